#include "sieve/kernels/cpu/page_select.h"

#include <algorithm>
#include <cmath>

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
    SIEVE_CHECKF(a.q && a.summary && a.out && a.group >= 1 && a.d >= 1 && a.d <= k_max_d && a.n_pages >= 0,
                 "%s: group %lld, d %lld, %lld pages (d at most %lld, pointers set)", who,
                 static_cast<long long>(a.group), static_cast<long long>(a.d), static_cast<long long>(a.n_pages),
                 static_cast<long long>(k_max_d));
}

}  // namespace

void quest_page_scores(const PageScoreArgs &a) {
    check(a, "quest_page_scores");
    const int64_t d = a.d;
    alignas(64) float mm[2 * k_max_d];
    for (int64_t p = 0; p < a.n_pages; ++p) {
        simd::f16_to_f32(a.summary + p * 2 * d, mm, 2 * d);  // min row, max row
        float s = bound(a.q, mm, mm + d, d);
        for (int64_t h = 1; h < a.group; ++h) {
            const float b = bound(a.q + h * d, mm, mm + d, d);
            s = a.agg_max ? std::max(s, b) : s + b;
        }
        a.out[p] = a.agg_max ? s : s / static_cast<float>(a.group);
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
    for (int64_t p = 0; p < a.n_pages; ++p) {
        double best = -INFINITY, sum = 0.0;
        for (int64_t h = 0; h < a.group; ++h) {
            double b = 0.0;
            for (int64_t c = 0; c < a.d; ++c) {
                const double q = a.q[h * a.d + c];
                const double lo = fp16_to_fp32(a.summary[(2 * p) * a.d + c]);
                const double hi = fp16_to_fp32(a.summary[(2 * p + 1) * a.d + c]);
                b += std::max(q * lo, q * hi);
            }
            best = std::max(best, b);
            sum += b;
        }
        a.out[p] = static_cast<float>(a.agg_max ? best : sum / static_cast<double>(a.group));
    }
}

}  // namespace sieve::cpu
