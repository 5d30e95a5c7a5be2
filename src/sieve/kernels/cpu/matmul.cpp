// matmul: y[t, r] = sum_c W[r, c] x[t, c], threaded over (row tile, token tile).
//
//   1. The rows are cut into tiles of k_row_tile; the tokens into tiles of
//      k_tok_tile. One task = one (row tile, token tile); the pool hands tasks
//      out dynamically, so both cores stay busy whatever the shape.
//   2. A task decodes its weight rows once into per-thread scratch and
//      multiplies them with every token of its token tile (prefill is matrix
//      x matrix, not token by token).
//   3. Two decodings: the 32-element block types go to q8 rows and an integer
//      dot against activations quantized to 8 bits (matmul_q8.h); everything
//      else (F16, BF16, K-quants) is dequantized to f32 and dotted in f32.
//      F32 weights are used in place. With AVX-512 VNNI, Q4_0 / Q4_1 / Q8_0
//      tiles of at most k_raw_max_tokens tokens (decode) skip the scratch and
//      expand the GGUF blocks in registers.
//
// Every output element is computed by one task in a fixed order, so results
// do not depend on the number of threads.
#include <algorithm>
#include <cstring>

#include "sieve/kernels/cpu/intrin.h"

#include "sieve/core/aligned.h"
#include "sieve/core/fp16.h"
#include "sieve/core/status.h"
#include "sieve/kernels/cpu/matmul_q8.h"
#include "sieve/kernels/cpu/ops.h"
#include "sieve/kernels/cpu/simd.h"
#include "sieve/quant/dequant.h"

namespace sieve::cpu {

namespace {

constexpr int64_t k_row_tile = 16;
constexpr int64_t k_tok_tile = 64;
// Up to this many tokens the q8 path reads weight blocks in place (see matmul_q8.h).
constexpr int64_t k_raw_max_tokens = 16;

// Scratch lives in thread_local storage: the pool's threads are persistent, so
// each keeps its buffers across calls (no allocation once the largest shape
// has been seen), and no caller has to thread a scratch object through every
// layer of the forward pass. Buffers only grow.
struct Scratch {
    AlignedBuffer<uint8_t> act;   // calling thread only: quantized activations for all tokens
    AlignedBuffer<uint8_t> tile;  // per thread: decoded weight rows
};
Scratch &scratch() {
    static thread_local Scratch s;
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

void matmul_f32(const WeightView &w, const float *x, int64_t n_tokens, float *y, ThreadPool &pool) {
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
            float *tile = reinterpret_cast<float *>(
                grow(scratch().tile, static_cast<size_t>(k_row_tile * n) * sizeof(float)));
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

// Decode-sized batches (at most k_raw_max_tokens tokens) are split into
// contiguous row ranges instead of 16-row tiles: about k_tasks_per_thread
// tasks per thread (fewer claims on the pool's shared word, long sequential
// weight streams the prefetcher follows), each at least k_min_task_rows rows.
constexpr int64_t k_tasks_per_thread = 4;
constexpr int64_t k_min_task_rows = 32;
// Several weight matrices of one type and width against the same activations
// (Q, K and V; gate and up): one quantization of the activations and one pool
// dispatch for all of them. Rows of the matrices are numbered one after the
// other; a task covers rows of one matrix only.
void matmul_q8_multi(const WeightView *ws, float *const *ys, int n_mat, const float *x, int64_t n_tokens,
                     ThreadPool &pool) {
    const int64_t n_cols = ws[0].n_cols;
    const q8::RowShape s = q8::row_shape(n_cols);
    uint8_t *act = grow(scratch().act, static_cast<size_t>(n_tokens * s.stride_bytes));
    // Quantize the activations once, shared read-only by every task.
    const int64_t n_act_tasks = std::min<int64_t>(n_tokens, pool.n_threads() * 4);
    pool.run(n_act_tasks, [&](int64_t task, int) {
        for (int64_t t = task; t < n_tokens; t += n_act_tasks)
            q8::quantize_act(x + t * n_cols, s, act + t * s.stride_bytes);
    });
    const bool decode = n_tokens <= k_raw_max_tokens;
    int64_t total_rows = 0;
    for (int m = 0; m < n_mat; ++m) total_rows += ws[m].n_rows;
    const int64_t row_chunk =
        decode ? std::max(k_min_task_rows,
                          (total_rows + pool.n_threads() * k_tasks_per_thread - 1) / (pool.n_threads() * k_tasks_per_thread) /
                              k_row_tile * k_row_tile)
               : k_row_tile;
    const int64_t tok_chunk = decode ? n_tokens : k_tok_tile;
    const int64_t n_tok_tiles = (n_tokens + tok_chunk - 1) / tok_chunk;
    // First task of each matrix: tasks [task0[m], task0[m+1]) are its row chunks.
    int64_t task0[8] = {0};
    SIEVE_CHECKF(n_mat >= 1 && n_mat < 8, "matmul_multi: %d matrices", n_mat);
    for (int m = 0; m < n_mat; ++m) task0[m + 1] = task0[m] + (ws[m].n_rows + row_chunk - 1) / row_chunk * n_tok_tiles;

    pool.run(task0[n_mat], [&](int64_t task, int) {
        int m = 0;
        while (task >= task0[m + 1]) ++m;
        const WeightView &w = ws[m];
        float *y = ys[m];
        const int64_t local = task - task0[m];
        const int64_t r0 = local / n_tok_tiles * row_chunk, r1 = std::min(r0 + row_chunk, w.n_rows);
        const int64_t t0 = local % n_tok_tiles * tok_chunk, t1 = std::min(t0 + tok_chunk, n_tokens);
        const uint8_t *base = static_cast<const uint8_t *>(w.data);
        // Few tokens: read the GGUF blocks directly; unpacking to scratch
        // only pays off when the unpacked rows serve many tokens.
        const bool raw = decode && q8::has_dot_raw(w.type);
        uint8_t *tile = raw ? nullptr : grow(scratch().tile, static_cast<size_t>(k_row_tile * s.stride_bytes));
        // Sub-tiles of k_row_tile rows: the unpacked rows stay in L1 while
        // every token of the token tile uses them.
        for (int64_t rb = r0; rb < r1; rb += k_row_tile) {
            const int64_t rb1 = std::min(rb + k_row_tile, r1);
            if (!raw)
                for (int64_t r = rb; r < rb1; ++r) {
                    if (r + k_prefetch_rows < w.n_rows)
                        prefetch_row(base + (r + k_prefetch_rows) * w.row_bytes, w.row_bytes);
                    q8::unpack_weight(w.type, base + r * w.row_bytes, s, tile + (r - rb) * s.stride_bytes);
                }
            // Four tokens per weight-row pass: each weight vector load feeds four dots.
            for (int64_t t = t0; t < t1; t += 4) {
                const int n_act = static_cast<int>(std::min<int64_t>(4, t1 - t));
                const uint8_t *acts[4];
                for (int j = 0; j < n_act; ++j) acts[j] = act + (t + j) * s.stride_bytes;
                for (int64_t r = rb; r < rb1; ++r) {
                    float out[4];
                    if (raw) {
                        if (r + k_prefetch_rows < w.n_rows)
                            prefetch_row(base + (r + k_prefetch_rows) * w.row_bytes, w.row_bytes);
                        q8::dot_raw(w.type, base + r * w.row_bytes, acts, n_act, s, out);
                    } else {
                        q8::dot(tile + (r - rb) * s.stride_bytes, acts, n_act, s, out);
                    }
                    for (int j = 0; j < n_act; ++j) y[(t + j) * w.n_rows + r] = out[j];
                }
            }
        }
    });
}

void check_weight(const WeightView &w) {
    const TypeTraits *tr = type_traits(w.type);
    SIEVE_CHECKF(tr && tr->weights_ok, "matmul: weight type %s is not supported", type_name(w.type));
    SIEVE_CHECKF(w.n_cols > 0 && w.n_cols % tr->block_size == 0, "matmul: n_cols = %lld is not a multiple of %lld (%s)",
                 static_cast<long long>(w.n_cols), static_cast<long long>(tr->block_size), tr->name);
    SIEVE_CHECKF(w.row_bytes >= w.n_cols / tr->block_size * tr->type_size, "matmul: row_bytes = %lld too small",
                 static_cast<long long>(w.row_bytes));
}

}  // namespace

void matmul(const WeightView &w, const float *x, int64_t n_tokens, float *y, ThreadPool &pool,
            ActPrecision prec) {
    check_weight(w);
    if (n_tokens <= 0 || w.n_rows <= 0) return;
    if (prec == ActPrecision::q8 && q8::supports(w.type))
        matmul_q8_multi(&w, &y, 1, x, n_tokens, pool);
    else
        matmul_f32(w, x, n_tokens, y, pool);
}

void matmul_multi(const WeightView *ws, float *const *ys, int n_mat, const float *x, int64_t n_tokens,
                  ThreadPool &pool, ActPrecision prec) {
    bool shared = prec == ActPrecision::q8 && n_mat > 1 && n_mat < 8;
    for (int m = 0; m < n_mat; ++m) {
        check_weight(ws[m]);
        shared = shared && ws[m].n_cols == ws[0].n_cols && q8::supports(ws[m].type) && ws[m].n_rows > 0;
    }
    if (n_tokens <= 0) return;
    if (shared) return matmul_q8_multi(ws, ys, n_mat, x, n_tokens, pool);
    for (int m = 0; m < n_mat; ++m) matmul(ws[m], x, n_tokens, ys[m], pool, prec);
}

void get_row(const WeightView &w, int64_t row, float *out) {
    SIEVE_CHECKF(row >= 0 && row < w.n_rows, "get_row: row %lld out of [0, %lld)", static_cast<long long>(row),
                 static_cast<long long>(w.n_rows));
    decode_row_f32(w.type, static_cast<const uint8_t *>(w.data) + row * w.row_bytes, out, w.n_cols);
}

}  // namespace sieve::cpu
