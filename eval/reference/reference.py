#!/usr/bin/env python3
"""Independent NumPy forward pass for llama-family GGUF models (llama, qwen2).

This is the oracle sieve's C++ forward pass is tested against, so it shares no
code with sieve: the file is read with the `gguf` package's GGUFReader, weights
are dequantized with `gguf.quants.dequantize`, and the forward pass is written
from the model definitions (RMSNorm, RoPE, grouped-query attention, SwiGLU).

Precision: weights are dequantized once and every product is computed in
float64 (`--dtype float32` halves memory and time when that matters), so the
reference's own rounding error is far below anything the comparison bounds in
tests/model allow.

`forward(..., act_q8=True)` (`--act-q8`) models one documented approximation of CPU
engines instead of the exact math: before a product with a weight stored in
a 32-element block format (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) or a K-quant (Q4_K,
Q5_K, Q6_K), the activations are rounded to 8 bits per block of 32 (scale =
max|x| / 127, round half to even), as ggml's Q8_0 activation path and sieve's
integer matmuls (for both families) do. The exact and the rounded reference
together tell how much of a difference to the exact math that rounding
explains; tests/model uses both.

Supported: `llama` (SmolLM2, stories, Llama 2/3, Mistral) and `qwen2`
(q/k/v biases); GQA; tied or separate output embedding; RoPE pairs (2i, 2i+1)
for llama (GGUF converters permute HF's q/k rows for it) and halves
(i, i + d/2) for qwen2; `rope.freq_base`; `rope_freqs.weight` divisors
(Llama 3.1+); llama3 and linear `rope.scaling` from metadata.

`forward(..., kv_round="f16" | "bf16")` (`--kv-round`) mirrors sieve's typed
KV cache (`-ctk f16|bf16`): each K row (after RoPE) and V row is rounded to
that type, round to nearest even, as it enters the cache, and attention uses
the rounded values; queries are not rounded. Values pass through float32
first, as sieve's rows are f32 before it narrows them (f64 -> f32 -> f16 can
differ from f64 -> f16 only at an exact f16 tie, and the f32 step is what
sieve does). None (the default) keeps K and V as computed.

`kv_jitter=(eps, rng)` multiplies K and V by (1 + eps N(0, 1)) just before
that rounding: another realization of the rows an f32 engine computes, whose
f32 rounding differs from this float64 pass by about eps relative. Roundings
that sit near an f16 / bf16 rounding boundary then flip; tests/model runs it
with a few seeds to measure how far those flips alone move the logits.

CLI:
    reference.py MODEL --tokens 1,2,3            # or --tokens-file ids.txt (whitespace-separated)
        [--logits out.npy]                        # logits of every position, [n_tokens, n_vocab]
        [--gen N]                                 # greedy-generate N tokens after the prompt
        [--kv-round f16|bf16]                     # round K and V rows as sieve's f16 / bf16 KV cache does
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field

import numpy as np
from gguf import GGUFReader
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize

# Weight formats whose products run against 8-bit activations in act_q8 mode:
# sieve's integer path rounds the activations in blocks of 32 for the
# 32-element block types and for the K-quants alike (their sub-blocks are 32
# or 16 elements, kernels/cpu/matmul_q8.h).
_Q8_ACT_TYPES = {QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.Q4_K, QT.Q5_K, QT.Q6_K}
_Q8_BLOCK = 32


def round_act_q8(x: np.ndarray) -> np.ndarray:
    """x [n, k] rounded as 8-bit blocks of 32: e = amax / 127, q = rint(x / e), x' = e q (f32 like the engines)."""
    n, k = x.shape
    xb = x.astype(np.float32).reshape(n, k // _Q8_BLOCK, _Q8_BLOCK)
    e = np.abs(xb).max(axis=-1, keepdims=True) / np.float32(127)
    inv = np.divide(np.float32(1), e, out=np.zeros_like(e), where=e > 0)
    q = np.rint(xb * inv)
    return (q.astype(np.float64) * e.astype(np.float64)).reshape(n, k).astype(x.dtype)


KV_ROUND_TYPES = ("f16", "bf16")


def round_bf16(x: np.ndarray) -> np.ndarray:
    """x rounded to bfloat16 (via float32, round to nearest even), returned as float32.

    The bit trick of sieve's fp32_to_bf16 and of PyTorch: add 0x7fff plus the
    lowest kept bit, then drop the low 16 bits. NaN stays NaN (quieted)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    rounded = np.where(nan, (bits | np.uint32(0x00400000)) & np.uint32(0xFFFF0000), rounded)
    return rounded.astype(np.uint32).view(np.float32)


def round_kv(x: np.ndarray, kind: str | None, jitter=None) -> np.ndarray:
    """A K or V row as sieve's KV cache of row type kind stores it (None: unchanged), in x's dtype.

    jitter (eps, rng): first multiply x by 1 + eps N(0, 1) (see the module docstring)."""
    if jitter is not None:
        eps, rng = jitter
        x = x * (1.0 + eps * rng.standard_normal(x.shape)).astype(x.dtype)
    if kind is None:
        return x
    f32 = x.astype(np.float32)
    if kind == "f16":
        return f32.astype(np.float16).astype(x.dtype)  # numpy's half cast rounds to nearest even
    if kind == "bf16":
        return round_bf16(f32).astype(x.dtype)
    raise ValueError(f"kv_round must be one of {KV_ROUND_TYPES} or None, got {kind!r}")


@dataclass
class Config:
    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    norm_eps: float
    neox: bool            # RoPE rotates halves (qwen2) instead of adjacent pairs (llama)
    has_bias: bool        # q/k/v projections carry biases (qwen2)
    tied: bool            # LM head is token_embd
    inv_freq: np.ndarray = field(repr=False)  # [head_dim / 2] angular frequencies, scaling applied


def _field(reader: GGUFReader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        if default is None:
            raise KeyError(f"missing metadata key '{key}'")
        return default
    return f.contents()


def _rope_inv_freq(reader: GGUFReader, arch: str, head_dim: int, freqs: np.ndarray | None) -> np.ndarray:
    """theta_i = base^(-2i/d), then the model's frequency scaling."""
    base = float(_field(reader, f"{arch}.rope.freq_base", 10000.0))
    i = np.arange(head_dim // 2, dtype=np.float64)
    inv_freq = base ** (-2.0 * i / head_dim)
    kind = _field(reader, f"{arch}.rope.scaling.type", "none")
    factor = float(_field(reader, f"{arch}.rope.scaling.factor", 1.0))
    if freqs is not None:
        # Llama 3.1+: the converter stores the per-frequency divisors.
        return inv_freq / freqs.astype(np.float64)
    if kind == "llama3":
        # Llama 3.1 "rope_scaling": divide low frequencies (long wavelengths)
        # by factor, keep high ones, interpolate smoothly in between.
        low = float(_field(reader, f"{arch}.rope.scaling.low_freq_factor", 1.0))
        high = float(_field(reader, f"{arch}.rope.scaling.high_freq_factor", 4.0))
        n_orig = float(_field(reader, f"{arch}.rope.scaling.original_context_length", 8192))
        wavelen = 2.0 * math.pi / inv_freq
        smooth = (n_orig / wavelen - low) / (high - low)
        scaled = np.where(wavelen > n_orig / low, inv_freq / factor,
                          np.where(wavelen < n_orig / high, inv_freq,
                                   (1.0 - smooth) * inv_freq / factor + smooth * inv_freq))
        return scaled
    if kind == "linear" and factor != 1.0:
        return inv_freq / factor
    if kind not in ("none", "linear"):
        raise ValueError(f"rope scaling type '{kind}' is not supported by the reference")
    return inv_freq


class Reference:
    """Weights of one model, dequantized, and a forward pass with a KV cache."""

    def __init__(self, path: str, dtype=np.float64):
        self.dtype = dtype
        self.act_q8 = False  # set per call by forward()
        self._q8_ids: set[int] = set()  # id() of weights multiplied against 8-bit activations
        reader = GGUFReader(path)
        arch = _field(reader, "general.architecture")
        if arch not in ("llama", "qwen2"):
            raise ValueError(f"architecture '{arch}' is not supported by the reference (llama, qwen2)")
        tensors = {t.name: t for t in reader.tensors}
        self._tensors = tensors

        n_embd = int(_field(reader, f"{arch}.embedding_length"))
        n_head = int(_field(reader, f"{arch}.attention.head_count"))
        n_head_kv = int(_field(reader, f"{arch}.attention.head_count_kv", n_head))
        head_dim = int(_field(reader, f"{arch}.attention.key_length", n_embd // n_head))
        freqs = self._weight("rope_freqs.weight") if "rope_freqs.weight" in tensors else None
        self.cfg = Config(
            arch=arch,
            n_vocab=int(tensors["token_embd.weight"].shape[1]),
            n_embd=n_embd,
            n_layer=int(_field(reader, f"{arch}.block_count")),
            n_head=n_head,
            n_head_kv=n_head_kv,
            head_dim=head_dim,
            n_ff=int(_field(reader, f"{arch}.feed_forward_length")),
            norm_eps=float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon")),
            neox=(arch == "qwen2"),
            has_bias=("blk.0.attn_q.bias" in tensors),
            tied=("output.weight" not in tensors),
            inv_freq=_rope_inv_freq(reader, arch, head_dim, freqs),
        )
        c = self.cfg
        self.tok_embd = self._weight("token_embd.weight")              # [n_vocab, n_embd]
        self.out_norm = self._weight("output_norm.weight")
        self.output = self.tok_embd if c.tied else self._weight("output.weight")
        self.layers = []
        for il in range(c.n_layer):
            p = f"blk.{il}."
            w = {name: self._weight(p + name + ".weight") for name in (
                "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")}
            if c.has_bias:
                for name in ("attn_q", "attn_k", "attn_v"):
                    w[name + "_bias"] = self._weight(p + name + ".bias")
            self.layers.append(w)
        del self._tensors
        self.has_q8_weights = bool(self._q8_ids)
        # Vocabulary, for callers that build prompts (the forward pass needs none of it).
        self.tokens = list(_field(reader, "tokenizer.ggml.tokens", []))
        self.bos = int(_field(reader, "tokenizer.ggml.bos_token_id", -1))
        tok_model = _field(reader, "tokenizer.ggml.model", "")
        self.add_bos = bool(_field(reader, "tokenizer.ggml.add_bos_token", tok_model == "llama")) and self.bos >= 0

    def _weight(self, name: str) -> np.ndarray:
        """Dequantized tensor shaped [ne[1], ne[0]] (rows are output features)."""
        t = self._tensors[name]
        values = dequantize(t.data, t.tensor_type).astype(self.dtype)
        shape = [int(n) for n in reversed(t.shape)]
        w = values.reshape(shape)
        if t.tensor_type in _Q8_ACT_TYPES:
            self._q8_ids.add(id(w))
        return w

    def _linear(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        """x [n, k] @ w[m, k]^T, with activations rounded to 8 bits first in act_q8 mode."""
        if self.act_q8 and id(w) in self._q8_ids:
            x = round_act_q8(x)
        return x @ w.T

    # ---- building blocks -------------------------------------------------
    def _rmsnorm(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.cfg.norm_eps) * w

    def _rope(self, x: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """x: [n, heads, head_dim]; rotates each pair by pos * inv_freq[i]."""
        ang = pos[:, None].astype(np.float64) * self.cfg.inv_freq[None, :]  # [n, d/2]
        cos = np.cos(ang)[:, None, :].astype(self.dtype)
        sin = np.sin(ang)[:, None, :].astype(self.dtype)
        half = self.cfg.head_dim // 2
        if self.cfg.neox:
            a, b = x[..., :half], x[..., half:]
        else:
            a, b = x[..., 0::2], x[..., 1::2]
        ra = a * cos - b * sin
        rb = a * sin + b * cos
        out = np.empty_like(x)
        if self.cfg.neox:
            out[..., :half], out[..., half:] = ra, rb
        else:
            out[..., 0::2], out[..., 1::2] = ra, rb
        return out

    def new_cache(self) -> list:
        """Per layer [K, V], each [n_past, n_head_kv, head_dim]."""
        c = self.cfg
        empty = np.zeros((0, c.n_head_kv, c.head_dim), dtype=self.dtype)
        return [[empty, empty] for _ in range(c.n_layer)]

    # ---- forward ---------------------------------------------------------
    def forward(self, tokens, cache: list, cb=None, act_q8: bool = False, kv_round: str | None = None,
                kv_jitter=None) -> np.ndarray:
        """Runs tokens after what cache holds; returns logits [n, n_vocab] and extends cache.

        act_q8: round activations to 8 bits before products with 32-block
        quantized weights (see the module docstring); a cache must not mix modes.
        kv_round: "f16" | "bf16" rounds each K (after RoPE) and V row to that
        type before attention uses it, as sieve's typed KV cache does; None
        keeps them exact. A cache must not mix modes either. kv_jitter
        (eps, numpy Generator) perturbs them first (see the module docstring).

        cb(name, il, array), if given, sees the intermediates under the names
        sieve's Model uses (attn_norm, q, k, v, kqv_out, attn_out, ffn_inp,
        ffn_norm, ffn_out, l_out, result_norm), each [n, features].
        """
        c = self.cfg
        cb = cb or (lambda name, il, a: None)
        self.act_q8 = act_q8
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.min() < 0 or tokens.max() >= c.n_vocab:
            raise ValueError(f"token ids must be in [0, {c.n_vocab})")
        n = len(tokens)
        n_past = cache[0][0].shape[0]
        pos = np.arange(n_past, n_past + n)
        group = c.n_head // c.n_head_kv
        scale = 1.0 / math.sqrt(c.head_dim)
        # query i (position n_past + i) sees keys j <= n_past + i
        mask = np.arange(n_past + n)[None, :] > pos[:, None]

        x = self.tok_embd[tokens]
        cb("inp_embd", -1, x)
        for il, w in enumerate(self.layers):
            h = self._rmsnorm(x, w["attn_norm"])
            cb("attn_norm", il, h)
            q = self._linear(h, w["attn_q"])
            k = self._linear(h, w["attn_k"])
            v = self._linear(h, w["attn_v"])
            if c.has_bias:
                q = q + w["attn_q_bias"]
                k = k + w["attn_k_bias"]
                v = v + w["attn_v_bias"]
            q = self._rope(q.reshape(n, c.n_head, c.head_dim), pos)
            k = self._rope(k.reshape(n, c.n_head_kv, c.head_dim), pos)
            v = v.reshape(n, c.n_head_kv, c.head_dim)
            cb("q", il, q.reshape(n, -1))
            cb("k", il, k.reshape(n, -1))
            cb("v", il, v.reshape(n, -1))
            # The cb above sees K and V as computed (sieve dumps them before
            # its KV store narrows them); attention sees the cached rows.
            cache[il][0] = np.concatenate([cache[il][0], round_kv(k, kv_round, kv_jitter)])
            cache[il][1] = np.concatenate([cache[il][1], round_kv(v, kv_round, kv_jitter)])
            keys, vals = cache[il]
            att = np.empty((n, c.n_head, c.head_dim), dtype=self.dtype)
            for hh in range(c.n_head):
                g = hh // group
                s = (q[:, hh, :] @ keys[:, g, :].T) * scale       # [n, n_past + n]
                s = np.where(mask, -np.inf, s)
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s /= s.sum(axis=1, keepdims=True)
                att[:, hh, :] = s @ vals[:, g, :]
            cb("kqv_out", il, att.reshape(n, -1))
            o = self._linear(att.reshape(n, c.n_head * c.head_dim), w["attn_output"])
            cb("attn_out", il, o)
            x = x + o
            cb("ffn_inp", il, x)
            h = self._rmsnorm(x, w["ffn_norm"])
            cb("ffn_norm", il, h)
            gate = self._linear(h, w["ffn_gate"])
            up = self._linear(h, w["ffn_up"])
            o = self._linear(gate / (1.0 + np.exp(-gate)) * up, w["ffn_down"])
            cb("ffn_out", il, o)
            x = x + o
            cb("l_out", il, x)
        x = self._rmsnorm(x, self.out_norm)
        cb("result_norm", -1, x)
        return self._linear(x, self.output)

    def logits(self, tokens, act_q8: bool = False, kv_round: str | None = None, kv_jitter=None) -> np.ndarray:
        """Logits at every position of a prompt, [n_tokens, n_vocab]."""
        return self.forward(tokens, self.new_cache(), act_q8=act_q8, kv_round=kv_round, kv_jitter=kv_jitter)

    def generate(self, tokens, n_gen: int, act_q8: bool = False,
                 kv_round: str | None = None) -> tuple[list[int], np.ndarray]:
        """Greedy: returns n_gen token ids and the logits each was chosen from [n_gen, n_vocab]."""
        cache = self.new_cache()
        last = self.forward(tokens, cache, act_q8=act_q8, kv_round=kv_round)[-1]
        out, rows = [], []
        for i in range(n_gen):
            tok = int(np.argmax(last))
            out.append(tok)
            rows.append(last)
            if i + 1 < n_gen:
                last = self.forward([tok], cache, act_q8=act_q8, kv_round=kv_round)[-1]
        return out, np.array(rows)


def _parse_tokens(args) -> list[int]:
    if args.tokens_file:
        with open(args.tokens_file) as f:
            text = f.read()
    else:
        text = args.tokens or ""
    ids = [int(s) for s in text.replace(",", " ").split()]
    if not ids:
        raise SystemExit("error: no token ids given (--tokens 1,2,3 or --tokens-file FILE)")
    return ids


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="GGUF file")
    ap.add_argument("--tokens", help="comma- or space-separated token ids")
    ap.add_argument("--tokens-file", help="file of whitespace-separated token ids")
    ap.add_argument("--logits", help="write logits of every position to this .npy file")
    ap.add_argument("--gen", type=int, default=0, help="greedy-generate this many tokens")
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    ap.add_argument("--act-q8", action="store_true",
                    help="round activations to 8 bits before products with 32-block quantized weights")
    ap.add_argument("--kv-round", choices=KV_ROUND_TYPES, default=None,
                    help="round K (after RoPE) and V rows to this type before attention, as sieve -ctk does")
    args = ap.parse_args(argv)
    ids = _parse_tokens(args)
    ref = Reference(args.model, dtype=np.dtype(args.dtype).type)
    print(f"{ref.cfg.arch}: n_vocab={ref.cfg.n_vocab} n_embd={ref.cfg.n_embd} n_layer={ref.cfg.n_layer} "
          f"n_head={ref.cfg.n_head}/{ref.cfg.n_head_kv} head_dim={ref.cfg.head_dim} "
          f"tied={ref.cfg.tied} bias={ref.cfg.has_bias}", file=sys.stderr)
    logits = ref.logits(ids, act_q8=args.act_q8, kv_round=args.kv_round)
    if args.logits:
        np.save(args.logits, logits.astype(np.float32))
    print("argmax per position:", " ".join(str(int(i)) for i in logits.argmax(axis=1)))
    if args.gen > 0:
        gen, _ = ref.generate(ids, args.gen, act_q8=args.act_q8, kv_round=args.kv_round)
        print("generated:", " ".join(str(t) for t in gen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
