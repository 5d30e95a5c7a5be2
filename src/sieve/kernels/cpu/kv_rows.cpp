#include "sieve/kernels/cpu/kv_rows.h"

#include <array>
#include <cstring>
#include <string>

#include "sieve/core/fp16.h"
#include "sieve/core/status.h"
#include "sieve/kernels/cpu/simd.h"
#include "sieve/quant/blocks.h"
#include "sieve/quant/dequant.h"

namespace sieve::cpu {

namespace {

const block_q8_0 *q8_blocks(const void *base) { return static_cast<const block_q8_0 *>(base); }
const block_q4_0 *q4_blocks(const void *base) { return static_cast<const block_q4_0 *>(base); }

void check_block(RowType t, int64_t e0, int64_t n, const char *who) {
    const int64_t b = row_type_block(t);
    SIEVE_CHECKF(e0 >= 0 && n >= 0 && e0 % b == 0 && n % b == 0,
                 "%s: elements [%lld, +%lld) of %s rows, expected whole blocks of %lld", who,
                 static_cast<long long>(e0), static_cast<long long>(n), row_type_name(t), static_cast<long long>(b));
}

}  // namespace

const char *row_type_name(KvRowTypes t) {
    constexpr int n = static_cast<int>(sizeof(k_row_types) / sizeof(k_row_types[0]));
    static const auto names = [] {
        std::array<std::string, 2 * n * n> a;
        for (int r = 0; r < 2; ++r)
            for (int i = 0; i < n; ++i)
                for (int j = 0; j < n; ++j)
                    a[static_cast<size_t>((r * n + i) * n + j)] =
                        (i == j ? std::string(row_type_name(k_row_types[i]))
                                : std::string(row_type_name(k_row_types[i])) + "/" +
                                      row_type_name(k_row_types[j])) +
                        (r ? " rotated-K" : "");
        return a;
    }();
    const int r = t.k_rotated ? 1 : 0;
    return names[static_cast<size_t>((r * n + static_cast<int>(t.k)) * n + static_cast<int>(t.v))].c_str();
}

float row_elem(RowType t, const void *base, int64_t i) {
    switch (t) {
    case RowType::f32: return static_cast<const float *>(base)[i];
    case RowType::f16: return fp16_to_fp32(static_cast<const uint16_t *>(base)[i]);
    case RowType::bf16: return bf16_to_fp32(static_cast<const uint16_t *>(base)[i]);
    case RowType::q8_0: {
        const block_q8_0 &b = q8_blocks(base)[i / 32];
        return fp16_to_fp32(b.d) * static_cast<float>(b.qs[i % 32]);
    }
    case RowType::q4_0: {
        const block_q4_0 &b = q4_blocks(base)[i / 32];
        const int j = static_cast<int>(i % 32);
        const int q = j < 16 ? (b.qs[j] & 0x0f) : (b.qs[j - 16] >> 4);
        return fp16_to_fp32(b.d) * static_cast<float>(q - 8);
    }
    }
    return 0.0f;
}

void rows_to_f32(RowType t, const void *base, int64_t e0, int64_t n, float *out) {
    check_block(t, e0, n, "rows_to_f32");
    switch (t) {
    case RowType::f32: std::memcpy(out, static_cast<const float *>(base) + e0, sizeof(float) * static_cast<size_t>(n)); return;
    case RowType::f16: return simd::f16_to_f32(static_cast<const uint16_t *>(base) + e0, out, n);
    case RowType::bf16: return simd::bf16_to_f32(static_cast<const uint16_t *>(base) + e0, out, n);
    case RowType::q8_0: {
        const block_q8_0 *b = q8_blocks(base) + e0 / 32;
        for (int64_t k = 0; k < n / 32; ++k, out += 32) {
            const float d = fp16_to_fp32(b[k].d);
#if defined(__AVX512F__)
            const __m512 vd = _mm512_set1_ps(d);
            for (int h = 0; h < 2; ++h) {
                const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b[k].qs + 16 * h));
                _mm512_storeu_ps(out + 16 * h, _mm512_mul_ps(vd, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q))));
            }
#else
            for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(b[k].qs[j]);
#endif
        }
        return;
    }
    case RowType::q4_0: {
        const block_q4_0 *b = q4_blocks(base) + e0 / 32;
        for (int64_t k = 0; k < n / 32; ++k, out += 32) {
            const float d = fp16_to_fp32(b[k].d);
#if defined(__AVX512F__)
            const __m512 vd = _mm512_set1_ps(d);
            const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b[k].qs));
            const __m128i m = _mm_set1_epi8(0x0f);
            const __m512i eight = _mm512_set1_epi32(8);
            const __m128i lo = _mm_and_si128(x, m), hi = _mm_and_si128(_mm_srli_epi16(x, 4), m);
            _mm512_storeu_ps(out, _mm512_mul_ps(vd, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(lo), eight))));
            _mm512_storeu_ps(out + 16,
                             _mm512_mul_ps(vd, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(hi), eight))));
#else
            for (int j = 0; j < 16; ++j) {
                out[j] = d * static_cast<float>((b[k].qs[j] & 0x0f) - 8);
                out[j + 16] = d * static_cast<float>((b[k].qs[j] >> 4) - 8);
            }
#endif
        }
        return;
    }
    }
}

void f32_to_rows(RowType t, const float *src, void *dst, int64_t n) {
    check_block(t, 0, n, "f32_to_rows");
    switch (t) {
    case RowType::f32: std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(n)); return;
    case RowType::f16: return simd::f32_to_f16(src, static_cast<uint16_t *>(dst), n);
    case RowType::bf16: return simd::f32_to_bf16(src, static_cast<uint16_t *>(dst), n);
    case RowType::q8_0: quantize_row_ref(GgmlType::Q8_0, src, dst, n); return;
    case RowType::q4_0: quantize_row_ref(GgmlType::Q4_0, src, dst, n); return;
    }
}

}  // namespace sieve::cpu
