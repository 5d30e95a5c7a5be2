// Scalar reference (de)quantization. Layouts are documented in blocks.h.
//
// Exactness: every function evaluates the same float32 operations in the same
// order as the gguf Python package (NumPy, one rounding per operation), so the
// results match it bit for bit.
//   - Dequantization: the products formed before an add (d * q, d * sc * q for
//     the K-quants with an f16 d, <= 6-bit scales and <= 5-bit quants) need at
//     most 22 significant bits, so they are exact in float32 and a fused
//     multiply-add cannot change the result either.
//   - Quantization: `trunc(x * id + 8.5f)` (Q4_0, Q5_0) is not safe: when
//     x * id is near -7.5 its rounding step is coarser than the sum's, and an
//     FMA picks the nibble below NumPy's (the golden data has such blocks).
//     GCC fuses by default even under -std=c++20, hence the pragmas below,
//     which only affect this file; SIMD kernels may fuse freely and are checked
//     against these functions with a tolerance.
#include "sieve/quant/dequant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "sieve/core/fp16.h"
#include "sieve/core/status.h"
#include "sieve/quant/blocks.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace sieve {

namespace {

// ---------------------------------------------------------------------------
// Dequantization of one block; y receives the block's elements.
// ---------------------------------------------------------------------------

// Low 4 bits of element i (0..31) in the 32-element formats: nibble i / 16 of qs[i % 16].
inline int nibble32(const uint8_t *qs, int i) { return (qs[i % 16] >> (4 * (i / 16))) & 0xF; }

inline uint32_t load_u32_le(const uint8_t *p) {
    return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
           static_cast<uint32_t>(p[3]) << 24;
}

void dequant_block(const block_q4_0 &b, float *y) {
    const float d = fp16_to_fp32(b.d);
    for (int i = 0; i < k_qk4_0; ++i) y[i] = d * static_cast<float>(nibble32(b.qs, i) - 8);
}

void dequant_block(const block_q4_1 &b, float *y) {
    const float d = fp16_to_fp32(b.d);
    const float m = fp16_to_fp32(b.m);
    for (int i = 0; i < k_qk4_1; ++i) y[i] = d * static_cast<float>(nibble32(b.qs, i)) + m;
}

void dequant_block(const block_q5_0 &b, float *y) {
    const float d = fp16_to_fp32(b.d);
    const uint32_t qh = load_u32_le(b.qh);
    for (int i = 0; i < k_qk5_0; ++i) {
        const int q = nibble32(b.qs, i) | static_cast<int>((qh >> i) & 1u) << 4;
        y[i] = d * static_cast<float>(q - 16);
    }
}

void dequant_block(const block_q5_1 &b, float *y) {
    const float d = fp16_to_fp32(b.d);
    const float m = fp16_to_fp32(b.m);
    const uint32_t qh = load_u32_le(b.qh);
    for (int i = 0; i < k_qk5_1; ++i) {
        const int q = nibble32(b.qs, i) | static_cast<int>((qh >> i) & 1u) << 4;
        y[i] = d * static_cast<float>(q) + m;
    }
}

void dequant_block(const block_q8_0 &b, float *y) {
    const float d = fp16_to_fp32(b.d);
    for (int i = 0; i < k_qk8_0; ++i) y[i] = static_cast<float>(b.qs[i]) * d;
}

// 2-bit field of element i (0..255) in Q2_K/Q3_K's qs: half h = i / 128,
// shift s = (i % 128) / 32, byte 32h + i % 32.
inline int crumb256(const uint8_t *qs, int i) {
    return (qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
}

void dequant_block(const block_q2_k &b, float *y) {
    const float d = fp16_to_fp32(b.d);
    const float dmin = fp16_to_fp32(b.dmin);
    for (int g = 0; g < k_qk_k / 16; ++g) {
        const float dl = d * static_cast<float>(b.scales[g] & 0xF);
        const float ml = dmin * static_cast<float>(b.scales[g] >> 4);
        for (int i = 16 * g; i < 16 * g + 16; ++i) y[i] = dl * static_cast<float>(crumb256(b.qs, i)) - ml;
    }
}

void dequant_block(const block_q3_k &b, float *y) {
    const float d = fp16_to_fp32(b.d);
    int8_t sc[16];
    q3_k_unpack_scales(b.scales, sc);
    for (int g = 0; g < k_qk_k / 16; ++g) {
        const float dl = d * static_cast<float>(sc[g]);
        for (int i = 16 * g; i < 16 * g + 16; ++i) {
            const int high = (b.hmask[i % 32] >> (i / 32)) & 1;
            const int q = crumb256(b.qs, i) - (high ? 0 : 4);
            y[i] = dl * static_cast<float>(q);
        }
    }
}

// Low 4 bits of element i (0..255) in Q4_K/Q5_K's qs: nibble (i % 64) / 32 of
// byte 32 * (i / 64) + i % 32.
inline int nibble256(const uint8_t *qs, int i) {
    return (qs[32 * (i / 64) + i % 32] >> (4 * ((i % 64) / 32))) & 0xF;
}

void dequant_block(const block_q4_k &b, float *y) {
    const float d = fp16_to_fp32(b.d);
    const float dmin = fp16_to_fp32(b.dmin);
    for (int j = 0; j < k_qk_k / 32; ++j) {
        uint8_t sc, mn;
        k_quant_scale_min(j, b.scales, &sc, &mn);
        const float dl = d * static_cast<float>(sc);
        const float ml = dmin * static_cast<float>(mn);
        for (int i = 32 * j; i < 32 * j + 32; ++i) y[i] = dl * static_cast<float>(nibble256(b.qs, i)) - ml;
    }
}

void dequant_block(const block_q5_k &b, float *y) {
    const float d = fp16_to_fp32(b.d);
    const float dmin = fp16_to_fp32(b.dmin);
    for (int j = 0; j < k_qk_k / 32; ++j) {
        uint8_t sc, mn;
        k_quant_scale_min(j, b.scales, &sc, &mn);
        const float dl = d * static_cast<float>(sc);
        const float ml = dmin * static_cast<float>(mn);
        for (int i = 32 * j; i < 32 * j + 32; ++i) {
            const int q = nibble256(b.qs, i) | ((b.qh[i % 32] >> j) & 1) << 4;
            y[i] = dl * static_cast<float>(q) - ml;
        }
    }
}

void dequant_block(const block_q6_k &b, float *y) {
    const float d = fp16_to_fp32(b.d);
    for (int g = 0; g < k_qk_k / 16; ++g) {
        const float dl = d * static_cast<float>(b.scales[g]);
        for (int i = 16 * g; i < 16 * g + 16; ++i) {
            const int h = i / 128, r = i % 128;  // half, offset in half
            const int lo = (b.ql[64 * h + r % 64] >> (4 * (r / 64))) & 0xF;
            const int hi = (b.qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
            y[i] = dl * static_cast<float>((lo | hi << 4) - 32);
        }
    }
}

void dequant_block(const block_q8_k &b, float *y) {
    for (int i = 0; i < k_qk_k; ++i) y[i] = b.d * static_cast<float>(b.qs[i]);
}

template <class Block>
void dequant_blocks(const void *src, float *dst, int64_t n, int block_size) {
    const Block *blocks = static_cast<const Block *>(src);
    for (int64_t ib = 0; ib < n / block_size; ++ib) dequant_block(blocks[ib], dst + ib * block_size);
}

// ---------------------------------------------------------------------------
// Reference quantizers (one block each), mirroring gguf.quants step by step.
// ---------------------------------------------------------------------------

// The signed element of largest magnitude, the first one on ties (NumPy's
// argmax of |x|, ggml's strict `<` scan).
float signed_absmax(const float *x, int n) {
    float amax = std::fabs(x[0]), v = x[0];
    for (int i = 1; i < n; ++i) {
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            v = x[i];
        }
    }
    return v;
}

// Symmetric 4/5-bit: d = v / -(2^(bits-1)), q = min(qmax, trunc(x / d + offset + 0.5)).
// Returns d (float32; the caller stores it as f16) and writes q[0..32).
float quant_symmetric(const float *x, int half, int qmax, uint8_t *q) {
    const float d = signed_absmax(x, 32) / static_cast<float>(-half);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const float offset = static_cast<float>(half) + 0.5f;
    for (int i = 0; i < 32; ++i) {
        const float t = std::trunc(x[i] * id + offset);
        q[i] = static_cast<uint8_t>(std::clamp(static_cast<int>(t), 0, qmax));
    }
    return d;
}

// Asymmetric 4/5-bit: d = (max - min) / qmax, q = min(qmax, trunc((x - min) / d + 0.5)).
void quant_affine(const float *x, int qmax, uint8_t *q, float *d_out, float *min_out) {
    float mn = x[0], mx = x[0];
    for (int i = 1; i < 32; ++i) {
        mn = std::min(mn, x[i]);
        mx = std::max(mx, x[i]);
    }
    const float d = (mx - mn) / static_cast<float>(qmax);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < 32; ++i) {
        const float t = std::trunc((x[i] - mn) * id + 0.5f);
        q[i] = static_cast<uint8_t>(std::clamp(static_cast<int>(t), 0, qmax));
    }
    *d_out = d;
    *min_out = mn;
}

void pack_nibbles(const uint8_t *q, uint8_t *qs) {
    for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0xF) | (q[j + 16] & 0xF) << 4);
}

void pack_fifth_bits(const uint8_t *q, uint8_t *qh) {
    uint32_t bits = 0;
    for (int i = 0; i < 32; ++i) bits |= static_cast<uint32_t>((q[i] >> 4) & 1) << i;
    for (int k = 0; k < 4; ++k) qh[k] = static_cast<uint8_t>(bits >> (8 * k));
}

void quant_block(const float *x, block_q4_0 *b) {
    uint8_t q[32];
    b->d = fp32_to_fp16(quant_symmetric(x, 8, 15, q));
    pack_nibbles(q, b->qs);
}

void quant_block(const float *x, block_q5_0 *b) {
    uint8_t q[32];
    b->d = fp32_to_fp16(quant_symmetric(x, 16, 31, q));
    pack_fifth_bits(q, b->qh);
    pack_nibbles(q, b->qs);
}

void quant_block(const float *x, block_q4_1 *b) {
    uint8_t q[32];
    float d, mn;
    quant_affine(x, 15, q, &d, &mn);
    b->d = fp32_to_fp16(d);
    b->m = fp32_to_fp16(mn);
    pack_nibbles(q, b->qs);
}

void quant_block(const float *x, block_q5_1 *b) {
    uint8_t q[32];
    float d, mn;
    quant_affine(x, 31, q, &d, &mn);
    b->d = fp32_to_fp16(d);
    b->m = fp32_to_fp16(mn);
    pack_fifth_bits(q, b->qh);
    pack_nibbles(q, b->qs);
}

// Q8_0 rounds half away from zero (roundf), unlike Q8_K's round-half-even.
void quant_block(const float *x, block_q8_0 *b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < 32; ++i) b->qs[i] = static_cast<int8_t>(std::round(x[i] * id));
    b->d = fp32_to_fp16(d);
}

template <class Block>
void quant_blocks(const float *src, void *dst, int64_t n, int block_size) {
    Block *blocks = static_cast<Block *>(dst);
    for (int64_t ib = 0; ib < n / block_size; ++ib) quant_block(src + ib * block_size, &blocks[ib]);
}

void check_row(GgmlType type, int64_t n) {
    const TypeTraits *tr = type_traits(type);
    SIEVE_CHECKF(tr != nullptr, "unknown type id %u", static_cast<unsigned>(type));
    SIEVE_CHECKF(n >= 0 && n % tr->block_size == 0, "%s row of %lld elements: expected a multiple of %lld",
                 tr->name, static_cast<long long>(n), static_cast<long long>(tr->block_size));
}

}  // namespace

void dequantize_row(GgmlType type, const void *src, float *dst, int64_t n) {
    check_row(type, n);
    if (n == 0) return;  // src and dst may be null for an empty row
    switch (type) {
        case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
        case GgmlType::F16:
        case GgmlType::BF16: {
            const auto *p = static_cast<const uint8_t *>(src);
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, p + 2 * i, 2);
                dst[i] = type == GgmlType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
            }
            return;
        }
        case GgmlType::Q4_0: return dequant_blocks<block_q4_0>(src, dst, n, k_qk4_0);
        case GgmlType::Q4_1: return dequant_blocks<block_q4_1>(src, dst, n, k_qk4_1);
        case GgmlType::Q5_0: return dequant_blocks<block_q5_0>(src, dst, n, k_qk5_0);
        case GgmlType::Q5_1: return dequant_blocks<block_q5_1>(src, dst, n, k_qk5_1);
        case GgmlType::Q8_0: return dequant_blocks<block_q8_0>(src, dst, n, k_qk8_0);
        case GgmlType::Q2_K: return dequant_blocks<block_q2_k>(src, dst, n, k_qk_k);
        case GgmlType::Q3_K: return dequant_blocks<block_q3_k>(src, dst, n, k_qk_k);
        case GgmlType::Q4_K: return dequant_blocks<block_q4_k>(src, dst, n, k_qk_k);
        case GgmlType::Q5_K: return dequant_blocks<block_q5_k>(src, dst, n, k_qk_k);
        case GgmlType::Q6_K: return dequant_blocks<block_q6_k>(src, dst, n, k_qk_k);
        case GgmlType::Q8_K: return dequant_blocks<block_q8_k>(src, dst, n, k_qk_k);
        default: SIEVE_CHECKF(false, "dequantize_row: type %s is not supported", type_name(type));
    }
}

bool quantize_row_ref(GgmlType type, const float *src, void *dst, int64_t n) {
    check_row(type, n);
    switch (type) {
        case GgmlType::F32:
            if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
            return true;
        case GgmlType::F16:
        case GgmlType::BF16: {
            auto *p = static_cast<uint8_t *>(dst);
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = type == GgmlType::F16 ? fp32_to_fp16(src[i]) : fp32_to_bf16(src[i]);
                std::memcpy(p + 2 * i, &h, 2);
            }
            return true;
        }
        case GgmlType::Q4_0: quant_blocks<block_q4_0>(src, dst, n, k_qk4_0); return true;
        case GgmlType::Q4_1: quant_blocks<block_q4_1>(src, dst, n, k_qk4_1); return true;
        case GgmlType::Q5_0: quant_blocks<block_q5_0>(src, dst, n, k_qk5_0); return true;
        case GgmlType::Q5_1: quant_blocks<block_q5_1>(src, dst, n, k_qk5_1); return true;
        case GgmlType::Q8_0: quant_blocks<block_q8_0>(src, dst, n, k_qk8_0); return true;
        default: return false;
    }
}

void quantize_row_q8_k_ref(const float *src, void *dst, int64_t n) {
    check_row(GgmlType::Q8_K, n);
    auto *blocks = static_cast<block_q8_k *>(dst);
    for (int64_t ib = 0; ib < n / k_qk_k; ++ib) {
        const float *x = src + ib * k_qk_k;
        block_q8_k &b = blocks[ib];
        const float v = signed_absmax(x, k_qk_k);
        if (v == 0.0f) {
            b = block_q8_k{};
            continue;
        }
        const float iscale = -127.0f / v;
        for (int i = 0; i < k_qk_k; ++i) {
            // nearbyint: round half to even in the default rounding mode, as ggml's nearest_int.
            const int q = static_cast<int>(std::nearbyint(iscale * x[i]));
            b.qs[i] = static_cast<int8_t>(std::min(127, q));
        }
        for (int g = 0; g < k_qk_k / 16; ++g) {
            int sum = 0;
            for (int i = 16 * g; i < 16 * g + 16; ++i) sum += b.qs[i];
            b.bsums[g] = static_cast<int16_t>(sum);
        }
        b.d = 1.0f / iscale;
    }
}

}  // namespace sieve
