#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels_test_util.h"
#include "sieve/core/aligned.h"
#include "sieve/kernels/cpu/matmul_q8.h"
#include "sieve/kernels/cpu/ops.h"

using namespace sieve;
using sieve::test::random_values;
using sieve::test::random_weights;

namespace {

const GgmlType k_all_types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                                GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K,
                                GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// The 32-element block types, Q4_K, Q5_K and Q6_K run with activations
// quantized to int8 per block of 32 (scale e = amax / 127), so each x[c] is
// off by at most e/2; their weights are represented exactly (matmul_q8.h).
// ActPrecision::f32 keeps x exact for every type.
bool quantizes_activations(GgmlType t, sieve::cpu::ActPrecision prec) {
    return prec == sieve::cpu::ActPrecision::q8 && sieve::cpu::q8::supports(t);
}

// Allowed |y - y_ref| for output (t, r):
//   f32 accumulation of n products: rounding well under 1e-5 * sum |w x| for
//   the lengths used here (n <= 1024: sqrt(n) * 2^-24 ~ 2e-6 typical);
//   plus, for int8 activations, sum_c |w[c]| * e_block(c) / 2 (the exact worst
//   case of the activation rounding), with 1% slack for the f32 scales.
// The integer path sums d e (sum u q) and the offset term c (e sum q)
// separately (matmul_q8.h); with u spread over its range each partial sum is
// a few times sum |w x| at most, and its f32 rounding still a random walk of
// sqrt(n_blocks) roundings, far inside 1e-5.
std::vector<double> tolerances(const sieve::cpu::WeightView &w, const std::vector<float> &x, int64_t n_tokens,
                               sieve::cpu::ActPrecision prec = sieve::cpu::ActPrecision::q8) {
    std::vector<double> tol(static_cast<size_t>(n_tokens * w.n_rows));
    std::vector<float> row(static_cast<size_t>(w.n_cols));
    const bool q8 = quantizes_activations(w.type, prec);
    for (int64_t r = 0; r < w.n_rows; ++r) {
        dequantize_row(w.type, static_cast<const uint8_t *>(w.data) + r * w.row_bytes, row.data(), w.n_cols);
        for (int64_t t = 0; t < n_tokens; ++t) {
            const float *xt = x.data() + t * w.n_cols;
            double abs_sum = 0.0, q8_err = 0.0;
            for (int64_t b = 0; b < w.n_cols; b += 32) {
                double amax = 0.0, wsum = 0.0;
                for (int64_t c = b; c < std::min(b + 32, w.n_cols); ++c) {
                    abs_sum += std::fabs(static_cast<double>(row[c]) * xt[c]);
                    amax = std::max(amax, std::fabs(static_cast<double>(xt[c])));
                    wsum += std::fabs(static_cast<double>(row[c]));
                }
                q8_err += wsum * amax / 127.0 / 2.0;
            }
            tol[static_cast<size_t>(t * w.n_rows + r)] = 1e-5 * abs_sum + 1e-30 + (q8 ? 1.01 * q8_err : 0.0);
        }
    }
    return tol;
}

void expect_close(const sieve::cpu::WeightView &w, const std::vector<float> &x, int64_t n_tokens,
                  const std::vector<float> &y, const std::vector<float> &ref, const char *what,
                  sieve::cpu::ActPrecision prec = sieve::cpu::ActPrecision::q8) {
    const std::vector<double> tol = tolerances(w, x, n_tokens, prec);
    int n_bad = 0;
    for (size_t i = 0; i < y.size() && n_bad < 5; ++i) {
        const double err = std::fabs(static_cast<double>(y[i]) - ref[i]);
        if (!(err <= tol[i])) {
            ++n_bad;
            ADD_FAILURE() << what << " " << type_name(w.type) << " rows=" << w.n_rows << " cols=" << w.n_cols
                          << " tokens=" << n_tokens << " at (t=" << i / w.n_rows << ", r=" << i % w.n_rows
                          << "): got " << y[i] << ", want " << ref[i] << ", |err| " << err << " > tol " << tol[i];
        }
    }
}

// x as the q8 path sees it: each row through quantize_act, then back to
// floats (e_b * q) from the activation row layout in matmul_q8.h.
std::vector<float> q8_rounded(const std::vector<float> &x, int64_t n_tokens, int64_t n_cols) {
    const sieve::cpu::q8::RowShape s = sieve::cpu::q8::row_shape(n_cols);
    std::vector<uint8_t> row(static_cast<size_t>(s.act_stride_bytes));
    std::vector<float> out(x.size());
    for (int64_t t = 0; t < n_tokens; ++t) {
        sieve::cpu::q8::quantize_act(x.data() + t * n_cols, s, row.data());
        for (int64_t c = 0; c < n_cols; ++c) {
            float e;
            std::memcpy(&e, row.data() + s.n_pad * 32 + c / 32 * 4, 4);
            out[static_cast<size_t>(t * n_cols + c)] = e * static_cast<float>(static_cast<int8_t>(row[c]));
        }
    }
    return out;
}

// The q8 path against matmul_ref on q8_rounded(x): what is left is f32
// rounding only, a much tighter check than the worst-case activation bound.
void expect_close_to_rounded(const sieve::cpu::WeightView &w, const std::vector<float> &x, int64_t n_tokens,
                             const std::vector<float> &y) {
    const std::vector<float> xr = q8_rounded(x, n_tokens, w.n_cols);
    std::vector<float> ref(y.size());
    sieve::cpu::matmul_ref(w, xr.data(), n_tokens, ref.data());
    expect_close(w, xr, n_tokens, y, ref, "matmul vs q8-rounded x", sieve::cpu::ActPrecision::f32);
}

}  // namespace

TEST(Matmul, MatchesReferenceForEveryTypeAndShape) {
    std::mt19937 rng(1234);
    ThreadPool pool(2);
    for (GgmlType type : k_all_types) {
        const int64_t bs = type_traits(type)->block_size;
        const int64_t blocks_per_row[] = {bs == 1 ? 97 : 1, bs == 256 ? 3 : (bs == 1 ? 576 : 9)};
        for (int64_t n_blocks : blocks_per_row) {
            const int64_t n_cols = n_blocks * bs;
            for (int64_t n_rows : {1, 3, 67, 130}) {
                const auto w = random_weights(rng, type, n_rows, n_cols);
                ASSERT_FALSE(w.bytes.empty());
                for (int64_t n_tokens : {1, 2, 3, 7, 33}) {
                    const auto x = random_values(rng, static_cast<size_t>(n_tokens * n_cols));
                    std::vector<float> y(static_cast<size_t>(n_tokens * n_rows), NAN), ref(y.size());
                    cpu::matmul(w.view, x.data(), n_tokens, y.data(), pool);
                    cpu::matmul_ref(w.view, x.data(), n_tokens, ref.data());
                    expect_close(w.view, x, n_tokens, y, ref, "matmul");
                }
            }
        }
    }
}

TEST(Matmul, ModelShapedQ4_1AndQ8_0) {
    // The default model's shapes: dim 576, ffn 1536; a prompt longer than a token tile.
    std::mt19937 rng(99);
    ThreadPool pool(2);
    for (GgmlType type : {GgmlType::Q4_1, GgmlType::Q8_0}) {
        for (auto [n_rows, n_cols] : {std::pair<int64_t, int64_t>{576, 576}, {1536, 576}, {576, 1536}}) {
            const auto w = random_weights(rng, type, n_rows, n_cols);
            for (int64_t n_tokens : {1, 65}) {
                const auto x = random_values(rng, static_cast<size_t>(n_tokens * n_cols));
                std::vector<float> y(static_cast<size_t>(n_tokens * n_rows), NAN), ref(y.size());
                cpu::matmul(w.view, x.data(), n_tokens, y.data(), pool);
                cpu::matmul_ref(w.view, x.data(), n_tokens, ref.data());
                expect_close(w.view, x, n_tokens, y, ref, "matmul");
            }
        }
    }
}

TEST(Matmul, SameBitsWithAnyThreadCount) {
    std::mt19937 rng(7);
    for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_0,
                          GgmlType::Q6_K}) {
        const int64_t n_rows = 131, n_cols = type_traits(type)->block_size == 256 ? 512 : 320, n_tokens = 67;
        const auto w = random_weights(rng, type, n_rows, n_cols);
        const auto x = random_values(rng, static_cast<size_t>(n_tokens * n_cols));
        std::vector<float> y1(static_cast<size_t>(n_tokens * n_rows));
        {
            ThreadPool pool(1);
            cpu::matmul(w.view, x.data(), n_tokens, y1.data(), pool);
        }
        for (int n_threads : {2, 3}) {
            ThreadPool pool(n_threads);
            std::vector<float> y(y1.size(), NAN);
            cpu::matmul(w.view, x.data(), n_tokens, y.data(), pool);
            ASSERT_EQ(0, std::memcmp(y.data(), y1.data(), y.size() * sizeof(float)))
                << type_name(type) << " with " << n_threads << " threads differs from 1 thread";
        }
    }
}

TEST(Matmul, RepeatedCallsWithShrinkingAndGrowingShapes) {
    // Scratch is reused across calls: a smaller call after a larger one (and
    // the reverse) must not see stale data.
    std::mt19937 rng(5);
    ThreadPool pool(2);
    for (int64_t n_cols : {1024, 64, 512, 32}) {
        const auto w = random_weights(rng, GgmlType::Q4_0, 19, n_cols);
        const auto x = random_values(rng, static_cast<size_t>(5 * n_cols));
        std::vector<float> y(5 * 19, NAN), ref(y.size());
        cpu::matmul(w.view, x.data(), 5, y.data(), pool);
        cpu::matmul_ref(w.view, x.data(), 5, ref.data());
        expect_close(w.view, x, 5, y, ref, "matmul");
    }
}

TEST(MatmulQ8, QuantizedActivationsMatchTheScalarDefinitionByteForByte) {
    // quantize_act's SIMD bodies (AVX-512, AVX2) against the definition in
    // matmul_q8.h, written out here: e = amax / 127, q = nearbyint(x / e)
    // (ties to even), sums of q per block and per half block. Odd lengths,
    // a zero block, and blocks whose x / e land exactly on halves.
    std::mt19937 rng(29);
    for (int64_t n_cols : {32, 64, 96, 608, 1536}) {
        const cpu::q8::RowShape s = cpu::q8::row_shape(n_cols);
        auto x = random_values(rng, static_cast<size_t>(n_cols));
        for (int64_t c = 0; c < 32; ++c)
            x[static_cast<size_t>(c)] = c == 3 ? 127.0f : static_cast<float>(c % 9) - 3.5f;
        if (n_cols >= 96)
            for (int64_t c = 32; c < 64; ++c) x[static_cast<size_t>(c)] = 0.0f;
        std::vector<uint8_t> got(static_cast<size_t>(s.act_stride_bytes), 0xAB);
        cpu::q8::quantize_act(x.data(), s, got.data());
        for (int64_t b = 0; b < s.n_pad; ++b) {
            float e = 0.0f;
            int32_t sum[2] = {0, 0};
            int8_t q[32] = {};
            if (b < s.n_blocks) {
                float amax = 0.0f;
                for (int j = 0; j < 32; ++j)
                    amax = std::max(amax, std::fabs(x[static_cast<size_t>(b * 32 + j)]));
                e = amax / 127.0f;
                const float inv = e > 0.0f ? 1.0f / e : 0.0f;
                for (int j = 0; j < 32; ++j) {
                    q[j] = static_cast<int8_t>(std::nearbyint(x[static_cast<size_t>(b * 32 + j)] * inv));
                    sum[j / 16] += q[j];
                }
            }
            EXPECT_EQ(0, std::memcmp(got.data() + b * 32, q, 32)) << "n_cols " << n_cols << " block " << b;
            float scale, aux, half[2];
            const uint8_t *f = got.data() + s.n_pad * 32;
            std::memcpy(&scale, f + 4 * b, 4);
            std::memcpy(&aux, f + 4 * (s.n_pad + b), 4);
            std::memcpy(half, f + 4 * (2 * s.n_pad + 2 * b), 8);
            EXPECT_EQ(scale, e) << "n_cols " << n_cols << " block " << b;
            EXPECT_EQ(aux, e * static_cast<float>(sum[0] + sum[1])) << "n_cols " << n_cols << " block " << b;
            EXPECT_EQ(half[0], e * static_cast<float>(sum[0])) << "n_cols " << n_cols << " block " << b;
            EXPECT_EQ(half[1], e * static_cast<float>(sum[1])) << "n_cols " << n_cols << " block " << b;
        }
    }
}

TEST(MatmulQ8, PortableDotAgreesWithDispatchedDot) {
    // On an AVX-512 VNNI machine dot() and dot_raw() run the VNNI bodies; the
    // portable body (what other CPUs run) is checked against them here.
    std::mt19937 rng(11);
    for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0}) {
        for (int64_t n_cols : {32, 96, 608}) {
            const cpu::q8::RowShape s = cpu::q8::row_shape(n_cols);
            const auto w = random_weights(rng, type, 1, n_cols);
            std::vector<uint8_t> wq(static_cast<size_t>(s.stride_bytes));
            std::vector<uint8_t> xq(static_cast<size_t>(4 * s.act_stride_bytes));
            cpu::q8::unpack_weight(type, w.bytes.data(), s, wq.data());
            const auto x = random_values(rng, static_cast<size_t>(4 * n_cols));
            const uint8_t *acts[4];
            for (int t = 0; t < 4; ++t) {
                cpu::q8::quantize_act(x.data() + t * n_cols, s, xq.data() + t * s.act_stride_bytes);
                acts[t] = xq.data() + t * s.act_stride_bytes;
            }
            std::vector<float> row(static_cast<size_t>(n_cols));
            dequantize_row(type, w.bytes.data(), row.data(), n_cols);
            for (int n_act = 1; n_act <= 4; ++n_act) {
                float a[4], b[4], c[4];
                cpu::q8::dot(type, wq.data(), acts, n_act, s, a);
                cpu::q8::dot_portable(type, wq.data(), acts, n_act, s, b);
                const bool raw = cpu::q8::has_dot_raw(type);
                if (raw) cpu::q8::dot_raw(type, w.bytes.data(), acts, n_act, s, c);
                for (int t = 0; t < n_act; ++t) {
                    double abs_sum = 0.0;  // both sums are exact int dots scaled in f32: rounding only
                    for (int64_t i = 0; i < n_cols; ++i) abs_sum += std::fabs(row[i] * x[t * n_cols + i]);
                    EXPECT_NEAR(a[t], b[t], 1e-5 * abs_sum) << type_name(type) << " n_cols " << n_cols;
                    if (raw) {
                        EXPECT_EQ(a[t], c[t]) << type_name(type) << " raw vs unpacked, n_cols " << n_cols;
                    }
                }
            }
        }
    }
}

TEST(Matmul, IntegerPathTypesAtEveryDecodeBatchAndPrefill) {
    // Q5_0 / Q5_1 / Q4_K / Q5_K / Q6_K: 1..16 tokens read the GGUF blocks in
    // place (AVX-512 VNNI builds), 17 and more unpack 16-row tiles; 64 and 65
    // tokens fill one token tile and spill one token into a second. Row
    // counts are not multiples of the 16-row tile; the 32-element types get an
    // odd number of blocks (the last pair is half padding).
    std::mt19937 rng(31);
    ThreadPool pool(2);
    for (GgmlType type : {GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
        const bool k = type_traits(type)->block_size == 256;
        const int64_t n_rows = 37, n_cols = k ? 768 : 608;
        const auto w = random_weights(rng, type, n_rows, n_cols);
        for (int64_t n_tokens = 1; n_tokens <= 17; ++n_tokens) {
            const auto x = random_values(rng, static_cast<size_t>(n_tokens * n_cols));
            std::vector<float> y(static_cast<size_t>(n_tokens * n_rows), NAN), ref(y.size());
            cpu::matmul(w.view, x.data(), n_tokens, y.data(), pool);
            cpu::matmul_ref(w.view, x.data(), n_tokens, ref.data());
            expect_close(w.view, x, n_tokens, y, ref, "matmul");
            expect_close_to_rounded(w.view, x, n_tokens, y);
        }
        // The default model's shapes (dim 576, ffn 1536); K-quants need
        // multiples of 256 columns, so they take the 1536-wide down projection.
        const std::pair<int64_t, int64_t> shapes_32[] = {{576, 576}, {1536, 576}, {576, 1536}};
        const std::pair<int64_t, int64_t> shapes_k[] = {{576, 1536}};
        for (auto [rows, cols] : k ? std::vector(std::begin(shapes_k), std::end(shapes_k))
                                   : std::vector(std::begin(shapes_32), std::end(shapes_32))) {
            const auto wm = random_weights(rng, type, rows, cols);
            for (int64_t n_tokens : {1, 8, 65}) {
                const auto x = random_values(rng, static_cast<size_t>(n_tokens * cols));
                std::vector<float> y(static_cast<size_t>(n_tokens * rows), NAN), ref(y.size());
                cpu::matmul(wm.view, x.data(), n_tokens, y.data(), pool);
                cpu::matmul_ref(wm.view, x.data(), n_tokens, ref.data());
                expect_close(wm.view, x, n_tokens, y, ref, "matmul");
                expect_close_to_rounded(wm.view, x, n_tokens, y);
            }
        }
    }
}

TEST(Matmul, ExactActivationsKeepTheFloatPath) {
    // ActPrecision::f32 must not quantize x: the tolerance here has no
    // activation-rounding term, which the q8 path (int8 x) would exceed.
    std::mt19937 rng(41);
    ThreadPool pool(2);
    for (GgmlType type : {GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
        const int64_t n_rows = 29, n_cols = 512;
        const auto w = random_weights(rng, type, n_rows, n_cols);
        for (int64_t n_tokens : {1, 5, 20}) {
            const auto x = random_values(rng, static_cast<size_t>(n_tokens * n_cols));
            std::vector<float> y(static_cast<size_t>(n_tokens * n_rows), NAN), ref(y.size());
            cpu::matmul(w.view, x.data(), n_tokens, y.data(), pool, cpu::ActPrecision::f32);
            cpu::matmul_ref(w.view, x.data(), n_tokens, ref.data());
            expect_close(w.view, x, n_tokens, y, ref, "matmul f32", cpu::ActPrecision::f32);
        }
    }
}

TEST(Matmul, MultiWithMixedTypesEqualsSeparateCalls) {
    // Q4_K_M files put Q5_0 / Q8_0 / Q6_K / Q4_K matrices side by side; one
    // shared activation quantization must give the bits of separate calls.
    std::mt19937 rng(43);
    ThreadPool pool(2);
    const GgmlType types[] = {GgmlType::Q5_0, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_K};
    const int64_t n_cols = 512, rows[] = {45, 19, 64, 33};
    std::vector<test::RandomWeights> ws;
    std::vector<cpu::WeightView> views;
    for (int m = 0; m < 4; ++m) ws.push_back(random_weights(rng, types[m], rows[m], n_cols));
    for (const auto &w : ws) views.push_back(w.view);
    for (int64_t n_tokens : {1, 3, 16, 17, 70}) {
        const auto x = random_values(rng, static_cast<size_t>(n_tokens * n_cols));
        std::vector<std::vector<float>> y(4), sep(4);
        float *yp[4];
        for (int m = 0; m < 4; ++m) {
            y[m].assign(static_cast<size_t>(n_tokens * rows[m]), NAN);
            sep[m].assign(y[m].size(), NAN);
            yp[m] = y[m].data();
            cpu::matmul(views[m], x.data(), n_tokens, sep[m].data(), pool);
        }
        cpu::matmul_multi(views.data(), yp, 4, x.data(), n_tokens, pool);
        for (int m = 0; m < 4; ++m)
            EXPECT_EQ(0, std::memcmp(y[m].data(), sep[m].data(), y[m].size() * sizeof(float)))
                << type_name(types[m]) << " in matmul_multi, " << n_tokens << " tokens";
    }
}

TEST(MatmulQ8, KQuantDotsAgreeWithPortableAndRaw) {
    // Q4_K / Q5_K / Q6_K through the q8 kernels: dispatched dot (VNNI where
    // available) vs the portable body, and in-place (raw) vs unpacked rows,
    // which must agree bit for bit (same kernel, same scale values). The
    // activations carry one large outlier per row so that e differs a lot
    // between blocks (a mixed-up block index would show).
    std::mt19937 rng(17);
    for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q5_0, GgmlType::Q5_1}) {
        for (int64_t n_cols : {256, 768, 1536}) {
            const cpu::q8::RowShape s = cpu::q8::row_shape(n_cols);
            const auto w = random_weights(rng, type, 1, n_cols);
            std::vector<uint8_t> wq(static_cast<size_t>(s.stride_bytes));
            std::vector<uint8_t> xq(static_cast<size_t>(4 * s.act_stride_bytes));
            cpu::q8::unpack_weight(type, w.bytes.data(), s, wq.data());
            auto x = random_values(rng, static_cast<size_t>(4 * n_cols));
            const uint8_t *acts[4];
            for (int t = 0; t < 4; ++t) {
                x[static_cast<size_t>(t * n_cols + (37 * t + 5) % n_cols)] = 60.0f - 30.0f * static_cast<float>(t);
                cpu::q8::quantize_act(x.data() + t * n_cols, s, xq.data() + t * s.act_stride_bytes);
                acts[t] = xq.data() + t * s.act_stride_bytes;
            }
            std::vector<float> row(static_cast<size_t>(n_cols));
            dequantize_row(type, w.bytes.data(), row.data(), n_cols);
            for (int n_act = 1; n_act <= 4; ++n_act) {
                float a[4], b[4], c[4];
                cpu::q8::dot(type, wq.data(), acts, n_act, s, a);
                cpu::q8::dot_portable(type, wq.data(), acts, n_act, s, b);
                const bool raw = cpu::q8::has_dot_raw(type);
                if (raw) cpu::q8::dot_raw(type, w.bytes.data(), acts, n_act, s, c);
                for (int t = 0; t < n_act; ++t) {
                    // And both near the exact dot: int8 x is off by at most
                    // e_b / 2 = amax_b / 254 per element (weights are exact).
                    double abs_sum = 0.0, ref = 0.0, q8_err = 0.0;
                    for (int64_t b0 = 0; b0 < n_cols; b0 += 32) {
                        double amax = 0.0, wsum = 0.0;
                        for (int64_t i = b0; i < b0 + 32; ++i) {
                            const double xi = x[static_cast<size_t>(t * n_cols + i)];
                            abs_sum += std::fabs(row[i] * xi);
                            ref += row[i] * xi;
                            amax = std::max(amax, std::fabs(xi));
                            wsum += std::fabs(row[i]);
                        }
                        q8_err += wsum * amax / 254.0;
                    }
                    EXPECT_NEAR(a[t], b[t], 1e-5 * abs_sum) << type_name(type) << " n_cols " << n_cols;
                    EXPECT_NEAR(a[t], ref, 1e-5 * abs_sum + 1.01 * q8_err) << type_name(type) << " n_cols " << n_cols;
                    if (raw) {
                        EXPECT_EQ(a[t], c[t]) << type_name(type) << " raw vs unpacked, n_cols " << n_cols;
                    }
                }
            }
        }
    }
}

TEST(MatmulQ8, PackedTileDotAgreesWithRowDot) {
    // The prefill tile (16 rows interleaved, rows in the SIMD lanes) against
    // the portable per-row dot on the same q8 activations: partial tiles
    // (1, 7, 16 rows; rows past n_rows must stay untouched), 1..8 tokens, one
    // outlier per activation row so block scales differ a lot, and widths
    // with one block, an odd block count and several K-quant super-blocks.
    if (!cpu::q8::has_tile()) GTEST_SKIP() << "packed tiles need an AVX-512 VNNI build";
    std::mt19937 rng(19);
    for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                          GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
        const bool k = type_traits(type)->block_size == 256;
        for (int64_t n_cols : k ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{32, 96, 608}) {
            const cpu::q8::RowShape s = cpu::q8::row_shape(n_cols);
            for (int n_rows : {1, 7, 16}) {
                const auto w = random_weights(rng, type, n_rows, n_cols);
                AlignedBuffer<uint8_t> scratch(static_cast<size_t>(cpu::q8::k_tile_rows * s.stride_bytes));
                AlignedBuffer<uint8_t> tile(static_cast<size_t>(cpu::q8::tile_bytes(type, s)));
                cpu::q8::pack_tile(type, w.bytes.data(), w.view.row_bytes, n_rows, s, scratch.data(), tile.data());
                auto x = random_values(rng, static_cast<size_t>(8 * n_cols));
                std::vector<uint8_t> xq(static_cast<size_t>(8 * s.act_stride_bytes));
                const uint8_t *acts[8];
                for (int t = 0; t < 8; ++t) {
                    x[static_cast<size_t>(t * n_cols + (53 * t + 11) % n_cols)] = 40.0f - 9.0f * static_cast<float>(t);
                    cpu::q8::quantize_act(x.data() + t * n_cols, s, xq.data() + t * s.act_stride_bytes);
                    acts[t] = xq.data() + t * s.act_stride_bytes;
                }
                std::vector<uint8_t> wq(static_cast<size_t>(s.stride_bytes));
                std::vector<float> row(static_cast<size_t>(n_cols));
                for (int n_act = 1; n_act <= 8; ++n_act) {
                    std::vector<float> out(static_cast<size_t>(8 * 16), NAN);
                    float *outs[8];
                    for (int t = 0; t < 8; ++t) outs[t] = out.data() + 16 * t;
                    cpu::q8::tile_dot(type, tile.data(), acts, n_act, s, outs, n_rows);
                    for (int r = 0; r < n_rows; ++r) {
                        cpu::q8::unpack_weight(type, w.bytes.data() + r * w.view.row_bytes, s, wq.data());
                        dequantize_row(type, w.bytes.data() + r * w.view.row_bytes, row.data(), n_cols);
                        for (int t0 = 0; t0 < n_act; t0 += 4) {
                            const int n = std::min(4, n_act - t0);
                            float want[4];
                            cpu::q8::dot_portable(type, wq.data(), acts + t0, n, s, want);
                            for (int t = t0; t < t0 + n; ++t) {
                                double abs_sum = 0.0;
                                for (int64_t i = 0; i < n_cols; ++i)
                                    abs_sum += std::fabs(row[i] * x[static_cast<size_t>(t * n_cols + i)]);
                                EXPECT_NEAR(out[static_cast<size_t>(16 * t + r)], want[t - t0], 1e-5 * abs_sum)
                                    << type_name(type) << " n_cols " << n_cols << " rows " << n_rows << " tokens "
                                    << n_act << " (t=" << t << ", r=" << r << ")";
                            }
                        }
                    }
                    for (int t = 0; t < 8; ++t)
                        for (int r = t < n_act ? n_rows : 0; r < 16; ++r)
                            EXPECT_TRUE(std::isnan(out[static_cast<size_t>(16 * t + r)]))
                                << type_name(type) << ": wrote past the tile at (t=" << t << ", r=" << r << ")";
                }
            }
        }
    }
}

TEST(MatmulQ8, RepackedX16MatchesTheTilePathBitForBit) {
    // Every integer-path type repacked at load (x16) must give exactly what
    // the packed tile kernel gives on the same rows, for 1..8 tokens and any
    // number of rows in the last tile; and through matmul the same bits for a
    // token whether it comes alone (decode), in a decode batch of 2..33, or in
    // a prefill batch, close to the reference on q8-rounded activations. Row
    // counts are not multiples of 16; the 32-element types get odd block
    // counts (the last pair half padding).
    if (!cpu::q8::has_tile()) GTEST_SKIP() << "the repacked layout needs an AVX-512 VNNI build";
    std::mt19937 rng(23);
    ThreadPool pool(2);
    const GgmlType types[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                              GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};
    for (GgmlType type : types) {
        const bool k = type_traits(type)->block_size == 256;
        const std::vector<std::pair<int64_t, int64_t>> shapes =
            k ? std::vector<std::pair<int64_t, int64_t>>{{16, 256}, {37, 768}, {48, 1536}}
              : std::vector<std::pair<int64_t, int64_t>>{{16, 64}, {37, 608}, {48, 576}, {21, 96}};
        EXPECT_FALSE(cpu::q8::x16_ok(type, 16, k ? 288 : 48));
        EXPECT_FALSE(cpu::q8::x16_ok(type, 0, 256));
        for (auto [n_rows, n_cols] : shapes) {
            ASSERT_TRUE(cpu::q8::x16_ok(type, n_rows, n_cols)) << type_name(type);
            const auto w = random_weights(rng, type, n_rows, n_cols);
            const cpu::q8::RowShape s = cpu::q8::row_shape(n_cols);
            const int64_t stride = cpu::q8::x16_tile_stride(type, n_cols);
            const int64_t n_tiles = (n_rows + 15) / 16;
            ASSERT_EQ(cpu::q8::x16_bytes(type, n_rows, n_cols), n_tiles * stride);
            AlignedBuffer<uint8_t> packed(static_cast<size_t>(n_tiles * stride));
            cpu::q8::repack_x16(type, w.bytes.data(), w.view.row_bytes, n_rows, n_cols, packed.data());
            auto x = random_values(rng, static_cast<size_t>(8 * n_cols));
            std::vector<uint8_t> xq(static_cast<size_t>(8 * s.act_stride_bytes));
            const uint8_t *acts[8];
            for (int t = 0; t < 8; ++t) {
                x[static_cast<size_t>(t * n_cols + (29 * t + 3) % n_cols)] = 25.0f + 7.0f * static_cast<float>(t);
                cpu::q8::quantize_act(x.data() + t * n_cols, s, xq.data() + t * s.act_stride_bytes);
                acts[t] = xq.data() + t * s.act_stride_bytes;
            }
            AlignedBuffer<uint8_t> scratch(static_cast<size_t>(16 * s.stride_bytes));
            AlignedBuffer<uint8_t> tile(static_cast<size_t>(cpu::q8::tile_bytes(type, s)));
            for (int64_t rt = 0; rt < n_tiles; ++rt) {
                const int n_r = static_cast<int>(std::min<int64_t>(16, n_rows - 16 * rt));
                cpu::q8::pack_tile(type, w.bytes.data() + rt * 16 * w.view.row_bytes, w.view.row_bytes, n_r, s,
                                   scratch.data(), tile.data());
                if (n_r == 16) {
                    // Prefill's expansion of the x16 tile is pack_tile's tile, byte for byte.
                    AlignedBuffer<uint8_t> unpacked(tile.size());
                    cpu::q8::x16_unpack_tile(type, packed.data() + rt * stride, s, unpacked.data());
                    size_t first = 0;
                    while (first < tile.size() && unpacked.data()[first] == tile.data()[first]) ++first;
                    ASSERT_EQ(first, tile.size()) << type_name(type) << " " << n_rows << "x" << n_cols << " tile " << rt
                                                  << ": the expansion differs from pack_tile at byte " << first;
                }
                for (int n_act = 1; n_act <= 8; ++n_act) {
                    std::vector<float> a(128, NAN), b(128, NAN);
                    float *pa[8], *pb[8];
                    for (int t = 0; t < 8; ++t) pa[t] = a.data() + 16 * t, pb[t] = b.data() + 16 * t;
                    cpu::q8::tile_dot(type, tile.data(), acts, n_act, s, pa, n_r);
                    cpu::q8::x16_dot(type, packed.data() + rt * stride, acts, n_act, s, pb, n_r);
                    for (int i = 0; i < 128; ++i) {
                        const bool written = i / 16 < n_act && i % 16 < n_r;
                        if (written)
                            ASSERT_EQ(a[static_cast<size_t>(i)], b[static_cast<size_t>(i)])
                                << type_name(type) << " " << n_rows << "x" << n_cols << " tile " << rt << " tokens "
                                << n_act << " at " << i;
                        else
                            ASSERT_TRUE(std::isnan(b[static_cast<size_t>(i)]))
                                << type_name(type) << ": x16_dot wrote past its rows/tokens at " << i;
                    }
                }
            }
            cpu::WeightView view = w.view;
            view.x16 = packed.data();
            const int64_t n_tok = 70;
            const auto xs = random_values(rng, static_cast<size_t>(n_tok * n_cols));
            std::vector<float> y(static_cast<size_t>(n_tok * n_rows), NAN), ref(y.size());
            cpu::matmul(view, xs.data(), n_tok, y.data(), pool);
            cpu::matmul_ref(w.view, xs.data(), n_tok, ref.data());
            expect_close(view, xs, n_tok, y, ref, "x16 matmul");
            expect_close_to_rounded(view, xs, n_tok, y);
            // Decode batches of every size 1..33 starting at varying tokens.
            for (int64_t nb = 1; nb <= 33; ++nb) {
                const int64_t t0 = (nb * 7) % (n_tok - nb + 1);
                std::vector<float> yb(static_cast<size_t>(nb * n_rows), NAN);
                cpu::matmul(view, xs.data() + t0 * n_cols, nb, yb.data(), pool);
                ASSERT_EQ(0, std::memcmp(yb.data(), y.data() + t0 * n_rows, yb.size() * sizeof(float)))
                    << type_name(type) << " " << n_rows << "x" << n_cols << ": tokens " << t0 << ".." << t0 + nb - 1
                    << " in a batch of " << nb << " vs in a batch of " << n_tok;
            }
        }
    }
}

