// What the integer-path kernel files (matmul_q8.cpp, matmul_q8_avx2.cpp,
// matmul_x16.cpp) share: the q8 row layout of matmul_q8.h cut into its
// parts, the byte layout of the 32-element block types, and the AVX2 entry
// points. Private to kernels/cpu.
#pragma once

#include <cstdint>

#include "sieve/kernels/cpu/intrin.h"
#include "sieve/kernels/cpu/matmul_q8.h"
#include "sieve/quant/types.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define SIEVE_Q8_VNNI 1
#else
#define SIEVE_Q8_VNNI 0
#endif
// The AVX2 bodies (matmul_q8_avx2.cpp): what runs without VNNI.
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define SIEVE_Q8_AVX2 1
#else
#define SIEVE_Q8_AVX2 0
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

// Byte layout of the 32-element block types (quant/blocks.h): block size,
// offsets of the Q5 fifth-bit word and of the quants, and the offset c of
// matmul_q8.h as a multiple of d where the block stores no min.
template <GgmlType T>
struct BlockLayout {
    static constexpr bool k_q5 = T == GgmlType::Q5_0 || T == GgmlType::Q5_1;
    static constexpr bool k_min = T == GgmlType::Q4_1 || T == GgmlType::Q5_1;  // c = m stored
    static constexpr int64_t k_size = T == GgmlType::Q4_0   ? 18
                                      : T == GgmlType::Q4_1 ? 20
                                      : T == GgmlType::Q5_0 ? 22
                                      : T == GgmlType::Q5_1 ? 24
                                                            : 34;
    static constexpr int64_t k_qh = k_min ? 4 : 2;          // Q5: offset of the 32-bit fifth-bit word
    static constexpr int64_t k_qs = k_qh + (k_q5 ? 4 : 0);  // offset of the quants
    static constexpr float k_offset = T == GgmlType::Q4_0 ? -8.0f : T == GgmlType::Q5_0 ? -16.0f : -128.0f;
};

#if defined(__AVX2__)
// Q5: byte j = 0x10 where bit j of qh is set (byte j gets byte j / 8 of qh,
// then tests bit j % 8).
inline __m256i fifth_bits_avx2(uint32_t qh) {
    const __m256i rep = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)),
                                            _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                             2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bits = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(rep, bits), bits);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}
#endif

#if SIEVE_Q8_AVX2
// matmul_q8_avx2.cpp. dot_avx2: dot() on an unpacked q8 row (n_act 1..4);
// dot_raw_avx2: the same from the GGUF blocks, false for a type it does not
// read. Both give the same bits for the same row.
void dot_avx2(GgmlType type, const ConstRowParts &w, const uint8_t *const *acts, int n_act, const RowShape &s,
              float *out);
bool dot_raw_avx2(GgmlType type, const void *w, const uint8_t *const *acts, int n_act, const RowShape &s,
                  float *out);
#endif

}  // namespace sieve::cpu::q8
