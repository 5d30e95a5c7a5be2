// matmul: y[t, r] = sum_c W[r, c] x[t, c], threaded over (row tile, token tile).
//
//   1. The rows are cut into tiles of k_row_tile; the tokens into tiles of
//      k_tok_tile. One task = one (row tile, token tile); the pool hands tasks
//      out dynamically, so both cores stay busy whatever the shape.
//   2. A task decodes its weight rows once into per-thread scratch and
//      multiplies them with every token of its token tile (prefill is matrix
//      x matrix, not token by token).
//   3. Two decodings: the 32-element block types, Q4_K, Q5_K and Q6_K go to
//      q8 rows and an integer dot against activations quantized to 8 bits
//      (matmul_q8.h); everything else (F16, BF16, Q2_K, Q3_K) is dequantized
//      to f32 and dotted in f32, as is every type with ActPrecision::f32.
//      F32 weights are used in place. With AVX-512 VNNI:
//        - up to k_raw_max_tokens tokens (decode) skip the scratch and expand
//          the GGUF blocks in registers (q8::dot_raw);
//        - prefill packs each 16-row tile with the rows in the SIMD lanes
//          (q8::pack_tile) and runs it against up to k_tok_tile_packed
//          tokens, 8 per pass (q8::tile_dot);
//        - matrices the model repacked at load (WeightView::x16: every
//          integer-path type) skip all of that: decode expands the 16-row
//          tiles in registers for up to 8 tokens per pass (q8::x16_dot),
//          prefill expands each tile once for its token tile
//          (q8::x16_unpack_tile + tile_dot), with the same bits, so a
//          token's result does not depend on how many tokens share the step.
//
// Every output element is computed by one task in a fixed order, so results
// do not depend on the number of threads.
#include <algorithm>
#include <cstring>

#include "sieve/kernels/cpu/intrin.h"

#include "sieve/core/aligned.h"
#include "sieve/core/fp16.h"
#include "sieve/core/status.h"
#include "sieve/kernels/cpu/matmul_float.h"
#include "sieve/kernels/cpu/matmul_q8.h"
#include "sieve/kernels/cpu/ops.h"
#include "sieve/kernels/cpu/simd.h"
#include "sieve/quant/dequant.h"

namespace sieve::cpu {

namespace {

constexpr int64_t k_row_tile = 16;
constexpr int64_t k_tok_tile = 64;
// Token tile of the packed prefill path: packing 16 rows costs about as much
// as 20-40 tokens of dots, so a tile serves up to 256 tokens.
constexpr int64_t k_tok_tile_packed = 256;
// Up to this many tokens the q8 path reads weight blocks in place (see matmul_q8.h).
constexpr int64_t k_raw_max_tokens = 16;

// Scratch lives in thread_local storage: the pool's threads are persistent, so
// each keeps its buffers across calls (no allocation once the largest shape
// has been seen), and no caller has to thread a scratch object through every
// layer of the forward pass. Buffers only grow.
struct Scratch {
    AlignedBuffer<uint8_t> act;   // calling thread only: quantized activations for all tokens
    AlignedBuffer<uint8_t> tile;  // per thread: decoded weight rows
    AlignedBuffer<uint8_t> packed;  // per thread: a packed 16-row tile (q8::pack_tile)
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

// Software prefetch distance for the weight streams, in rows: the dot of one
// row is short (a few hundred bytes), so the hardware prefetcher alone leaves
// the gather of the next row's scales waiting on DRAM.
constexpr int64_t k_prefetch_rows = 4;

inline void prefetch_row(const uint8_t *p, int64_t n_bytes) {
#if defined(__SSE__)
    for (int64_t o = 0; o < n_bytes; o += 64) __builtin_prefetch(p + o, 0, 3);
#else
    (void)p;
    (void)n_bytes;
#endif
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
    uint8_t *act = grow(scratch().act, static_cast<size_t>(n_tokens * s.act_stride_bytes));
    // Quantize the activations once, shared read-only by every task.
    const int64_t n_act_tasks = std::min<int64_t>(n_tokens, pool.n_threads() * 4);
    pool.run(n_act_tasks, [&](int64_t task, int) {
        for (int64_t t = task; t < n_tokens; t += n_act_tasks)
            q8::quantize_act(x + t * n_cols, s, act + t * s.act_stride_bytes);
    });
    const bool decode = n_tokens <= k_raw_max_tokens;
    int64_t total_rows = 0;
    for (int m = 0; m < n_mat; ++m) total_rows += ws[m].n_rows;
    const int64_t row_chunk =
        decode ? std::max(k_min_task_rows,
                          (total_rows + pool.n_threads() * k_tasks_per_thread - 1) / (pool.n_threads() * k_tasks_per_thread) /
                              k_row_tile * k_row_tile)
               : k_row_tile;
    const int64_t tok_chunk = decode ? n_tokens : q8::has_tile() ? k_tok_tile_packed : k_tok_tile;
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
        // Decode's tile kernel: the task's tokens in groups of up to 8, each
        // group's outputs for rows [rb, rb + 16) (row rb of token t at y[t, rb]).
        const auto token_groups = [&](int64_t rb, auto &&dot) {
            for (int64_t t = t0; t < t1; t += 8) {
                const int n_act = static_cast<int>(std::min<int64_t>(8, t1 - t));
                const uint8_t *acts[8];
                float *outs[8];
                for (int j = 0; j < n_act; ++j) {
                    acts[j] = act + (t + j) * s.act_stride_bytes;
                    outs[j] = y + (t + j) * w.n_rows + rb;
                }
                dot(acts, n_act, outs);
            }
        };
        if (w.x16) {
            // Repacked at load: decode expands the 16-row tiles in registers
            // as it streams them; prefill expands each tile once into the
            // packed layout for all its tokens. Both give the same bits.
            const int64_t stride = q8::x16_tile_stride(w.type, w.n_cols);
            uint8_t *packed = decode ? nullptr : grow(scratch().packed, static_cast<size_t>(q8::tile_bytes(w.type, s)));
            for (int64_t rb = r0; rb < r1; rb += q8::k_tile_rows) {
                const uint8_t *tile16 = w.x16 + rb / q8::k_tile_rows * stride;
                const int n_r = static_cast<int>(std::min<int64_t>(q8::k_tile_rows, r1 - rb));
                if (decode) {
                    token_groups(rb, [&](const uint8_t *const *acts, int n_act, float *const *outs) {
                        q8::x16_dot(w.type, tile16, acts, n_act, s, outs, n_r, true);
                    });
                } else {
                    q8::x16_unpack_tile(w.type, tile16, s, packed);
                    q8::tile_dot_tokens(w.type, packed, act + t0 * s.act_stride_bytes, t1 - t0, s,
                                        y + t0 * w.n_rows + rb, w.n_rows, n_r);
                }
            }
            return;
        }
        // Few tokens: read the GGUF blocks directly; unpacking to scratch
        // only pays off when the unpacked rows serve many tokens.
        const bool raw = decode && q8::has_dot_raw(w.type);
        uint8_t *tile = raw ? nullptr : grow(scratch().tile, static_cast<size_t>(k_row_tile * s.stride_bytes));
        if (!decode && q8::has_tile()) {
            // Prefill: 16 rows packed once per task, then 8 tokens per pass
            // with the 16 rows in the lanes (q8::tile_dot).
            uint8_t *packed = grow(scratch().packed, static_cast<size_t>(q8::tile_bytes(w.type, s)));
            for (int64_t rb = r0; rb < r1; rb += q8::k_tile_rows) {
                const int n_r = static_cast<int>(std::min<int64_t>(q8::k_tile_rows, r1 - rb));
                q8::pack_tile(w.type, base + rb * w.row_bytes, w.row_bytes, n_r, s, tile, packed);
                q8::tile_dot_tokens(w.type, packed, act + t0 * s.act_stride_bytes, t1 - t0, s, y + t0 * w.n_rows + rb,
                                    w.n_rows, n_r);
            }
            return;
        }
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
                for (int j = 0; j < n_act; ++j) acts[j] = act + (t + j) * s.act_stride_bytes;
                for (int64_t r = rb; r < rb1; ++r) {
                    float out[4];
                    if (raw) {
                        if (r + k_prefetch_rows < w.n_rows)
                            prefetch_row(base + (r + k_prefetch_rows) * w.row_bytes, w.row_bytes);
                        q8::dot_raw(w.type, base + r * w.row_bytes, acts, n_act, s, out);
                    } else {
                        q8::dot(w.type, tile + (r - rb) * s.stride_bytes, acts, n_act, s, out);
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
    SIEVE_CHECKF(!w.x16 || q8::x16_ok(w.type, w.n_rows, w.n_cols),
                 "matmul: %s %lld x %lld has no x16 layout (matmul_q8.h)",
                 type_name(w.type), static_cast<long long>(w.n_rows), static_cast<long long>(w.n_cols));
}

}  // namespace

void matmul(const WeightView &w, const float *x, int64_t n_tokens, float *y, ThreadPool &pool,
            ActPrecision prec) {
    check_weight(w);
    if (n_tokens <= 0 || w.n_rows <= 0) return;
    if (prec == ActPrecision::q8 && q8::supports(w.type))
        matmul_q8_multi(&w, &y, 1, x, n_tokens, pool);
    else
        matmul_float(w, x, n_tokens, y, pool);
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

}  // namespace sieve::cpu
