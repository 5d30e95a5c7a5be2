// The f32 path of matmul (kernels/cpu/matmul_float.cpp): F32 / F16 / BF16
// weights, K-quants without an integer path, and every type in exact mode,
// against the double-accumulating reference, on shapes that hit every edge of
// the tiling (row groups of 4, token groups, cache blocks of k, tails of k
// that are not a whole vector).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels_test_util.h"
#include "sieve/kernels/cpu/ops.h"

using namespace sieve;
using sieve::test::random_values;
using sieve::test::random_weights;

namespace {

// Allowed |y - y_ref|: f32 accumulation of at most ~1100 products in 16 (or
// 8) lanes, each lane a chain of at most ~70 FMAs plus a 16-way sum, rounds
// to well under 1e-5 * sum |w x| (worst case (70 + 4 + tail) * 2^-24 ~ 5e-6).
double tolerance(const cpu::WeightView &w, const float *row, const float *xt) {
    double abs_sum = 0.0;
    for (int64_t c = 0; c < w.n_cols; ++c) abs_sum += std::fabs(static_cast<double>(row[c]) * xt[c]);
    return 1e-5 * abs_sum + 1e-30;
}

void expect_matches_ref(const cpu::WeightView &w, const std::vector<float> &x, int64_t n_tokens,
                        const std::vector<float> &y) {
    std::vector<float> ref(y.size());
    cpu::matmul_ref(w, x.data(), n_tokens, ref.data());
    std::vector<float> row(static_cast<size_t>(w.n_cols));
    int n_bad = 0;
    for (int64_t r = 0; r < w.n_rows && n_bad < 5; ++r) {
        cpu::get_row(w, r, row.data());
        for (int64_t t = 0; t < n_tokens && n_bad < 5; ++t) {
            const size_t i = static_cast<size_t>(t * w.n_rows + r);
            const double tol = tolerance(w, row.data(), x.data() + t * w.n_cols);
            const double err = std::fabs(static_cast<double>(y[i]) - ref[i]);
            if (!(err <= tol)) {
                ++n_bad;
                ADD_FAILURE() << type_name(w.type) << " rows=" << w.n_rows << " cols=" << w.n_cols
                              << " tokens=" << n_tokens << " at (t=" << t << ", r=" << r << "): got " << y[i]
                              << ", want " << ref[i] << ", |err| " << err << " > tol " << tol;
            }
        }
    }
}

// Element-by-element types get lengths around the vector width, the cache
// block (512) and ragged tails; block types whole blocks.
std::vector<int64_t> col_counts(GgmlType type) {
    const int64_t bs = type_traits(type)->block_size;
    if (bs == 1) return {7, 16, 45, 512, 1037};
    return {bs, 3 * bs};
}

const int64_t k_token_counts[] = {1, 2, 3, 5, 17, 64, 130};

}  // namespace

TEST(MatmulFloat, MatchesReferenceOnOddShapes) {
    std::mt19937 rng(77);
    ThreadPool pool(2);
    for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q6_K, GgmlType::Q3_K}) {
        for (int64_t n_cols : col_counts(type)) {
            for (int64_t n_rows : {1, 6, 37}) {
                const auto w = random_weights(rng, type, n_rows, n_cols);
                ASSERT_EQ(w.view.n_rows, n_rows) << type_name(type);
                for (int64_t n_tokens : k_token_counts) {
                    const auto x = random_values(rng, static_cast<size_t>(n_tokens * n_cols));
                    std::vector<float> y(static_cast<size_t>(n_tokens * n_rows), std::nanf(""));
                    cpu::matmul(w.view, x.data(), n_tokens, y.data(), pool, cpu::ActPrecision::f32);
                    expect_matches_ref(w.view, x, n_tokens, y);
                }
            }
        }
    }
}

// Weights with large outliers (|w| up to ~1e4 against ~1) and activations
// spanning many magnitudes: cancellation must stay within the f32 bound.
TEST(MatmulFloat, OutliersStayWithinBound) {
    std::mt19937 rng(5);
    ThreadPool pool(2);
    const int64_t n_rows = 21, n_cols = 1056;
    for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
        std::vector<float> vals = random_values(rng, static_cast<size_t>(n_rows * n_cols));
        std::uniform_int_distribution<size_t> pick(0, vals.size() - 1);
        for (int i = 0; i < 40; ++i) vals[pick(rng)] *= 1000.0f;
        int64_t row_bytes = 0;
        ASSERT_TRUE(type_row_bytes(type, n_cols, &row_bytes));
        std::vector<uint8_t> bytes(static_cast<size_t>(row_bytes * n_rows));
        for (int64_t r = 0; r < n_rows; ++r)
            ASSERT_TRUE(quantize_row_ref(type, vals.data() + r * n_cols, bytes.data() + r * row_bytes, n_cols));
        const cpu::WeightView w{type, n_rows, n_cols, row_bytes, bytes.data()};
        for (int64_t n_tokens : {1, 9, 70}) {
            auto x = random_values(rng, static_cast<size_t>(n_tokens * n_cols));
            for (size_t i = 0; i < x.size(); i += 97) x[i] *= 3000.0f;
            std::vector<float> y(static_cast<size_t>(n_tokens * n_rows));
            cpu::matmul(w, x.data(), n_tokens, y.data(), pool);
            expect_matches_ref(w, x, n_tokens, y);
        }
    }
}

// Every output is computed by one task in a fixed order: 1, 2 and 3 threads
// give the same bits, and so does each token run alone (decode) vs inside a
// batch (prefill) — the two paths accumulate in the same lane order.
TEST(MatmulFloat, ThreadCountAndBatchInvariant) {
    std::mt19937 rng(9);
    ThreadPool p1(1), p2(2), p3(3);
    for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q6_K}) {
        const int64_t n_cols = type_traits(type)->block_size == 1 ? 1100 : 1024, n_rows = 70, n_tokens = 130;
        const auto w = random_weights(rng, type, n_rows, n_cols);
        const auto x = random_values(rng, static_cast<size_t>(n_tokens * n_cols));
        std::vector<float> y1(static_cast<size_t>(n_tokens * n_rows)), y2(y1.size()), y3(y1.size());
        cpu::matmul(w.view, x.data(), n_tokens, y1.data(), p1, cpu::ActPrecision::f32);
        cpu::matmul(w.view, x.data(), n_tokens, y2.data(), p2, cpu::ActPrecision::f32);
        cpu::matmul(w.view, x.data(), n_tokens, y3.data(), p3, cpu::ActPrecision::f32);
        EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float))) << type_name(type);
        EXPECT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(float))) << type_name(type);
        for (int64_t t : {int64_t{0}, int64_t{61}, n_tokens - 1}) {
            std::vector<float> one(static_cast<size_t>(n_rows));
            cpu::matmul(w.view, x.data() + t * n_cols, 1, one.data(), p2, cpu::ActPrecision::f32);
            EXPECT_EQ(0, std::memcmp(one.data(), y1.data() + t * n_rows, one.size() * sizeof(float)))
                << type_name(type) << " token " << t;
        }
        // A few tokens (batched decode) vs the same tokens in the big batch.
        std::vector<float> few(static_cast<size_t>(5 * n_rows));
        cpu::matmul(w.view, x.data() + 40 * n_cols, 5, few.data(), p3, cpu::ActPrecision::f32);
        EXPECT_EQ(0, std::memcmp(few.data(), y1.data() + 40 * n_rows, few.size() * sizeof(float))) << type_name(type);
    }
}
