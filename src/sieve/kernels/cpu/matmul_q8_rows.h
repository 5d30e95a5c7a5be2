// Row views shared by the integer-path kernel files (matmul_q8.cpp,
// matmul_x16.cpp): the q8 row layout of matmul_q8.h cut into its parts.
// Private to kernels/cpu.
#pragma once

#include <cstdint>

#include "sieve/kernels/cpu/matmul_q8.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define SIEVE_Q8_VNNI 1
#else
#define SIEVE_Q8_VNNI 0
#endif

namespace sieve::cpu::q8 {

// `half` exists in activation rows only (matmul_q8.h).
struct RowParts {
    uint8_t *bytes;
    float *scale;
    float *aux;
    float *half;
};
inline RowParts parts(uint8_t *row, const RowShape &s) {
    float *scale = reinterpret_cast<float *>(row + s.n_pad * k_block);
    return {row, scale, scale + s.n_pad, scale + 2 * s.n_pad};
}
struct ConstRowParts {
    const uint8_t *bytes;
    const float *scale;
    const float *aux;
    const float *half;
};
inline ConstRowParts parts(const uint8_t *row, const RowShape &s) {
    const float *scale = reinterpret_cast<const float *>(row + s.n_pad * k_block);
    return {row, scale, scale + s.n_pad, scale + 2 * s.n_pad};
}

}  // namespace sieve::cpu::q8
