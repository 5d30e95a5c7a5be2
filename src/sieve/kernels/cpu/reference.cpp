// Scalar oracles for the CPU kernels: plain loops, double accumulation.
// Slow by design; tests compare every fast kernel with these.
#include <algorithm>
#include <cmath>
#include <vector>

#include "sieve/core/fp16.h"
#include "sieve/kernels/cpu/attention_args.h"
#include "sieve/kernels/cpu/ops.h"
#include "sieve/quant/dequant.h"

namespace sieve::cpu {

void matmul_ref(const WeightView &w, const float *x, int64_t n_tokens, float *y) {
    std::vector<float> row(static_cast<size_t>(w.n_cols));
    for (int64_t r = 0; r < w.n_rows; ++r) {
        dequantize_row(w.type, static_cast<const uint8_t *>(w.data) + r * w.row_bytes, row.data(), w.n_cols);
        for (int64_t t = 0; t < n_tokens; ++t) {
            const float *xt = x + t * w.n_cols;
            double acc = 0.0;
            for (int64_t c = 0; c < w.n_cols; ++c) acc += static_cast<double>(row[static_cast<size_t>(c)]) * xt[c];
            y[t * w.n_rows + r] = static_cast<float>(acc);
        }
    }
}

namespace {

// Scalar and independent of kv_rows.cpp: the quantized rows through the
// GGUF reference dequantizer (quant/dequant.h).
void widen_rows(RowType t, const void *src, int64_t n, float *dst) {
    if (t == RowType::q8_0 || t == RowType::q4_0) {
        dequantize_row(t == RowType::q8_0 ? GgmlType::Q8_0 : GgmlType::Q4_0, src, dst, n);
        return;
    }
    for (int64_t i = 0; i < n; ++i) {
        const uint16_t *h = static_cast<const uint16_t *>(src);
        dst[i] = t == RowType::f32 ? static_cast<const float *>(src)[i]
                 : t == RowType::f16 ? fp16_to_fp32(h[i])
                                     : bf16_to_fp32(h[i]);
    }
}

}  // namespace

void attention_ref(const AttnArgs &a) {
    attn_check_args(a, "attention_ref");
    const int64_t d = a.head_dim, group = a.n_head / a.n_head_kv;
    std::vector<double> s(static_cast<size_t>(attn_max_past(a) + a.n_q)), o(static_cast<size_t>(d));
    // Widen every lane to f32 first (exact), then the plain loops.
    std::vector<std::vector<float>> kf(static_cast<size_t>(a.n_head_kv)), vf(kf.size());
    for (int64_t g = 0; g < a.n_head_kv; ++g) {
        const int64_t n = a.past(g) + a.n_q;
        kf[static_cast<size_t>(g)].resize(static_cast<size_t>(n * d));
        vf[static_cast<size_t>(g)].resize(static_cast<size_t>(n * d));
        widen_rows(a.kv_type, a.k[g], n * d, kf[static_cast<size_t>(g)].data());
        widen_rows(a.kv_type, a.v[g], n * d, vf[static_cast<size_t>(g)].data());
    }
    for (int64_t h = 0; h < a.n_head; ++h) {
        const float *k = kf[static_cast<size_t>(h / group)].data(), *v = vf[static_cast<size_t>(h / group)].data();
        for (int64_t i = 0; i < a.n_q; ++i) {
            const float *q = a.q + (i * a.n_head + h) * d;
            const int64_t n_vis = a.past(h / group) + i + 1;  // causal: rows 0 ..= n_past + i of its lane
            // The rows the query reads: all visible ones, or its head's spans.
            std::vector<char> read(static_cast<size_t>(n_vis), a.spans ? 0 : 1);
            if (a.spans)
                for (int64_t si = 0; si < a.spans->n_spans(h / group); ++si)
                    for (int64_t j = a.spans->begin(h / group, si); j < a.spans->end(h / group, si); ++j)
                        read[static_cast<size_t>(j)] = 1;
            if (a.lambda && a.lambda->streaming(h / group))  // Λ: the first sink rows and the last recent
                for (int64_t j = a.lambda->sink; j < n_vis - a.lambda->recent; ++j) read[static_cast<size_t>(j)] = 0;
            double m = -INFINITY;
            for (int64_t j = 0; j < n_vis; ++j) {
                if (!read[static_cast<size_t>(j)]) continue;
                double dot = 0.0;
                for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * k[j * d + c];
                s[static_cast<size_t>(j)] = dot * a.scale;
                m = std::max(m, s[static_cast<size_t>(j)]);
            }
            double l = 0.0;
            std::fill(o.begin(), o.end(), 0.0);
            for (int64_t j = 0; j < n_vis; ++j) {
                if (!read[static_cast<size_t>(j)]) continue;
                const double p = std::exp(s[static_cast<size_t>(j)] - m);
                l += p;
                for (int64_t c = 0; c < d; ++c) o[static_cast<size_t>(c)] += p * v[j * d + c];
            }
            float *out = a.o + (i * a.n_head + h) * d;
            for (int64_t c = 0; c < d; ++c) out[c] = static_cast<float>(o[static_cast<size_t>(c)] / l);
            if (a.lse) a.lse[h * a.n_q + i] = static_cast<float>(m + std::log(l));
        }
    }
}

std::string attn_spans_error(const AttnArgs &a) {
    if (!a.spans) return std::string();
    const RowSpans &sp = *a.spans;
    for (int64_t g = 0; g < a.n_head_kv; ++g) {
        if (sp.n_spans(g) < 1) return strfmt("kv head %lld reads no rows", static_cast<long long>(g));
        int64_t prev = 0;
        for (int64_t i = 0; i < sp.n_spans(g); ++i) {
            const int64_t b = sp.begin(g, i), e = sp.end(g, i);
            if (b < prev || e <= b || e > a.past(g) + 1)
                return strfmt("kv head %lld span %lld = [%lld, %lld): expected sorted, disjoint, non-empty "
                              "ranges inside the %lld visible rows",
                              static_cast<long long>(g), static_cast<long long>(i), static_cast<long long>(b),
                              static_cast<long long>(e), static_cast<long long>(a.past(g) + 1));
            prev = e;
        }
    }
    return std::string();
}

}  // namespace sieve::cpu
