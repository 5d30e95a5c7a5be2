#!/usr/bin/env python3
"""Peer cross-check of `sieve eval` against NVIDIA kvpress (optional, not CI).

The same GGUF file is loaded twice: by sieve, and by Hugging Face transformers
(`gguf_file=`, dequantized to float32). `sieve eval --dump-samples` writes the
exact samples (prompt token ids, answers) it evaluated; this script feeds the
same ids to the transformers model under each kvpress press and scores the
greedy answers with sieve's rule (every expected string appears verbatim in
the output, RULER's string_match_all). It prints accuracy side by side:
sieve dense, transformers dense, and each press at each compression ratio,
with the Wilson 95% interval, and how many dense outputs are identical text.
With --sieve-policies sieve also runs its counterpart of each press at each
ratio (snapkv, streaming, pyramidkv with the press's settings) on the same
samples, and the table shows them beside the presses.

    python3 eval/kvpress_check.py -m ~/.cache/sieve/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf \\
        --task passkey,niah_multikey --ctx 4096 --samples 20 \\
        --press dense,snapkv,streamingllm,pyramidkv --ratio 0.5,0.75 -o kvpress.json

How the presses are applied: the whole prompt (context, question and answer
prefix) is prefilled under the press (`with press(model): model(ids)`), so
query-aware presses (SnapKV, PyramidKV) see the question in their observation
window, as sieve's after-prefill policy point does; decoding then runs without
the press on the compressed cache, greedily, for the same max tokens as sieve
(32 for passkey, niah_multikey, code; 128 for vt, cwe; 64 otherwise). kvpress's pipeline
instead compresses the context without the question; that is the harder,
question-agnostic setting and is not what sieve's policies are compared on.

--overlap compares which rows are kept instead of accuracy: sieve eval runs
SnapKV with kvpress's settings (`snapkv:keep=1-R,window=64,pool=5,
pooling=avg,agg=mean`) with exact activations (`--exact`) and f32 KV (or,
with --mode serving, as `sieve serve` runs: 8-bit activations, f16 KV), and
writes the prompt positions each (layer, KV head) lane kept
(`--dump-kept`); the same prompt ids are prefilled through transformers
under kvpress's SnapKVPress(compression_ratio=R), whose scores are recorded
per layer and cut to the top max(1, int(n (1 - R))) per KV head exactly as
its ScorerPress does. Reported per sample: the mean and smallest fraction of
a lane's kept positions that both chose, and the share of lanes at >= 95%.

    python3 eval/kvpress_check.py -m ~/.cache/sieve/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf \\
        --task passkey,niah_multikey --ctx 4096 --samples 2 --overlap --ratio 0.5 -o overlap.json

Needs kvpress, torch, transformers and gguf: eval/install_kvpress.sh puts the
versions docs/accuracy.md ran with in a virtual environment and prints its
python (CPU torch is enough for <= 4k tokens on a 0.5B model).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

from eval_common import default_max_tokens, wilson

# transformers' GGUF loader draws a progress bar per tensor; logs stay readable without.
os.environ.setdefault("TQDM_DISABLE", "1")

PRESSES = {
    # name: (kvpress class, keyword arguments besides compression_ratio)
    "snapkv": ("SnapKVPress", {}),
    "streamingllm": ("StreamingLLMPress", {}),
    "pyramidkv": ("PyramidKVPress", {}),
    "knorm": ("KnormPress", {}),
    "tova": ("TOVAPress", {}),
    # DuoAttention with sieve's head profile (--profile) instead of a pattern
    # downloaded for one of the press's listed checkpoints; the ratio is the
    # fraction of KV heads made streaming heads.
    "duo": ("DuoAttentionPress", {}),
}


def profile_streaming_mask(path, fraction):
    """The streaming heads sieve's lserve makes of a head profile
    (head_profile_streaming): the round(fraction * n) lowest scores, ties to
    the later head; [n_layer][n_head_kv] booleans."""
    with open(path) as f:
        prof = json.load(f)
    n_layer, n_kv = prof["n_layer"], prof["n_head_kv"]
    flat = [prof["scores"][l][h] for l in range(n_layer) for h in range(n_kv)]
    order = sorted(range(len(flat)), key=lambda i: (flat[i], -i))
    k = min(len(flat), max(0, int(math.floor(fraction * len(flat) + 0.5))))
    mask = [False] * len(flat)
    for i in order[:k]:
        mask[i] = True
    return [mask[l * n_kv:(l + 1) * n_kv] for l in range(n_layer)]


def sieve_snapkv_spec(args, ratio):
    """sieve's SnapKV with kvpress SnapKVPress's defaults (window 64, avg-pool 5, group mean)."""
    return (f"snapkv:keep={1 - ratio:g},window={args.window},pool={args.kernel},pooling=avg,agg=mean")


def sieve_counterpart(args, press, ratio):
    """sieve's policy spec for a kvpress press at a compression ratio, with the
    press's default settings; None when sieve has no such policy."""
    keep = f"keep={1 - ratio:g}"
    if press == "snapkv":
        return sieve_snapkv_spec(args, ratio)
    if press == "streamingllm":
        return f"streaming:{keep},sink=4"  # StreamingLLMPress(n_sink=4)
    if press == "pyramidkv":
        return f"pyramidkv:{keep},window={args.window},pool={args.kernel},pooling=avg,agg=mean,beta=20"
    if press == "duo":
        # Streaming heads only: the retrieval heads read every row (a budget
        # past any prompt), and prefill is dense, as the press's is.
        return (f"lserve:static={ratio:g},budget=1073741824,sink={args.sink},recent={args.recent},"
                f"prefill=dense,profile={args.profile}")
    return None


def run_sieve(args, dump_path, policies=("dense",), extra=(), kv_type="f32"):
    """sieve eval on the same samples; returns its JSON result."""
    cmd = [args.sieve, "eval", "-m", args.model, "--task", args.task, "--ctx", args.ctx,
           "--samples", str(args.samples), "--seed", str(args.seed),
           "-ctk", kv_type, "-o", "json", "--dump-samples", dump_path]
    for p in policies:
        cmd += ["--kv-policy", p]
    cmd += list(extra)
    if args.threads:
        cmd += ["-t", str(args.threads)]
    if args.max_tokens:
        cmd += ["--max-tokens", str(args.max_tokens)]
    print("running:", " ".join(cmd), file=sys.stderr)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out)


def load_samples(path):
    with open(path) as f:
        samples = [json.loads(line) for line in f if line.strip()]
    skipped = [s for s in samples if s["n_forced"] > 0 or not s["answers"]]
    if skipped:
        print(f"skipping {len(skipped)} perplexity samples (no answers)", file=sys.stderr)
    return [s for s in samples if s not in skipped]


def load_hf(args):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    folder, name = os.path.split(os.path.abspath(args.model))
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation=args.attn)
    model.eval()
    torch.set_num_threads(args.threads)
    print(f"loaded {name} through transformers in {time.time() - t0:.1f} s", file=sys.stderr)
    return model, tok


def make_press(name, ratio, args):
    if name == "dense":
        return None
    import kvpress
    if name == "duo":
        import torch

        class ProfileDuoPress(kvpress.DuoAttentionPress):
            """DuoAttentionPress whose heads come from sieve's head profile."""

            def post_init_from_model(self, model):
                self.sink_size, self.recent_size = args.sink, args.recent
                self.streaming_mask = torch.tensor(profile_streaming_mask(args.profile, ratio), dtype=torch.bool,
                                                   device=model.device)

        return ProfileDuoPress(head_compression_ratio=ratio)
    cls_name, kwargs = PRESSES[name]
    return getattr(kvpress, cls_name)(compression_ratio=ratio, **kwargs)


def greedy(model, ids, press, max_tokens, eos_ids):
    """Prefill the whole prompt under the press, then decode greedily without it."""
    import contextlib
    import torch
    from transformers import DynamicCache
    cache = DynamicCache()
    x = torch.tensor([ids])
    n = len(ids)
    with torch.no_grad():
        with press(model) if press is not None else contextlib.nullcontext():
            out = model(input_ids=x, past_key_values=cache, use_cache=True, logits_to_keep=1,
                        position_ids=torch.arange(n).unsqueeze(0), cache_position=torch.arange(n))
        kept = cache.get_seq_length()
        tokens = [int(out.logits[0, -1].argmax())]
        while tokens[-1] not in eos_ids and len(tokens) < max_tokens:
            # Positions continue from the prompt's length, not from the kept
            # rows (as kvpress's own pipeline decodes after a press).
            out = model(input_ids=torch.tensor([[tokens[-1]]]), past_key_values=cache, use_cache=True,
                        logits_to_keep=1, position_ids=torch.tensor([[n + len(tokens) - 1]]))
            tokens.append(int(out.logits[0, -1].argmax()))
    return tokens, kept


def eos_token_ids(model, tok):
    ids = set()
    for src in (getattr(model.generation_config, "eos_token_id", None), tok.eos_token_id):
        if isinstance(src, int):
            ids.add(src)
        elif src:
            ids.update(src)
    return ids


def evaluate(args, samples, model, tok):
    """{(press label, task, ctx): [correct...]} and the dense outputs per sample."""
    results, dense_text = {}, {}
    eos = eos_token_ids(model, tok)
    runs = ([("dense", 0.0)] if "dense" in args.press else []) + \
        [(p, r) for p in args.press if p != "dense" for r in args.ratio]
    for i, s in enumerate(samples):
        max_tokens = args.max_tokens or default_max_tokens(s["task"])
        for name, ratio in runs:
            label = name if name == "dense" else f"{name}@{ratio:g}"
            t0 = time.time()
            out_ids, kept = greedy(model, s["prompt_ids"], make_press(name, ratio, args), max_tokens, eos)
            text = tok.decode(out_ids, skip_special_tokens=True)
            ok = all(a in text for a in s["answers"])
            results.setdefault((label, s["task"], s["ctx"]), []).append(ok)
            if name == "dense":
                dense_text[(s["task"], s["ctx"], s["seed"])] = text
            print(f"[{i + 1}/{len(samples)}] {s['task']} @{s['ctx']} seed {s['seed']} {label}: "
                  f"{'ok' if ok else 'wrong'}, kept {kept}/{len(s['prompt_ids'])} rows, "
                  f"{time.time() - t0:.1f} s", file=sys.stderr)
    return results, dense_text


def kvpress_kept(model, ids, ratio, args):
    """Prefill ids under a SnapKVPress that records each layer's scores; returns
    {layer: [sorted kept positions per KV head]} as its ScorerPress cuts them."""
    import torch
    import kvpress
    from transformers import DynamicCache

    scores = {}

    class RecordingSnapKV(kvpress.SnapKVPress):
        def score(self, module, *a, **kw):
            sc = super().score(module, *a, **kw)
            scores[module.layer_idx] = sc.detach().clone()
            return sc

    press = RecordingSnapKV(compression_ratio=ratio, window_size=args.window, kernel_size=args.kernel)
    n = len(ids)
    with torch.no_grad(), press(model):
        model(input_ids=torch.tensor([ids]), past_key_values=DynamicCache(), use_cache=True, logits_to_keep=1,
              position_ids=torch.arange(n).unsqueeze(0), cache_position=torch.arange(n))
    n_kept = max(1, int(n * (1 - ratio)))
    return {l: [sorted(h) for h in sc.topk(n_kept, dim=-1).indices[0].tolist()] for l, sc in scores.items()}


def overlap(args, model):
    """--overlap: kept positions per (layer, KV head), sieve vs kvpress, per sample and ratio."""
    rows = []
    for ratio in args.ratio:
        spec = sieve_snapkv_spec(args, ratio)
        with tempfile.TemporaryDirectory() as tmp:
            dump, kept_path = os.path.join(tmp, "samples.jsonl"), os.path.join(tmp, "kept.jsonl")
            t0 = time.time()
            # exact: f32 activations and f32 KV (the model transformers computes);
            # serving: what `sieve serve` runs by default (8-bit activations, f16 KV).
            exact = args.mode == "exact"
            run_sieve(args, dump, policies=(spec,), kv_type="f32" if exact else "f16",
                      extra=(("--exact",) if exact else ()) + ("--ref-cache-type", "f32", "--dump-kept", kept_path))
            print(f"sieve eval ({spec}, {args.mode} mode) took {time.time() - t0:.1f} s", file=sys.stderr)
            samples = {(s["task"], s["seed"]): s for s in load_samples(dump)}
            with open(kept_path) as f:
                sieve_kept = [json.loads(line) for line in f if line.strip()]
        for k in sieve_kept:
            s = samples[(k["task"], k["seed"])]
            ids = s["prompt_ids"]
            assert len(ids) == k["n_prompt"], "sieve's dump and the sample disagree on the prompt"
            t0 = time.time()
            hf = kvpress_kept(model, ids, ratio, args)
            fr, control = [], []
            n = k["n_prompt"]
            for l in range(k["n_layer"]):
                for h in range(k["n_head_kv"]):
                    a = set(k["kept"][l * k["n_head_kv"] + h])
                    b = set(hf[l][h])
                    fr.append(len(a & b) / max(1, len(b)))
                    # Control: a score-free choice of the same size (the first
                    # rows + the window) — what the overlap would be if the
                    # scores did not matter.
                    c = set(range(len(b) - args.window)) | set(range(n - args.window, n))
                    control.append(len(c & b) / max(1, len(b)))
            row = {"ratio": ratio, "policy": spec, "task": k["task"], "ctx": k["ctx"], "seed": k["seed"],
                   "n_prompt": k["n_prompt"], "n_kept_kvpress": len(hf[0][0]),
                   "n_kept_sieve": len(k["kept"][0]), "overlap_mean": sum(fr) / len(fr),
                   "overlap_min": min(fr), "lanes_ge_95": sum(f >= 0.95 for f in fr) / len(fr),
                   "control_mean": sum(control) / len(control), "mode": args.mode,
                   "per_lane": fr}
            rows.append(row)
            print(f"{k['task']} @{k['ctx']} seed {k['seed']} ratio {ratio:g}: overlap mean "
                  f"{row['overlap_mean']:.4f} min {row['overlap_min']:.4f}, lanes >= 95%: "
                  f"{100 * row['lanes_ge_95']:.1f}% ({time.time() - t0:.1f} s)", file=sys.stderr)
    return rows


def overlap_report(rows):
    lines = ["| task | ctx | seed | prompt tokens | removed | rows kept per lane (sieve / kvpress) | "
             "overlap mean | overlap min | lanes ≥ 95% | control: first rows + window |",
             "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['task']} | {r['ctx']} | {r['seed']} | {r['n_prompt']} | {r['ratio']:g} | "
                     f"{r['n_kept_sieve']} / {r['n_kept_kvpress']} | {100 * r['overlap_mean']:.2f}% | "
                     f"{100 * r['overlap_min']:.2f}% | {100 * r['lanes_ge_95']:.1f}% | "
                     f"{100 * r['control_mean']:.1f}% |")
    if rows:
        allf = [f for r in rows for f in r["per_lane"]]
        lines.append("")
        lines.append(f"all lanes: mean {100 * sum(allf) / len(allf):.2f}%, min {100 * min(allf):.2f}%, "
                     f"{100 * sum(f >= 0.95 for f in allf) / len(allf):.1f}% of {len(allf)} lanes at >= 95%")
    return "\n".join(lines)


def report(sieve_json, results, dense_text):
    """Markdown table: one row per cell, sieve dense then every press."""
    labels = sorted({k[0] for k in results}, key=lambda l: (l != "dense", l))
    sieve_cells = {(c["task"], c["ctx"]): c for c in sieve_json["cells"] if c["reference"]}
    # sieve's own policies on the same samples (--sieve-policies), in run order.
    sieve_rows = [r["policy"] for r in sieve_json["config"]["rows"] if not r["reference"] and r["policy"] != "dense"]
    sieve_pol = {(c["policy"], c["task"], c["ctx"]): c for c in sieve_json["cells"] if not c["reference"]}
    same = sum(1 for s in sieve_json["samples"] if s["reference"]
               and dense_text.get((s["task"], s["ctx"], s["seed"])) is not None
               and dense_text[(s["task"], s["ctx"], s["seed"])].strip() == s["output"].strip())
    lines = ["| task | ctx | sieve dense | " + "".join(f"sieve {p} | " for p in sieve_rows)
             + " | ".join(f"hf {l}" for l in labels) + " |",
             "|---|---:|---|" + "---|" * (len(sieve_rows) + len(labels))]

    def fmt(k, n):
        lo, hi = wilson(k, n)
        return f"{100 * k / n:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]" if n else "—"

    for (task, ctx), c in sorted(sieve_cells.items()):
        row = [task, str(ctx), fmt(c["n_correct"], c["n_scored"])]
        for p in sieve_rows:
            pc = sieve_pol.get((p, task, ctx))
            row.append(fmt(pc["n_correct"], pc["n_scored"]) if pc else "—")
        for l in labels:
            v = results.get((l, task, ctx), [])
            row.append(fmt(sum(v), len(v)))
        lines.append("| " + " | ".join(row) + " |")
    if dense_text:
        lines.append("")
        lines.append(f"dense outputs identical in text (sieve f32 KV vs transformers f32): {same} of {len(dense_text)}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True, help="GGUF file (the same one sieve reads)")
    ap.add_argument("--sieve", default="build/sieve", help="sieve binary (default: %(default)s)")
    ap.add_argument("--task", default="passkey,niah_multikey")
    ap.add_argument("--ctx", default="4096")
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=0, help="0 = sieve's per-task default")
    ap.add_argument("--press", default="dense,snapkv,streamingllm,pyramidkv",
                    help=f"comma-separated: dense, {', '.join(PRESSES)}")
    ap.add_argument("--ratio", default="0.5", help="compression ratios (fraction of rows removed), comma-separated")
    ap.add_argument("--attn", default="eager", help="transformers attention implementation (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--sieve-policies", action="store_true",
                    help="also run sieve's counterpart of each press (snapkv, streamingllm, pyramidkv) at each "
                         "ratio, with the press's settings, on the same samples")
    ap.add_argument("--overlap", action="store_true",
                    help="compare the rows SnapKV keeps (sieve vs kvpress) instead of accuracy")
    ap.add_argument("--window", type=int, default=64, help="SnapKV observation window (kvpress's default)")
    ap.add_argument("--kernel", type=int, default=5, help="SnapKV pooling kernel (kvpress's default)")
    ap.add_argument("--mode", choices=("exact", "serving"), default="exact",
                    help="--overlap: sieve exact (f32 activations and KV, as transformers) or as it serves "
                         "(8-bit activations, f16 KV)")
    ap.add_argument("--profile", default="", help="duo: sieve's head profile (sieve calibrate) giving the heads")
    ap.add_argument("--sink", type=int, default=64, help="duo: sink rows of a streaming head (lserve's default)")
    ap.add_argument("--recent", type=int, default=256, help="duo: recent rows of a streaming head (lserve's default)")
    ap.add_argument("-o", "--output", default="", help="also write the raw results as JSON")
    args = ap.parse_args()
    args.press = [p for p in args.press.split(",") if p]
    args.ratio = [float(r) for r in args.ratio.split(",") if r]
    unknown = [p for p in args.press if p != "dense" and p not in PRESSES]
    if unknown:
        sys.exit(f"--press: unknown {unknown}; expected dense, {', '.join(PRESSES)}")
    if "duo" in args.press and not args.profile:
        sys.exit("--press duo needs --profile FILE (a head profile from `sieve calibrate`)")
    if "duo" in args.press and args.attn == "eager" and not args.overlap:
        sys.exit("--press duo needs --attn sdpa: kvpress masks the streaming heads' keys in the attention "
                 "functions transformers registers, which eager attention does not go through")

    if args.overlap:
        model, _ = load_hf(args)
        rows = overlap(args, model)
        print(overlap_report(rows))
        if args.output:
            with open(args.output, "w") as f:
                json.dump({"overlap": rows}, f, indent=2)
        return

    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "samples.jsonl")
        t0 = time.time()
        policies = ["dense"]
        if args.sieve_policies:
            policies += [p for p in (sieve_counterpart(args, n, r) for n in args.press if n != "dense"
                                     for r in args.ratio) if p]
        sieve_json = run_sieve(args, dump, policies=policies)
        print(f"sieve eval took {time.time() - t0:.1f} s", file=sys.stderr)
        samples = load_samples(dump)
    model, tok = load_hf(args)
    t0 = time.time()
    results, dense_text = evaluate(args, samples, model, tok)
    print(f"transformers + kvpress took {time.time() - t0:.1f} s", file=sys.stderr)
    print(report(sieve_json, results, dense_text))
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"sieve": sieve_json["cells"],
                       "hf": [{"press": k[0], "task": k[1], "ctx": k[2], "correct": v} for k, v in results.items()]},
                      f, indent=2)


if __name__ == "__main__":
    main()
