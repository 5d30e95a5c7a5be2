// The integer-path dots for AVX2 without VNNI (matmul_q8.h, matmul_q8_rows.h):
// what dot() and dot_raw() run on such CPUs, and what dot_portable() is
// there. Private to kernels/cpu.
#include <algorithm>
#include <cstring>

#include "sieve/core/status.h"
#include "sieve/kernels/cpu/matmul_q8_rows.h"
#include "sieve/quant/blocks.h"

#if SIEVE_Q8_AVX2

namespace sieve::cpu::q8 {

namespace {

// AVX2 body (no VNNI): a block's 32 byte products in 8 int32 lanes, with
// the block scale applied in f32 lanes, so no horizontal sum until the end.
// vpmaddubsw adds byte products in pairs into int16: exact while
// 2 * 127 * u_max fits, i.e. u <= 63 (Q4_*, Q5_*, Q4_K, Q5_K, Q6_K). Q8_0's
// u = q8 + 128 reaches 255, so it multiplies the signed q8 = u ^ 0x80 by q
// (|q8| <= 128: 2 * 128 * 127 < 2^15): that sum is sum u q - 128 sum q, and
// the dropped 128 d e sum q is exactly what its correction c = -128 d would
// add back, so Q8_0 skips the correction. Blocks alternate between two
// accumulators per token (two FMA chains); each token's arithmetic is the
// same whatever n_act is, so a token's result never depends on its batch.
template <bool Signed>
inline __m256i block_sums_avx2(__m256i u, __m256i q) {
    const __m256i ones = _mm256_set1_epi16(1);
    if constexpr (Signed) {
        const __m256i w = _mm256_xor_si256(u, _mm256_set1_epi8(static_cast<char>(0x80)));
        return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(q, w)), ones);
    } else {
        return _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), ones);
    }
}

inline float hsum_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// Lanes 0 .. n-1 of 8 (all for n >= 8), as a maskload mask.
inline __m256i lane_mask_avx2(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::min<int64_t>(n, 8))),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Src supplies the weights: block(b) = the 32 bytes u of block b in element
// order (zero for the pad block of an odd count), scale(b) = d_b, and
// aux8(b, m) = c_b .. c_{b+7} in the lanes m selects (zero past the last
// real block). UnpackedSrc reads a q8 row, RawSrc the GGUF blocks; both give
// the same values, so the same bits.
template <int NT, bool Signed, class Src>
void dot_body(const Src &w, const uint8_t *const *acts, const RowShape &s, float *out) {
    ConstRowParts a[NT];
    __m256 acc0[NT], acc1[NT];
    for (int t = 0; t < NT; ++t) {
        a[t] = parts(acts[t], s);
        acc0[t] = acc1[t] = _mm256_setzero_ps();
    }
    // n_pad is even and pad blocks are zero on both sides. Pairs of real
    // blocks first (no pad checks), then the pair holding the pad block.
    const int64_t n_full = s.n_blocks / 2 * 2;
    for (int64_t b = 0; b < s.n_pad; b += 2) {
        const bool full = b < n_full;
        const __m256i u0 = full ? w.block_real(b) : w.block(b),
                      u1 = full ? w.block_real(b + 1) : w.block(b + 1);
        const float d0 = full ? w.scale_real(b) : w.scale(b),
                    d1 = full ? w.scale_real(b + 1) : w.scale(b + 1);
        for (int t = 0; t < NT; ++t) {
            const __m256i q0 =
                _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a[t].bytes + b * k_block));
            const __m256i q1 =
                _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a[t].bytes + (b + 1) * k_block));
            acc0[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_sums_avx2<Signed>(u0, q0)),
                                      _mm256_set1_ps(d0 * a[t].scale[b]), acc0[t]);
            acc1[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_sums_avx2<Signed>(u1, q1)),
                                      _mm256_set1_ps(d1 * a[t].scale[b + 1]), acc1[t]);
        }
    }
    __m256 corr[NT];
    for (int t = 0; t < NT; ++t) corr[t] = _mm256_setzero_ps();
    if constexpr (!Signed) {
        for (int64_t b = 0; b < s.n_pad; b += 8) {
            const __m256i m = lane_mask_avx2(s.n_pad - b);
            const __m256 c = w.aux8(b, m);
            for (int t = 0; t < NT; ++t)
                corr[t] = _mm256_fmadd_ps(c, _mm256_maskload_ps(a[t].aux + b, m), corr[t]);
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = hsum_avx2(_mm256_add_ps(_mm256_add_ps(acc0[t], acc1[t]), corr[t]));
}

struct UnpackedSrcAvx2 {
    ConstRowParts w;
    __m256i block(int64_t b) const {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w.bytes + b * k_block));
    }
    __m256i block_real(int64_t b) const { return block(b); }
    float scale(int64_t b) const { return w.scale[b]; }
    float scale_real(int64_t b) const { return w.scale[b]; }
    __m256 aux8(int64_t b, __m256i m) const { return _mm256_maskload_ps(w.aux + b, m); }
};

inline float f16c_load(const uint8_t *p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

// The 32-element block types straight from their GGUF blocks (layouts in
// quant/blocks.h), expanded to what unpack_weight would store.
template <GgmlType T>
struct RawSrcAvx2 {
    using L = BlockLayout<T>;
    static constexpr bool k_q5 = L::k_q5, k_min = L::k_min;
    static constexpr int64_t k_size = L::k_size, k_qh = L::k_qh, k_qs = L::k_qs;
    static constexpr float k_offset = L::k_offset;
    const uint8_t *row;
    int64_t n_blocks;

    __m256i block(int64_t b) const { return b < n_blocks ? block_real(b) : _mm256_setzero_si256(); }
    __m256i block_real(int64_t b) const {
        const uint8_t *p = row + b * k_size;
        if constexpr (T == GgmlType::Q8_0) {
            return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + k_qs)),
                                    _mm256_set1_epi8(static_cast<char>(0x80)));
        } else {
            const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p + k_qs));
            const __m128i nib = _mm_set1_epi8(0x0f);
            __m256i v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), nib), _mm_and_si128(q, nib));
            if constexpr (k_q5) {
                uint32_t qh;
                std::memcpy(&qh, p + k_qh, 4);
                v = _mm256_or_si256(v, fifth_bits_avx2(qh));
            }
            return v;
        }
    }
    float scale(int64_t b) const { return b < n_blocks ? scale_real(b) : 0.0f; }
    float scale_real(int64_t b) const { return f16c_load(row + b * k_size); }
    __m256 aux8(int64_t b, __m256i m) const {
        alignas(32) uint16_t h[8] = {};
        const int64_t n = std::min<int64_t>(8, n_blocks - b);
        for (int64_t i = 0; i < n; ++i) std::memcpy(&h[i], row + (b + i) * k_size + (k_min ? 2 : 0), 2);
        __m256 c = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i *>(h)));
        if constexpr (!k_min) c = _mm256_mul_ps(c, _mm256_set1_ps(k_offset));
        // +0 past the last real block, like the unpacked row's pad (m only
        // cuts lanes past n_pad, a subset).
        (void)m;
        return _mm256_and_ps(c, _mm256_castsi256_ps(lane_mask_avx2(n)));
    }
};

// Q4_K / Q5_K straight from their super-blocks (quant/blocks.h): block b is
// sub-block b % 8 of super-block b / 8, with d_b = d sc_j and c_b = -dmin mn_j
// as unpack_k_quant computes them. Rows are whole super-blocks (no pad).
template <GgmlType T>
struct KRawSrcAvx2 {
    static constexpr bool k_q5 = T == GgmlType::Q5_K;
    static constexpr int64_t k_size = k_q5 ? 176 : 144;
    static constexpr int64_t k_qs = k_q5 ? 48 : 16;
    const uint8_t *row;

    __m256i block(int64_t b) const {
        const uint8_t *blk = row + b / 8 * k_size;
        const int j = static_cast<int>(b % 8);
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + k_qs + 32 * (j / 2)));
        __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 4 * (j % 2)), _mm256_set1_epi8(0x0f));
        if constexpr (k_q5) {
            const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << j));
            const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + 16));
            v = _mm256_or_si256(v, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit),
                                                    _mm256_set1_epi8(0x10)));
        }
        return v;
    }
    __m256i block_real(int64_t b) const { return block(b); }
    float scale(int64_t b) const {
        const uint8_t *blk = row + b / 8 * k_size;
        uint8_t sc, mn;
        k_quant_scale_min(static_cast<int>(b % 8), blk + 4, &sc, &mn);
        return f16c_load(blk) * static_cast<float>(sc);
    }
    float scale_real(int64_t b) const { return scale(b); }
    __m256 aux8(int64_t b, __m256i m) const {
        // b is a multiple of 8: one super-block's eight mins.
        const uint8_t *blk = row + b / 8 * k_size;
        const float dmin = f16c_load(blk + 2);
        alignas(32) float c[8];
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, mn;
            k_quant_scale_min(j, blk + 4, &sc, &mn);
            c[j] = -(dmin * static_cast<float>(mn));
        }
        return _mm256_maskload_ps(c, m);
    }
};

// Q6_K: a 32-byte block is two sub-blocks of 16; after the pair sums, int32
// lanes 0-3 belong to the first, 4-7 to the second, scaled by their own dsc.
// Src: block(b) = u of block b in element order, dsc2(b) = those two scales
// (lanes 0-3, 4-7), dsc8(j, m) = the scales of sub-blocks j .. j + 7 in the
// lanes m selects.
template <int NT, class Src>
void dot_q6_avx2(const Src &w, const uint8_t *const *acts, const RowShape &s, float *out) {
    ConstRowParts a[NT];
    __m256 acc0[NT], acc1[NT];
    for (int t = 0; t < NT; ++t) {
        a[t] = parts(acts[t], s);
        acc0[t] = acc1[t] = _mm256_setzero_ps();
    }
    // Q6_K rows are whole super-blocks: n_blocks is a multiple of 8.
    for (int64_t b = 0; b < s.n_blocks; b += 2) {
        const __m256i u0 = w.block(b), u1 = w.block(b + 1);
        const __m256 d0 = w.dsc2(b), d1 = w.dsc2(b + 1);
        for (int t = 0; t < NT; ++t) {
            const __m256i q0 =
                _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a[t].bytes + b * k_block));
            const __m256i q1 =
                _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a[t].bytes + (b + 1) * k_block));
            acc0[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_sums_avx2<false>(u0, q0)),
                                      _mm256_mul_ps(d0, _mm256_set1_ps(a[t].scale[b])), acc0[t]);
            acc1[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_sums_avx2<false>(u1, q1)),
                                      _mm256_mul_ps(d1, _mm256_set1_ps(a[t].scale[b + 1])), acc1[t]);
        }
    }
    __m256 corr[NT];
    for (int t = 0; t < NT; ++t) corr[t] = _mm256_setzero_ps();
    for (int64_t j = 0; j < 2 * s.n_blocks; j += 8) {
        const __m256i m = lane_mask_avx2(2 * s.n_blocks - j);
        const __m256 d = w.dsc8(j, m);
        for (int t = 0; t < NT; ++t)
            corr[t] = _mm256_fmadd_ps(d, _mm256_maskload_ps(a[t].half + j, m), corr[t]);
    }
    for (int t = 0; t < NT; ++t)
        out[t] = hsum_avx2(_mm256_add_ps(acc0[t], acc1[t])) - 32.0f * hsum_avx2(corr[t]);
}

struct Q6UnpackedSrcAvx2 {
    ConstRowParts w;  // w.scale holds dsc for the 2 n_blocks sub-blocks (matmul_q8.h)
    __m256i block(int64_t b) const {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w.bytes + b * k_block));
    }
    __m256 dsc2(int64_t b) const {
        return _mm256_set_m128(_mm_set1_ps(w.scale[2 * b + 1]), _mm_set1_ps(w.scale[2 * b]));
    }
    __m256 dsc8(int64_t j, __m256i m) const { return _mm256_maskload_ps(w.scale + j, m); }
};

// Q6_K super-block (quant/blocks.h): ql[128], qh[64], int8 scales[16], f16 d.
// Block k of 8 is quarter k % 4 of half k / 4: low nibbles from
// ql[64 h + 32 (k % 2)] shifted by 4 ((k / 2) % 2), top bits from
// qh[32 h] shifted by 2 (k % 4); as unpack_q6_k lays them out.
struct Q6RawSrcAvx2 {
    const uint8_t *row;
    __m256i block(int64_t b) const {
        const uint8_t *blk = row + b / 8 * 210;
        const int k = static_cast<int>(b % 8), h = k / 4, sub = k % 4;
        const __m256i lo = _mm256_and_si256(
            _mm256_srli_epi16(
                _mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + 64 * h + 32 * (sub % 2))),
                4 * (sub / 2)),
            _mm256_set1_epi8(0x0f));
        const __m256i hi = _mm256_and_si256(
            _mm256_srli_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + 128 + 32 * h)),
                              2 * sub),
            _mm256_set1_epi8(0x03));
        return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
    }
    float dsc(int64_t j) const {
        const uint8_t *blk = row + j / 16 * 210;
        return f16c_load(blk + 208) * static_cast<float>(static_cast<int8_t>(blk[192 + j % 16]));
    }
    __m256 dsc2(int64_t b) const {
        return _mm256_set_m128(_mm_set1_ps(dsc(2 * b + 1)), _mm_set1_ps(dsc(2 * b)));
    }
    __m256 dsc8(int64_t j, __m256i m) const {
        alignas(32) float d[8];
        for (int i = 0; i < 8; ++i) d[i] = dsc(j + i);  // j is a multiple of 8: one super-block
        return _mm256_maskload_ps(d, m);
    }
};

template <int NT>
void dot_avx2_type(GgmlType type, const ConstRowParts &w, const uint8_t *const *acts, const RowShape &s,
                   float *out) {
    if (type == GgmlType::Q6_K) return dot_q6_avx2<NT>(Q6UnpackedSrcAvx2{w}, acts, s, out);
    if (type == GgmlType::Q8_0) return dot_body<NT, true>(UnpackedSrcAvx2{w}, acts, s, out);
    dot_body<NT, false>(UnpackedSrcAvx2{w}, acts, s, out);
}

template <bool Signed, class Src>
void dot_raw_body(const Src &src, const uint8_t *const *acts, int n_act, const RowShape &s, float *out) {
    switch (n_act) {
        case 1:
            return dot_body<1, Signed>(src, acts, s, out);
        case 2:
            return dot_body<2, Signed>(src, acts, s, out);
        case 3:
            return dot_body<3, Signed>(src, acts, s, out);
        case 4:
            return dot_body<4, Signed>(src, acts, s, out);
        default:
            SIEVE_CHECKF(false, "n_act = %d, expected 1..4", n_act);
    }
}

void dot_q6_raw_avx2(const uint8_t *row, const uint8_t *const *acts, int n_act, const RowShape &s,
                     float *out) {
    const Q6RawSrcAvx2 src{row};
    switch (n_act) {
        case 1:
            return dot_q6_avx2<1>(src, acts, s, out);
        case 2:
            return dot_q6_avx2<2>(src, acts, s, out);
        case 3:
            return dot_q6_avx2<3>(src, acts, s, out);
        case 4:
            return dot_q6_avx2<4>(src, acts, s, out);
        default:
            SIEVE_CHECKF(false, "n_act = %d, expected 1..4", n_act);
    }
}

}  // namespace

void dot_avx2(GgmlType type, const ConstRowParts &w, const uint8_t *const *acts, int n_act, const RowShape &s,
              float *out) {
    switch (n_act) {
        case 1:
            return dot_avx2_type<1>(type, w, acts, s, out);
        case 2:
            return dot_avx2_type<2>(type, w, acts, s, out);
        case 3:
            return dot_avx2_type<3>(type, w, acts, s, out);
        case 4:
            return dot_avx2_type<4>(type, w, acts, s, out);
        default:
            SIEVE_CHECKF(false, "n_act = %d, expected 1..4", n_act);
    }
}

bool dot_raw_avx2(GgmlType type, const void *w, const uint8_t *const *acts, int n_act, const RowShape &s,
                  float *out) {
    const uint8_t *row = static_cast<const uint8_t *>(w);
    const int64_t n = s.n_blocks;
    switch (type) {
        case GgmlType::Q4_0:
            dot_raw_body<false>(RawSrcAvx2<GgmlType::Q4_0>{row, n}, acts, n_act, s, out);
            return true;
        case GgmlType::Q4_1:
            dot_raw_body<false>(RawSrcAvx2<GgmlType::Q4_1>{row, n}, acts, n_act, s, out);
            return true;
        case GgmlType::Q5_0:
            dot_raw_body<false>(RawSrcAvx2<GgmlType::Q5_0>{row, n}, acts, n_act, s, out);
            return true;
        case GgmlType::Q5_1:
            dot_raw_body<false>(RawSrcAvx2<GgmlType::Q5_1>{row, n}, acts, n_act, s, out);
            return true;
        case GgmlType::Q8_0:
            dot_raw_body<true>(RawSrcAvx2<GgmlType::Q8_0>{row, n}, acts, n_act, s, out);
            return true;
        case GgmlType::Q4_K:
            dot_raw_body<false>(KRawSrcAvx2<GgmlType::Q4_K>{row}, acts, n_act, s, out);
            return true;
        case GgmlType::Q5_K:
            dot_raw_body<false>(KRawSrcAvx2<GgmlType::Q5_K>{row}, acts, n_act, s, out);
            return true;
        case GgmlType::Q6_K:
            dot_q6_raw_avx2(row, acts, n_act, s, out);
            return true;
        default:
            return false;
    }
}

}  // namespace sieve::cpu::q8

#endif
