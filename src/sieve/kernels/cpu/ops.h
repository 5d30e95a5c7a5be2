// CPU kernels used by the forward pass. Kernels take plain pointers and
// shapes and know nothing of models, requests or KV pages. Every kernel has a
// scalar reference (suffix _ref) that tests use as the oracle.
//
// Row-major throughout: a "[a, b]" array has b contiguous.
#pragma once

#include <cstdint>
#include <string>

#include "sieve/core/thread_pool.h"
#include "sieve/kernels/cpu/row_type.h"
#include "sieve/quant/types.h"

namespace sieve::cpu {

// A weight matrix as stored in GGUF: n_rows rows (output features), each of
// n_cols elements encoded as `type`; row r starts at data + r * row_bytes.
struct WeightView {
    GgmlType type = GgmlType::F32;
    int64_t n_rows = 0;
    int64_t n_cols = 0;
    int64_t row_bytes = 0;
    const void *data = nullptr;
    // Optional: Q4_0 / Q8_0 rows repacked for the tile kernel (q8::repack_x16),
    // used by the integer path instead of `data`; `data` stays the source for
    // everything else (the f32 path, row lookups).
    const uint8_t *x16 = nullptr;
};

// How activations meet weights stored in a 32-element block format (Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0) or Q4_K / Q5_K:
//   q8:  each block of 32 activations is rounded to 8 bits (scale max|x|/127)
//        and multiplied with integer dot products, as ggml does — the fast
//        default, a small perturbation of the model (docs/correctness.md);
//   f32: weights are dequantized to f32 and multiplied with f32 activations —
//        slower, and equal to the exact model up to f32 rounding (the oracle
//        mode the reference tests use).
// Other weight types always take the f32 path.
enum class ActPrecision { q8, f32 };

// y[t, r] = sum_c W[r, c] * x[t, c]  for t < n_tokens, r < n_rows.
// x: [n_tokens, n_cols] f32; y: [n_tokens, n_rows] f32 (overwritten).
// Uses every thread of the pool; reads each weight tile once per token tile.
// Does not allocate after the first call with a given shape (scratch is kept
// per thread inside the kernel module).
void matmul(const WeightView &w, const float *x, int64_t n_tokens, float *y, ThreadPool &pool,
            ActPrecision prec = ActPrecision::q8);
// matmul of several matrices with the same n_cols against the same x
// (Q/K/V, gate/up): y_m = W_m x for m < n_mat. Results equal separate
// matmul calls bitwise; mixed types fall back to separate calls. n_mat < 8.
void matmul_multi(const WeightView *w, float *const *y, int n_mat, const float *x, int64_t n_tokens,
                  ThreadPool &pool, ActPrecision prec = ActPrecision::q8);
// Scalar oracle: dequantize each row, accumulate in double.
void matmul_ref(const WeightView &w, const float *x, int64_t n_tokens, float *y);

// Row i of an embedding table, dequantized: out[n_cols].
void get_row(const WeightView &w, int64_t row, float *out);

// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight;  x, y: [n_tokens, dim] (may alias).
void rmsnorm(const float *x, const float *weight, float *y, int64_t n_tokens, int64_t dim, float eps);

// Rotates x: [n_tokens, n_heads, head_dim] in place; token t at position pos[t].
// inv_freq: [head_dim / 2] angular frequencies (base^(-2i/d), already scaled).
// neox = false rotates pairs (2i, 2i+1); neox = true rotates (i, i + head_dim/2).
void rope(float *x, const int32_t *pos, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
          const float *inv_freq, bool neox);
// rope in two parts, for a forward pass that rotates Q and K of every layer
// at the same positions: the angles' cos and sin once per token,
//   cs[t * head_dim + i] = cos(pos[t] inv_freq[i]), cs[t * head_dim + half + i] = sin(...)
// (angles formed in double, as rope does), then the rotation with them. The
// two give rope's bits exactly.
void rope_table(const int32_t *pos, int64_t n_tokens, int64_t head_dim, const float *inv_freq, float *cs);
void rope_apply(float *x, const float *cs, int64_t n_tokens, int64_t n_heads, int64_t head_dim, bool neox);

// A fixed orthogonal rotation of every head vector, for the keys of a
// quantized K cache (QuaRot, Ashkboos et al. 2024): x <- R x with
// R = H D / sqrt(b) per block, H the b x b Sylvester-Hadamard matrix, D a
// fixed diagonal of signs (the same for every call with this head_dim), and
// head_dim split into power-of-two blocks, largest first (80 = 64 + 16).
// Q and K rotated alike keep every q.k (R is orthogonal) while a few large
// channels of K are spread over the whole block, so a per-row scale rounds
// them less coarsely. x: [n_vecs, head_dim] in place; head_dim even.
void hadamard_rotate(float *x, int64_t n_vecs, int64_t head_dim);
// The same rotation as a dense matrix product, the test oracle.
void hadamard_rotate_ref(float *x, int64_t n_vecs, int64_t head_dim);
// The sign D applies to element i (+1 or -1): fixed, from i alone.
float hadamard_sign(int64_t i);

// gate[i] = silu(gate[i]) * up[i]
void silu_mul(float *gate, const float *up, int64_t n);

// Attention of one sequence over its KV, causal, GQA.
//
// K and V come per KV head as a contiguous lane [rows, head_dim] (the KV store
// gives one pointer per (layer, kv head)); query head h reads KV head
// h / (n_head / n_head_kv) without copying. Rows are not positions: a lane
// may hold fewer rows than the sequence has positions (a sparse policy kept
// a subset), and lanes of one layer may differ. The chunk's own rows were
// appended at each lane's end, so
//
//   lane of KV head g:  [ n_past(g) rows held before the chunk | the chunk's n_q rows | ... ]
//   query i (i < n_q) of a head in g's group sees rows 0 ..= n_past(g) + i
//
// with n_past(g) = n_past_kv[g] when n_past_kv is set, else n_past for every
// head (dense lanes: n_past is the chunk's first position). Queries carry
// their true positions in RoPE already; the kernels never see positions.
//
// Decode over a selection (page selection, sparse/quest.h): with `spans` set
// the single query of KV head g's group reads only the rows of g's spans,
// sorted disjoint [begin, end) ranges inside its n_past(g) + 1 visible rows,
// in row order; rows outside them are never read. One span [0, n_past(g) + 1)
// per head gives the bits of the call without spans.
struct RowSpans {
    const int32_t *rows = nullptr;   // pairs (begin, end) of every head, head after head
    const int64_t *first = nullptr;  // [n_head_kv + 1]: head g's pairs are [first[g], first[g + 1])
    int64_t n_spans(int64_t g) const { return first[g + 1] - first[g]; }
    int64_t begin(int64_t g, int64_t i) const { return rows[2 * (first[g] + i)]; }
    int64_t end(int64_t g, int64_t i) const { return rows[2 * (first[g] + i) + 1]; }
    // Rows head g reads.
    int64_t n_rows(int64_t g) const {
        int64_t n = 0;
        for (int64_t i = 0; i < n_spans(g); ++i) n += end(g, i) - begin(g, i);
        return n;
    }
};

// Λ-shaped prefill attention for streaming heads (LServe, Yang et al. 2025;
// DuoAttention, Xiao et al. 2024): in a head marked here, query i of the
// chunk (its last visible row lim = n_past(g) + i) sees only the lane's first
// `sink` rows and its last `recent` rows up to itself,
//
//   rows [0, min(sink, lim + 1))  and  [max(sink, lim - recent + 1), lim]
//
// so a long prompt costs such a head O(n (sink + recent)) instead of O(n^2).
// A head whose lim < sink + recent sees every row (the bits of the dense
// call). Prefill only: a streaming lane is compacted to sink + recent rows
// before decoding.
struct AttnLambda {
    const uint8_t *heads = nullptr;  // [n_head_kv]: nonzero for a streaming head
    int64_t sink = 0;
    int64_t recent = 1;              // >= 1: a query always sees itself
    bool streaming(int64_t kv_head) const { return heads[kv_head] != 0; }
};

struct AttnArgs {
    const float *q = nullptr;          // [n_q, n_head, head_dim]
    const void *const *k = nullptr;    // n_head_kv pointers, each [n_past(g) + n_q, head_dim] of kv_type.k
    const void *const *v = nullptr;    // n_head_kv pointers, each [n_past(g) + n_q, head_dim] of kv_type.v
    KvRowTypes kv_type = RowType::f32;  // element types of K and V rows (f16/bf16 are widened in L1)
    float *o = nullptr;                // [n_q, n_head, head_dim]
    float *lse = nullptr;              // optional [n_head, n_q]: log-sum-exp of scaled scores per row
    int64_t n_q = 0;
    int64_t n_past = 0;                // rows every lane held before the chunk (when n_past_kv is null)
    const int64_t *n_past_kv = nullptr;  // optional [n_head_kv]: rows each lane held before the chunk
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;
    float scale = 0.0f;                // usually 1 / sqrt(head_dim)
    const RowSpans *spans = nullptr;   // optional, decode only (n_q == 1): the rows each head reads
    const AttnLambda *lambda = nullptr;  // optional, prefill only: the Λ mask of streaming heads

    int64_t past(int64_t kv_head) const { return n_past_kv ? n_past_kv[kv_head] : n_past; }
};

// Tiled online-softmax (FlashAttention-2 style) over query and key tiles.
void attention_prefill(const AttnArgs &a, ThreadPool &pool);
// attention_prefill over f16 / bf16 / quantized rows can take its two
// products on Intel AMX tiles (bf16 hi/lo splits, f32 sums: within f32
// rounding of the f32 tiles, not bit-equal to them). Available when built for
// a CPU with AMX-BF16 (-march=native there), the CPU has it and the OS grants
// the tile state; then on unless SIEVE_AMX=0 is in the environment. f32 rows
// always take the f32 tiles. The switch is process-wide: flip it only between
// calls (tests, benchmarks).
bool attention_prefill_amx_available();
bool attention_prefill_use_amx(bool on);  // returns whether it is now on
bool attention_prefill_uses_amx();
// n_q == 1 fast path split along the keys across threads (flash-decoding),
// so one long sequence still uses every core.
void attention_decode(const AttnArgs &a, ThreadPool &pool);
// attention_decode of n_seq independent sequences (a decode step of a batch:
// each args[i] has n_q == 1 and its own q, lanes, n_past / n_past_kv, o and
// optional lse; shapes and row types may differ) in one pool dispatch: the
// tasks are (sequence, KV head, chunk) over all sequences, so short and long
// sequences share the threads and a step pays one barrier instead of n_seq.
// Each sequence's o and lse are bit-identical to attention_decode(args[i],
// pool) (the same chunk plan, task code and merge order). Outputs must not
// overlap. Scratch is kept per thread and only grows.
void attention_decode_multi(const AttnArgs *args, int64_t n_seq, ThreadPool &pool);
// Whether attention_decode takes Q.K over rows of type t in integers (AVX-512
// VNNI builds, q8_0 / q4_0 rows, head_dim a multiple of 64 up to 256, at most
// 64 query heads per KV head): the query is then rounded to 8 bits per block
// of 32, as llama.cpp does for a quantized K (attention_decode_core.h, qk_int).
bool attention_decode_rounds_query(RowType t, int64_t head_dim, int64_t group);
// Scalar oracle (double accumulation) for both, spans and Λ masks included.
// decode = true: the scores as attention_decode takes them (with the query
// rounded where attention_decode_rounds_query says so).
void attention_ref(const AttnArgs &a, bool decode = false);
// Checks a.spans against the lanes (sorted, disjoint, non-empty, inside the
// visible rows); a message naming the head and span, or empty when valid.
// The kernels check it only in debug builds; the selector builds valid ones.
std::string attn_spans_error(const AttnArgs &a);

}  // namespace sieve::cpu
