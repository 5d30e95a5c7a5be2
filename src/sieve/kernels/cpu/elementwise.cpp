// Row-wise kernels of the forward pass: RMS norm, rotary embedding, SwiGLU.
// They are memory-bound and small next to matmul and attention, so they stay
// simple scalar loops the compiler vectorizes; accuracy choices are noted.
#include <cmath>

#include "sieve/core/status.h"
#include "sieve/kernels/cpu/ops.h"

namespace sieve::cpu {

void rmsnorm(const float *x, const float *weight, float *y, int64_t n_tokens, int64_t dim, float eps) {
    SIEVE_CHECKF(dim > 0, "rmsnorm: dim = %lld", static_cast<long long>(dim));
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float *xt = x + t * dim;
        float *yt = y + t * dim;
        // Sum of squares in double: dim is small, and this keeps the norm exact
        // to f32 rounding whatever the spread of the values.
        double ss = 0.0;
        for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xt[i]) * xt[i];
        const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + static_cast<double>(eps)));
        for (int64_t i = 0; i < dim; ++i) yt[i] = xt[i] * inv * weight[i];
    }
}

void rope(float *x, const int32_t *pos, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const float *inv_freq,
          bool neox) {
    SIEVE_CHECKF(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim = %lld must be even",
                 static_cast<long long>(head_dim));
    const int64_t half = head_dim / 2;
    // The angle pos * freq is formed in double: at positions in the tens of
    // thousands an f32 product would already be off by a noticeable fraction
    // of a radian in the fastest-turning pairs.
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t i = 0; i < half; ++i) {
            const double theta = static_cast<double>(pos[t]) * static_cast<double>(inv_freq[i]);
            const float c = static_cast<float>(std::cos(theta)), s = static_cast<float>(std::sin(theta));
            for (int64_t h = 0; h < n_heads; ++h) {
                float *xh = x + (t * n_heads + h) * head_dim;
                const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
                const float a = xh[i0], b = xh[i1];
                xh[i0] = a * c - b * s;
                xh[i1] = a * s + b * c;
            }
        }
    }
}

void silu_mul(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        gate[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

}  // namespace sieve::cpu
