// Conversions between f32 and the elements of KV rows of every RowType
// (row_type.h). A lane is a run of rows, and a run of rows is a run of
// elements: element e of a lane starts row_bytes(t, e) bytes in whenever e is
// a multiple of the type's block, so these functions address elements, not
// rows.
#pragma once

#include <cstdint>

#include "sieve/kernels/cpu/row_type.h"

namespace sieve::cpu {

// Element i of the elements at base, exactly (scalar; any i).
float row_elem(RowType t, const void *base, int64_t i);

// Elements [e0, e0 + n) at base as f32 into out; e0 and n multiples of
// row_type_block(t). SIMD where the machine has it; the values equal
// row_elem's bit for bit (every type's dequantization is exact in f32).
void rows_to_f32(RowType t, const void *base, int64_t e0, int64_t n, float *out);

// n floats (a multiple of the block) as elements of type t at dst: f16 and
// bf16 round to nearest even; q8_0 and q4_0 are llama.cpp's reference
// quantizers (quant/dequant.h), one scale per block of 32.
void f32_to_rows(RowType t, const float *src, void *dst, int64_t n);

// The address of element e0 (a multiple of the block).
inline const uint8_t *row_elems_at(RowType t, const void *base, int64_t e0) {
    return static_cast<const uint8_t *>(base) + row_bytes(t, e0);
}

}  // namespace sieve::cpu
