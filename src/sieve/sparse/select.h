// The pieces eviction policies are made of: combining a GQA group's scores,
// pooling scores over neighbouring keys, choosing rows by score, budgets per
// layer. Plain functions on score vectors, tested on their own
// (tests/unit/test_sparse_select.cpp).
#pragma once

#include <cstdint>
#include <vector>

namespace sieve::sparse {

enum class GroupAgg { mean, max };

// out[j] = mean or max over the group's heads of heads[h][j], j < n.
void group_scores(const float *const *heads, int64_t n_heads, int64_t n, GroupAgg agg, float *out);

// out[j] = max of s[j - kernel/2 .. j + kernel/2] clipped to [0, n) (SnapKV's
// clustering of neighbouring keys: a key next to an important one is kept
// too). kernel must be odd and >= 1; kernel 1 copies.
void max_pool(const float *s, int64_t n, int64_t kernel, float *out);

// out[j] = (sum of s[j - kernel/2 .. j + kernel/2] clipped to [0, n)) /
// kernel: torch's avg_pool1d with zero padding counted, as SnapKV's
// `avgpool` and kvpress's SnapKVPress smooth scores (keys near either end
// average in zeros). kernel odd and >= 1; kernel 1 copies.
void avg_pool(const float *s, int64_t n, int64_t kernel, float *out);

enum class Pooling { max, avg };

// The rows a lane of n rows keeps, ascending: every row in [0, n_sink) and in
// [n - n_recent, n), plus the n_keep - (those) rows of the rest with the
// highest score (ties: the lower row). score may be null when nothing is
// chosen by score. If n_keep >= n every row is kept. n_sink + n_recent <= n_keep.
std::vector<int32_t> keep_rows(const float *score, int64_t n, int64_t n_keep, int64_t n_sink, int64_t n_recent);

// PyramidKV's budget schedule (Cai et al. 2024): with a mean budget of
// `mean` rows per lane of which `window` are the observation window, layer l
// of n_layer keeps window + max_num - l * (max_num - min_num) / (n_layer - 1)
// rows, min_num = (mean - window) / beta, max_num = 2 (mean - window) - min_num:
// falling with depth, the same total.
int64_t pyramid_budget(int64_t mean, int64_t window, double beta, int64_t layer, int64_t n_layer);

}  // namespace sieve::sparse
