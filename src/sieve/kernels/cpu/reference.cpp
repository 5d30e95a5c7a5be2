// Scalar oracles for the CPU kernels: plain loops, double accumulation.
// Slow by design; tests compare every fast kernel with these.
#include <algorithm>
#include <cmath>
#include <cstring>
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

// The score attention_decode gives a quantized K row with the query rounded
// (ops.h, attention_decode_rounds_query): per block of 32 the query's scale
// amax / 127 and values round(q * 127 / amax) (ties to even), the block's
// exact integer sum with the row's values, then per 64 columns
// (S0 * dk0) * sq0 + (S1 * dk1) * sq1 in f32, summed over the chunks, times
// the scale. Read from the GGUF block layout here, not through the kernels'
// loaders.
float rounded_query_score(RowType t, const float *q, const uint8_t *row, int64_t d, float scale) {
    const int64_t bb = t == RowType::q8_0 ? 34 : 18;
    volatile float tot = 0.0f;  // volatile: the f32 operations one by one, in this order
    for (int64_t c = 0; c < d / 64; ++c) {
        volatile float part = 0.0f;
        for (int64_t h = 0; h < 2; ++h) {
            const int64_t b = 2 * c + h;
            const float *qb = q + 32 * b;
            float amax = 0.0f;
            for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(qb[i]));
            const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
            const float sq = amax / 127.0f;
            const uint8_t *blk = row + bb * b;
            uint16_t hbits;
            std::memcpy(&hbits, blk, 2);
            int64_t sum = 0;
            for (int i = 0; i < 32; ++i) {
                const float x = qb[i] * inv;
                const auto qi = static_cast<int64_t>(std::nearbyint(x));
                const int64_t ki = t == RowType::q8_0 ? static_cast<int8_t>(blk[2 + i])
                                   : i < 16           ? (blk[2 + i] & 0x0f) - 8
                                                      : (blk[2 + i - 16] >> 4) - 8;
                sum += qi * ki;
            }
            volatile float p = static_cast<float>(sum);
            p = p * fp16_to_fp32(hbits);
            p = p * sq;
            part = h == 0 ? static_cast<float>(p) : part + p;
        }
        tot = c == 0 ? static_cast<float>(part) : tot + part;
    }
    return scale * tot;
}

}  // namespace

void attention_ref(const AttnArgs &a, bool decode) {
    attn_check_args(a, "attention_ref");
    const int64_t d = a.head_dim, group = a.n_head / a.n_head_kv;
    const bool rounded = decode && attention_decode_rounds_query(a.kv_type.k, d, group);
    const int64_t row_bytes = a.kv_type.k == RowType::q8_0 ? d / 32 * 34 : d / 32 * 18;
    std::vector<double> s(static_cast<size_t>(attn_max_past(a) + a.n_q)), o(static_cast<size_t>(d));
    // Widen every lane to f32 first (exact), then the plain loops.
    std::vector<std::vector<float>> kf(static_cast<size_t>(a.n_head_kv)), vf(kf.size());
    for (int64_t g = 0; g < a.n_head_kv; ++g) {
        const int64_t n = a.past(g) + a.n_q;
        kf[static_cast<size_t>(g)].resize(static_cast<size_t>(n * d));
        vf[static_cast<size_t>(g)].resize(static_cast<size_t>(n * d));
        widen_rows(a.kv_type.k, a.k[g], n * d, kf[static_cast<size_t>(g)].data());
        widen_rows(a.kv_type.v, a.v[g], n * d, vf[static_cast<size_t>(g)].data());
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
                if (rounded) {
                    const auto *kr = static_cast<const uint8_t *>(a.k[h / group]) + j * row_bytes;
                    s[static_cast<size_t>(j)] = rounded_query_score(a.kv_type.k, q, kr, d, a.scale);
                } else {
                    double dot = 0.0;
                    for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * k[j * d + c];
                    s[static_cast<size_t>(j)] = dot * a.scale;
                }
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
