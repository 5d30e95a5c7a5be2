// Row-wise kernels of the forward pass: RMS norm, rotary embedding, SwiGLU.
// They are memory-bound and small next to matmul and attention: simple loops
// the compiler vectorizes, except SwiGLU's exp (explicit vectors); accuracy
// choices are noted. The forward pass runs them on token ranges in parallel.
#include <cmath>
#include <cstdint>
#include <vector>

#include "sieve/core/status.h"
#include "sieve/kernels/cpu/ops.h"
#include "sieve/kernels/cpu/simd.h"

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

void rope_table(const int32_t *pos, int64_t n_tokens, int64_t head_dim, const float *inv_freq, float *cs) {
    SIEVE_CHECKF(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim = %lld must be even",
                 static_cast<long long>(head_dim));
    const int64_t half = head_dim / 2;
    // The angle pos * freq is formed in double: at positions in the tens of
    // thousands an f32 product would already be off by a noticeable fraction
    // of a radian in the fastest-turning pairs.
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t i = 0; i < half; ++i) {
            const double theta = static_cast<double>(pos[t]) * static_cast<double>(inv_freq[i]);
            cs[t * head_dim + i] = static_cast<float>(std::cos(theta));
            cs[t * head_dim + half + i] = static_cast<float>(std::sin(theta));
        }
}

void rope_apply(float *x, const float *cs, int64_t n_tokens, int64_t n_heads, int64_t head_dim, bool neox) {
    SIEVE_CHECKF(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim = %lld must be even",
                 static_cast<long long>(head_dim));
    const int64_t half = head_dim / 2;
    for (int64_t t = 0; t < n_tokens; ++t) {
        const float *cos_t = cs + t * head_dim, *sin_t = cos_t + half;
        for (int64_t h = 0; h < n_heads; ++h) {
            float *xh = x + (t * n_heads + h) * head_dim;
            for (int64_t i = 0; i < half; ++i) {
                const float c = cos_t[i], s = sin_t[i];
                const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
                const float a = xh[i0], b = xh[i1];
                xh[i0] = a * c - b * s;
                xh[i1] = a * s + b * c;
            }
        }
    }
}

void rope(float *x, const int32_t *pos, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const float *inv_freq,
          bool neox) {
    SIEVE_CHECKF(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim = %lld must be even",
                 static_cast<long long>(head_dim));
    std::vector<float> cs(static_cast<size_t>(head_dim));
    for (int64_t t = 0; t < n_tokens; ++t) {
        rope_table(pos + t, 1, head_dim, inv_freq, cs.data());
        rope_apply(x + t * n_heads * head_dim, cs.data(), 1, n_heads, head_dim, neox);
    }
}

float hadamard_sign(int64_t i) {
    // splitmix64 of the index: fixed signs with no table and no state.
    uint64_t z = static_cast<uint64_t>(i) + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (z & 1) ? -1.0f : 1.0f;
}

namespace {

// The largest power of two <= n (n >= 1).
int64_t pow2_floor(int64_t n) {
    int64_t b = 1;
    while (b * 2 <= n) b *= 2;
    return b;
}

}  // namespace

void hadamard_rotate(float *x, int64_t n_vecs, int64_t head_dim) {
    SIEVE_CHECKF(head_dim > 0 && head_dim % 2 == 0, "hadamard_rotate: head_dim = %lld must be even",
                 static_cast<long long>(head_dim));
    std::vector<float> signs(static_cast<size_t>(head_dim));  // once per call, not per vector
    for (int64_t i = 0; i < head_dim; ++i) signs[static_cast<size_t>(i)] = hadamard_sign(i);
    for (int64_t v = 0; v < n_vecs; ++v) {
        float *xv = x + v * head_dim;
        for (int64_t i = 0; i < head_dim; ++i) xv[i] *= signs[static_cast<size_t>(i)];
        for (int64_t o = 0; o < head_dim;) {
            const int64_t b = pow2_floor(head_dim - o);
            float *xb = xv + o;
            // Fast Walsh-Hadamard transform: log2(b) butterfly stages.
            for (int64_t h = 1; h < b; h *= 2)
                for (int64_t i = 0; i < b; i += 2 * h)
                    for (int64_t j = i; j < i + h; ++j) {
                        const float a = xb[j], c = xb[j + h];
                        xb[j] = a + c;
                        xb[j + h] = a - c;
                    }
            const float s = 1.0f / std::sqrt(static_cast<float>(b));
            for (int64_t i = 0; i < b; ++i) xb[i] *= s;
            o += b;
        }
    }
}

void hadamard_rotate_ref(float *x, int64_t n_vecs, int64_t head_dim) {
    SIEVE_CHECKF(head_dim > 0 && head_dim % 2 == 0, "hadamard_rotate: head_dim = %lld must be even",
                 static_cast<long long>(head_dim));
    std::vector<double> in(static_cast<size_t>(head_dim));
    for (int64_t v = 0; v < n_vecs; ++v) {
        float *xv = x + v * head_dim;
        for (int64_t i = 0; i < head_dim; ++i)
            in[static_cast<size_t>(i)] = static_cast<double>(xv[i]) * hadamard_sign(i);
        for (int64_t o = 0; o < head_dim;) {
            const int64_t b = pow2_floor(head_dim - o);
            // Sylvester's H: entry (r, c) is (-1)^popcount(r & c).
            for (int64_t r = 0; r < b; ++r) {
                double acc = 0.0;
                for (int64_t c = 0; c < b; ++c)
                    acc += (__builtin_popcountll(static_cast<uint64_t>(r & c)) & 1 ? -1.0 : 1.0) *
                           in[static_cast<size_t>(o + c)];
                xv[o + r] = static_cast<float>(acc / std::sqrt(static_cast<double>(b)));
            }
            o += b;
        }
    }
}

// silu(g) = g * sigmoid(g) from e = exp(-|g|) (always in (0, 1], so the
// vector exp for non-positive arguments serves both signs):
// sigmoid(g) = 1 / (1 + e) for g >= 0 and e / (1 + e) for g < 0.
void silu_mul(float *gate, const float *up, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    // Masked tail: every element takes the same arithmetic wherever a
    // caller splits the range.
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
        const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
        const __m512 e = simd::exp_neg(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(g)));
        const __m512 one = _mm512_set1_ps(1.0f);
        const __mmask16 neg = _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_LT_OQ);
        const __m512 num = _mm512_mask_blend_ps(neg, one, e);
        const __m512 sig = _mm512_div_ps(num, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(gate + i, m, _mm512_mul_ps(_mm512_mul_ps(g, sig), _mm512_maskz_loadu_ps(m, up + i)));
    }
#elif defined(__AVX2__)
    // The tail goes through the same vector arithmetic from a padded copy, so
    // an element's bits do not depend on where a caller splits the range.
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const auto body = [&](const float *gp, const float *up_p, float *out) {
        const __m256 g = _mm256_loadu_ps(gp);
        const __m256 e = simd::exp_neg(_mm256_or_ps(g, sign));  // -|g|
        const __m256 one = _mm256_set1_ps(1.0f);
        const __m256 num = _mm256_blendv_ps(one, e, _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_LT_OQ));
        const __m256 sig = _mm256_div_ps(num, _mm256_add_ps(one, e));
        _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_mul_ps(g, sig), _mm256_loadu_ps(up_p)));
    };
    for (; i + 8 <= n; i += 8) body(gate + i, up + i, gate + i);
    if (i < n) {
        float g8[8] = {}, u8[8] = {}, o8[8];
        for (int64_t j = i; j < n; ++j) g8[j - i] = gate[j], u8[j - i] = up[j];
        body(g8, u8, o8);
        for (int64_t j = i; j < n; ++j) gate[j] = o8[j - i];
        i = n;
    }
#endif
    for (; i < n; ++i) {
        const float g = gate[i];
        gate[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
}

}  // namespace sieve::cpu
