#include "sieve/kernels/cpu/page_select.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "sieve/core/fp16.h"
#include "sieve/core/status.h"
#include "sieve/kernels/cpu/kv_rows.h"
#include "sieve/kernels/cpu/simd.h"

namespace sieve::cpu {

namespace {

constexpr int64_t k_max_d = 512;

// sum_c max(q[c] * lo[c], q[c] * hi[c])
inline float bound(const float *q, const float *lo, const float *hi, int64_t d) {
    int64_t c = 0;
    float sum = 0.0f;
#if defined(__AVX512F__)
    __m512 acc = _mm512_setzero_ps();
    for (; c + 16 <= d; c += 16) {
        const __m512 qv = _mm512_loadu_ps(q + c);
        acc = _mm512_add_ps(acc, _mm512_max_ps(_mm512_mul_ps(qv, _mm512_loadu_ps(lo + c)),
                                               _mm512_mul_ps(qv, _mm512_loadu_ps(hi + c))));
    }
    sum = _mm512_reduce_add_ps(acc);
#endif
    for (; c < d; ++c) sum += std::max(q[c] * lo[c], q[c] * hi[c]);
    return sum;
}

void check(const PageScoreArgs &a, const char *who) {
    SIEVE_CHECKF(a.q && a.summary && a.out && a.group >= 1 && a.d >= 1 && a.d <= k_max_d && a.n_pages >= 0 &&
                     ((a.agg != PageAgg::mass && a.agg != PageAgg::maxprob) || a.scale > 0.0f),
                 "%s: group %lld, d %lld, %lld pages, scale %g (d at most %lld, pointers set, scale > 0 for "
                 "mass and maxprob)",
                 who, static_cast<long long>(a.group), static_cast<long long>(a.d),
                 static_cast<long long>(a.n_pages), static_cast<double>(a.scale),
                 static_cast<long long>(k_max_d));
}

}  // namespace

void quest_page_scores(const PageScoreArgs &a) {
    check(a, "quest_page_scores");
    const int64_t d = a.d, n = a.n_pages;
    alignas(64) float mm[2 * k_max_d];
    if (a.agg == PageAgg::max || a.agg == PageAgg::mean) {
        const bool agg_max = a.agg == PageAgg::max;
        for (int64_t p = 0; p < n; ++p) {
            simd::f16_to_f32(a.summary + p * 2 * d, mm, 2 * d);  // min row, max row
            float s = bound(a.q, mm, mm + d, d);
            for (int64_t h = 1; h < a.group; ++h) {
                const float b = bound(a.q + h * d, mm, mm + d, d);
                s = agg_max ? std::max(s, b) : s + b;
            }
            a.out[p] = agg_max ? s : s / static_cast<float>(a.group);
        }
        return;
    }
    // mass, maxprob: every head's scaled bounds over the pages (and their max), then a
    // softmax per head.
    thread_local std::vector<float> logits, top;
    logits.resize(static_cast<size_t>(a.group * n));
    top.assign(static_cast<size_t>(a.group), -INFINITY);
    for (int64_t p = 0; p < n; ++p) {
        simd::f16_to_f32(a.summary + p * 2 * d, mm, 2 * d);
        for (int64_t h = 0; h < a.group; ++h) {
            const float x = a.scale * bound(a.q + h * d, mm, mm + d, d);
            logits[static_cast<size_t>(h * n + p)] = x;
            top[static_cast<size_t>(h)] = std::max(top[static_cast<size_t>(h)], x);
        }
    }
    std::fill(a.out, a.out + n, 0.0f);
    for (int64_t h = 0; h < a.group && n > 0; ++h) {
        float *x = logits.data() + h * n;
        const float inv = 1.0f / simd::exp_sub_sum(x, top[static_cast<size_t>(h)], n);  // >= 1 term equals 1
        if (a.agg == PageAgg::mass)
            for (int64_t p = 0; p < n; ++p) a.out[p] += x[p] * inv;
        else
            for (int64_t p = 0; p < n; ++p) a.out[p] = std::max(a.out[p], x[p] * inv);
    }
}

void rows_minmax(RowType t, const void *rows, int64_t n, int64_t d, float *lo, float *hi) {
    SIEVE_CHECKF(d >= 1 && d <= 1024 && n >= 0, "rows_minmax: %lld rows of %lld (d at most 1024)",
                 static_cast<long long>(n), static_cast<long long>(d));
    std::fill(lo, lo + d, INFINITY);
    std::fill(hi, hi + d, -INFINITY);
    alignas(64) float buf[1024];
    for (int64_t r = 0; r < n; ++r) {
        const float *x;
        if (t == RowType::f32) {
            x = static_cast<const float *>(rows) + r * d;
        } else {
            rows_to_f32(t, rows, r * d, d, buf);  // quantized keys: their dequantized values
            x = buf;
        }
        for (int64_t c = 0; c < d; ++c) {  // vectorized: min / max are exact in any order
            lo[c] = std::min(lo[c], x[c]);
            hi[c] = std::max(hi[c], x[c]);
        }
    }
}

void quest_page_scores_ref(const PageScoreArgs &a) {
    check(a, "quest_page_scores_ref");
    std::vector<double> b(static_cast<size_t>(a.group * a.n_pages));
    for (int64_t p = 0; p < a.n_pages; ++p)
        for (int64_t h = 0; h < a.group; ++h) {
            double s = 0.0;
            for (int64_t c = 0; c < a.d; ++c) {
                const double q = a.q[h * a.d + c];
                const double lo = fp16_to_fp32(a.summary[(2 * p) * a.d + c]);
                const double hi = fp16_to_fp32(a.summary[(2 * p + 1) * a.d + c]);
                s += std::max(q * lo, q * hi);
            }
            b[static_cast<size_t>(h * a.n_pages + p)] = s;
        }
    std::vector<double> lse(static_cast<size_t>(a.group), 0.0);
    const bool prob = a.agg == PageAgg::mass || a.agg == PageAgg::maxprob;
    if (prob)
        for (int64_t h = 0; h < a.group && a.n_pages > 0; ++h) {
            const double *x = b.data() + h * a.n_pages;
            const double m = a.scale * *std::max_element(x, x + a.n_pages);
            double z = 0.0;
            for (int64_t p = 0; p < a.n_pages; ++p) z += std::exp(a.scale * x[p] - m);
            lse[static_cast<size_t>(h)] = m + std::log(z);
        }
    for (int64_t p = 0; p < a.n_pages; ++p) {
        double best = -INFINITY, sum = 0.0;
        for (int64_t h = 0; h < a.group; ++h) {
            double x = b[static_cast<size_t>(h * a.n_pages + p)];
            if (prob) x = std::exp(a.scale * x - lse[static_cast<size_t>(h)]);
            best = std::max(best, x);
            sum += x;
        }
        a.out[p] = static_cast<float>(a.agg == PageAgg::mean   ? sum / static_cast<double>(a.group)
                                      : a.agg == PageAgg::mass ? sum
                                                               : best);
    }
}

}  // namespace sieve::cpu
