// Byte layouts of the GGUF (ggml) block formats.
//
// Every struct below is exactly the on-disk block: fields in file order, no
// padding (checked by the static_asserts), little-endian. Half-precision
// fields are raw IEEE binary16 bits (uint16_t; convert with fp16_to_fp32),
// F16 and BF16 tensors are plain uint16_t arrays. A row of n elements is
// n / block_size consecutive blocks. Blocks in a mapped file are only 1- or
// 2-byte aligned in general, so SIMD code must use unaligned loads.
//
// Notation: "x[i]" is the i-th of the block's elements after dequantization;
// "q" is the small integer stored for it; d, dmin, m are f16 unless noted.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sieve {

constexpr int k_qk4_0 = 32;
constexpr int k_qk4_1 = 32;
constexpr int k_qk5_0 = 32;
constexpr int k_qk5_1 = 32;
constexpr int k_qk8_0 = 32;
constexpr int k_qk_k = 256;     // super-block size of every K-quant
constexpr int k_k_scale_size = 12;  // packed 6-bit scales/mins of Q4_K, Q5_K (and Q3_K's 6-bit scales)

// ---------------------------------------------------------------------------
// 32-element formats
// ---------------------------------------------------------------------------

// Q4_0: x[i] = d * (q[i] - 8), q in 0..15.
// qs[j] low nibble = q[j], high nibble = q[j + 16]   (j = 0..15)
struct block_q4_0 {
    uint16_t d;
    uint8_t qs[k_qk4_0 / 2];
};
static_assert(sizeof(block_q4_0) == 18);

// Q4_1: x[i] = d * q[i] + m, q in 0..15. Nibbles as Q4_0.
struct block_q4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[k_qk4_1 / 2];
};
static_assert(sizeof(block_q4_1) == 20);

// Q5_0: x[i] = d * (q[i] - 16), q in 0..31.
// Low 4 bits as Q4_0's nibbles (qs[j] low = element j, high = element j + 16);
// the 5th bit of element i is bit i of the little-endian uint32 in qh[0..3].
struct block_q5_0 {
    uint16_t d;
    uint8_t qh[4];  // bytes, not uint32_t, so the struct stays 2-byte aligned
    uint8_t qs[k_qk5_0 / 2];
};
static_assert(sizeof(block_q5_0) == 22);

// Q5_1: x[i] = d * q[i] + m, q in 0..31. Bits as Q5_0.
struct block_q5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[k_qk5_1 / 2];
};
static_assert(sizeof(block_q5_1) == 24);

// Q8_0: x[i] = d * qs[i].
struct block_q8_0 {
    uint16_t d;
    int8_t qs[k_qk8_0];
};
static_assert(sizeof(block_q8_0) == 34);

// ---------------------------------------------------------------------------
// K-quants: 256-element super-blocks cut into sub-blocks of 16 or 32
// ---------------------------------------------------------------------------

// Q2_K: 16 sub-blocks of 16. x[i] = d * (sc & 0xF) * q[i] - dmin * (sc >> 4),
// sc = scales[i / 16], q in 0..3.
// 2-bit quants: the super-block is two halves of 128; in half h, element
//   i = 128*h + 32*s + l   (s = 0..3, l = 0..31)
// is bits [2s, 2s+1] of qs[32*h + l].
struct block_q2_k {
    uint8_t scales[k_qk_k / 16];  // low nibble: scale, high nibble: min
    uint8_t qs[k_qk_k / 4];
    uint16_t d;     // super-block scale for the scales
    uint16_t dmin;  // super-block scale for the mins
};
static_assert(sizeof(block_q2_k) == 84);
static_assert(offsetof(block_q2_k, d) == 80);

// Q3_K: 16 sub-blocks of 16. x[i] = d * (s6[i / 16] - 32) * (q[i] - 4*(1 - hbit[i])).
// Low 2 bits of q: exactly Q2_K's qs layout.
// High bit: element i = 32*b + l (b = 0..7, l = 0..31) uses bit b of hmask[l];
//   a set bit means "no offset" (value lo2), a clear bit subtracts 4, so the
//   signed quant is in -4..3.
// 6-bit scales s6[0..15] (unsigned, then minus 32) packed in 12 bytes:
//   s6[j]     = (scales[j] & 0xF)     | ((scales[8 + j]     >> 0) & 3) << 4   j = 0..3
//   s6[4 + j] = (scales[4 + j] & 0xF) | ((scales[8 + j]     >> 2) & 3) << 4
//   s6[8 + j] = (scales[j] >> 4)      | ((scales[8 + j]     >> 4) & 3) << 4
//   s6[12+ j] = (scales[4 + j] >> 4)  | ((scales[8 + j]     >> 6) & 3) << 4
// i.e. bytes 0..7 hold the low nibbles of s6[0..7] and the high nibbles of
// s6[8..15]; byte 8 + j holds the top 2 bits of s6[j], s6[4+j], s6[8+j], s6[12+j]
// in bit pairs 0-1, 2-3, 4-5, 6-7. q3_k_unpack_scales does this.
struct block_q3_k {
    uint8_t hmask[k_qk_k / 8];
    uint8_t qs[k_qk_k / 4];
    uint8_t scales[k_k_scale_size];
    uint16_t d;
};
static_assert(sizeof(block_q3_k) == 110);
static_assert(offsetof(block_q3_k, d) == 108);

// Q4_K: 8 sub-blocks of 32. x[i] = d * sc[j] * q[i] - dmin * mn[j], j = i / 32,
// q in 0..15, sc and mn 6-bit unsigned (k_quant_scale_min unpacks them).
// 4-bit quants: element i = 64*p + 32*h + l (p = 0..3, h = 0..1, l = 0..31)
//   is nibble h (0 = low) of qs[32*p + l].
// Scales/mins in 12 bytes (A..H = sc[0..7] six bits each, a..h = mn[0..7]):
//    byte 0..3 : bits 0-5 = sc[0..3],  bits 6-7 = top 2 bits of sc[4..7]
//    byte 4..7 : bits 0-5 = mn[0..3],  bits 6-7 = top 2 bits of mn[4..7]
//    byte 8..11: bits 0-3 = low 4 bits of sc[4..7], bits 4-7 = low 4 bits of mn[4..7]
struct block_q4_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[k_k_scale_size];
    uint8_t qs[k_qk_k / 2];
};
static_assert(sizeof(block_q4_k) == 144);

// Q5_K: as Q4_K with a 5th bit: element i = 32*b + l (b = 0..7, l = 0..31)
// takes bit b of qh[l] as bit 4 of q, so q in 0..31.
struct block_q5_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[k_k_scale_size];
    uint8_t qh[k_qk_k / 8];
    uint8_t qs[k_qk_k / 2];
};
static_assert(sizeof(block_q5_k) == 176);

// Q6_K: 16 sub-blocks of 16. x[i] = d * scales[i / 16] * (q[i] - 32), q in 0..63,
// scales signed 8-bit. Two halves of 128; in half h, element
//   i = 128*h + 32*s + l  (s = 0..3, l = 0..31)
// has low 4 bits = nibble (s / 2) of ql[64*h + 32*(s % 2) + l]
// and high 2 bits = bits [2s, 2s+1] of qh[32*h + l].
struct block_q6_k {
    uint8_t ql[k_qk_k / 2];
    uint8_t qh[k_qk_k / 4];
    int8_t scales[k_qk_k / 16];
    uint16_t d;
};
static_assert(sizeof(block_q6_k) == 210);
static_assert(offsetof(block_q6_k, d) == 208);

// Q8_K: activations only (never stored in files). x[i] = d * qs[i], d is f32;
// bsums[g] = sum of qs[16g .. 16g+15], which lets K-quant dot products fold
// the per-sub-block mins in without touching the quants again.
struct block_q8_k {
    float d;
    int8_t qs[k_qk_k];
    int16_t bsums[k_qk_k / 16];
};
static_assert(sizeof(block_q8_k) == 292);

// ---------------------------------------------------------------------------
// Scale unpacking shared by the reference code and the SIMD kernels
// ---------------------------------------------------------------------------

// Q4_K / Q5_K: scale and min of sub-block j (0..7) from the 12 packed bytes.
inline void k_quant_scale_min(int j, const uint8_t *scales, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = scales[j] & 63;
        *mn = scales[j + 4] & 63;
    } else {
        *sc = static_cast<uint8_t>((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
        *mn = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
    }
}

// Q3_K: the 16 signed sub-block scales (s6 - 32, in -32..31).
inline void q3_k_unpack_scales(const uint8_t *scales, int8_t out[16]) {
    for (int j = 0; j < 4; ++j) {
        const uint8_t hi = scales[8 + j];
        out[j] = static_cast<int8_t>(((scales[j] & 0xF) | ((hi & 3) << 4)) - 32);
        out[4 + j] = static_cast<int8_t>(((scales[4 + j] & 0xF) | (((hi >> 2) & 3) << 4)) - 32);
        out[8 + j] = static_cast<int8_t>(((scales[j] >> 4) | (((hi >> 4) & 3) << 4)) - 32);
        out[12 + j] = static_cast<int8_t>(((scales[4 + j] >> 4) | (((hi >> 6) & 3) << 4)) - 32);
    }
}

}  // namespace sieve
