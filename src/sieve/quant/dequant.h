// Scalar reference (de)quantization of GGUF block formats. These are the
// oracles for every SIMD kernel; they favour clarity over speed.
#pragma once

#include <cstdint>

#include "sieve/quant/types.h"

namespace sieve {

// dst[0..n) = values of the n elements at src, encoded as `type`.
// Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
// Precondition (checked): type supported and n a multiple of its block size.
void dequantize_row(GgmlType type, const void *src, float *dst, int64_t n);

// Encodes n floats as `type` (round-to-nearest reference quantizers, as the
// gguf Python package does). Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1.
// Returns false for a type without a reference quantizer.
bool quantize_row_ref(GgmlType type, const float *src, void *dst, int64_t n);

}  // namespace sieve
