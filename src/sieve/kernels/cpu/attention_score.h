// Attention probabilities summed over queries: the score every eviction
// policy that ranks keys by attention uses (SnapKV / PyramidKV over an
// observation window of the last prompt queries, H2O over every query).
//
// Same lane layout as attention (ops.h, AttnArgs): query i of a head in KV
// head g's group sees rows 0 ..= past(g) + i of g's lane. With lse the
// log-sum-exp the attention kernel returned for that (head, query), the
// softmax probability is exp(scale * q·k - lse), and
//
//   acc[h * acc_stride + j] += sum over i < n_q with j <= past(g) + i of
//                              exp(scale * q[i, h] · k_g[j] - lse[h * lse_stride + i])
//
// per query head h (a policy combines a GQA group's heads itself: mean or
// max). Keys are the outer loop and the queries inner, so the partial sums
// stay in registers; a key block no query sees is skipped, so n_q queries
// over n rows cost n * n_q dot products, not n^2. Rows past every query's
// reach are not written.
#pragma once

#include <cstdint>

#include "sieve/core/thread_pool.h"
#include "sieve/kernels/cpu/row_type.h"

namespace sieve::cpu {

struct AttnScoreArgs {
    const float *q = nullptr;          // [n_q, n_head, head_dim], post-RoPE (the attention call's q)
    const float *lse = nullptr;        // lse[h * lse_stride + i]
    int64_t lse_stride = 0;            // usually n_q (AttnArgs::lse layout [n_head, n_q])
    const void *const *k = nullptr;    // n_head_kv lanes, each [past(g) + n_q, head_dim] of kv_type
    RowType kv_type = RowType::f32;
    int64_t n_q = 0;
    int64_t n_past = 0;                // rows every lane held before the queries (when n_past_kv is null)
    const int64_t *n_past_kv = nullptr;  // optional [n_head_kv]
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;
    float scale = 0.0f;
    float *acc = nullptr;              // acc[h * acc_stride + j], j < past(g) + n_q; added to
    int64_t acc_stride = 0;

    int64_t past(int64_t kv_head) const { return n_past_kv ? n_past_kv[kv_head] : n_past; }
};

// Vectorized, split over (KV head, key block) tasks; every task writes its
// own keys' sums, so the result does not depend on the thread count. Sums
// are within a few 1e-5 relative of the oracle's (f32 dot products, as in the
// attention kernels; the vectorized exp adds ~3e-7). head_dim <= 256 (checked).
void attention_scores(const AttnScoreArgs &a, ThreadPool &pool);
// Scalar oracle (double accumulation).
void attention_scores_ref(const AttnScoreArgs &a);

}  // namespace sieve::cpu
