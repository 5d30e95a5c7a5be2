// Row-wise kernels (get_row, rmsnorm, rope, silu_mul) against direct double
// implementations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <vector>

#include "kernels_test_util.h"
#include "sieve/kernels/cpu/ops.h"

using namespace sieve;
using sieve::test::random_values;

TEST(GetRow, EqualsDequantizedRow) {
    std::mt19937 rng(1);
    for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::Q6_K}) {
        const int64_t n_cols = type_traits(type)->block_size == 256 ? 512 : 96 + 32 * (type == GgmlType::Q8_0);
        const auto w = sieve::test::random_weights(rng, type, 11, n_cols);
        std::vector<float> got(static_cast<size_t>(n_cols)), want(got.size());
        for (int64_t r : {0, 5, 10}) {
            cpu::get_row(w.view, r, got.data());
            dequantize_row(type, w.bytes.data() + r * w.view.row_bytes, want.data(), n_cols);
            for (int64_t c = 0; c < n_cols; ++c) ASSERT_EQ(got[c], want[c]) << type_name(type) << " row " << r << " col " << c;
        }
    }
}

TEST(RmsNorm, MatchesDoubleFormulaInPlaceAndOutOfPlace) {
    std::mt19937 rng(2);
    for (int64_t dim : {1, 7, 64, 576, 1001}) {
        const int64_t n_tokens = 5;
        const float eps = 1e-5f;
        const auto x = random_values(rng, static_cast<size_t>(n_tokens * dim), 3.0f);
        const auto weight = random_values(rng, static_cast<size_t>(dim));
        std::vector<float> y(x.size()), inplace = x;
        cpu::rmsnorm(x.data(), weight.data(), y.data(), n_tokens, dim, eps);
        cpu::rmsnorm(inplace.data(), weight.data(), inplace.data(), n_tokens, dim, eps);
        for (int64_t t = 0; t < n_tokens; ++t) {
            double ss = 0;
            for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[t * dim + i]) * x[t * dim + i];
            const double inv = 1.0 / std::sqrt(ss / dim + eps);
            for (int64_t i = 0; i < dim; ++i) {
                const double want = x[t * dim + i] * inv * weight[i];
                // two f32 multiplications: a few ulps
                EXPECT_NEAR(y[t * dim + i], want, 4e-7 * std::fabs(want) + 1e-30) << "dim " << dim;
                EXPECT_EQ(y[t * dim + i], inplace[t * dim + i]);
            }
        }
    }
}

TEST(Rope, MatchesDirectRotationBothOrders) {
    std::mt19937 rng(3);
    const int64_t n_tokens = 6, n_heads = 3;
    const int32_t pos[n_tokens] = {0, 1, 17, 255, 4096, 31999};
    for (int64_t head_dim : {4, 48, 64, 128})
        for (bool neox : {false, true}) {
            std::vector<float> inv_freq(static_cast<size_t>(head_dim / 2));
            for (int64_t i = 0; i < head_dim / 2; ++i)
                inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / head_dim));
            const auto x = random_values(rng, static_cast<size_t>(n_tokens * n_heads * head_dim));
            std::vector<float> y = x;
            cpu::rope(y.data(), pos, n_tokens, n_heads, head_dim, inv_freq.data(), neox);
            for (int64_t t = 0; t < n_tokens; ++t)
                for (int64_t h = 0; h < n_heads; ++h)
                    for (int64_t i = 0; i < head_dim / 2; ++i) {
                        const int64_t base = (t * n_heads + h) * head_dim;
                        const int64_t i0 = base + (neox ? i : 2 * i), i1 = base + (neox ? i + head_dim / 2 : 2 * i + 1);
                        const double th = static_cast<double>(pos[t]) * inv_freq[i];
                        const double a = x[i0], b = x[i1];
                        const double w0 = a * std::cos(th) - b * std::sin(th), w1 = a * std::sin(th) + b * std::cos(th);
                        // cos/sin rounded to f32 and two products: a few ulps of |a| + |b|
                        const double tol = 1e-6 * (std::fabs(a) + std::fabs(b));
                        ASSERT_NEAR(y[i0], w0, tol) << "neox " << neox << " d " << head_dim << " pos " << pos[t];
                        ASSERT_NEAR(y[i1], w1, tol) << "neox " << neox << " d " << head_dim << " pos " << pos[t];
                    }
        }
}

TEST(Rope, OrdersDifferAndPositionZeroIsIdentity) {
    std::mt19937 rng(4);
    const int64_t d = 8;
    const float inv_freq[4] = {1.0f, 0.1f, 0.01f, 0.001f};
    const auto x = random_values(rng, d);
    std::vector<float> a = x, b = x, z = x;
    const int32_t p3 = 3, p0 = 0;
    cpu::rope(a.data(), &p3, 1, 1, d, inv_freq, false);
    cpu::rope(b.data(), &p3, 1, 1, d, inv_freq, true);
    cpu::rope(z.data(), &p0, 1, 1, d, inv_freq, true);
    EXPECT_NE(a, b);
    EXPECT_EQ(z, x);
}

TEST(HadamardRotate, MatchesDenseMatrixProductAtOddAndPowerOfTwoSizes) {
    std::mt19937 rng(5);
    // Powers of two and sizes split into blocks (80 = 64 + 16, 96 = 64 + 32,
    // 6 = 4 + 2, 112 = 64 + 32 + 16).
    for (int64_t d : {2, 6, 16, 64, 80, 96, 112, 128, 256}) {
        const int64_t n = 7;
        const auto x = random_values(rng, static_cast<size_t>(n * d));
        std::vector<float> fast = x, ref = x;
        cpu::hadamard_rotate(fast.data(), n, d);
        cpu::hadamard_rotate_ref(ref.data(), n, d);
        double max_abs = 0;
        for (float v : x) max_abs = std::max(max_abs, static_cast<double>(std::fabs(v)));
        for (size_t i = 0; i < fast.size(); ++i)
            ASSERT_NEAR(fast[i], ref[i], 1e-6 * max_abs * std::sqrt(static_cast<double>(d)))
                << "d " << d << " i " << i;
        EXPECT_NE(fast, x) << "d " << d;
    }
}

TEST(HadamardRotate, KeepsDotProductsAndSpreadsAnOutlierChannel) {
    std::mt19937 rng(6);
    for (int64_t d : {64, 80, 128}) {
        auto q = random_values(rng, static_cast<size_t>(d));
        auto k = random_values(rng, static_cast<size_t>(d));
        k[3] = 40.0f;  // one channel far above the rest, as attention keys have
        double dot = 0, nk = 0;
        for (int64_t i = 0; i < d; ++i)
            dot += static_cast<double>(q[i]) * k[i], nk += static_cast<double>(k[i]) * k[i];
        cpu::hadamard_rotate(q.data(), 1, d);
        cpu::hadamard_rotate(k.data(), 1, d);
        double rdot = 0, rnk = 0, rmax = 0;
        for (int64_t i = 0; i < d; ++i) {
            rdot += static_cast<double>(q[i]) * k[i];
            rnk += static_cast<double>(k[i]) * k[i];
            rmax = std::max(rmax, static_cast<double>(std::fabs(k[i])));
        }
        EXPECT_NEAR(rdot, dot, 1e-5 * nk) << "d " << d;
        EXPECT_NEAR(rnk, nk, 1e-5 * nk) << "d " << d;
        // 40 spread over a block of 64 (or 16 at d = 80, where channel 3
        // falls in the first block of 64): each element at most a few units.
        EXPECT_LT(rmax, 12.0) << "d " << d;
    }
}

TEST(HadamardRotate, SignsAreFixedAndMixed) {
    int plus = 0;
    for (int64_t i = 0; i < 256; ++i) {
        const float s = cpu::hadamard_sign(i);
        ASSERT_TRUE(s == 1.0f || s == -1.0f);
        ASSERT_EQ(s, cpu::hadamard_sign(i));
        plus += s > 0;
    }
    EXPECT_GT(plus, 96);
    EXPECT_LT(plus, 160);
}

TEST(SiluMul, MatchesDouble) {
    std::mt19937 rng(5);
    const auto gate0 = random_values(rng, 1037, 4.0f);
    const auto up = random_values(rng, 1037);
    std::vector<float> gate = gate0;
    cpu::silu_mul(gate.data(), up.data(), static_cast<int64_t>(gate.size()));
    for (size_t i = 0; i < gate.size(); ++i) {
        const double g = gate0[i];
        const double want = g / (1.0 + std::exp(-g)) * up[i];
        EXPECT_NEAR(gate[i], want, 1e-6 * std::fabs(want) + 1e-30) << "gate " << g;
    }
}

TEST(SiluMul, LargeMagnitudesAndAnySplit) {
    // Saturated gates (sigmoid ~ 0 or 1, exp deep in the subnormal range)
    // and the same element computed in a different position of the range:
    // the forward pass splits rows across threads, so an element must not
    // depend on whether it lands in a vector body or a tail.
    std::mt19937 rng(6);
    std::vector<float> gate0 = random_values(rng, 203, 1.0f);
    const float big[] = {-120.0f, -95.5f, -60.25f, -30.0f, -17.0f, 17.0f, 30.0f, 60.25f, 95.5f, 120.0f};
    for (size_t i = 0; i < std::size(big); ++i) gate0[7 + 19 * i] = big[i];
    const auto up = random_values(rng, gate0.size());
    std::vector<float> whole = gate0;
    cpu::silu_mul(whole.data(), up.data(), static_cast<int64_t>(whole.size()));
    for (size_t i = 0; i < gate0.size(); ++i) {
        const double g = gate0[i];
        const double want = g / (1.0 + std::exp(-g)) * up[i];
        EXPECT_NEAR(whole[i], want, 1e-6 * std::fabs(want) + 1e-37) << "gate " << g;
    }
    for (int64_t cut : {1, 5, 16, 17, 100}) {
        std::vector<float> split = gate0;
        cpu::silu_mul(split.data(), up.data(), cut);
        cpu::silu_mul(split.data() + cut, up.data() + cut, static_cast<int64_t>(split.size()) - cut);
        EXPECT_EQ(0, std::memcmp(split.data(), whole.data(), whole.size() * sizeof(float))) << "cut at " << cut;
    }
}
