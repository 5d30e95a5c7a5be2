// Integer-dot matmul path for the 32-element block types (Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0). Private to kernels/cpu; matmul.cpp drives it.
//
// Both operands are brought to one "q8 row" layout so a single dot kernel
// serves every type:
//
//   weight block b:      w = d_b * u + c_b          u in [0, 255] (uint8)
//   activation block b:  x ~ e_b * q                q in [-127, 127] (int8)
//
//   sum_c w[c] x[c] ~ sum_b d_b e_b (sum u*q) + sum_b c_b (e_b sum q)
//
// so a weight block stores (u[32], d_b, c_b) and an activation block stores
// (q[32], e_b, e_b * sum q). Unsigned-by-signed bytes is exactly what VNNI's
// vpdpbusd multiplies. Q4_0 has c = -8d, Q5_0 c = -16d, Q8_0 u = q + 128 and
// c = -128d; Q4_1 and Q5_1 store c = m directly.
//
// Row layout (n_blocks padded to an even count; pad blocks are all zero):
//   [ bytes: n_pad * 32 ][ scale: n_pad floats ][ aux: n_pad floats ] padded to 64 bytes
#pragma once

#include <cstdint>

#include "sieve/quant/types.h"

namespace sieve::cpu::q8 {

constexpr int64_t k_block = 32;

bool supports(GgmlType t);

struct RowShape {
    int64_t n_blocks = 0;     // real blocks: n_cols / 32
    int64_t n_pad = 0;        // n_blocks rounded up to even
    int64_t stride_bytes = 0; // bytes of one q8 row
};
RowShape row_shape(int64_t n_cols);

// Activations: one row of n_cols floats -> q8 row (round to nearest, scale amax/127).
void quantize_act(const float *x, const RowShape &s, uint8_t *dst);
// Weights: one GGUF row of `type` -> q8 row.
void unpack_weight(GgmlType type, const void *src, const RowShape &s, uint8_t *dst);
// out[t] = dot(weight row, act row t) for t < n_act (1..4).
void dot(const uint8_t *w, const uint8_t *const *acts, int n_act, const RowShape &s, float *out);
// Whether dot_raw can read `type`'s blocks directly (AVX-512 VNNI builds:
// Q4_0, Q4_1, Q8_0). For a few tokens this skips the unpack to scratch.
bool has_dot_raw(GgmlType t);
// dot() with the weight row given as its raw GGUF blocks.
void dot_raw(GgmlType type, const void *w, const uint8_t *const *acts, int n_act, const RowShape &s, float *out);
// The same with a per-block int32 dot (AVX2 or plain C++): what dot() runs
// without AVX-512 VNNI, and what tests compare the VNNI body with.
void dot_portable(const uint8_t *w, const uint8_t *const *acts, int n_act, const RowShape &s, float *out);

}  // namespace sieve::cpu::q8
