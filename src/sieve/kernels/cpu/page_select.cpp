#include "sieve/kernels/cpu/page_select.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "sieve/core/fp16.h"
#include "sieve/core/status.h"
#include "sieve/kernels/cpu/attention_decode_core.h"
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

// The pages a call scores: the list, or every page.
int64_t exact_pages(const PageExactArgs &a) {
    return a.pages ? a.n_list : (a.n_rows + a.page_rows - 1) / a.page_rows;
}
int64_t exact_page(const PageExactArgs &a, int64_t i) {
    return a.pages ? a.pages[i] : i;
}

bool exact_list_ok(const PageExactArgs &a) {
    if (!a.pages) return true;
    if (a.n_list < 0 || a.page_rows < 1) return false;
    const int64_t np = (a.n_rows + a.page_rows - 1) / a.page_rows;
    for (int64_t i = 0; i < a.n_list; ++i)
        if (a.pages[i] < 0 || a.pages[i] >= np || (i > 0 && a.pages[i] <= a.pages[i - 1])) return false;
    return true;
}

void check_exact(const PageExactArgs &a, const char *who) {
    SIEVE_CHECKF(a.q && a.keys && a.out && a.group >= 1 && a.d >= 1 && a.d <= k_max_d && a.n_rows >= 0 &&
                     a.page_rows >= 1 && row_type_fits(a.type, a.d) && exact_list_ok(a) &&
                     ((a.agg != PageAgg::mass && a.agg != PageAgg::maxprob) || a.scale > 0.0f),
                 "%s: group %lld, d %lld, %lld rows of %s, pages of %lld, scale %g (d at most %lld and whole "
                 "blocks of the type, pointers set, a page list ascending and within the rows, scale > 0 for "
                 "mass and maxprob)",
                 who, static_cast<long long>(a.group), static_cast<long long>(a.d),
                 static_cast<long long>(a.n_rows), row_type_name(a.type), static_cast<long long>(a.page_rows),
                 static_cast<double>(a.scale), static_cast<long long>(k_max_d));
}

// logit[h * m + j] = q_h . k (times the scale for mass and maxprob) for the call's rows j (the listed pages'
// rows end to end, first[] their offsets), through the decode's Q.K (the rows read in place, several rows per
// horizontal sum, every query head per row read). It walks each page from its first row in blocks of up to
// decode::k_blk, so a row's bits depend only on its place in its page: a page scores the same listed or not.
template <class R>
void exact_logits_t(const PageExactArgs &a, const int64_t *first, int64_t np, int64_t m, float *logit) {
    const auto *rows = static_cast<const typename R::T *>(a.keys);
    const int64_t d = a.d, stride = R::stride(d), n = a.n_rows;
    const float scale = a.agg == PageAgg::mass || a.agg == PageAgg::maxprob ? a.scale : 1.0f;
    thread_local AlignedBuffer<float> sbuf;
    float *s = decode::grow(sbuf, a.group * decode::k_blk);
    for (int64_t i = 0; i < np; ++i) {
        const int64_t r0 = exact_page(a, i) * a.page_rows, r1 = std::min(n, r0 + a.page_rows);
        for (int64_t r = r0; r < r1; r += decode::k_blk) {
            const int64_t nb = std::min(decode::k_blk, r1 - r), j = first[i] + (r - r0);
            decode::qk<R>(a.q, a.group, rows + r * stride, nb, d, scale, s);
            for (int64_t h = 0; h < a.group; ++h)
                std::copy(s + h * decode::k_blk, s + h * decode::k_blk + nb, logit + h * m + j);
        }
    }
}

void exact_logits(const PageExactArgs &a, const int64_t *first, int64_t np, int64_t m, float *logit) {
    switch (a.type) {
        case RowType::f32:
            return exact_logits_t<decode::RowF32>(a, first, np, m, logit);
        case RowType::f16:
            return exact_logits_t<decode::RowF16>(a, first, np, m, logit);
        case RowType::bf16:
            return exact_logits_t<decode::RowBF16>(a, first, np, m, logit);
        case RowType::q8_0:
            return exact_logits_t<decode::RowQ8_0>(a, first, np, m, logit);
        case RowType::q4_0:
            return exact_logits_t<decode::RowQ4_0>(a, first, np, m, logit);
    }
}

// out[p] from the per-head page values v[h * n_pages + p] (max or mean:
// largest logits; mass or maxprob: probabilities).
template <class T>
void combine_heads(const T *v, int64_t group, int64_t n_pages, PageAgg agg, float *out) {
    for (int64_t p = 0; p < n_pages; ++p) {
        T best = v[p], sum = v[p];
        for (int64_t h = 1; h < group; ++h) {
            best = std::max(best, v[h * n_pages + p]);
            sum += v[h * n_pages + p];
        }
        const bool use_sum = agg == PageAgg::mean || agg == PageAgg::mass;
        out[p] = static_cast<float>(!use_sum               ? best
                                    : agg == PageAgg::mean ? sum / static_cast<T>(group)
                                                           : sum);
    }
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

void page_scores_exact(const PageExactArgs &a) {
    check_exact(a, "page_scores_exact");
    const int64_t n = a.n_rows, np = exact_pages(a);
    // The keys scored: the listed pages' rows in order, or every row.
    thread_local std::vector<float> logit, per_head;
    thread_local std::vector<int64_t> first;  // the call's rows of page i: [first[i], first[i + 1])
    first.resize(static_cast<size_t>(np + 1));
    first[0] = 0;
    for (int64_t i = 0; i < np; ++i) {
        const int64_t r0 = exact_page(a, i) * a.page_rows;
        first[static_cast<size_t>(i + 1)] =
            first[static_cast<size_t>(i)] + std::min(n, r0 + a.page_rows) - r0;
    }
    const int64_t m = first[static_cast<size_t>(np)];
    logit.resize(static_cast<size_t>(a.group * m));
    per_head.resize(static_cast<size_t>(a.group * np));
    exact_logits(a, first.data(), np, m, logit.data());
    const bool prob = a.agg == PageAgg::mass || a.agg == PageAgg::maxprob;
    for (int64_t h = 0; h < a.group && m > 0; ++h) {
        float *x = logit.data() + h * m, *v = per_head.data() + h * np;
        float inv = 1.0f;
        if (prob)
            inv = 1.0f /
                  simd::exp_sub_sum(x, simd::max_of(x, m), m);  // x[j] = exp(x[j] - max); >= 1 term equals 1
        for (int64_t i = 0; i < np; ++i) {
            const float *xp = x + first[static_cast<size_t>(i)];
            const int64_t len = first[static_cast<size_t>(i + 1)] - first[static_cast<size_t>(i)];
            v[i] = prob ? simd::sum_of(xp, len) * inv : simd::max_of(xp, len);
        }
    }
    combine_heads(per_head.data(), a.group, np, a.agg, a.out);
}

void page_scores_exact_ref(const PageExactArgs &a) {
    check_exact(a, "page_scores_exact_ref");
    const int64_t d = a.d, n = a.n_rows, np = exact_pages(a);
    const bool prob = a.agg == PageAgg::mass || a.agg == PageAgg::maxprob;
    std::vector<double> v(static_cast<size_t>(a.group * np));
    std::vector<std::vector<double>> l(static_cast<size_t>(np));  // per page, its rows' logits
    for (int64_t h = 0; h < a.group; ++h) {
        double top = -INFINITY;
        for (int64_t i = 0; i < np; ++i) {
            const int64_t r0 = exact_page(a, i) * a.page_rows;
            std::vector<double> &page = l[static_cast<size_t>(i)];
            page.clear();
            for (int64_t r = r0; r < std::min(n, r0 + a.page_rows); ++r) {
                double s = 0.0;
                for (int64_t c = 0; c < d; ++c)
                    s += static_cast<double>(a.q[h * d + c]) *
                         static_cast<double>(row_elem(a.type, a.keys, r * d + c));
                if (prob) s *= static_cast<double>(a.scale);
                page.push_back(s);
                top = std::max(top, s);
            }
        }
        double z = 0.0;
        for (const std::vector<double> &page : l)
            for (double x : page) z += std::exp(x - top);
        const double lse = top + std::log(z);
        for (int64_t i = 0; i < np; ++i) {
            double s = prob ? 0.0 : -INFINITY;
            for (double x : l[static_cast<size_t>(i)]) s = prob ? s + std::exp(x - lse) : std::max(s, x);
            v[static_cast<size_t>(h * np + i)] = s;
        }
    }
    combine_heads(v.data(), a.group, np, a.agg, a.out);
}

}  // namespace sieve::cpu
