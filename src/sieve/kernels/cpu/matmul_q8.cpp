#include "sieve/kernels/cpu/matmul_q8.h"
#include "sieve/kernels/cpu/matmul_q8_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "sieve/kernels/cpu/intrin.h"

#include "sieve/core/fp16.h"
#include "sieve/core/status.h"
#include "sieve/quant/blocks.h"

namespace sieve::cpu::q8 {

namespace {

inline float load_f16(const uint8_t *p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return fp16_to_fp32(h);
}

// The low nibbles of 16 bytes are elements 0..15 of a block, the high nibbles 16..31.
inline void split_nibbles(const uint8_t *qs, uint8_t *u) {
#if defined(__AVX2__)
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i *>(qs));
    const __m128i m = _mm_set1_epi8(0x0f);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(u), _mm_and_si128(q, m));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(u + 16), _mm_and_si128(_mm_srli_epi16(q, 4), m));
#else
    for (int j = 0; j < 16; ++j) {
        u[j] = qs[j] & 0x0f;
        u[j + 16] = qs[j] >> 4;
    }
#endif
}

// Q5: bit j of the little-endian qh word is the fifth bit of element j.
inline void add_fifth_bits(const uint8_t *qh_bytes, uint8_t *u) {
    uint32_t qh;
    std::memcpy(&qh, qh_bytes, 4);
#if defined(__AVX2__)
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(u));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(u), _mm256_or_si256(v, fifth_bits_avx2(qh)));
#else
    for (int j = 0; j < 32; ++j) u[j] |= static_cast<uint8_t>(((qh >> j) & 1u) << 4);
#endif
}

}  // namespace

bool supports(GgmlType t) {
    switch (t) {
        case GgmlType::Q4_0:
        case GgmlType::Q4_1:
        case GgmlType::Q5_0:
        case GgmlType::Q5_1:
        case GgmlType::Q8_0:
        case GgmlType::Q4_K:
        case GgmlType::Q5_K:
        case GgmlType::Q6_K: return true;
        default: return false;
    }
}

RowShape row_shape(int64_t n_cols) {
    RowShape s;
    s.n_blocks = n_cols / k_block;
    s.n_pad = (s.n_blocks + 1) / 2 * 2;
    s.stride_bytes = (s.n_pad * (k_block + 8) + 63) / 64 * 64;
    s.act_stride_bytes = (s.n_pad * (k_block + 16) + 63) / 64 * 64;
    return s;
}

void quantize_act(const float *x, const RowShape &s, uint8_t *dst) {
    RowParts p = parts(dst, s);
    int64_t b = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
    // Same arithmetic as the scalar loop below (max is exact; roundscale with
    // imm 0 is round-to-nearest-even like nearbyint in the default mode; the
    // int sum is exact), so both give identical bytes.
    for (; b < s.n_blocks; ++b) {
        const float *xb = x + b * k_block;
        const __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
        const float e = amax / 127.0f;
        const float inv = e > 0.0f ? 1.0f / e : 0.0f;
        const __m512 vinv = _mm512_set1_ps(inv);
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(x0, vinv), 0));
        const __m512i q1 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(x1, vinv), 0));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(p.bytes + b * k_block), _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(p.bytes + b * k_block + 16), _mm512_cvtepi32_epi8(q1));
        const int32_t h0 = _mm512_reduce_add_epi32(q0), h1 = _mm512_reduce_add_epi32(q1);
        p.scale[b] = e;
        p.aux[b] = e * static_cast<float>(h0 + h1);
        p.half[2 * b] = e * static_cast<float>(h0);
        p.half[2 * b + 1] = e * static_cast<float>(h1);
    }
#elif defined(__AVX2__)
    // The same bytes as the scalar loop below (max and the int sums are
    // exact; _MM_FROUND_TO_NEAREST_INT is nearbyint's default mode).
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const auto hsum_i32 = [](__m256i v) {
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        return _mm_cvtsi128_si32(s4);
    };
    for (; b < s.n_blocks; ++b) {
        const float *xb = x + b * k_block;
        __m256 v[4];
        for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(xb + 8 * i);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float e = _mm_cvtss_f32(m4) / 127.0f;
        const float inv = e > 0.0f ? 1.0f / e : 0.0f;
        const __m256 vinv = _mm256_set1_ps(inv);
        __m256i q[4];
        for (int i = 0; i < 4; ++i)
            q[i] = _mm256_cvtps_epi32(
                _mm256_round_ps(_mm256_mul_ps(v[i], vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        // packs interleave the 128-bit lanes; the permute restores element order.
        const __m256i p8 = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(p.bytes + b * k_block),
                            _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
        const int32_t h0 = hsum_i32(_mm256_add_epi32(q[0], q[1])),
                      h1 = hsum_i32(_mm256_add_epi32(q[2], q[3]));
        p.scale[b] = e;
        p.aux[b] = e * static_cast<float>(h0 + h1);
        p.half[2 * b] = e * static_cast<float>(h0);
        p.half[2 * b + 1] = e * static_cast<float>(h1);
    }
#endif
    for (; b < s.n_blocks; ++b) {
        const float *xb = x + b * k_block;
        float amax = 0.0f;
        for (int j = 0; j < k_block; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
        const float e = amax / 127.0f;
        const float inv = e > 0.0f ? 1.0f / e : 0.0f;
        int8_t *q = reinterpret_cast<int8_t *>(p.bytes + b * k_block);
        int32_t sum[2] = {0, 0};
        for (int j = 0; j < k_block; ++j) {
            const int v = static_cast<int>(std::nearbyint(xb[j] * inv));
            q[j] = static_cast<int8_t>(v);
            sum[j / 16] += v;
        }
        p.scale[b] = e;
        p.aux[b] = e * static_cast<float>(sum[0] + sum[1]);
        p.half[2 * b] = e * static_cast<float>(sum[0]);
        p.half[2 * b + 1] = e * static_cast<float>(sum[1]);
    }
    for (b = s.n_blocks; b < s.n_pad; ++b) {
        std::memset(p.bytes + b * k_block, 0, k_block);
        p.scale[b] = 0.0f;
        p.aux[b] = 0.0f;
        p.half[2 * b] = p.half[2 * b + 1] = 0.0f;
    }
}

namespace {
bool unpack_weight_simd(GgmlType type, const void *src, const RowShape &s, uint8_t *dst);
}  // namespace

namespace {
// Q4_K / Q5_K (quant/blocks.h): sub-block j of 32 is w = (d sc_j) q - dmin mn_j
// with q in 0..15 (0..31), exactly a q8 weight block with d_b = d sc_j and
// c_b = -dmin mn_j. Both products are exact in f32 (11-bit by 6-bit
// mantissas), so the unpacked row represents the weights without error.
void unpack_k_quant(GgmlType type, const uint8_t *in, const RowParts &p, int64_t n_blocks) {
    const bool q5 = type == GgmlType::Q5_K;
    const int64_t sb_bytes = q5 ? 176 : 144;
    for (int64_t sb = 0; sb < n_blocks / 8; ++sb) {
        const uint8_t *blk = in + sb * sb_bytes;
        const float d = load_f16(blk), dmin = load_f16(blk + 2);
        const uint8_t *scales = blk + 4;
        const uint8_t *qh = blk + 16;
        const uint8_t *qs = blk + (q5 ? 48 : 16);
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, mn;
            k_quant_scale_min(j, scales, &sc, &mn);
            const int64_t b = sb * 8 + j;
            p.scale[b] = d * static_cast<float>(sc);
            p.aux[b] = -(dmin * static_cast<float>(mn));
            // element 32 j + l: nibble (j % 2) of qs[32 (j / 2) + l]; Q5_K: bit j of qh[l]
            uint8_t *u = p.bytes + b * k_block;
            const uint8_t *q = qs + 32 * (j / 2);
            const int shift = 4 * (j % 2);
#if defined(__AVX2__)
            const __m256i nib = _mm256_set1_epi8(0x0f);
            __m256i v = _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(q)), shift), nib);
            if (q5) {
                const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << j));
                const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(qh));
                const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit);
                v = _mm256_or_si256(v, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
            }
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(u), v);
#else
            for (int l = 0; l < 32; ++l) u[l] = static_cast<uint8_t>((q[l] >> shift) & 0x0f);
            if (q5)
                for (int l = 0; l < 32; ++l) u[l] |= static_cast<uint8_t>(((qh[l] >> j) & 1) << 4);
#endif
        }
    }
}

// Q6_K (quant/blocks.h) -> u in element order and dsc_j = d * sc_j (exact).
void unpack_q6_k(const uint8_t *in, const RowParts &p, int64_t n_blocks) {
    for (int64_t sb = 0; sb < n_blocks / 8; ++sb) {
        const uint8_t *blk = in + sb * 210;
        const float d = load_f16(blk + 208);
        for (int j = 0; j < 16; ++j) p.scale[sb * 16 + j] = d * static_cast<float>(static_cast<int8_t>(blk[192 + j]));
        uint8_t *u = p.bytes + sb * 256;
        for (int h = 0; h < 2; ++h)
            for (int sub = 0; sub < 4; ++sub)
                for (int l = 0; l < 32; ++l) {
                    const int lo = (blk[64 * h + 32 * (sub % 2) + l] >> (4 * (sub / 2))) & 0x0f;
                    const int hi = (blk[128 + 32 * h + l] >> (2 * sub)) & 3;
                    u[128 * h + 32 * sub + l] = static_cast<uint8_t>(lo | hi << 4);
                }
    }
}
}  // namespace

void unpack_weight(GgmlType type, const void *src, const RowShape &s, uint8_t *dst) {
    if (unpack_weight_simd(type, src, s, dst)) return;
    RowParts p = parts(dst, s);
    const uint8_t *in = static_cast<const uint8_t *>(src);
    if (type == GgmlType::Q6_K) return unpack_q6_k(in, p, s.n_blocks);  // n_pad == n_blocks: no pad blocks
    if (type == GgmlType::Q4_K || type == GgmlType::Q5_K) {
        unpack_k_quant(type, in, p, s.n_blocks);
        for (int64_t b = s.n_blocks; b < s.n_pad; ++b) {
            std::memset(p.bytes + b * k_block, 0, k_block);
            p.scale[b] = 0.0f;
            p.aux[b] = 0.0f;
        }
        return;
    }
    for (int64_t b = 0; b < s.n_blocks; ++b) {
        uint8_t *u = p.bytes + b * k_block;
        float d = 0.0f, c = 0.0f;
        switch (type) {
            case GgmlType::Q4_0: {  // f16 d | 16 bytes of nibbles
                const uint8_t *blk = in + b * 18;
                d = load_f16(blk);
                c = -8.0f * d;
                split_nibbles(blk + 2, u);
                break;
            }
            case GgmlType::Q4_1: {  // f16 d | f16 m | 16 bytes of nibbles
                const uint8_t *blk = in + b * 20;
                d = load_f16(blk);
                c = load_f16(blk + 2);
                split_nibbles(blk + 4, u);
                break;
            }
            case GgmlType::Q5_0: {  // f16 d | 4 bytes qh | 16 bytes of nibbles
                const uint8_t *blk = in + b * 22;
                d = load_f16(blk);
                c = -16.0f * d;
                split_nibbles(blk + 6, u);
                add_fifth_bits(blk + 2, u);
                break;
            }
            case GgmlType::Q5_1: {  // f16 d | f16 m | 4 bytes qh | 16 bytes of nibbles
                const uint8_t *blk = in + b * 24;
                d = load_f16(blk);
                c = load_f16(blk + 2);
                split_nibbles(blk + 8, u);
                add_fifth_bits(blk + 4, u);
                break;
            }
            case GgmlType::Q8_0: {  // f16 d | 32 int8; stored with +128 so it is unsigned
                const uint8_t *blk = in + b * 34;
                d = load_f16(blk);
                c = -128.0f * d;
                for (int j = 0; j < k_block; ++j) u[j] = static_cast<uint8_t>(blk[2 + j] ^ 0x80u);
                break;
            }
            default: SIEVE_CHECKF(false, "q8 path does not handle type %s", type_name(type));
        }
        p.scale[b] = d;
        p.aux[b] = c;
    }
    for (int64_t b = s.n_blocks; b < s.n_pad; ++b) {
        std::memset(p.bytes + b * k_block, 0, k_block);
        p.scale[b] = 0.0f;
        p.aux[b] = 0.0f;
    }
}

namespace {

#if SIEVE_Q8_VNNI
// One weight row against NT activation rows. 16 blocks form a group: their
// d*e products are one vector; each pair of blocks is one 64-byte vpdpbusd
// whose lanes 0-7 belong to the first block and 8-15 to the second, so the
// pair's scales are two broadcasts picked out of the group vector.
//
// Src supplies the weights: scales(g, mask, &d, &c) for the group starting at
// block g, and pair(b) = the 64 bytes u of blocks b and b + 1 (zero past the
// last real block).
template <int NT, class Src>
void dot_vnni(const Src &w, const uint8_t *const *acts, const RowShape &s, float *out) {
    ConstRowParts a[NT];
    for (int t = 0; t < NT; ++t) a[t] = parts(acts[t], s);
    __m512 acc[NT], corr[NT];
    for (int t = 0; t < NT; ++t) acc[t] = corr[t] = _mm512_setzero_ps();
    const __m512i pair_idx0 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int64_t g = 0; g < s.n_pad; g += 16) {
        const int64_t n_g = s.n_pad - g < 16 ? s.n_pad - g : 16;
        const __mmask16 m = static_cast<__mmask16>(n_g == 16 ? 0xffffu : (1u << n_g) - 1u);
        __m512 wd, wc;
        w.scales(g, m, &wd, &wc);
        __m512 sc[NT];
        for (int t = 0; t < NT; ++t) {
            sc[t] = _mm512_mul_ps(wd, _mm512_maskz_loadu_ps(m, a[t].scale + g));
            corr[t] = _mm512_fmadd_ps(wc, _mm512_maskz_loadu_ps(m, a[t].aux + g), corr[t]);
        }
        __m512i idx = pair_idx0;
        for (int64_t p = 0; p < n_g; p += 2) {
            const __m512i wv = w.pair(g + p);
            for (int t = 0; t < NT; ++t) {
                const __m512i xv = _mm512_loadu_si512(a[t].bytes + (g + p) * k_block);
                const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, xv);
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_permutexvar_ps(idx, sc[t]), acc[t]);
            }
            idx = _mm512_add_epi32(idx, _mm512_set1_epi32(2));
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = _mm512_reduce_add_ps(_mm512_add_ps(acc[t], corr[t]));
}

// Weights already unpacked to a q8 row.
struct UnpackedSrc {
    ConstRowParts w;
    void scales(int64_t g, __mmask16 m, __m512 *d, __m512 *c) const {
        *d = _mm512_maskz_loadu_ps(m, w.scale + g);
        *c = _mm512_maskz_loadu_ps(m, w.aux + g);
    }
    __m512i pair(int64_t b) const { return _mm512_loadu_si512(w.bytes + b * k_block); }
};

// Weights read straight from the GGUF blocks (no scratch round trip): the
// f16 scales of 16 blocks come in with one gather of the 4 bytes at each
// block start (d, and m for Q4_1 / Q5_1), the quants are expanded in registers.
template <GgmlType T>
struct RawSrc {
    using L = BlockLayout<T>;
    static constexpr bool k_q5 = L::k_q5, k_min = L::k_min;
    static constexpr int64_t k_size = L::k_size, k_qh = L::k_qh, k_qs = L::k_qs;
    static constexpr float k_offset = L::k_offset;
    const uint8_t *row;
    int64_t n_blocks;

    void scales(int64_t g, __mmask16 m, __m512 *d, __m512 *c) const {
        // Lanes past the last real block stay zero: d = c = 0.
        if constexpr (T == GgmlType::Q4_0) {
            if (n_blocks - g >= 16) {
                // A full group spans 288 bytes with d at every 9th 16-bit word:
                // blocks 0-7 lie in the first 128 bytes, 8-15 in the 128 from
                // byte 144, so two 2-source word permutes replace the gather.
                const uint8_t *base = row + g * k_size;
                const __m512i idx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  //
                                                     63, 54, 45, 36, 27, 18, 9, 0, 63, 54, 45, 36, 27, 18, 9, 0);
                const __m512i lo = _mm512_permutex2var_epi16(_mm512_loadu_si512(base), idx,
                                                             _mm512_loadu_si512(base + 64));
                const __m512i hi = _mm512_permutex2var_epi16(_mm512_loadu_si512(base + 144), idx,
                                                             _mm512_loadu_si512(base + 208));
                const __m512i both = _mm512_mask_mov_epi16(lo, 0xff00u, hi);
                *d = _mm512_cvtph_ps(_mm512_castsi512_si256(both));
                *c = _mm512_mul_ps(*d, _mm512_set1_ps(k_offset));
                return;
            }
        }
        const __mmask16 real = static_cast<__mmask16>(m & (n_blocks - g >= 16 ? 0xffffu : (1u << (n_blocks - g)) - 1u));
        const __m512i offs = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                _mm512_set1_epi32(static_cast<int>(k_size)));
        const __m512i head = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), real, offs, row + g * k_size, 1);
        *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head));
        if constexpr (k_min)
            *c = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(head, 16)));
        else
            *c = _mm512_mul_ps(*d, _mm512_set1_ps(k_offset));
    }
    __m512i pair(int64_t b) const {
        const uint8_t *b0 = row + b * k_size;
        const bool two = b + 1 < n_blocks;
        if constexpr (T == GgmlType::Q8_0) {
            const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b0 + k_qs));
            const __m256i hi = two ? _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b0 + k_size + k_qs))
                                   : _mm256_set1_epi8(static_cast<char>(0x80));
            const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            return _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
        } else {
            // 128-bit lanes [qs0, qs0, qs1, qs1] straight from two broadcast
            // loads (no shuffle uop); lanes 1 and 3 shifted down a nibble, then
            // masked: [lo0, hi0, lo1, hi1] = elements in order.
            const __m256i q0 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b0 + k_qs)));
            const __m256i q1 = two ? _mm256_broadcastsi128_si256(
                                         _mm_loadu_si128(reinterpret_cast<const __m128i *>(b0 + k_size + k_qs)))
                                   : _mm256_setzero_si256();
            const __m512i dup = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
            const __m512i v = _mm512_srlv_epi64(dup, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0));
            const __m512i nib = _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
            if constexpr (!k_q5) {
                return nib;
            } else {
                // Bit j of the two qh words (block 0 low, block 1 high) is
                // byte j's fifth bit: one masked add of 16.
                uint32_t h0 = 0, h1 = 0;
                std::memcpy(&h0, b0 + k_qh, 4);
                if (two) std::memcpy(&h1, b0 + k_size + k_qh, 4);
                const __mmask64 k = static_cast<__mmask64>(h0) | static_cast<__mmask64>(h1) << 32;
                return _mm512_mask_add_epi8(nib, k, nib, _mm512_set1_epi8(0x10));
            }
        }
    }
};

// Q4_K / Q5_K read in place: each 32-element sub-block is one q8 block
// (unpack_k_quant). A group of 16 blocks is two super-blocks; n_blocks is a
// multiple of 8, so every pair lies inside one super-block.
template <GgmlType T>
struct KRawSrc {
    static constexpr bool k_q5 = T == GgmlType::Q5_K;
    static constexpr int64_t k_size = k_q5 ? 176 : 144;
    static constexpr int64_t k_qs = k_q5 ? 48 : 16;
    const uint8_t *row;
    int64_t n_blocks;

    // The 6-bit scales and mins of one super-block (k_quant_scale_min) as 8 +
    // 8 bytes, with whole-word masks instead of a branch per sub-block:
    // sc[0..3] = s0 & 63, mn[0..3] = s1 & 63,
    // sc[4..7] = (s2 & 15) | (s0 >> 6) << 4, mn[4..7] = (s2 >> 4) | (s1 >> 6) << 4,
    // where s0, s1, s2 are the 12 bytes as three little-endian words.
    static void scale_bytes(const uint8_t *sc12, uint64_t *sc, uint64_t *mn) {
        uint32_t s0, s1, s2;
        std::memcpy(&s0, sc12, 4);
        std::memcpy(&s1, sc12 + 4, 4);
        std::memcpy(&s2, sc12 + 8, 4);
        const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
        *sc = (s0 & lo6) | static_cast<uint64_t>((s2 & lo4) | ((s0 >> 6) & lo2) << 4) << 32;
        *mn = (s1 & lo6) | static_cast<uint64_t>(((s2 >> 4) & lo4) | ((s1 >> 6) & lo2) << 4) << 32;
    }
    void scales(int64_t g, __mmask16, __m512 *d, __m512 *c) const {
        // Super-blocks g / 8 and g / 8 + 1 (the second may be past the row end:
        // its lanes stay zero). dd holds [d0, dmin0, d1, dmin1] from f16.
        const uint8_t *b0 = row + g / 8 * k_size;
        const bool two = g + 8 < n_blocks;
        uint32_t h0, h1 = 0;
        std::memcpy(&h0, b0, 4);
        uint64_t sc0, mn0, sc1 = 0, mn1 = 0;
        scale_bytes(b0 + 4, &sc0, &mn0);
        if (two) {
            std::memcpy(&h1, b0 + k_size, 4);
            scale_bytes(b0 + k_size + 4, &sc1, &mn1);
        }
        const __m512 dd =
            _mm512_castps128_ps512(_mm_cvtph_ps(_mm_set_epi32(0, 0, static_cast<int>(h1), static_cast<int>(h0))));
        const __m512i half = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
        const __m512 vd = _mm512_permutexvar_ps(half, dd);
        const __m512 vm = _mm512_permutexvar_ps(_mm512_add_epi32(half, _mm512_set1_epi32(1)), dd);
        const __m512 fsc = _mm512_cvtepi32_ps(
            _mm512_cvtepu8_epi32(_mm_set_epi64x(static_cast<long long>(sc1), static_cast<long long>(sc0))));
        const __m512 fmn = _mm512_cvtepi32_ps(
            _mm512_cvtepu8_epi32(_mm_set_epi64x(static_cast<long long>(mn1), static_cast<long long>(mn0))));
        // Same exact products as unpack_k_quant: d * sc, -(dmin * mn).
        *d = _mm512_mul_ps(vd, fsc);
        *c = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(vm, fmn));
    }
    __m512i pair(int64_t b) const {
        const uint8_t *blk = row + b / 8 * k_size;
        const int j = static_cast<int>(b % 8);  // even: sub-blocks j, j + 1 = both nibbles of 32 bytes
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + k_qs + 16 * j));
        const __m256i nib = _mm256_set1_epi8(0x0f);
        const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q, nib)),
                                             _mm256_and_si256(_mm256_srli_epi16(q, 4), nib), 1);
        if constexpr (!k_q5) {
            return v;
        } else {
            const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + 16));
            const __mmask64 k =
                static_cast<__mmask64>(_mm256_test_epi8_mask(h, _mm256_set1_epi8(static_cast<char>(1 << j)))) |
                static_cast<__mmask64>(_mm256_test_epi8_mask(h, _mm256_set1_epi8(static_cast<char>(1 << (j + 1)))))
                    << 32;
            return _mm512_mask_add_epi8(v, k, v, _mm512_set1_epi8(0x10));
        }
    }
};

template <class Src>
void unpack_raw(const Src &src, const RowShape &s, uint8_t *dst) {
    RowParts p = parts(dst, s);
    for (int64_t g = 0; g < s.n_pad; g += 16) {
        const int64_t n_g = s.n_pad - g < 16 ? s.n_pad - g : 16;
        const __mmask16 m = static_cast<__mmask16>(n_g == 16 ? 0xffffu : (1u << n_g) - 1u);
        __m512 d, c;
        src.scales(g, m, &d, &c);
        _mm512_mask_storeu_ps(p.scale + g, m, d);
        _mm512_mask_storeu_ps(p.aux + g, m, c);
        for (int64_t b = g; b < g + n_g; b += 2) _mm512_storeu_si512(p.bytes + b * k_block, src.pair(b));
    }
}

template <class Src>
void dot_dispatch(const Src &src, const uint8_t *const *acts, int n_act, const RowShape &s, float *out) {
    switch (n_act) {
        case 1: return dot_vnni<1>(src, acts, s, out);
        case 2: return dot_vnni<2>(src, acts, s, out);
        case 3: return dot_vnni<3>(src, acts, s, out);
        case 4: return dot_vnni<4>(src, acts, s, out);
        default: SIEVE_CHECKF(false, "n_act = %d, expected 1..4", n_act);
    }
}

// Q6_K, one super-block (256 elements, 16 sub-blocks of 16) at a time. Src
// gives dsc (16 lanes: d * sc_j) and u as four vectors of 64 elements; in
// vector v, 32-bit lane l of a vpdpbusd is sub-block 4 v + l / 4 and
// activation block 2 v + l / 8, so its scale is lane 4 v + l / 4 of
// dsc * (e of each sub-block's activation block).
template <int NT, class Src>
void dot_q6_vnni(const Src &w, const uint8_t *const *acts, const RowShape &s, float *out) {
    ConstRowParts a[NT];
    for (int t = 0; t < NT; ++t) a[t] = parts(acts[t], s);
    __m512 acc[NT], corr[NT];
    for (int t = 0; t < NT; ++t) acc[t] = corr[t] = _mm512_setzero_ps();
    const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    const __m512i quarter = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    for (int64_t sb = 0; sb < s.n_blocks / 8; ++sb) {
        __m512 dsc;
        __m512i u[4];
        w.load(sb, &dsc, u);
        for (int t = 0; t < NT; ++t) {
            const __m512 e = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_loadu_ps(a[t].scale + 8 * sb)));
            const __m512 sc = _mm512_mul_ps(dsc, e);
            corr[t] = _mm512_fmadd_ps(dsc, _mm512_loadu_ps(a[t].half + 16 * sb), corr[t]);
            const uint8_t *x = a[t].bytes + 256 * sb;
            for (int v = 0; v < 4; ++v) {
                const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[v],
                                                      _mm512_loadu_si512(x + 64 * v));
                const __m512i idx = _mm512_add_epi32(quarter, _mm512_set1_epi32(4 * v));
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_permutexvar_ps(idx, sc), acc[t]);
            }
        }
    }
    for (int t = 0; t < NT; ++t)
        out[t] = _mm512_reduce_add_ps(_mm512_fmadd_ps(corr[t], _mm512_set1_ps(-32.0f), acc[t]));
}

// Q6_K straight from the GGUF blocks. Per half of 128 elements: 64 bytes of
// ql give sub-blocks 0-1 (low nibbles) and 2-3 (high nibbles); 32 bytes of qh
// give their top two bits at bit pairs 0, 2, 4, 6. [qh, qh >> 2] lines up the
// pairs of sub-blocks 0 / 1 at bits 0-1 and those of 2 / 3 at bits 4-5.
struct Q6RawSrc {
    const uint8_t *row;
    void load(int64_t sb, __m512 *dsc, __m512i *u) const {
        const uint8_t *blk = row + sb * 210;
        const __m512 sc =
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(blk + 192))));
        uint16_t d16;
        std::memcpy(&d16, blk + 208, 2);
        *dsc = _mm512_mul_ps(sc, _mm512_set1_ps(_cvtsh_ss(d16)));
        const __m512i m0f = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
        for (int h = 0; h < 2; ++h) {
            const __m512i l = _mm512_loadu_si512(blk + 64 * h);
            const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + 128 + 32 * h));
            const __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
            u[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m0f), _mm512_and_si512(_mm512_slli_epi16(hh, 4), m30));
            u[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m0f), _mm512_and_si512(hh, m30));
        }
    }
};

// Q6_K already unpacked (unpack_q6_k's layout).
struct Q6UnpackedSrc {
    ConstRowParts w;
    void load(int64_t sb, __m512 *dsc, __m512i *u) const {
        *dsc = _mm512_loadu_ps(w.scale + 16 * sb);
        for (int v = 0; v < 4; ++v) u[v] = _mm512_loadu_si512(w.bytes + 256 * sb + 64 * v);
    }
};

void unpack_q6_raw(const uint8_t *row, const RowShape &s, uint8_t *dst) {
    const Q6RawSrc src{row};
    RowParts p = parts(dst, s);
    for (int64_t sb = 0; sb < s.n_blocks / 8; ++sb) {
        __m512 dsc;
        __m512i u[4];
        src.load(sb, &dsc, u);
        _mm512_storeu_ps(p.scale + 16 * sb, dsc);
        for (int v = 0; v < 4; ++v) _mm512_storeu_si512(p.bytes + 256 * sb + 64 * v, u[v]);
    }
}

template <class Src>
void dot_q6_dispatch(const Src &src, const uint8_t *const *acts, int n_act, const RowShape &s, float *out) {
    switch (n_act) {
        case 1: return dot_q6_vnni<1>(src, acts, s, out);
        case 2: return dot_q6_vnni<2>(src, acts, s, out);
        case 3: return dot_q6_vnni<3>(src, acts, s, out);
        case 4: return dot_q6_vnni<4>(src, acts, s, out);
        default: SIEVE_CHECKF(false, "n_act = %d, expected 1..4", n_act);
    }
}
#endif

#if !SIEVE_Q8_AVX2
// Plain C++ body: per block an exact int32 dot, then the scale/correction
// formula of matmul_q8.h.
inline int32_t block_dot(const uint8_t *u, const int8_t *q) {
    int32_t sum = 0;
    for (int j = 0; j < k_block; ++j) sum += static_cast<int32_t>(u[j]) * q[j];
    return sum;
}

// Q6_K sub-block of 16: exact int32 dot.
inline int32_t half_dot(const uint8_t *u, const int8_t *q) {
    int32_t sum = 0;
    for (int j = 0; j < 16; ++j) sum += static_cast<int32_t>(u[j]) * q[j];
    return sum;
}
#endif

}  // namespace

void dot_portable(GgmlType type, const uint8_t *wrow, const uint8_t *const *acts, int n_act, const RowShape &s,
                  float *out) {
    const ConstRowParts w = parts(wrow, s);
#if SIEVE_Q8_AVX2
    dot_avx2(type, w, acts, n_act, s, out);
#else
    for (int t = 0; t < n_act; ++t) {
        const ConstRowParts a = parts(acts[t], s);
        float acc = 0.0f, corr = 0.0f;
        if (type == GgmlType::Q6_K) {
            // w.scale holds dsc for 2 n_blocks sub-blocks of 16 (matmul_q8.h).
            for (int64_t j = 0; j < 2 * s.n_blocks; ++j) {
                const int32_t d = half_dot(w.bytes + j * 16, reinterpret_cast<const int8_t *>(a.bytes + j * 16));
                acc += w.scale[j] * a.scale[j / 2] * static_cast<float>(d);
                corr += w.scale[j] * a.half[j];
            }
            out[t] = acc - 32.0f * corr;
            continue;
        }
        for (int64_t b = 0; b < s.n_blocks; ++b) {
            const int32_t d = block_dot(w.bytes + b * k_block, reinterpret_cast<const int8_t *>(a.bytes + b * k_block));
            acc += w.scale[b] * a.scale[b] * static_cast<float>(d);
            corr += w.aux[b] * a.aux[b];
        }
        out[t] = acc + corr;
    }
#endif
}

void dot(GgmlType type, const uint8_t *w, const uint8_t *const *acts, int n_act, const RowShape &s, float *out) {
#if SIEVE_Q8_VNNI
    if (type == GgmlType::Q6_K) return dot_q6_dispatch(Q6UnpackedSrc{parts(w, s)}, acts, n_act, s, out);
    dot_dispatch(UnpackedSrc{parts(w, s)}, acts, n_act, s, out);
#else
    SIEVE_CHECKF(n_act >= 1 && n_act <= 4, "n_act = %d, expected 1..4", n_act);
    dot_portable(type, w, acts, n_act, s, out);
#endif
}

namespace {
bool unpack_weight_simd(GgmlType type, const void *src, const RowShape &s, uint8_t *dst) {
#if SIEVE_Q8_VNNI
    const uint8_t *row = static_cast<const uint8_t *>(src);
    const int64_t n = s.n_blocks;
    switch (type) {
        case GgmlType::Q4_0: unpack_raw(RawSrc<GgmlType::Q4_0>{row, n}, s, dst); return true;
        case GgmlType::Q4_1: unpack_raw(RawSrc<GgmlType::Q4_1>{row, n}, s, dst); return true;
        case GgmlType::Q5_0: unpack_raw(RawSrc<GgmlType::Q5_0>{row, n}, s, dst); return true;
        case GgmlType::Q5_1: unpack_raw(RawSrc<GgmlType::Q5_1>{row, n}, s, dst); return true;
        case GgmlType::Q8_0: unpack_raw(RawSrc<GgmlType::Q8_0>{row, n}, s, dst); return true;
        case GgmlType::Q4_K: unpack_raw(KRawSrc<GgmlType::Q4_K>{row, n}, s, dst); return true;
        case GgmlType::Q5_K: unpack_raw(KRawSrc<GgmlType::Q5_K>{row, n}, s, dst); return true;
        case GgmlType::Q6_K: unpack_q6_raw(row, s, dst); return true;
        default: return false;
    }
#else
    (void)type;
    (void)src;
    (void)s;
    (void)dst;
    return false;
#endif
}
}  // namespace

bool has_dot_raw(GgmlType t) {
#if SIEVE_Q8_VNNI
    return supports(t);
#elif SIEVE_Q8_AVX2
    return supports(t);
#else
    (void)t;
    return false;
#endif
}

void dot_raw(GgmlType type, const void *w, const uint8_t *const *acts, int n_act, const RowShape &s, float *out) {
#if SIEVE_Q8_VNNI
    const uint8_t *row = static_cast<const uint8_t *>(w);
    const int64_t n = s.n_blocks;
    switch (type) {
        case GgmlType::Q4_0: return dot_dispatch(RawSrc<GgmlType::Q4_0>{row, n}, acts, n_act, s, out);
        case GgmlType::Q4_1: return dot_dispatch(RawSrc<GgmlType::Q4_1>{row, n}, acts, n_act, s, out);
        case GgmlType::Q5_0: return dot_dispatch(RawSrc<GgmlType::Q5_0>{row, n}, acts, n_act, s, out);
        case GgmlType::Q5_1: return dot_dispatch(RawSrc<GgmlType::Q5_1>{row, n}, acts, n_act, s, out);
        case GgmlType::Q8_0: return dot_dispatch(RawSrc<GgmlType::Q8_0>{row, n}, acts, n_act, s, out);
        case GgmlType::Q4_K: return dot_dispatch(KRawSrc<GgmlType::Q4_K>{row, n}, acts, n_act, s, out);
        case GgmlType::Q5_K: return dot_dispatch(KRawSrc<GgmlType::Q5_K>{row, n}, acts, n_act, s, out);
        case GgmlType::Q6_K: return dot_q6_dispatch(Q6RawSrc{row}, acts, n_act, s, out);
        default: break;
    }
#elif SIEVE_Q8_AVX2
    if (dot_raw_avx2(type, w, acts, n_act, s, out)) return;
#else
    (void)w;
    (void)acts;
    (void)n_act;
    (void)s;
    (void)out;
#endif
    SIEVE_CHECKF(false, "dot_raw: no direct path for %s (check has_dot_raw first)", type_name(type));
}

#if SIEVE_Q8_VNNI
namespace {

inline int64_t tile_groups(GgmlType type, const RowShape &s) {
    return type == GgmlType::Q6_K ? 2 * s.n_blocks : s.n_blocks;
}

// T tokens against a packed tile. Q6: groups of 16 columns (two per
// activation block, correction with the half-block sums).
template <int T, bool Q6>
void tile_dot_t(const uint8_t *tile, const uint8_t *const *acts, const RowShape &s, float *const *out,
                __mmask16 m) {
    const int64_t n_cols = s.n_blocks * k_block;
    const int64_t n_groups = Q6 ? 2 * s.n_blocks : s.n_blocks;
    const float *D = reinterpret_cast<const float *>(tile + 16 * n_cols), *C = D + 16 * n_groups;
    ConstRowParts a[T];
    for (int t = 0; t < T; ++t) a[t] = parts(acts[t], s);
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    constexpr int quads = Q6 ? 4 : 8;  // 4-column groups per scale group
    for (int64_t g = 0; g < n_groups; ++g) {
        const uint8_t *wg = tile + g * quads * 64;
        const int64_t col0 = g * quads * 4, b = Q6 ? g / 2 : g;
        __m512i ia[T];
        for (int t = 0; t < T; ++t) ia[t] = _mm512_setzero_si512();
        for (int q = 0; q < quads; ++q) {
            const __m512i w = _mm512_load_si512(wg + 64 * q);
            for (int t = 0; t < T; ++t) {
                int32_t x;
                std::memcpy(&x, a[t].bytes + col0 + 4 * q, 4);
                ia[t] = _mm512_dpbusd_epi32(ia[t], w, _mm512_set1_epi32(x));
            }
        }
        const __m512 d = _mm512_load_ps(D + 16 * g), c = _mm512_load_ps(C + 16 * g);
        for (int t = 0; t < T; ++t) {
            const float sum_term = Q6 ? a[t].half[g] : a[t].aux[g];
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[t]), _mm512_mul_ps(d, _mm512_set1_ps(a[t].scale[b])), acc[t]);
            acc[t] = _mm512_fmadd_ps(c, _mm512_set1_ps(sum_term), acc[t]);
        }
    }
    for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(out[t], m, acc[t]);
}

template <bool Q6>
void tile_dot_n(const uint8_t *tile, const uint8_t *const *acts, int n_act, const RowShape &s, float *const *out,
                __mmask16 m) {
    switch (n_act) {
        case 1: return tile_dot_t<1, Q6>(tile, acts, s, out, m);
        case 2: return tile_dot_t<2, Q6>(tile, acts, s, out, m);
        case 3: return tile_dot_t<3, Q6>(tile, acts, s, out, m);
        case 4: return tile_dot_t<4, Q6>(tile, acts, s, out, m);
        case 5: return tile_dot_t<5, Q6>(tile, acts, s, out, m);
        case 6: return tile_dot_t<6, Q6>(tile, acts, s, out, m);
        case 7: return tile_dot_t<7, Q6>(tile, acts, s, out, m);
        case 8: return tile_dot_t<8, Q6>(tile, acts, s, out, m);
        default: SIEVE_CHECKF(false, "tile_dot: n_act = %d, expected 1..8", n_act);
    }
}

}  // namespace
#endif

bool has_tile() { return SIEVE_Q8_VNNI != 0; }

int64_t tile_bytes(GgmlType type, const RowShape &s) {
    return 16 * s.n_blocks * k_block + 2 * 16 * 4 * (type == GgmlType::Q6_K ? 2 * s.n_blocks : s.n_blocks);
}

void pack_tile(GgmlType type, const uint8_t *rows, int64_t row_bytes, int n_rows, const RowShape &s,
               uint8_t *row_scratch, uint8_t *tile) {
#if SIEVE_Q8_VNNI
    SIEVE_CHECKF(n_rows >= 1 && n_rows <= k_tile_rows, "pack_tile: n_rows = %d, expected 1..16", n_rows);
    for (int r = 0; r < n_rows; ++r) unpack_weight(type, rows + r * row_bytes, s, row_scratch + r * s.stride_bytes);
    std::memset(row_scratch + n_rows * s.stride_bytes, 0, static_cast<size_t>((k_tile_rows - n_rows) * s.stride_bytes));
    // A 16 x (n_cols / 4) dword transpose: lane r of output vector k is
    // dword k of row r.
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(static_cast<int>(s.stride_bytes / 4)));
    const int64_t n_cols = s.n_blocks * k_block, n_groups = tile_groups(type, s);
    for (int64_t k = 0; k < n_cols / 4; ++k)
        _mm512_store_si512(tile + 64 * k, _mm512_i32gather_epi32(idx, row_scratch + 4 * k, 4));
    float *D = reinterpret_cast<float *>(tile + 16 * n_cols), *C = D + 16 * n_groups;
    const uint8_t *scale0 = row_scratch + s.n_pad * k_block, *aux0 = scale0 + 4 * s.n_pad;
    for (int64_t g = 0; g < n_groups; ++g) {
        const __m512 d = _mm512_i32gather_ps(idx, scale0 + 4 * g, 4);
        _mm512_store_ps(D + 16 * g, d);
        // Q6_K: dsc runs on from `scale` into `aux` (matmul_q8.h), c = -32 dsc.
        _mm512_store_ps(C + 16 * g, type == GgmlType::Q6_K ? _mm512_mul_ps(d, _mm512_set1_ps(-32.0f))
                                                            : _mm512_i32gather_ps(idx, aux0 + 4 * g, 4));
    }
#else
    (void)type, (void)rows, (void)row_bytes, (void)n_rows, (void)s, (void)row_scratch, (void)tile;
    SIEVE_CHECKF(false, "pack_tile: needs an AVX-512 VNNI build (check has_tile first)");
#endif
}

void tile_dot(GgmlType type, const uint8_t *tile, const uint8_t *const *acts, int n_act, const RowShape &s,
              float *const *out, int n_rows) {
#if SIEVE_Q8_VNNI
    SIEVE_CHECKF(n_rows >= 1 && n_rows <= k_tile_rows, "tile_dot: n_rows = %d, expected 1..16", n_rows);
    const __mmask16 m = static_cast<__mmask16>(n_rows == 16 ? 0xffffu : (1u << n_rows) - 1u);
    if (type == GgmlType::Q6_K) return tile_dot_n<true>(tile, acts, n_act, s, out, m);
    return tile_dot_n<false>(tile, acts, n_act, s, out, m);
#else
    (void)type, (void)tile, (void)acts, (void)n_act, (void)s, (void)out, (void)n_rows;
    SIEVE_CHECKF(false, "tile_dot: needs an AVX-512 VNNI build (check has_tile first)");
#endif
}

void tile_dot_tokens(GgmlType type, const uint8_t *tile, const uint8_t *act, int64_t n_tok, const RowShape &s,
                     float *y, int64_t y_stride, int n_rows) {
#if SIEVE_Q8_VNNI
    SIEVE_CHECKF(n_rows >= 1 && n_rows <= k_tile_rows, "tile_dot_tokens: n_rows = %d, expected 1..16", n_rows);
    for (int64_t t = 0; t < n_tok; t += 8) {
        const int n_act = static_cast<int>(std::min<int64_t>(8, n_tok - t));
        const uint8_t *acts[8];
        float *outs[8];
        for (int j = 0; j < n_act; ++j) {
            acts[j] = act + (t + j) * s.act_stride_bytes;
            outs[j] = y + (t + j) * y_stride;
        }
        tile_dot(type, tile, acts, n_act, s, outs, n_rows);
    }
#else
    (void)type, (void)tile, (void)act, (void)n_tok, (void)s, (void)y, (void)y_stride, (void)n_rows;
    SIEVE_CHECKF(false, "tile_dot_tokens: needs an AVX-512 VNNI build (check has_tile first)");
#endif
}

}  // namespace sieve::cpu::q8
