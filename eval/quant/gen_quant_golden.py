#!/usr/bin/env python3
"""Golden data for sieve's reference (de)quantization, made with the `gguf`
Python package (an implementation independent of sieve's C++).

Writes two files (default folder: tests/data/quant beside this repository's eval/):
  dequant.bin   random blocks of every weight type and gguf.quants.dequantize of them
  quantize.bin  random float rows and gguf.quants.quantize of them

File format (little-endian), read by tests/unit/test_quant.cpp:
  char[8]  magic "SIEVEQG1"
  u32      length of the provenance string, then that many bytes of UTF-8
           (generator name, gguf and numpy versions, seed)
  u32      record count
  records, each:
    u32    ggml type id
    u32    n_elements (a multiple of the type's block size)
    u32    n_bytes (the encoded row: n_elements / block_size * type_size)
    u8     encoded[n_bytes]
    f32    values[n_elements]
  In dequant.bin `values` = dequantize(encoded); in quantize.bin
  `encoded` = quantize(values).

Usage: python3 eval/quant/gen_quant_golden.py [--out DIR] [--seed N]
Output is deterministic for a given seed and package versions.
"""

import argparse
import struct
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

MAGIC = b"SIEVEQG1"

# Byte offsets of the f16 scale fields inside one block, per type: these get
# chosen values instead of random bytes so the results stay finite.
F16_FIELDS = {
    T.Q4_0: [0],
    T.Q4_1: [0, 2],
    T.Q5_0: [0],
    T.Q5_1: [0, 2],
    T.Q8_0: [0],
    T.Q2_K: [80, 82],
    T.Q3_K: [108],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
}

BLOCKS_PER_TYPE = {T.Q4_0: 48, T.Q4_1: 48, T.Q5_0: 48, T.Q5_1: 48, T.Q8_0: 48,
                   T.Q2_K: 12, T.Q3_K: 12, T.Q4_K: 12, T.Q5_K: 12, T.Q6_K: 12}


def package_version(name: str) -> str:
    from importlib.metadata import version
    return version(name)


def random_scales(rng: np.random.Generator, n: int) -> np.ndarray:
    """Finite f16 values of widely varied magnitude: mostly ordinary scales,
    some tiny (subnormal) and some huge outliers, either sign."""
    exp = rng.uniform(-12.0, 2.0, size=n)
    kind = rng.uniform(size=n)
    exp = np.where(kind < 0.1, rng.uniform(-24.0, -14.5, size=n), exp)  # subnormal halves
    exp = np.where(kind > 0.9, rng.uniform(8.0, 15.9, size=n), exp)  # outliers up to ~6e4
    sign = np.where(rng.uniform(size=n) < 0.2, -1.0, 1.0)
    v = (sign * np.exp2(exp)).astype(np.float16)
    v = np.where(v == 0, np.float16(2.0 ** -24), v)  # keep scales non-zero
    assert np.all(np.isfinite(v))
    return v.astype(np.float16)


def random_blocks(rng: np.random.Generator, qtype: T, n_blocks: int) -> np.ndarray:
    _, type_size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        raw[:, off:off + 2] = random_scales(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    return raw


def finite_half_bits(rng: np.random.Generator, n: int, exp_mask: int) -> np.ndarray:
    """Random 16-bit patterns whose exponent field is not all ones (finite)."""
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
    all_ones = (bits & exp_mask) == exp_mask
    bits[all_ones] &= np.uint16(~0x4000 & 0xFFFF)  # clear the exponent's top bit (0x4000 in both formats)
    assert not np.any((bits & exp_mask) == exp_mask)
    return bits


def dequant_records(rng: np.random.Generator):
    recs = []
    # F32: the identity, on random finite values.
    x = (rng.standard_normal(96) * np.exp2(rng.uniform(-20, 20, 96))).astype(np.float32)
    recs.append((T.F32, x.view(np.uint8), gguf.quants.dequantize(x.view(np.uint8), T.F32)))
    for qtype, mask in ((T.F16, 0x7C00), (T.BF16, 0x7F80)):
        bits = finite_half_bits(rng, 160, mask)
        recs.append((qtype, bits.view(np.uint8), gguf.quants.dequantize(bits.view(np.uint8), qtype)))
    for qtype, n_blocks in BLOCKS_PER_TYPE.items():
        raw = random_blocks(rng, qtype, n_blocks)
        values = gguf.quants.dequantize(raw.reshape(-1), qtype)
        assert np.all(np.isfinite(values)), qtype.name
        recs.append((qtype, raw.reshape(-1), values))
    return recs


def random_row(rng: np.random.Generator, n: int, block: int) -> np.ndarray:
    """Floats with a different magnitude per block, a few outliers, and some
    blocks placed on a grid so that x / d hits exact half-way points."""
    n_blocks = n // block
    scale = np.exp2(rng.uniform(-16, 10, size=(n_blocks, 1)))
    x = rng.standard_normal((n_blocks, block)) * scale
    outlier = rng.uniform(size=x.shape) < 0.03
    x = np.where(outlier, x * rng.uniform(10, 300, size=x.shape), x)
    x = x + rng.uniform(-1, 1, size=(n_blocks, 1)) * scale * 3  # non-zero means (matter for Q4_1/Q5_1)
    # Half-way cases: blocks of multiples of 1/4 (times a power of two) whose
    # extremes make d exactly a power of two for one format, so x / d lands on
    # k + 0.5: extreme -8 for Q4_0, -16 for Q5_0, 127 for Q8_0, a range of 15
    # for Q4_1 and 31 for Q5_1.
    for k, ib in enumerate(range(0, n_blocks, 4)):
        extreme = (-8.0, -16.0, 127.0, 15.0, 31.0)[k % 5]
        if extreme < 0 or extreme == 127.0:  # symmetric: |x| < |extreme| except one element
            lim = int(abs(extreme) * 4) - 1
            g = rng.integers(-lim, lim + 1, size=block).astype(np.float64) / 4.0
            g[rng.integers(block)] = extreme
        else:  # affine: values in [c, c + extreme] with both ends present
            g = rng.integers(0, int(extreme * 4) + 1, size=block).astype(np.float64) / 4.0
            i0, i1 = rng.choice(block, size=2, replace=False)
            g[i0], g[i1] = 0.0, extreme
            g += rng.integers(-16, 17) / 4.0
        x[ib] = g * np.exp2(rng.integers(-6, 6))
    return x.reshape(-1).astype(np.float32)


def contraction_trap_block(rng: np.random.Generator, half: int) -> np.ndarray:
    """A block for the symmetric quantizers (Q4_0: half = 8, Q5_0: half = 16)
    where trunc(x * id + half + 0.5) depends on x * id being rounded before the
    add: x * id rounds to exactly -(half - 0.5) + j while the exact product is a
    hair more negative. Separate rounding (NumPy, ggml's C) gives the upper
    integer; a fused multiply-add gives the one below. Only the negative end
    can show this: there |x * id| is larger than the sum, so its rounding step
    is coarser than the sum's."""
    while True:
        m = np.float32(np.exp2(rng.uniform(-10, 10)))
        d = m / np.float32(-half)
        inv = np.float32(1) / d
        found = []
        for j in range(3):
            target = np.float32(-(half - 0.5) + j)
            x = np.float32(float(target) / float(inv))
            for _ in range(64):
                x = np.nextafter(x, np.float32(np.inf), dtype=np.float32)
                if x * inv == target and float(x) * float(inv) < float(target):
                    found.append(x)
                    break
            for _ in range(128):
                x = np.nextafter(x, np.float32(0), dtype=np.float32)
                if x * inv == target and float(x) * float(inv) < float(target):
                    found.append(x)
                    break
        if found:
            block = (rng.uniform(-1, 1, size=32) * float(m) * 0.9).astype(np.float32)
            block[0] = m
            for k, x in enumerate(found):
                block[1 + 3 * k: 4 + 3 * k] = x
            return block


def quantize_records(rng: np.random.Generator):
    recs = []
    for qtype in (T.F32, T.F16, T.BF16):
        x = random_row(rng, 256, 32)
        # F16 edges: overflow to inf, subnormals, ties at the last mantissa bit.
        x[:4] = np.array([70000.0, -65520.0, 3e-6, -1e-7], dtype=np.float32)
        x[4:8] = np.array([1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8], dtype=np.float32)
        enc = gguf.quants.quantize(x, qtype)
        recs.append((qtype, np.ascontiguousarray(enc).view(np.uint8).reshape(-1), x))
    for qtype in (T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1):
        x = random_row(rng, 32 * 40, 32)
        x[32:64] = 1.5  # a constant block: d = 0 for the affine formats
        if qtype in (T.Q4_0, T.Q5_0):
            half = 8 if qtype == T.Q4_0 else 16
            for ib in (2, 9, 17, 30):
                x[32 * ib:32 * ib + 32] = contraction_trap_block(rng, half)
        enc = gguf.quants.quantize(x, qtype)
        recs.append((qtype, np.ascontiguousarray(enc).view(np.uint8).reshape(-1), x))
    return recs


def write(path: Path, provenance: str, recs) -> None:
    with open(path, "wb") as f:
        f.write(MAGIC)
        p = provenance.encode()
        f.write(struct.pack("<I", len(p)))
        f.write(p)
        f.write(struct.pack("<I", len(recs)))
        for qtype, enc, values in recs:
            enc = np.asarray(enc, dtype=np.uint8)
            values = np.asarray(values, dtype=np.float32).reshape(-1)
            block, type_size = GGML_QUANT_SIZES[qtype]
            assert values.size % block == 0 and enc.size == values.size // block * type_size
            f.write(struct.pack("<III", int(qtype), values.size, enc.size))
            f.write(enc.tobytes())
            f.write(values.astype("<f4").tobytes())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[2] / "tests" / "data" / "quant")
    ap.add_argument("--seed", type=int, default=20240611)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    provenance = (f"eval/quant/gen_quant_golden.py seed={args.seed} "
                  f"gguf={package_version('gguf')} numpy={np.__version__}")
    rng = np.random.default_rng(args.seed)
    with np.errstate(over="ignore"):  # F16 overflow to inf is one of the cases
        write(args.out / "dequant.bin", provenance, dequant_records(rng))
        write(args.out / "quantize.bin", provenance, quantize_records(rng))
    for name in ("dequant.bin", "quantize.bin"):
        print(f"{args.out / name}: {(args.out / name).stat().st_size} bytes ({provenance})")


if __name__ == "__main__":
    main()
