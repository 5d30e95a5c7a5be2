// Scalar reference (de)quantization of GGUF block formats. These are the
// oracles for every SIMD kernel; they favour clarity over speed.
#pragma once

#include <cstdint>

#include "sieve/quant/types.h"

namespace sieve {

// dst[0..n) = values of the n elements at src, encoded as `type`.
// Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
// and Q8_K (activations; handy for checking quantize_row_q8_k_ref).
// Reads exactly the row's bytes [src, src + row bytes); src needs only the
// alignment a file gives it (2 bytes for the block formats, 4 for Q8_K).
// Results equal the gguf Python package's float32 dequantization bit for bit.
// Precondition (checked): type supported and n >= 0 a multiple of its block size.
void dequantize_row(GgmlType type, const void *src, float *dst, int64_t n);

// Encodes n floats as `type` (round-to-nearest reference quantizers, as the
// gguf Python package does). Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1.
// Returns false for a type without a reference quantizer.
// Precondition (checked): n >= 0 a multiple of the type's block size.
bool quantize_row_ref(GgmlType type, const float *src, void *dst, int64_t n);

// Activation quantization for the K-quant dot products (n a multiple of 256,
// checked): per block of 256, with v the element of largest magnitude (the
// first one on ties), iscale = -127 / v, q = min(127, round_half_even(x * iscale)),
// d = 1 / iscale (negative when v is positive, exactly as ggml's reference), and
// bsums[g] = sum of q over elements 16g..16g+15. An all-zero block gets d = 0,
// q = 0, bsums = 0. dst holds n / 256 block_q8_k (see blocks.h).
void quantize_row_q8_k_ref(const float *src, void *dst, int64_t n);

}  // namespace sieve
