// Float path of matmul: weights stored as F32, F16, BF16 or a type without
// an integer-dot path (Q2_K, Q3_K, IQ types, ...), or any type (Q6_K and the
// 32-element block types included) when the caller asks for exact f32
// activations. Private to kernels/cpu; matmul.cpp drives it.
#pragma once

#include <cstdint>

#include "sieve/core/thread_pool.h"
#include "sieve/kernels/cpu/ops.h"

namespace sieve::cpu {

// y[t, r] = sum_c W[r, c] x[t, c] in f32, every thread of the pool.
void matmul_float(const WeightView &w, const float *x, int64_t n_tokens, float *y, ThreadPool &pool);

// One weight row -> n f32 values (SIMD for F16 / BF16 / Q6_K, the reference
// decoder for the rest).
void decode_row_f32(GgmlType type, const void *src, float *dst, int64_t n);

}  // namespace sieve::cpu
