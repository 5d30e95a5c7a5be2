// Scalar oracles for the CPU kernels: plain loops, double accumulation.
// Slow by design; tests compare every fast kernel with these.
#include <algorithm>
#include <cmath>
#include <vector>

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

void attention_ref(const AttnArgs &a) {
    attn_check_args(a, "attention_ref");
    const int64_t d = a.head_dim, group = a.n_head / a.n_head_kv;
    std::vector<double> s(static_cast<size_t>(attn_max_past(a) + a.n_q)), o(static_cast<size_t>(d));
    for (int64_t h = 0; h < a.n_head; ++h) {
        const float *k = a.k[h / group], *v = a.v[h / group];
        for (int64_t i = 0; i < a.n_q; ++i) {
            const float *q = a.q + (i * a.n_head + h) * d;
            const int64_t n_vis = a.past(h / group) + i + 1;  // causal: rows 0 ..= n_past + i of its lane
            double m = -INFINITY;
            for (int64_t j = 0; j < n_vis; ++j) {
                double dot = 0.0;
                for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * k[j * d + c];
                s[static_cast<size_t>(j)] = dot * a.scale;
                m = std::max(m, s[static_cast<size_t>(j)]);
            }
            double l = 0.0;
            std::fill(o.begin(), o.end(), 0.0);
            for (int64_t j = 0; j < n_vis; ++j) {
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

}  // namespace sieve::cpu
