// The inner loop of decode attention, shared by the contiguous-lane kernel
// (attention_decode) and the paged one (attention_decode_paged) so the two
// designs are measured with the same arithmetic: they differ only in where
// the rows come from.
//
// A task owns one KV head's query group (group heads) and a chunk of keys.
// Its partial result per head g lives at part0 + g * hstride as (acc[d], m,
// l): the exp-weighted sum of V rows, the running max of the scaled scores,
// and the sum of exp(score - m). merge() combines the chunks of every head
// (flash-decoding).
//
// acc comes first and every partial is part_len(d) floats, a multiple of 16,
// so each acc starts on a cache line (the scratch is 64-byte aligned). With
// (m, l) first, acc sat 8 bytes into a line: every 64-byte access straddled
// two lines, and where one straddled a 4 KiB page boundary (which partials
// did depended on where the scratch landed in the page, i.e. on the process)
// the read-modify-write per V row slowed the whole kernel 2-2.5x.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "sieve/core/aligned.h"
#include "sieve/kernels/cpu/kv_rows.h"
#include "sieve/kernels/cpu/simd.h"

namespace sieve::cpu::decode {

// Rows per inner block: the group's scores of one block stay in L1.
constexpr int64_t k_blk = 64;

// Per-thread buffers shared by both decode kernels, so the lane and paged
// kernels also write their scores and partials at the same addresses (one
// less difference between the two in the comparison). thread_local because
// the pool's threads are persistent: buffers only grow, steady-state calls do
// not allocate.
struct Scratch {
    AlignedBuffer<float> scores;   // per thread: [group * k_blk]
    AlignedBuffer<float> partial;  // calling thread: partials of all tasks
    AlignedBuffer<float> qint;     // per thread: a task's rounded queries (QInt)
};
inline Scratch &scratch() {
    static thread_local Scratch s;
    return s;
}
inline float *grow(AlignedBuffer<float> &b, int64_t n) {
    if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
    return b.data();
}

// How a decode call splits each KV head's keys into chunks (tasks). Both
// kernels use this one plan so the lane-vs-block comparison differs only in
// where rows live:
//   - one thread: one chunk per KV head (splitting would only add merges);
//   - otherwise about 8 tasks per thread in total, so the last tasks to be
//     handed out are short and both threads finish together, and no chunk
//     shorter than k_min_chunk keys;
//   - chunk lengths are multiples of `align` (k_blk for lanes, so every inner
//     block but the last is full; whole blocks for the paged store).
struct ChunkPlan {
    int64_t n_chunks = 1, chunk = 0;
};
constexpr int64_t k_min_chunk = 64;
inline ChunkPlan plan_chunks(int64_t n_kv, int64_t n_head_kv, int n_threads, int64_t align) {
    ChunkPlan p;
    const int64_t want = n_threads <= 1 ? 1 : std::max<int64_t>(1, (8 * n_threads + n_head_kv - 1) / n_head_kv);
    p.n_chunks = std::clamp<int64_t>((n_kv + k_min_chunk - 1) / k_min_chunk, 1, want);
    p.chunk = (n_kv + p.n_chunks - 1) / p.n_chunks;
    p.chunk = (p.chunk + align - 1) / align * align;
    p.n_chunks = (n_kv + p.chunk - 1) / p.chunk;
    return p;
}

// Floats per partial: acc rounded up to whole cache lines, then m and l.
inline int64_t part_len(int64_t d) { return (d + 15) / 16 * 16 + 16; }
inline int64_t m_at(int64_t d) { return (d + 15) / 16 * 16; }  // l at m_at(d) + 1

inline void init_parts(float *part0, int64_t group, int64_t hstride, int64_t d) {
    for (int64_t g = 0; g < group; ++g) {
        float *part = part0 + g * hstride;
        std::fill(part, part + d, 0.0f);
        part[m_at(d)] = -INFINITY;
        part[m_at(d) + 1] = 0.0f;
    }
}

// Row element types the inner loop reads in place: f32, f16 / bf16 widened
// in registers (half the bytes from memory, the same f32 arithmetic), and the
// quantized q8_0 / q4_0 rows (row_type.h) dequantized in registers (about a
// half and a quarter of f16's bytes; the values are exactly row_elem's, so
// the arithmetic after the load is the f32 one). Each loader gives:
//   T            the pointer type rows are addressed by;
//   stride(d)    T units per row of d elements;
//   load16(r, i) elements [16 i, 16 i + 16) of the row at r as one f32 vector;
//   row(r, d, b) the whole row as f32 (r itself, or widened into b).
struct RowF32 {
    using T = float;
    static constexpr bool k_wide = false;  // rows not widened (the register paths below are for narrow rows)
    static constexpr int64_t stride(int64_t d) { return d; }
#if defined(__AVX512F__)
    static __m512 load16(const T *p, int i) { return _mm512_loadu_ps(p + 16 * i); }
#endif
    static const float *row(const T *p, int64_t, float *) { return p; }
};
struct RowF16 {
    using T = uint16_t;
    static constexpr bool k_wide = true;
    static constexpr int64_t stride(int64_t d) { return d; }
#if defined(__AVX512F__)
    static __m512 load16(const T *p, int i) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + 16 * i)));
    }
#endif
    static const float *row(const T *p, int64_t d, float *buf) {
        simd::f16_to_f32(p, buf, d);
        return buf;
    }
};
struct RowBF16 {
    using T = uint16_t;
    static constexpr bool k_wide = true;
    static constexpr int64_t stride(int64_t d) { return d; }
#if defined(__AVX512F__)
    static __m512 load16(const T *p, int i) {
        const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p + 16 * i)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    }
#endif
    static const float *row(const T *p, int64_t d, float *buf) {
        simd::bf16_to_f32(p, buf, d);
        return buf;
    }
};
// The f16 bits of a block's scale at p.
inline uint16_t f16_bits_at(const uint8_t *p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return h;
}
// q8_0: blocks of (f16 d, 32 int8); x = d q.
struct RowQ8_0 {
    using T = uint8_t;
    static constexpr bool k_wide = true;
    static constexpr int64_t stride(int64_t d) { return d / 32 * 34; }
#if defined(__AVX512F__)
    static __m512 load16(const T *p, int i) {
        const T *b = p + 34 * (i >> 1);
        uint16_t h;
        std::memcpy(&h, b, 2);
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + 2 + 16 * (i & 1)));
        return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(h)), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
    }
#endif
    static const float *row(const T *p, int64_t d, float *buf) {
        rows_to_f32(RowType::q8_0, p, 0, d, buf);
        return buf;
    }
    // The integer Q.K (qk_int below): the row's int8 values k plus 128 as
    // bytes, k_off = 128; 64 columns per vector, block 2c in the low 256 bits.
    static constexpr int k_off = 128;
    static constexpr bool k_int_nibbles = false;
    static uint16_t block_scale_bits(const T *p, int64_t b) {
        return f16_bits_at(p + 34 * b);
    }
#if defined(__AVX512BW__)
    static __m512i load64u(const T *p, int64_t c) {
        const T *b = p + 68 * c;
        const __m512i x = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + 2))),
            _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b + 36)), 1);
        return _mm512_xor_si512(x, _mm512_set1_epi8(static_cast<char>(0x80)));
    }
#endif
};
// q4_0: blocks of (f16 d, 16 bytes of nibbles: byte j's low nibble is element
// j, its high nibble element j + 16); x = d (q - 8).
struct RowQ4_0 {
    using T = uint8_t;
    static constexpr bool k_wide = true;
    static constexpr int64_t stride(int64_t d) { return d / 32 * 18; }
#if defined(__AVX512F__)
    static __m512 load16(const T *p, int i) {
        // The 16 values a nibble can stand for, d (q - 8), in one register;
        // vpermps picks by the low 4 bits of each 32-bit index, so the low
        // nibbles need no mask and the high ones one shift (the products are
        // rounded once either way: d (q - 8) is exact in f32).
        const T *b = p + 18 * (i >> 1);
        uint16_t h;
        std::memcpy(&h, b, 2);
        const __m512 lut = _mm512_mul_ps(
            _mm512_set1_ps(_cvtsh_ss(h)),
            _mm512_setr_ps(-8.0f, -7.0f, -6.0f, -5.0f, -4.0f, -3.0f, -2.0f, -1.0f, 0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f));
        __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + 2)));
        if (i & 1) x = _mm512_srli_epi32(x, 4);
        return _mm512_permutexvar_ps(x, lut);
    }
#endif
    static const float *row(const T *p, int64_t d, float *buf) {
        rows_to_f32(RowType::q4_0, p, 0, d, buf);
        return buf;
    }
    // The integer Q.K: the nibbles as bytes (k + 8), k_off = 8; a vector of
    // 64 columns holds, per 128 bits, elements 0-15 of block 2c, 0-15 of
    // block 2c + 1, 16-31 of 2c, 16-31 of 2c + 1 (the query is laid out the
    // same way).
    static constexpr int k_off = 8;
    static constexpr bool k_int_nibbles = true;
    static uint16_t block_scale_bits(const T *p, int64_t b) {
        return f16_bits_at(p + 18 * b);
    }
#if defined(__AVX512BW__)
    static __m512i load64u(const T *p, int64_t c) {
        const T *b = p + 36 * c;
        const __m256i y = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + 2))),
            _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + 20)), 1);
        const __m256i m = _mm256_set1_epi8(0x0f);
        return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(y, m)),
                                  _mm256_and_si256(_mm256_srli_epi16(y, 4), m), 1);
    }
#endif
};

// Rows of the next block to prefetch while a block is computed (n = 0: none).
template <class RK, class RV = RK>
struct Ahead {
    const typename RK::T *k = nullptr;
    const typename RV::T *v = nullptr;
    int64_t n = 0;
};
// Rows per prefetch slice: the prefetches are spread over a block's loops
// (16 rows of K before each 16 rows of Q.K, the same for V and PV) rather
// than issued at once, so they never queue behind each other in the line
// fill buffers and cost little when the rows are already cached.
constexpr int64_t k_pf_rows = 16;
template <class R>
inline void prefetch_slice(const typename R::T *rows, int64_t n_ahead, int64_t j, int64_t d) {
    if (j >= n_ahead) return;
    const int64_t bytes =
        std::min(k_pf_rows, n_ahead - j) * R::stride(d) * static_cast<int64_t>(sizeof(typename R::T));
    const char *c = reinterpret_cast<const char *>(rows + j * R::stride(d));
    for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(c + o, 0, 3);
}

// Longest row the generic paths widen on the stack.
constexpr int64_t k_max_row = 512;

#if defined(__AVX512F__)
// acc[g] += sum_j s[g * k_blk + j] * v[j] for the heads of the group, with
// the accumulators in registers across the block: each V row is loaded once
// per tile of GT heads (from L1 after the first tile) and nothing is stored
// until the block ends. D16 = d / 16.
template <class R, int D16, int GT>
inline void pv_tile(const float *s, const typename R::T *v_rows, int64_t nb, float *acc0, int64_t hstride) {
    __m512 acc[GT][D16];
    for (int t = 0; t < GT; ++t)
        for (int i = 0; i < D16; ++i) acc[t][i] = _mm512_load_ps(acc0 + t * hstride + 16 * i);
    for (int64_t j = 0; j < nb; ++j) {
        __m512 v[D16];
        const typename R::T *vr = v_rows + j * R::stride(16 * D16);
        for (int i = 0; i < D16; ++i) v[i] = R::load16(vr, i);
        for (int t = 0; t < GT; ++t) {
            const __m512 p = _mm512_set1_ps(s[t * k_blk + j]);
            for (int i = 0; i < D16; ++i) acc[t][i] = _mm512_fmadd_ps(p, v[i], acc[t][i]);
        }
    }
    for (int t = 0; t < GT; ++t)
        for (int i = 0; i < D16; ++i) _mm512_store_ps(acc0 + t * hstride + 16 * i, acc[t][i]);
}

// Heads in tiles of up to 16 / D16 (16 accumulator registers).
template <class R, int D16>
inline void pv_heads(const float *s, int64_t group, const typename R::T *v_rows, int64_t nb, float *part0,
                     int64_t hstride) {
    constexpr int GT = D16 >= 16 ? 1 : 16 / D16;
    int64_t g = 0;
    for (; g + GT <= group; g += GT) pv_tile<R, D16, GT>(s + g * k_blk, v_rows, nb, part0 + g * hstride, hstride);
    // The rest of the group in one tile too (a group of 3 or 7 would
    // otherwise widen every V row once per remaining head).
    const float *sr = s + g * k_blk;
    float *pr = part0 + g * hstride;
    switch (group - g) {
        case 0: return;
        case 1: return pv_tile<R, D16, 1>(sr, v_rows, nb, pr, hstride);
        case 2: if constexpr (GT > 2) return pv_tile<R, D16, 2>(sr, v_rows, nb, pr, hstride); break;
        case 3: if constexpr (GT > 3) return pv_tile<R, D16, 3>(sr, v_rows, nb, pr, hstride); break;
        default: break;
    }
    for (; g < group; ++g) pv_tile<R, D16, 1>(s + g * k_blk, v_rows, nb, part0 + g * hstride, hstride);
}

// s = scale * q_g . k for the heads of the group, the K row widened once into
// registers (D16 vectors) and dotted with every query head.
template <class R, int D16>
inline void qk_row(const float *q, int64_t group, const typename R::T *kr, float scale, float *s) {
    __m512 k[D16];
    for (int i = 0; i < D16; ++i) k[i] = R::load16(kr, i);
    for (int64_t g = 0; g < group; ++g) {
        __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(q + g * 16 * D16), k[0]);
        for (int i = 1; i < D16; ++i) acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + g * 16 * D16 + 16 * i), k[i], acc);
        s[g * k_blk] = scale * _mm512_reduce_add_ps(acc);
    }
}

// s[g * k_blk + r] = scale * q_g . k_r for 4 consecutive K rows of 64
// elements: the rows widened once (16 registers), then per head 4 dot
// products and one 4-way transposed sum. A horizontal sum per row and head
// is a chain of 8 dependent shuffles and adds that the store of its score
// waits on; here 4 rows share one shorter tree (13 operations, 4 deep).
template <class R>
inline void qk_rows4_d64(const float *q, int64_t group, const typename R::T *k_rows, float scale, float *s) {
    __m512 k[4][4];
    for (int r = 0; r < 4; ++r)
        for (int i = 0; i < 4; ++i) k[r][i] = R::load16(k_rows + r * R::stride(64), i);
    const __m128 vs = _mm_set1_ps(scale);
    for (int64_t g = 0; g < group; ++g) {
        const float *qg = q + 64 * g;
        __m512 acc[4];
        for (int r = 0; r < 4; ++r) {
            acc[r] = _mm512_mul_ps(_mm512_loadu_ps(qg), k[r][0]);
            for (int i = 1; i < 4; ++i) acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(qg + 16 * i), k[r][i], acc[r]);
        }
        // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3], the same for c, d
        const __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(acc[0], acc[1]), _mm512_unpackhi_ps(acc[0], acc[1]));
        const __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(acc[2], acc[3]), _mm512_unpackhi_ps(acc[2], acc[3]));
        // per 128-bit lane: that lane's sums of a, b, c, d; then over the 4 lanes
        const __m512 u = _mm512_add_ps(_mm512_shuffle_ps(t0, t1, 0x44), _mm512_shuffle_ps(t0, t1, 0xee));
        const __m512 v = _mm512_add_ps(u, _mm512_shuffle_f32x4(u, u, 0x4e));
        const __m512 w = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1));
        _mm_storeu_ps(s + g * k_blk, _mm_mul_ps(vs, _mm512_castps512_ps128(w)));
    }
}
#endif

// Q.K over quantized K rows in integers (AVX-512 VNNI): where the rows are
// q8_0 / q4_0, the query of each head is rounded once per task to 8 bits per
// block of 32 (scale amax / 127, round to nearest even: llama.cpp's q8_0 for
// the query of a quantized K), and a block's products are one exact int32
// sum, so a row of 64 columns is one vpdpbusd per head where the float path
// widens, scales and multiplies four vectors. The score of a row is then
//   scale * sum over 64-column chunks c of
//       (float(S[2c]) * dk[2c]) * sq[2c] + (float(S[2c+1]) * dk[2c+1]) * sq[2c+1]
// (S the block's integer sum, dk its K scale, sq the query's), in that order
// for every row wherever it falls, as qk_int_ref (kernels/cpu/reference.cpp)
// computes it. Head sizes that are multiples of 64 up to 256 (1 to 4 chunks).
// vpdpbusd multiplies unsigned by signed bytes: the K bytes are k + k_off
// (q8_0: k xor 0x80; q4_0: the nibbles) and each head's start vector holds
// -k_off * (sum of its 4 query bytes) per lane, so the sums are exact.
constexpr bool qk_int_fits(int64_t d) {
    return d % 64 == 0 && d >= 64 && d <= 256;
}
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
constexpr bool k_qk_int = true;
// A task's rounded queries: per head g, d bytes at q + g * d (in the row
// type's column order), the d / 32 scales at sq + g * (d / 32) and per chunk
// the start vector at init + (g * (d / 64) + c) * 16.
struct QInt {
    const int8_t *q = nullptr;
    const float *sq = nullptr;
    const int32_t *init = nullptr;
};
// Floats of scratch a task's QInt takes.
inline int64_t qint_floats(int64_t group, int64_t d) {
    return group * (d / 4 + d / 4 + d / 32) + 16;
}
template <class R>
inline QInt quantize_query(const float *q, int64_t group, int64_t d, float *buf) {
    // 64-byte aligned parts: init [group * d / 4 int32], q [group * d bytes], sq.
    auto *init = reinterpret_cast<int32_t *>(buf);
    auto *q8 = reinterpret_cast<int8_t *>(buf + group * d / 4);
    float *sq = buf + group * d / 2;
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t g = 0; g < group; ++g)
        for (int64_t c = 0; c < d / 64; ++c) {
            __m128i bytes[4];
            for (int h = 0; h < 2; ++h) {
                const int64_t b = 2 * c + h;
                const __m512 x0 = _mm512_loadu_ps(q + g * d + 32 * b),
                             x1 = _mm512_loadu_ps(q + g * d + 32 * b + 16);
                const float amax = _mm512_reduce_max_ps(
                    _mm512_max_ps(_mm512_andnot_ps(sign, x0), _mm512_andnot_ps(sign, x1)));
                const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
                sq[g * (d / 32) + b] = amax / 127.0f;
                bytes[2 * h] =
                    _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x0, _mm512_set1_ps(inv))));
                bytes[2 * h + 1] =
                    _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(x1, _mm512_set1_ps(inv))));
            }
            // q8_0 rows: natural order; q4_0: 0-15 of each block, then 16-31.
            const int o1 = R::k_int_nibbles ? 2 : 1, o2 = R::k_int_nibbles ? 1 : 2;
            __m512i v = _mm512_castsi128_si512(bytes[0]);
            v = _mm512_inserti32x4(v, bytes[o1], 1);
            v = _mm512_inserti32x4(v, bytes[o2], 2);
            v = _mm512_inserti32x4(v, bytes[3], 3);
            _mm512_storeu_si512(q8 + g * d + 64 * c, v);
            const __m512i off =
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(static_cast<char>(R::k_off)), v);
            _mm512_storeu_si512(init + (g * (d / 64) + c) * 16,
                                _mm512_sub_epi32(_mm512_setzero_si512(), off));
        }
    return QInt{q8, sq, init};
}
// Scores of 4 rows (the pointers may repeat: each row's lanes are summed on
// their own) for every head of the group, into s4[g * 4 + r]. C = d / 64.
template <class R, int C>
inline void qk_int_rows4(const QInt &qi, int64_t group, const typename R::T *const *rows, float scale,
                         float *s4) {
    constexpr int64_t d = 64 * C;
    __m512i k[4][C];
    for (int r = 0; r < 4; ++r)
        for (int c = 0; c < C; ++c) k[r][c] = R::load64u(rows[r], c);
    __m128 dk[C][2];  // the 4 rows' K scales of block 2c + h
    for (int c = 0; c < C; ++c)
        for (int h = 0; h < 2; ++h)
            dk[c][h] = _mm_cvtph_ps(
                _mm_setr_epi16(static_cast<int16_t>(R::block_scale_bits(rows[0], 2 * c + h)),
                               static_cast<int16_t>(R::block_scale_bits(rows[1], 2 * c + h)),
                               static_cast<int16_t>(R::block_scale_bits(rows[2], 2 * c + h)),
                               static_cast<int16_t>(R::block_scale_bits(rows[3], 2 * c + h)), 0, 0, 0, 0));
    const __m128 vs = _mm_set1_ps(scale);
    for (int64_t g = 0; g < group; ++g) {
        __m128 tot = _mm_setzero_ps();
        for (int c = 0; c < C; ++c) {
            const __m512i qv = _mm512_loadu_si512(qi.q + g * d + 64 * c);
            const __m512i iv = _mm512_loadu_si512(qi.init + (g * C + c) * 16);
            __m512i acc[4];
            for (int r = 0; r < 4; ++r) acc[r] = _mm512_dpbusd_epi32(iv, k[r][c], qv);
            // Per 128 bits: [a0+a2, b0+b2, a1+a3, b1+b3], then the 4 rows' sums of those 4 lanes.
            const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(acc[0], acc[1]),
                                                _mm512_unpackhi_epi32(acc[0], acc[1]));
            const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(acc[2], acc[3]),
                                                _mm512_unpackhi_epi32(acc[2], acc[3]));
            const __m512i u = _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(
                                                   _mm512_castsi512_ps(t0), _mm512_castsi512_ps(t1), 0x44)),
                                               _mm512_castps_si512(_mm512_shuffle_ps(
                                                   _mm512_castsi512_ps(t0), _mm512_castsi512_ps(t1), 0xee)));
            // The two 128-bit quarters of each block added: block 2c in
            // quarter 0, block 2c + 1 in quarter 2 (q8_0) or 1 (q4_0).
            const __m512 f = _mm512_cvtepi32_ps(
                _mm512_add_epi32(u, _mm512_shuffle_i32x4(u, u, R::k_int_nibbles ? 0x4e : 0xb1)));
            const __m128 fa = _mm512_castps512_ps128(f);
            const __m128 fb = R::k_int_nibbles ? _mm512_extractf32x4_ps(f, 1) : _mm512_extractf32x4_ps(f, 2);
            const __m128 pa = _mm_mul_ps(_mm_mul_ps(fa, dk[c][0]), _mm_set1_ps(qi.sq[g * (d / 32) + 2 * c]));
            const __m128 pb =
                _mm_mul_ps(_mm_mul_ps(fb, dk[c][1]), _mm_set1_ps(qi.sq[g * (d / 32) + 2 * c + 1]));
            const __m128 part = _mm_add_ps(pa, pb);
            tot = c == 0 ? part : _mm_add_ps(tot, part);
        }
        _mm_storeu_ps(s4 + g * 4, _mm_mul_ps(vs, tot));
    }
}
template <class R, int C>
inline void qk_int(const QInt &qi, int64_t group, const typename R::T *k_rows, int64_t nb, float scale,
                   float *s) {
    constexpr int64_t d = 64 * C;
    alignas(16) float s4[4 * 64];  // group <= 64 (checked by the caller)
    for (int64_t j = 0; j < nb; j += 4) {
        const typename R::T *rows[4];
        for (int r = 0; r < 4; ++r) rows[r] = k_rows + std::min<int64_t>(j + r, nb - 1) * R::stride(d);
        qk_int_rows4<R, C>(qi, group, rows, scale, s4);
        const int64_t n = std::min<int64_t>(4, nb - j);
        for (int64_t g = 0; g < group; ++g)
            for (int64_t r = 0; r < n; ++r) s[g * k_blk + j + r] = s4[g * 4 + r];
    }
}
#else
constexpr bool k_qk_int = false;
struct QInt {};
inline int64_t qint_floats(int64_t, int64_t) {
    return 0;
}
#endif

#if defined(__AVX2__) && !defined(__AVX512F__)
// The nb rows of 8 * D8 elements at `rows` as f32: row j at out[j], f16
// rows widened into buf[j * 8 * D8 ..] (other types: R::row's pointer).
template <class R, int D8>
inline void widen_rows_avx2(const typename R::T *rows, int64_t nb, float *buf, const float **out) {
    constexpr int64_t d = 8 * D8;
    for (int64_t j = 0; j < nb; ++j) {
        if constexpr (std::is_same_v<R, RowF16>) {
            // d is a multiple of 8: whole vectors (no scalar tail to analyse).
            const uint16_t *h = rows + j * d;
            for (int i = 0; i < D8; ++i)
                _mm256_store_ps(
                    buf + j * d + 8 * i,
                    _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(h + 8 * i))));
            out[j] = buf + j * d;
        } else {
            out[j] = R::row(rows + j * R::stride(d), d, buf + j * d);
        }
    }
}

// AVX2: the nb V rows widened once, then per head the D8 accumulator
// vectors stay in registers across the rows: acc = fma(p_j, v_j, acc), the
// same operations as the generic loop's scale_axpy (y = fma(a, x, 1 * y)),
// without its loads and stores of the accumulators per row.
template <class R, int D8>
inline void pv_avx2(const float *s, int64_t group, const typename R::T *v_rows, int64_t nb, float *part0,
                    int64_t hstride) {
    constexpr int64_t d = 8 * D8;
    alignas(32) float buf[k_blk * d];
    const float *vr[k_blk];
    widen_rows_avx2<R, D8>(v_rows, nb, buf, vr);  // pv() calls with nb <= k_blk
    for (int64_t g = 0; g < group; ++g) {
        float *acc0 = part0 + g * hstride;
        const float *sg = s + g * k_blk;
        __m256 acc[D8];
        for (int i = 0; i < D8; ++i) acc[i] = _mm256_loadu_ps(acc0 + 8 * i);
        for (int64_t j = 0; j < nb; ++j) {
            const __m256 p = _mm256_set1_ps(sg[j]);
            for (int i = 0; i < D8; ++i) acc[i] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vr[j] + 8 * i), acc[i]);
        }
        for (int i = 0; i < D8; ++i) _mm256_storeu_ps(acc0 + 8 * i, acc[i]);
    }
}
#endif

#if defined(__AVX2__) && !defined(__AVX512F__)
// The sums of the 8 lanes of each of a0..a3, as ((x0 + x1) + (x2 + x3)) +
// ((x4 + x5) + (x6 + x7)) for every one of them.
inline __m128 hsum4_avx2(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 t0 = _mm256_hadd_ps(a0, a1), t1 = _mm256_hadd_ps(a2, a3);
    const __m256 t2 = _mm256_hadd_ps(t0, t1);  // per 128-bit half: the 4 sums of that half
    return _mm_add_ps(_mm256_castps256_ps128(t2), _mm256_extractf128_ps(t2, 1));
}

// AVX2: s = scale * q_g . k for the nb K rows and every head of the group.
// The rows are widened once into L1; then per head the query stays in
// registers while 4 rows at a time are dotted with it (4 independent
// accumulators, one 4-way transposed sum), where the generic loop made a
// call, a load of each operand and a horizontal sum per row and head. A
// row's score does not depend on where in the block it falls (a lone row
// takes the same sum with zeros beside it).
template <class R, int D8>
inline void qk_avx2(const float *q, int64_t group, const typename R::T *k_rows, int64_t nb, float scale,
                    float *s) {
    constexpr int64_t d = 8 * D8;
    alignas(32) float buf[k_blk * d];
    const float *kr[k_blk];
    widen_rows_avx2<R, D8>(k_rows, nb, buf, kr);  // qk() calls with nb <= k_blk
    const __m128 vs = _mm_set1_ps(scale);
    const __m256 zero = _mm256_setzero_ps();
    for (int64_t g = 0; g < group; ++g) {
        const float *qg = q + g * d;
        float *sg = s + g * k_blk;
        __m256 qv[D8];
        for (int i = 0; i < D8; ++i) qv[i] = _mm256_loadu_ps(qg + 8 * i);
        const auto dot = [&](const float *k) {
            __m256 acc = _mm256_mul_ps(qv[0], _mm256_loadu_ps(k));
            for (int i = 1; i < D8; ++i) acc = _mm256_fmadd_ps(qv[i], _mm256_loadu_ps(k + 8 * i), acc);
            return acc;
        };
        int64_t j = 0;
        for (; j + 4 <= nb; j += 4) {
            const __m256 a0 = dot(kr[j]), a1 = dot(kr[j + 1]), a2 = dot(kr[j + 2]), a3 = dot(kr[j + 3]);
            _mm_storeu_ps(sg + j, _mm_mul_ps(vs, hsum4_avx2(a0, a1, a2, a3)));
        }
        for (; j < nb; ++j) sg[j] = _mm_cvtss_f32(_mm_mul_ps(vs, hsum4_avx2(dot(kr[j]), zero, zero, zero)));
    }
}
#endif

// Step 3 of block(): every head's acc += its block probabilities times V.
template <class R>
inline void pv(const float *s, int64_t group, const typename R::T *v_rows, int64_t nb, int64_t d, float *part0,
               int64_t hstride) {
#if defined(__AVX2__) && !defined(__AVX512F__)
    if (nb <= k_blk) {
        if (d == 64) return pv_avx2<R, 8>(s, group, v_rows, nb, part0, hstride);
        if (d == 32) return pv_avx2<R, 4>(s, group, v_rows, nb, part0, hstride);
    }
#endif
#if defined(__AVX512F__)
    // f32 V rows are 64-byte aligned when d is a multiple of 16 (lanes and
    // blocks start on pages); the register path needs that for f32 (the
    // accumulators' stores are aligned either way); other head sizes take the
    // generic loop.
    if (reinterpret_cast<uintptr_t>(v_rows) % 64 == 0 || R::k_wide) {
        switch (d) {
        case 64: return pv_heads<R, 4>(s, group, v_rows, nb, part0, hstride);
        case 128: return pv_heads<R, 8>(s, group, v_rows, nb, part0, hstride);
        case 32: return pv_heads<R, 2>(s, group, v_rows, nb, part0, hstride);
        case 256: return pv_heads<R, 16>(s, group, v_rows, nb, part0, hstride);
        default: break;
        }
    }
#endif
    alignas(64) float buf[k_max_row];
    for (int64_t j = 0; j < nb; ++j) {
        const float *vr = R::row(v_rows + j * R::stride(d), d, buf);
        for (int64_t g = 0; g < group; ++g) simd::scale_axpy(part0 + g * hstride, 1.0f, s[g * k_blk + j], vr, d);
    }
}

// Step 1 of block(): scores of nb rows for every head of the group.
template <class R>
inline void qk(const float *q, int64_t group, const typename R::T *k_rows, int64_t nb, int64_t d, float scale,
               float *s, const QInt *qi = nullptr) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    if constexpr (std::is_same_v<R, RowQ8_0> || std::is_same_v<R, RowQ4_0>) {
        if (qi) {
            switch (d) {
                case 64:
                    return qk_int<R, 1>(*qi, group, k_rows, nb, scale, s);
                case 128:
                    return qk_int<R, 2>(*qi, group, k_rows, nb, scale, s);
                case 192:
                    return qk_int<R, 3>(*qi, group, k_rows, nb, scale, s);
                case 256:
                    return qk_int<R, 4>(*qi, group, k_rows, nb, scale, s);
                default:
                    break;
            }
        }
    }
#else
    (void)qi;
#endif
#if defined(__AVX512F__)
    if (R::k_wide && (d == 64 || d == 128)) {
        int64_t j = 0;
        if (d == 64)
            for (; j + 4 <= nb; j += 4) qk_rows4_d64<R>(q, group, k_rows + j * R::stride(d), scale, s + j);
        for (; j < nb; ++j) {
            if (d == 64)
                qk_row<R, 4>(q, group, k_rows + j * R::stride(d), scale, s + j);
            else
                qk_row<R, 8>(q, group, k_rows + j * R::stride(d), scale, s + j);
        }
        return;
    }
#endif
#if defined(__AVX2__) && !defined(__AVX512F__)
    if (nb <= k_blk) {
        if (d == 64) return qk_avx2<R, 8>(q, group, k_rows, nb, scale, s);
        if (d == 32) return qk_avx2<R, 4>(q, group, k_rows, nb, scale, s);
        if (d == 128) return qk_avx2<R, 16>(q, group, k_rows, nb, scale, s);
    }
#endif
    // f32 rows (and other head sizes): each K row read once, dotted with every
    // query head of the group; half rows widened once into buf.
    alignas(64) float buf[k_max_row];
    for (int64_t j = 0; j < nb; ++j) {
        const float *kr = R::row(k_rows + j * R::stride(d), d, buf);
        for (int64_t g = 0; g < group; ++g) s[g * k_blk + j] = scale * simd::dot(q + g * d, kr, d);
    }
}

// A run of consecutive rows of a lane: its first K and V rows and its length.
template <class RK, class RV = RK>
struct Piece {
    const typename RK::T *k;
    const typename RV::T *v;
    int64_t n;
};

// One block of nb = sum of the pieces' lengths <= k_blk rows, gathered from
// np runs of a lane (one run: consecutive rows, the dense case; several: the
// short spans page selection leaves, so the block's online-softmax update is
// paid once per k_blk rows read, not once per span). q: the group's queries
// [group, d]. s: scratch [group * k_blk]; the pieces' scores lie end to end.
// K rows of type RK, V rows of RV.
template <class RK, class RV = RK>
inline void block_pieces(const float *q, int64_t group, const Piece<RK, RV> *pc, int np, int64_t nb,
                         int64_t d, float scale, float *s, float *part0, int64_t hstride,
                         const Ahead<RK, RV> &ahead = {}, const QInt *qi = nullptr) {
    // 1. Each K row is read from memory once and dotted with every query head of the group.
    if (ahead.n > 0 && np == 1) {
        for (int64_t j = 0; j < nb; j += k_pf_rows) {
            prefetch_slice<RK>(ahead.k, ahead.n, j, d);
            qk<RK>(q, group, pc[0].k + j * RK::stride(d), std::min(k_pf_rows, nb - j), d, scale, s + j, qi);
        }
    } else {
        for (int64_t i = 0, off = 0; i < np; off += pc[i].n, ++i)
            qk<RK>(q, group, pc[i].k, pc[i].n, d, scale, s + off, qi);
    }
    // 2. Online softmax per head over the block.
    const int64_t mi = m_at(d);
    for (int64_t g = 0; g < group; ++g) {
        float *part = part0 + g * hstride, *sg = s + g * k_blk;
        // The block max in vectors (max is exact, so any order gives the
        // same value; a scalar loop is one 64-long dependency chain per head).
        const float m_new = std::max(part[mi], simd::max_of(sg, nb));
        const float alpha = std::exp(part[mi] - m_new);  // 0 on the first block (m = -inf)
        const float sum = simd::exp_sub_sum(sg, m_new, nb);
        if (alpha != 1.0f) simd::scale(part, alpha, d);
        part[mi] = m_new;
        part[mi + 1] = part[mi + 1] * alpha + sum;
    }
    // 3. Each V row read once per tile of heads, accumulated in registers.
    if (ahead.n > 0 && np == 1) {
        for (int64_t j = 0; j < nb; j += k_pf_rows) {
            prefetch_slice<RV>(ahead.v, ahead.n, j, d);
            pv<RV>(s + j, group, pc[0].v + j * RV::stride(d), std::min(k_pf_rows, nb - j), d, part0, hstride);
        }
    } else {
        for (int64_t i = 0, off = 0; i < np; off += pc[i].n, ++i)
            pv<RV>(s + off, group, pc[i].v, pc[i].n, d, part0, hstride);
    }
}

// nb <= k_blk consecutive rows: k_rows [nb, d] of RK's element type, v_rows of RV's.
template <class RK, class RV = RK>
inline void block(const float *q, int64_t group, const typename RK::T *k_rows, const typename RV::T *v_rows,
                  int64_t nb, int64_t d, float scale, float *s, float *part0, int64_t hstride,
                  const Ahead<RK, RV> &ahead = {}, const QInt *qi = nullptr) {
    const Piece<RK, RV> one{k_rows, v_rows, nb};
    block_pieces<RK, RV>(q, group, &one, 1, nb, d, scale, s, part0, hstride, ahead, qi);
}

// partial: [n_head][n_chunks] x part_len(d) -> o [n_head, d], lse [n_head] (optional).
inline void merge(const float *partial, int64_t n_head, int64_t n_chunks, int64_t d, float *o, float *lse) {
    const int64_t pl = part_len(d), mi = m_at(d);
    for (int64_t h = 0; h < n_head; ++h) {
        const float *ph = partial + h * n_chunks * pl;
        float mx = -INFINITY;
        for (int64_t c = 0; c < n_chunks; ++c) mx = std::max(mx, ph[c * pl + mi]);
        float *out = o + h * d;
        std::fill(out, out + d, 0.0f);
        float l = 0.0f;
        for (int64_t c = 0; c < n_chunks; ++c) {
            const float w = std::exp(ph[c * pl + mi] - mx);
            l += ph[c * pl + mi + 1] * w;
            simd::scale_axpy(out, 1.0f, w, ph + c * pl, d);
        }
        simd::scale(out, 1.0f / l, d);
        if (lse) lse[h] = mx + std::log(l);
    }
}

}  // namespace sieve::cpu::decode
