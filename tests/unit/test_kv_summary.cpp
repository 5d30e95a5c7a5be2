// Page summaries (kv/page_summary.h): outward f16 rounding, and summaries
// kept by both stores through appends, compactions, rollbacks, clears and
// swaps equal to summaries computed from scratch over the lane's rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <vector>

#include "kernels_test_util.h"
#include "sieve/core/fp16.h"
#include "sieve/kv/contiguous_kv.h"
#include "sieve/kv/page_summary.h"
#include "sieve/kv/vattention_kv.h"

namespace sieve {
namespace {

TEST(PageSummary, RoundingOutwardBracketsEveryValue) {
    std::mt19937 rng(81);
    std::uniform_real_distribution<float> e(-30.0f, 17.0f);
    for (int i = 0; i < 20000; ++i) {
        const float x = (rng() % 2 ? 1.0f : -1.0f) * std::exp2(e(rng)) * (1.0f + static_cast<float>(rng() % 1000) / 1000.0f);
        const float lo = fp16_to_fp32(fp16_round_down(x)), hi = fp16_to_fp32(fp16_round_up(x));
        ASSERT_LE(lo, x) << x;
        ASSERT_GE(hi, x) << x;
        // Tight: the neighbours are adjacent f16 values (or x itself).
        const uint16_t rn = fp32_to_fp16(x);
        if (fp16_to_fp32(rn) == x) {
            ASSERT_EQ(lo, x);
            ASSERT_EQ(hi, x);
        } else if (std::isfinite(lo) && std::isfinite(hi)) {
            ASSERT_TRUE(fp16_to_fp32(rn) == lo || fp16_to_fp32(rn) == hi) << x;
        }
    }
    EXPECT_EQ(65504.0f, fp16_to_fp32(fp16_round_down(1e6f)));
    EXPECT_TRUE(std::isinf(fp16_to_fp32(fp16_round_up(1e6f))));
    EXPECT_EQ(-65504.0f, fp16_to_fp32(fp16_round_up(-1e6f)));
    EXPECT_LT(fp16_to_fp32(fp16_round_down(1e-9f)), 1e-9f);
    EXPECT_GT(fp16_to_fp32(fp16_round_up(1e-9f)), 1e-9f);
}

// Rows of `type` from f32 values.
std::vector<uint8_t> make_rows(std::mt19937 &rng, cpu::RowType t, int64_t n, int64_t d) {
    const std::vector<float> v = test::random_values(rng, static_cast<size_t>(n * d), 2.0f);
    return test::narrow_rows(t, v.data(), n, d);
}

TEST(PageSummary, GrowingRowByRowEqualsFromScratch) {
    std::mt19937 rng(82);
    for (cpu::RowType t : cpu::k_row_types) {
        const int64_t d = cpu::row_type_quantized(t) ? 64 : 24, n = 150;
        const std::vector<uint8_t> rows = make_rows(rng, t, n, d);
        LaneSummary s;
        int64_t at = 0;
        while (at < n) {
            at = std::min(n, at + 1 + static_cast<int64_t>(rng() % 23));
            const uint16_t *got = s.update(t, rows.data(), at, d);
            std::vector<uint16_t> want(static_cast<size_t>(summary_pages(at) * 2 * d));
            summarize_lane_ref(t, rows.data(), at, d, want.data());
            for (size_t i = 0; i < want.size(); ++i)
                ASSERT_EQ(fp16_to_fp32(want[i]), fp16_to_fp32(got[i]))
                    << cpu::row_type_name(t) << " rows " << at << " entry " << i;
        }
    }
}

// Both stores driven through the same random operations; after each, the
// summaries of random lanes equal summarize_lane_ref over the lane's rows.
class KvSummaryStores : public ::testing::TestWithParam<cpu::RowType> {};

TEST_P(KvSummaryStores, FollowAppendsCompactionsRollbacksAndSwaps) {
    const cpu::RowType t = GetParam();
    KvShape shape;
    shape.n_seq = 3;
    shape.n_layer = 2;
    shape.n_head_kv = 2;
    shape.head_dim = 32;
    shape.type = t;
    constexpr int64_t n_ctx = 700;
    auto c = ContiguousKv::create(shape, n_ctx);
    ASSERT_TRUE(c.ok()) << c.status().message();
    VAttentionKvOptions o;
    o.shape = shape;
    o.max_ctx = n_ctx;
    o.pool.page_bytes = 4096;
    o.pool.budget_bytes = int64_t{16} << 20;
    auto v = VAttentionKv::create(o);
    ASSERT_TRUE(v.ok()) << v.status().message();
    KvCache *stores[2] = {c.value().get(), v.value().get()};
    VAttentionKv &lanes = *v.value();

    std::mt19937 rng(83 + static_cast<int>(t));
    const int64_t rb = shape.k_row_bytes();
    const auto check = [&](const char *what, int step) {
        for (KvCache *kv : stores)
            for (int s = 0; s < shape.n_seq; ++s)
                for (int64_t l = 0; l < shape.n_layer; ++l)
                    for (int64_t h = 0; h < shape.n_head_kv; ++h) {
                        if (rng() % 3 == 0) continue;  // some lanes skip a check (catch up later)
                        const int64_t n = kv->n_rows(s, l, h);
                        const uint16_t *got = kv->k_summaries(s, l, h);
                        std::vector<uint16_t> want(static_cast<size_t>(summary_pages(n) * 2 * shape.head_dim));
                        summarize_lane_ref(t, kv->k_data(s, l, h), n, shape.head_dim, want.data());
                        for (size_t i = 0; i < want.size(); ++i)
                            ASSERT_EQ(fp16_to_fp32(want[i]), fp16_to_fp32(got[i]))
                                << what << " step " << step << " store " << (kv == stores[0] ? "contiguous" : "lanes")
                                << " slot " << s << " layer " << l << " head " << h << " rows " << n << " entry " << i;
                    }
    };
    for (int step = 0; step < 60; ++step) {
        const int s = static_cast<int>(rng() % 3);
        const uint32_t op = rng() % 10;
        if (op < 5) {  // append 1..40 rows (the same rows to both stores)
            const int64_t n0 = stores[0]->n_pos(s), n = std::min<int64_t>(n_ctx, n0 + 1 + rng() % 40);
            std::vector<std::vector<uint8_t>> rows;
            for (int64_t i = 0; i < shape.n_layer * shape.n_head_kv; ++i) rows.push_back(make_rows(rng, t, n - n0, shape.head_dim));
            for (KvCache *kv : stores) {
                ASSERT_TRUE(kv->reserve(s, n).ok());
                for (int64_t l = 0; l < shape.n_layer; ++l)
                    for (int64_t h = 0; h < shape.n_head_kv; ++h) {
                        const auto &r = rows[static_cast<size_t>(l * shape.n_head_kv + h)];
                        std::memcpy(static_cast<uint8_t *>(kv->k_data(s, l, h)) + kv->n_rows(s, l, h) * rb, r.data(),
                                    r.size());
                    }
                kv->set_n_pos(s, n);
            }
            check("append", step);
        } else if (op < 7) {  // compact one lane to a random subset
            const int64_t l = rng() % 2, h = rng() % 2, n = stores[0]->n_rows(s, l, h);
            std::vector<int32_t> keep;
            for (int64_t r = 0; r < n; ++r)
                if (rng() % 3 != 0 || r < 5) keep.push_back(static_cast<int32_t>(r));
            for (KvCache *kv : stores)
                ASSERT_TRUE(kv->compact(s, l, h, keep.data(), static_cast<int64_t>(keep.size())).ok());
            check("compact", step);
        } else if (op < 8) {  // roll back a few positions
            const int64_t n = std::max<int64_t>(0, stores[0]->n_pos(s) - 1 - static_cast<int64_t>(rng() % 20));
            for (KvCache *kv : stores) kv->set_n_pos(s, n);
            check("rollback", step);
        } else if (op < 9) {  // swap the lane store's slot out and back in
            KvSwapImage img;
            ASSERT_TRUE(lanes.swap_out(s, &img).ok());
            lanes.release(s);
            ASSERT_TRUE(lanes.swap_in(s, img).ok());
            check("swap", step);
        } else {  // clear
            for (KvCache *kv : stores) kv->clear(s);
            check("clear", step);
        }
    }
    EXPECT_GT(stores[1]->summary_bytes(), 0);
    for (int s = 0; s < shape.n_seq; ++s) stores[1]->clear(s);
    EXPECT_EQ(0, stores[1]->summary_bytes());
}

INSTANTIATE_TEST_SUITE_P(RowTypes, KvSummaryStores,
                         ::testing::ValuesIn(cpu::k_row_types),
                         [](const auto &p) { return std::string(cpu::row_type_name(p.param)); });

}  // namespace
}  // namespace sieve
