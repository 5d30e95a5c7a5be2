// Random inputs shared by the kernel tests: normal values with a sprinkling of
// large outliers (never zeros), and random weight rows of every weight type.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "sieve/core/fp16.h"
#include "sieve/kernels/cpu/ops.h"
#include "sieve/quant/dequant.h"
#include "sieve/quant/types.h"

namespace sieve::test {

// N(0, sigma) with ~2% of values scaled by 8..20 (outliers as in real activations).
inline std::vector<float> random_values(std::mt19937 &rng, size_t n, float sigma = 1.0f) {
    std::normal_distribution<float> nd(0.0f, sigma);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto &x : v) {
        x = nd(rng);
        if (x == 0.0f) x = sigma * 1e-3f;
        if (u(rng) < 0.02f) x *= 8.0f + 12.0f * u(rng);
    }
    return v;
}

// Byte offsets of the f16 scale fields of each K-quant block (see quant/blocks.h).
inline std::vector<int> k_quant_f16_offsets(GgmlType t) {
    switch (t) {
        case GgmlType::Q2_K: return {80, 82};
        case GgmlType::Q3_K: return {108};
        case GgmlType::Q4_K: return {0, 2};
        case GgmlType::Q5_K: return {0, 2};
        case GgmlType::Q6_K: return {208};
        default: return {};
    }
}

struct RandomWeights {
    std::vector<uint8_t> bytes;
    cpu::WeightView view;
};

// Types with a reference quantizer get quantized random rows; K-quants get
// random bytes whose f16 scales are overwritten with finite values in
// [0.002, 0.05), which makes every block valid.
inline RandomWeights random_weights(std::mt19937 &rng, GgmlType type, int64_t n_rows, int64_t n_cols) {
    RandomWeights w;
    int64_t row_bytes = 0;
    if (!type_row_bytes(type, n_cols, &row_bytes)) return w;
    w.bytes.resize(static_cast<size_t>(row_bytes * n_rows));
    const TypeTraits *tr = type_traits(type);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(0.002f, 0.05f);
    for (int64_t r = 0; r < n_rows; ++r) {
        uint8_t *row = w.bytes.data() + r * row_bytes;
        const std::vector<float> vals = random_values(rng, static_cast<size_t>(n_cols));
        if (quantize_row_ref(type, vals.data(), row, n_cols)) continue;
        for (int64_t i = 0; i < row_bytes; ++i) row[i] = static_cast<uint8_t>(byte(rng));
        for (int64_t b = 0; b < n_cols / tr->block_size; ++b)
            for (int off : k_quant_f16_offsets(type)) {
                const uint16_t h = fp32_to_fp16(scale(rng));
                std::memcpy(row + b * tr->type_size + off, &h, 2);
            }
    }
    w.view = {type, n_rows, n_cols, row_bytes, w.bytes.data()};
    return w;
}

// KV rows of type t from f32 values ([n, d]): f16 / bf16 rounded, q8_0 /
// q4_0 through the GGUF reference quantizer. A row holding a NaN (the tests
// poison rows a kernel must not read) becomes a NaN row of t: its blocks get
// a NaN scale, so every dequantized element is NaN.
inline std::vector<uint8_t> narrow_rows(cpu::RowType t, const float *x, int64_t n, int64_t d) {
    const int64_t rb = cpu::row_bytes(t, d);
    std::vector<uint8_t> out(static_cast<size_t>(n * rb));
    for (int64_t r = 0; r < n; ++r) {
        const float *row = x + r * d;
        uint8_t *dst = out.data() + r * rb;
        bool nan = false;
        for (int64_t c = 0; c < d; ++c) nan = nan || std::isnan(row[c]);
        switch (t) {
            case cpu::RowType::f32: std::memcpy(dst, row, static_cast<size_t>(rb)); break;
            case cpu::RowType::f16:
            case cpu::RowType::bf16:
                for (int64_t c = 0; c < d; ++c) {
                    const uint16_t h = t == cpu::RowType::f16 ? fp32_to_fp16(row[c]) : fp32_to_bf16(row[c]);
                    std::memcpy(dst + 2 * c, &h, 2);
                }
                break;
            case cpu::RowType::q8_0:
            case cpu::RowType::q4_0: {
                const int64_t bb = t == cpu::RowType::q8_0 ? 34 : 18;
                if (nan) {
                    for (int64_t b = 0; b < d / 32; ++b) {
                        const uint16_t h = 0x7e00;
                        std::memcpy(dst + b * bb, &h, 2);
                        std::memset(dst + b * bb + 2, 0x11, static_cast<size_t>(bb - 2));
                    }
                } else {
                    quantize_row_ref(t == cpu::RowType::q8_0 ? GgmlType::Q8_0 : GgmlType::Q4_0, row, dst, d);
                }
                break;
            }
        }
    }
    return out;
}

}  // namespace sieve::test
