#include "sieve/sparse/select.h"

#include <algorithm>
#include <numeric>

#include "sieve/core/status.h"

namespace sieve::sparse {

void group_scores(const float *const *heads, int64_t n_heads, int64_t n, GroupAgg agg, float *out) {
    SIEVE_CHECKF(n_heads >= 1, "group_scores: %lld heads", static_cast<long long>(n_heads));
    std::copy(heads[0], heads[0] + n, out);
    for (int64_t h = 1; h < n_heads; ++h) {
        const float *s = heads[h];
        if (agg == GroupAgg::max)
            for (int64_t j = 0; j < n; ++j) out[j] = std::max(out[j], s[j]);
        else
            for (int64_t j = 0; j < n; ++j) out[j] += s[j];
    }
    if (agg == GroupAgg::mean && n_heads > 1) {
        const float inv = 1.0f / static_cast<float>(n_heads);
        for (int64_t j = 0; j < n; ++j) out[j] *= inv;
    }
}

void max_pool(const float *s, int64_t n, int64_t kernel, float *out) {
    SIEVE_CHECKF(kernel >= 1 && kernel % 2 == 1, "max_pool: kernel %lld must be odd", static_cast<long long>(kernel));
    const int64_t r = kernel / 2;
    // Running window max with a deque of candidate indices (decreasing values).
    std::vector<int64_t> dq(static_cast<size_t>(n + 1));
    int64_t head = 0, tail = 0, next = 0;
    for (int64_t j = 0; j < n; ++j) {
        const int64_t hi = std::min(n - 1, j + r);
        for (; next <= hi; ++next) {
            while (tail > head && s[dq[static_cast<size_t>(tail - 1)]] <= s[next]) --tail;
            dq[static_cast<size_t>(tail++)] = next;
        }
        while (dq[static_cast<size_t>(head)] < j - r) ++head;
        out[j] = s[dq[static_cast<size_t>(head)]];
    }
}

void avg_pool(const float *s, int64_t n, int64_t kernel, float *out) {
    SIEVE_CHECKF(kernel >= 1 && kernel % 2 == 1, "avg_pool: kernel %lld must be odd", static_cast<long long>(kernel));
    const int64_t r = kernel / 2;
    // Each window summed on its own (kernel adds per key; a running sum
    // would drift and make ties depend on n).
    for (int64_t j = 0; j < n; ++j) {
        float sum = 0.0f;
        for (int64_t i = std::max<int64_t>(0, j - r); i <= std::min(n - 1, j + r); ++i) sum += s[i];
        out[j] = sum / static_cast<float>(kernel);
    }
}

std::vector<int32_t> keep_rows(const float *score, int64_t n, int64_t n_keep, int64_t n_sink, int64_t n_recent) {
    std::vector<int32_t> rows;
    if (n_keep >= n) {
        rows.resize(static_cast<size_t>(n));
        std::iota(rows.begin(), rows.end(), 0);
        return rows;
    }
    SIEVE_CHECKF(n_keep >= 0 && n_sink >= 0 && n_recent >= 0 && n_sink + n_recent <= n_keep,
                 "keep_rows: keep %lld, sink %lld, recent %lld", static_cast<long long>(n_keep),
                 static_cast<long long>(n_sink), static_cast<long long>(n_recent));
    const int64_t lo = n_sink, hi = n - n_recent;  // rows [lo, hi) compete by score
    const int64_t n_top = n_keep - n_sink - n_recent;
    rows.reserve(static_cast<size_t>(n_keep));
    for (int64_t j = 0; j < lo; ++j) rows.push_back(static_cast<int32_t>(j));
    if (n_top > 0) {
        SIEVE_CHECKF(score, "keep_rows: %lld rows to choose by score but no scores", static_cast<long long>(n_top));
        std::vector<int32_t> cand(static_cast<size_t>(hi - lo));
        std::iota(cand.begin(), cand.end(), static_cast<int32_t>(lo));
        const auto better = [score](int32_t a, int32_t b) {
            return score[a] > score[b] || (score[a] == score[b] && a < b);
        };
        std::nth_element(cand.begin(), cand.begin() + n_top - 1, cand.end(), better);
        cand.resize(static_cast<size_t>(n_top));
        std::sort(cand.begin(), cand.end());
        rows.insert(rows.end(), cand.begin(), cand.end());
    }
    for (int64_t j = hi; j < n; ++j) rows.push_back(static_cast<int32_t>(j));
    return rows;
}

int64_t pyramid_budget(int64_t mean, int64_t window, double beta, int64_t layer, int64_t n_layer) {
    const int64_t base = std::max<int64_t>(0, mean - window);
    if (n_layer <= 1) return window + base;
    const double min_num = static_cast<double>(base) / beta;
    const double max_num = 2.0 * static_cast<double>(base) - min_num;
    const double steps = (max_num - min_num) / static_cast<double>(n_layer - 1);
    return window + static_cast<int64_t>(max_num - static_cast<double>(layer) * steps);
}

}  // namespace sieve::sparse
