// matmul_float: the f32 path of matmul (see matmul_float.h), threaded over
// (row tile, token tile) tasks like the integer path in matmul.cpp.
#include "sieve/kernels/cpu/matmul_float.h"

#include <algorithm>
#include <cstring>

#include "sieve/kernels/cpu/intrin.h"

#include "sieve/core/aligned.h"
#include "sieve/core/fp16.h"
#include "sieve/core/status.h"
#include "sieve/kernels/cpu/simd.h"
#include "sieve/quant/dequant.h"

namespace sieve::cpu {

namespace {

constexpr int64_t k_row_tile = 16;
constexpr int64_t k_tok_tile = 64;

// Per-thread decoded weight rows, kept across calls (the pool's threads are
// persistent); only grows.
AlignedBuffer<float> &tile_scratch() {
    static thread_local AlignedBuffer<float> s;
    return s;
}
template <class T>
T *grow(AlignedBuffer<T> &b, size_t n) {
    if (b.size() < n) b.resize(n);
    return b.data();
}

// Q6_K row -> f32 (layout in quant/blocks.h). Per half of 128 elements the
// 6-bit quants of sub-group s (32 elements) are nibble s / 2 of ql[32 (s % 2) ..]
// plus bits 2s..2s+1 of qh as bits 4..5; byte-parallel with AVX2, then one
// multiply per element by d * scale, the same f32 product the reference forms.
void decode_q6_k_f32(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t sb = 0; sb < n / 256; ++sb) {
        const uint8_t *blk = src + sb * 210;
        const uint8_t *ql = blk, *qh = blk + 128;
        const int8_t *sc = reinterpret_cast<const int8_t *>(blk + 192);
        uint16_t dh;
        std::memcpy(&dh, blk + 208, 2);
        const float d = fp16_to_fp32(dh);
        alignas(32) int8_t q[256];
        for (int h = 0; h < 2; ++h) {
            for (int sg = 0; sg < 4; ++sg) {
                int8_t *qo = q + 128 * h + 32 * sg;
                const uint8_t *l = ql + 64 * h + 32 * (sg % 2);
#if defined(__AVX2__)
                const __m256i lo = _mm256_and_si256(
                    _mm256_srli_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(l)), 4 * (sg / 2)),
                    _mm256_set1_epi8(0x0f));
                const __m256i hi = _mm256_and_si256(
                    _mm256_slli_epi16(
                        _mm256_srli_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(qh + 32 * h)), 2 * sg), 4),
                    _mm256_set1_epi8(0x30));
                _mm256_store_si256(reinterpret_cast<__m256i *>(qo),
                                   _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(32)));
#else
                for (int i = 0; i < 32; ++i)
                    qo[i] = static_cast<int8_t>((((l[i] >> (4 * (sg / 2))) & 0xF) | (((qh[32 * h + i] >> (2 * sg)) & 3) << 4)) - 32);
#endif
            }
        }
        float *y = dst + sb * 256;
        for (int g = 0; g < 16; ++g) {
            const float dl = d * static_cast<float>(sc[g]);
            for (int i = 16 * g; i < 16 * g + 16; ++i) y[i] = dl * static_cast<float>(q[i]);
        }
    }
}

}  // namespace

// Weight row -> f32; SIMD conversion for F16/BF16/Q6_K, the reference decoder for the rest.
void decode_row_f32(GgmlType type, const void *src, float *dst, int64_t n) {
    const uint16_t *h = static_cast<const uint16_t *>(src);
    int64_t i = 0;
    if (type == GgmlType::F32) {
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    } else if (type == GgmlType::F16) {
#if defined(__AVX512F__)
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(h + i))));
#elif defined(__F16C__)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(h + i))));
#endif
        for (; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
    } else if (type == GgmlType::BF16) {
#if defined(__AVX512F__)
        for (; i + 16 <= n; i += 16) {
            const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(h + i)));
            _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
        }
#endif
        for (; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
    } else if (type == GgmlType::Q6_K) {
        decode_q6_k_f32(static_cast<const uint8_t *>(src), dst, n);
    } else {
        dequantize_row(type, src, dst, n);
    }
}

namespace {

struct Tiling {
    int64_t n_row_tiles, n_tok_tiles;
};
Tiling tiling(const WeightView &w, int64_t n_tokens) {
    return {(w.n_rows + k_row_tile - 1) / k_row_tile, (n_tokens + k_tok_tile - 1) / k_tok_tile};
}

// Software prefetch distance for the weight streams, in rows: the dot of one
// row is short (a few hundred bytes), so the hardware prefetcher alone leaves
// the gather of the next row's scales waiting on DRAM.
constexpr int64_t k_prefetch_rows = 4;

inline void prefetch_row(const uint8_t *p, int64_t n_bytes) {
#if defined(__SSE__)
    for (int64_t o = 0; o < n_bytes; o += 64) _mm_prefetch(reinterpret_cast<const char *>(p + o), _MM_HINT_T0);
#else
    (void)p;
    (void)n_bytes;
#endif
}

}  // namespace

void matmul_float(const WeightView &w, const float *x, int64_t n_tokens, float *y, ThreadPool &pool) {
    const Tiling tl = tiling(w, n_tokens);
    const int64_t n = w.n_cols;
    const uint8_t *base = static_cast<const uint8_t *>(w.data);
    pool.run(tl.n_row_tiles * tl.n_tok_tiles, [&](int64_t task, int) {
        const int64_t r0 = task / tl.n_tok_tiles * k_row_tile, r1 = std::min(r0 + k_row_tile, w.n_rows);
        const int64_t t0 = task % tl.n_tok_tiles * k_tok_tile, t1 = std::min(t0 + k_tok_tile, n_tokens);
        const float *rows[k_row_tile];
        if (w.type == GgmlType::F32) {
            for (int64_t r = r0; r < r1; ++r) rows[r - r0] = reinterpret_cast<const float *>(base + r * w.row_bytes);
        } else {
            float *tile = grow(tile_scratch(), static_cast<size_t>(k_row_tile * n));
            for (int64_t r = r0; r < r1; ++r) {
                if (r + k_prefetch_rows < w.n_rows) prefetch_row(base + (r + k_prefetch_rows) * w.row_bytes, w.row_bytes);
                decode_row_f32(w.type, base + r * w.row_bytes, tile + (r - r0) * n, n);
                rows[r - r0] = tile + (r - r0) * n;
            }
        }
        for (int64_t t = t0; t < t1; ++t)
            for (int64_t r = r0; r < r1; ++r) y[t * w.n_rows + r] = simd::dot(rows[r - r0], x + t * n, n);
    });
}

void get_row(const WeightView &w, int64_t row, float *out) {
    SIEVE_CHECKF(row >= 0 && row < w.n_rows, "get_row: row %lld out of [0, %lld)", static_cast<long long>(row),
                 static_cast<long long>(w.n_rows));
    decode_row_f32(w.type, static_cast<const uint8_t *>(w.data) + row * w.row_bytes, out, w.n_cols);
}

}  // namespace sieve::cpu
