// The paged baseline: block-table store bookkeeping, and the paged decode
// kernel against its scalar reference and against contiguous decode on the
// same K/V.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels_test_util.h"
#include "sieve/kernels/cpu/attention_paged.h"
#include "sieve/kernels/cpu/ops.h"
#include "sieve/kv/paged_kv.h"

namespace sieve {
namespace {

struct PagedCase {
    int64_t n_head, n_head_kv, head_dim, n_kv, block_size;
};

// Fills a PagedKv slot (one layer) with random K/V and returns the same rows
// as contiguous lanes [n_head_kv][n_kv * head_dim].
void fill(PagedKv &kv, int seq, const PagedCase &c, std::mt19937 &rng, std::vector<std::vector<float>> &k_lanes,
          std::vector<std::vector<float>> &v_lanes) {
    ASSERT_TRUE(kv.reserve(seq, c.n_kv).ok());
    k_lanes.assign(static_cast<size_t>(c.n_head_kv), {});
    v_lanes.assign(static_cast<size_t>(c.n_head_kv), {});
    for (int64_t g = 0; g < c.n_head_kv; ++g) {
        k_lanes[static_cast<size_t>(g)] = test::random_values(rng, static_cast<size_t>(c.n_kv * c.head_dim));
        v_lanes[static_cast<size_t>(g)] = test::random_values(rng, static_cast<size_t>(c.n_kv * c.head_dim));
        for (int64_t t = 0; t < c.n_kv; ++t) {
            std::copy_n(k_lanes[static_cast<size_t>(g)].data() + t * c.head_dim, c.head_dim, kv.k_row(seq, 0, g, t));
            std::copy_n(v_lanes[static_cast<size_t>(g)].data() + t * c.head_dim, c.head_dim, kv.v_row(seq, 0, g, t));
        }
    }
    kv.set_n_pos(seq, c.n_kv);
}

TEST(KvPaged, DecodeMatchesReferenceAndContiguous) {
    const PagedCase cases[] = {{9, 3, 64, 1, 16},    {9, 3, 64, 1000, 16}, {32, 8, 64, 333, 64},
                               {4, 4, 12, 257, 256}, {6, 2, 20, 4099, 32}, {8, 1, 8, 70, 128}};
    std::mt19937 rng(3);
    for (int n_threads : {1, 3}) {
        ThreadPool pool(n_threads);
        for (const PagedCase &c : cases) {
            PagedKvOptions o;
            o.shape = KvShape{3, 1, c.n_head_kv, c.head_dim};
            o.block_size = c.block_size;
            o.max_ctx = 5000;
            o.budget_bytes = 3 * ((5000 + c.block_size - 1) / c.block_size + 1) * 2 * c.n_head_kv * c.block_size *
                             c.head_dim * 4;
            auto kr = PagedKv::create(o);
            ASSERT_TRUE(kr.ok()) << kr.status().message();
            PagedKv &kv = **kr;
            // A decoy sequence first, so slot 1's blocks are not in order.
            ASSERT_TRUE(kv.reserve(0, 3 * c.block_size + 1).ok());
            std::vector<std::vector<float>> kl, vl;
            ASSERT_NO_FATAL_FAILURE(fill(kv, 1, c, rng, kl, vl));
            kv.clear(0);
            const std::vector<float> q = test::random_values(rng, static_cast<size_t>(c.n_head * c.head_dim));
            std::vector<float> o_paged(q.size()), o_ref(q.size()), o_contig(q.size()), lse(c.n_head),
                lse_ref(c.n_head), lse_contig(c.n_head);
            cpu::PagedAttnArgs pa;
            pa.q = q.data();
            pa.k_blocks = kv.k_blocks(0);
            pa.v_blocks = kv.v_blocks(0);
            pa.block_table = kv.block_table(1);
            pa.o = o_paged.data();
            pa.lse = lse.data();
            pa.n_kv = c.n_kv;
            pa.block_size = c.block_size;
            pa.n_head = c.n_head;
            pa.n_head_kv = c.n_head_kv;
            pa.head_dim = c.head_dim;
            pa.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
            cpu::attention_decode_paged(pa, pool);
            cpu::PagedAttnArgs pr = pa;
            pr.o = o_ref.data();
            pr.lse = lse_ref.data();
            cpu::attention_decode_paged_ref(pr);
            std::vector<const void *> kp, vp;
            for (int64_t g = 0; g < c.n_head_kv; ++g) {
                kp.push_back(kl[static_cast<size_t>(g)].data());
                vp.push_back(vl[static_cast<size_t>(g)].data());
            }
            cpu::AttnArgs ca;
            ca.q = q.data();
            ca.k = kp.data();
            ca.v = vp.data();
            ca.o = o_contig.data();
            ca.lse = lse_contig.data();
            ca.n_q = 1;
            ca.n_past = c.n_kv - 1;
            ca.n_head = c.n_head;
            ca.n_head_kv = c.n_head_kv;
            ca.head_dim = c.head_dim;
            ca.scale = pa.scale;
            cpu::attention_decode(ca, pool);
            for (size_t i = 0; i < q.size(); ++i) {
                ASSERT_NEAR(o_paged[i], o_ref[i], 2e-4f * (1.0f + std::fabs(o_ref[i])))
                    << "n_kv " << c.n_kv << " block " << c.block_size << " i " << i;
                ASSERT_NEAR(o_paged[i], o_contig[i], 2e-4f * (1.0f + std::fabs(o_ref[i])));
            }
            for (int64_t h = 0; h < c.n_head; ++h) {
                ASSERT_NEAR(lse[static_cast<size_t>(h)], lse_ref[static_cast<size_t>(h)], 1e-3f);
                ASSERT_NEAR(lse[static_cast<size_t>(h)], lse_contig[static_cast<size_t>(h)], 1e-3f);
            }
        }
    }
}

TEST(KvPaged, BlocksComeBackAndExhaustionIsAStatus) {
    PagedKvOptions o;
    o.shape = KvShape{4, 2, 2, 8};
    o.block_size = 16;
    o.max_ctx = 1000;
    o.budget_bytes = 10 * (2 * 2 * 2 * 16 * 8 * 4);  // 10 blocks
    auto kr = PagedKv::create(o);
    ASSERT_TRUE(kr.ok());
    PagedKv &kv = **kr;
    EXPECT_EQ(kv.n_blocks(), 10);
    ASSERT_TRUE(kv.reserve(0, 100).ok());  // 7 blocks
    EXPECT_EQ(kv.capacity(0), 112);
    Status st = kv.reserve(1, 60);         // needs 4, 3 left
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("exhausted"), std::string::npos) << st.message();
    EXPECT_EQ(kv.n_free_blocks(), 3);
    EXPECT_FALSE(kv.reserve(1, 1001).ok());
    kv.clear(0);
    EXPECT_EQ(kv.n_free_blocks(), 10);
    o.block_size = 8;
    EXPECT_FALSE(PagedKv::create(o).ok());
}

}  // namespace
}  // namespace sieve
