// Small f32 vector helpers shared by the CPU kernels (private to kernels/cpu).
// Each has an AVX-512 body (masked tails, so any length works), an AVX2 body,
// and a scalar fallback so a non-native build still compiles and runs.
#pragma once

#include <cmath>
#include <cstdint>

#include "sieve/core/fp16.h"
#include "sieve/kernels/cpu/intrin.h"

namespace sieve::cpu::simd {

#if defined(__AVX2__) && !defined(__AVX512F__)
inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

// sum_i a[i] * b[i], f32 accumulation in several independent lanes.
inline float dot(const float *a, const float *b, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
    }
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
        acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
#elif defined(__AVX2__)
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    float s = hsum256(_mm256_add_ps(acc0, acc1));
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
#else
    float s[4] = {0, 0, 0, 0};
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; ++j) s[j] += a[i + j] * b[i + j];
    for (; i < n; ++i) s[0] += a[i] * b[i];
    return (s[0] + s[1]) + (s[2] + s[3]);
#endif
}

// y[i] = y[i] * beta + alpha * x[i]
inline void scale_axpy(float *y, float beta, float alpha, const float *x, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    const __m512 vb = _mm512_set1_ps(beta), va = _mm512_set1_ps(alpha);
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
        const __m512 yv = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + i), vb);
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), yv));
    }
#elif defined(__AVX2__)
    const __m256 vb = _mm256_set1_ps(beta), va = _mm256_set1_ps(alpha);
    for (; i + 8 <= n; i += 8) {
        const __m256 yv = _mm256_mul_ps(_mm256_loadu_ps(y + i), vb);
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), yv));
    }
#endif
    for (; i < n; ++i) y[i] = y[i] * beta + alpha * x[i];
}

// y[i] *= s
inline void scale(float *y, float s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] *= s;
}

// Folds x[0, n) with op: 16 lanes first, then a tree across them, then the
// tail (the order depends on n alone). max_of is exact in any order (-inf for none);
// sum_of is a sum in that order.
template <class VOp, class Op>
inline float fold(const float *x, int64_t n, float init, VOp vop, Op op) {
    float r = init;
    int64_t j = 0;
#if defined(__AVX512F__)
    if (n >= 16) {
        __m512 acc = _mm512_loadu_ps(x);
        for (j = 16; j + 16 <= n; j += 16) acc = vop(acc, _mm512_loadu_ps(x + j));
        acc = vop(acc, _mm512_shuffle_f32x4(acc, acc, 0x4e));  // across halves, quarters, pairs, neighbours
        acc = vop(acc, _mm512_shuffle_f32x4(acc, acc, 0xb1));
        acc = vop(acc, _mm512_permute_ps(acc, 0x4e));
        acc = vop(acc, _mm512_permute_ps(acc, 0xb1));
        r = _mm512_cvtss_f32(acc);
    }
#else
    (void)vop;
#endif
    for (; j < n; ++j) r = op(r, x[j]);
    return r;
}
#if defined(__AVX512F__)
struct VMax {
    __m512 operator()(__m512 a, __m512 b) const { return _mm512_max_ps(a, b); }
};
struct VAdd {
    __m512 operator()(__m512 a, __m512 b) const { return _mm512_add_ps(a, b); }
};
#else
struct VMax {};
struct VAdd {};
#endif
inline float max_of(const float *x, int64_t n) {
    return fold(x, n, -INFINITY, VMax{}, [](float a, float b) { return a > b ? a : b; });
}
inline float sum_of(const float *x, int64_t n) {
    return fold(x, n, 0.0f, VAdd{}, [](float a, float b) { return a + b; });
}

#if defined(__AVX512F__)
// e^x for x <= 0 (softmax arguments after subtracting the max): x = n ln2 + r
// with |r| <= ln2/2 (ln2 split in two for an exact reduction), a degree-6
// Taylor polynomial for e^r (truncation < 2e-8 relative), then scalef by 2^n.
// Max relative error ~3e-7 (a few f32 ulps); arguments below -104 give 0
// like expf.
inline __m512 exp_neg(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), 0);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}
#elif defined(__AVX2__)
// AVX2: the same polynomial, with 2^n built in the exponent field; the clamp
// at -87 keeps n >= -126 (a normal float), and anything at or below it gives
// exactly 0, as the AVX-512 version does (a masked key, exp(-inf), must add
// nothing at all, or a row's bits would depend on how many it sees).
inline __m256 exp_neg(__m256 x) {
    const __m256 live = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GT_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), live);
}
#endif

// x[i] = exp(x[i] - sub) for x[i] <= sub; returns the sum of the results.
inline float exp_sub_sum(float *x, float sub, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    const __m512 vs = _mm512_set1_ps(sub);
    __m512 acc = _mm512_setzero_ps();
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
        const __m512 e = exp_neg(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vs));
        _mm512_mask_storeu_ps(x + i, m, e);
        acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(m, e));
    }
    return _mm512_reduce_add_ps(acc);
#else
    float sum = 0.0f;
    for (; i < n; ++i) {
        x[i] = std::exp(x[i] - sub);
        sum += x[i];
    }
    return sum;
#endif
}

// ---------------------------------------------------------------------------
// f16 / bf16 rows <-> f32 (KV rows, F16/BF16 weights). Conversions are exact
// to f32; the f32 -> f16/bf16 direction rounds to nearest even.

inline void f16_to_f32(const uint16_t *h, float *dst, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(h + i))));
#elif defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(h + i))));
#endif
    for (; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
}

inline void bf16_to_f32(const uint16_t *h, float *dst, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
        const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(h + i)));
        _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
#endif
    for (; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
}

inline void f32_to_f16(const float *x, uint16_t *dst, int64_t n) {
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
    for (; i < n; ++i) dst[i] = fp32_to_fp16(x[i]);
}

inline void f32_to_bf16(const float *x, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_bf16(x[i]);
}

}  // namespace sieve::cpu::simd
