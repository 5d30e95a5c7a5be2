// Lanes of different lengths through the whole forward pass (stories260K).
// A test-only keep list (random rows of random lanes of random layers) is
// applied after a random prefill chunk, identically to a ContiguousKv (the
// memmove oracle) and to a VAttentionKv (pages unmapped at once); the chunks
// and decode steps that follow must give bitwise the same logits over both,
// and keeping every row must give the bits of never compacting. Between
// steps every row past a lane's length is poisoned with NaN, so a kernel or
// a write that looks past n_rows shows up as non-finite logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "sieve/gguf/gguf.h"
#include "sieve/kv/contiguous_kv.h"
#include "sieve/kv/vattention_kv.h"
#include "sieve/model/model.h"

namespace sieve {
namespace {

constexpr int k_n_seq = 3;
constexpr int64_t k_n_ctx = 600;

class KvUneven : public ::testing::Test {
protected:
    void SetUp() override {
        const std::string path = std::string(SIEVE_TEST_MODELS) + "/stories260K.gguf";
        auto f = GgufFile::open(path);
        ASSERT_TRUE(f.ok()) << f.status().message();
        file_ = std::move(f.value());
        auto m = Model::load(*file_);
        ASSERT_TRUE(m.ok()) << m.status().message();
        model_ = std::move(m.value());
        make_stores(cpu::RowType::f32);
        ws_ = model_->make_workspace(320);
    }

    void make_stores(cpu::RowType type) {
        shape_ = model_->kv_shape(k_n_seq, type);
        auto c = ContiguousKv::create(shape_, k_n_ctx, true);
        ASSERT_TRUE(c.ok()) << c.status().message();
        contig_ = std::move(c.value());
        VAttentionKvOptions o;
        o.shape = shape_;
        o.max_ctx = k_n_ctx;
        o.pool.page_bytes = 4096;  // 128 rows of 8 floats: compaction frees whole pages
        o.pool.budget_bytes = int64_t{64} << 20;
        o.with_positions = true;
        auto v = VAttentionKv::create(o);
        ASSERT_TRUE(v.ok()) << v.status().message();
        lanes_ = std::move(v.value());
    }

    // NaN (of the store's row type) in rows [r0, r1) of a lane.
    void fill_nan(void *lane, int64_t r0, int64_t r1) {
        const int64_t d = shape_.head_dim;
        if (shape_.type == cpu::RowType::f32) {
            std::fill(static_cast<float *>(lane) + r0 * d, static_cast<float *>(lane) + r1 * d, NAN);
        } else {
            const uint16_t nan16 = shape_.type == cpu::RowType::f16 ? 0x7e00 : 0x7fc0;
            std::fill(static_cast<uint16_t *>(lane) + r0 * d, static_cast<uint16_t *>(lane) + r1 * d, nan16);
        }
    }

    // NaN in every row past each lane's length that the store has memory for.
    void poison() {
        for (int s = 0; s < k_n_seq; ++s)
            for (int64_t il = 0; il < shape_.n_layer; ++il)
                for (int64_t h = 0; h < shape_.n_head_kv; ++h) {
                    const int64_t r0 = contig_->n_rows(s, il, h);
                    fill_nan(contig_->k_data(s, il, h), r0, k_n_ctx);
                    fill_nan(contig_->v_data(s, il, h), r0, k_n_ctx);
                    const int64_t r1 = lanes_->n_rows(s, il, h), cap = lanes_->lane_capacity(s, il, h);
                    fill_nan(lanes_->k_data(s, il, h), r1, cap);
                    fill_nan(lanes_->v_data(s, il, h), r1, cap);
                }
    }

    // One forward step over `stores` with n new random tokens for each listed
    // slot; the logits of every store must be finite and bitwise equal.
    void step(std::vector<KvCache *> stores, const std::vector<std::pair<int, int>> &parts, std::mt19937 &rng) {
        std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(model_->config().n_vocab - 1));
        std::vector<int32_t> tokens, pos, seq;
        for (auto [s, n] : parts)
            for (int i = 0; i < n; ++i) {
                tokens.push_back(tok(rng));
                pos.push_back(static_cast<int32_t>(stores[0]->n_pos(s) + i));
                seq.push_back(s);
            }
        Batch b{tokens.data(), pos.data(), seq.data(), static_cast<int64_t>(tokens.size()), nullptr};
        std::vector<float> first;
        for (size_t k = 0; k < stores.size(); ++k) {
            Status st = model_->forward(b, *stores[k], *ws_, pool_);
            ASSERT_TRUE(st.ok()) << "store " << k << ": " << st.message();
            const float *l = ws_->logits();
            const size_t n = static_cast<size_t>(ws_->n_outputs() * model_->config().n_vocab);
            for (size_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(l[i])) << "store " << k << " logit " << i;
            if (k == 0)
                first.assign(l, l + n);
            else
                ASSERT_EQ(0, std::memcmp(first.data(), l, n * sizeof(float))) << "store " << k << " differs";
        }
        ASSERT_TRUE(lanes_->check_accounting().ok()) << lanes_->check_accounting().message();
    }

    void random_keep_lists(uint32_t seed);

    std::unique_ptr<GgufFile> file_;
    std::unique_ptr<Model> model_;
    KvShape shape_;
    std::unique_ptr<ContiguousKv> contig_;
    std::unique_ptr<VAttentionKv> lanes_;
    std::unique_ptr<Workspace> ws_;
    ThreadPool pool_{2};
};

void KvUneven::random_keep_lists(uint32_t seed) {
    std::mt19937 rng(seed);
    // Shadow of the positions each lane should hold (K/V rows follow them).
    const size_t n_lanes = static_cast<size_t>(k_n_seq * shape_.n_layer * shape_.n_head_kv);
    std::vector<std::vector<int32_t>> expect(n_lanes);
    const auto lane_of = [&](int s, int64_t il, int64_t h) {
        return static_cast<size_t>((s * shape_.n_layer + il) * shape_.n_head_kv + h);
    };
    const auto grow_shadow = [&](int s, int n) {
        for (int64_t il = 0; il < shape_.n_layer; ++il)
            for (int64_t h = 0; h < shape_.n_head_kv; ++h)
                for (int i = 0; i < n; ++i)
                    expect[lane_of(s, il, h)].push_back(static_cast<int32_t>(contig_->n_pos(s) + i));
    };
    const auto run = [&](const std::vector<std::pair<int, int>> &parts) {
        for (auto [s, n] : parts) grow_shadow(s, n);
        poison();
        step({contig_.get(), lanes_.get()}, parts, rng);
    };
    // Random lanes of random layers keep a random sorted subset.
    const auto compact_some = [&](int s) {
        const int64_t free0 = lanes_->pool().n_free();
        int64_t dropped_rows = 0;
        for (int64_t il = 0; il < shape_.n_layer; ++il) {
            if (rng() % 3 == 0) continue;
            std::vector<std::vector<int32_t>> keep(static_cast<size_t>(shape_.n_head_kv));
            std::vector<const int32_t *> ptrs;
            std::vector<int64_t> n_keep;
            for (int64_t h = 0; h < shape_.n_head_kv; ++h) {
                const int64_t rows = contig_->n_rows(s, il, h);
                const uint32_t keep_pct = rng() % 4 == 0 ? 100 : rng() % 100;
                std::vector<int32_t> &k = keep[static_cast<size_t>(h)];
                std::vector<int32_t> &sh = expect[lane_of(s, il, h)];
                std::vector<int32_t> kept_pos;
                for (int64_t r = 0; r < rows; ++r) {
                    if (rng() % 100 < keep_pct) {
                        k.push_back(static_cast<int32_t>(r));
                        kept_pos.push_back(sh[static_cast<size_t>(r)]);
                    }
                }
                dropped_rows += rows - static_cast<int64_t>(k.size());
                sh = kept_pos;
                ptrs.push_back(k.data());
                n_keep.push_back(static_cast<int64_t>(k.size()));
            }
            ASSERT_TRUE(contig_->compact_layer(s, il, ptrs.data(), n_keep.data()).ok());
            ASSERT_TRUE(lanes_->compact_layer(s, il, ptrs.data(), n_keep.data()).ok());
        }
        ASSERT_TRUE(lanes_->check_accounting().ok()) << lanes_->check_accounting().message();
        // What was dropped went back to the pool at once (the pool sees it).
        if (dropped_rows > 4 * 128) {
            EXPECT_GT(lanes_->pool().n_free(), free0);
        }
    };
    const auto check_positions = [&] {
        for (int s = 0; s < k_n_seq; ++s)
            for (int64_t il = 0; il < shape_.n_layer; ++il)
                for (int64_t h = 0; h < shape_.n_head_kv; ++h) {
                    const std::vector<int32_t> &sh = expect[lane_of(s, il, h)];
                    ASSERT_EQ(contig_->n_rows(s, il, h), static_cast<int64_t>(sh.size()));
                    ASSERT_EQ(lanes_->n_rows(s, il, h), static_cast<int64_t>(sh.size()));
                    for (size_t r = 0; r < sh.size(); ++r) {
                        ASSERT_EQ(contig_->positions(s, il, h)[r], sh[r]) << "slot " << s << " layer " << il;
                        ASSERT_EQ(lanes_->positions(s, il, h)[r], sh[r]) << "slot " << s << " layer " << il;
                    }
                }
    };

    ASSERT_NO_FATAL_FAILURE(run({{0, 170}, {1, 40}}));
    ASSERT_NO_FATAL_FAILURE(compact_some(0));
    ASSERT_NO_FATAL_FAILURE(run({{0, 60}, {1, 90}, {2, 130}}));  // a chunk after compaction
    ASSERT_NO_FATAL_FAILURE(compact_some(1));
    ASSERT_NO_FATAL_FAILURE(compact_some(2));
    for (int i = 0; i < 12; ++i) ASSERT_NO_FATAL_FAILURE(run({{0, 1}, {1, 1}, {2, 1}}));
    ASSERT_NO_FATAL_FAILURE(compact_some(0));  // compact again after decoding
    ASSERT_NO_FATAL_FAILURE(run({{0, 5}, {2, 1}}));
    for (int i = 0; i < 8; ++i) ASSERT_NO_FATAL_FAILURE(run({{0, 1}, {1, 1}, {2, 1}}));
    ASSERT_NO_FATAL_FAILURE(check_positions());
    // A slot cleared and reused starts dense again.
    contig_->clear(1);
    lanes_->clear(1);
    for (int64_t il = 0; il < shape_.n_layer; ++il)
        for (int64_t h = 0; h < shape_.n_head_kv; ++h) expect[lane_of(1, il, h)].clear();
    ASSERT_NO_FATAL_FAILURE(run({{1, 33}, {0, 1}}));
    ASSERT_NO_FATAL_FAILURE(check_positions());
}

TEST_F(KvUneven, RandomKeepListsGiveTheSameLogitsOnBothStores) { ASSERT_NO_FATAL_FAILURE(random_keep_lists(91)); }

TEST_F(KvUneven, RandomKeepListsOnHalfRows) {
    // The same with f16 rows (the default KV type): rows move as 2-byte
    // elements, pages hold twice the rows.
    make_stores(cpu::RowType::f16);
    ASSERT_NO_FATAL_FAILURE(random_keep_lists(95));
}

TEST_F(KvUneven, KeepingEveryRowEqualsNeverCompacting) {
    // Two lane stores, one compacted with identity lists at the same points,
    // one never: bitwise equal logits, and the same pages in use.
    VAttentionKvOptions o;
    o.shape = shape_;
    o.max_ctx = k_n_ctx;
    o.pool.page_bytes = 4096;
    o.pool.budget_bytes = int64_t{64} << 20;
    auto other = VAttentionKv::create(o);
    ASSERT_TRUE(other.ok());
    std::mt19937 rng(92);
    const auto keep_all = [&](KvCache &kv, int s) {
        for (int64_t il = 0; il < shape_.n_layer; ++il) {
            std::vector<std::vector<int32_t>> keep(static_cast<size_t>(shape_.n_head_kv));
            std::vector<const int32_t *> ptrs;
            std::vector<int64_t> n_keep;
            for (int64_t h = 0; h < shape_.n_head_kv; ++h) {
                for (int64_t r = 0; r < kv.n_rows(s, il, h); ++r) keep[static_cast<size_t>(h)].push_back(static_cast<int32_t>(r));
                ptrs.push_back(keep[static_cast<size_t>(h)].data());
                n_keep.push_back(kv.n_rows(s, il, h));
            }
            ASSERT_TRUE(kv.compact_layer(s, il, ptrs.data(), n_keep.data()).ok());
        }
    };
    std::vector<KvCache *> stores = {other->get(), lanes_.get(), contig_.get()};
    ASSERT_NO_FATAL_FAILURE(step(stores, {{0, 100}, {1, 37}}, rng));
    keep_all(*lanes_, 0);
    keep_all(*contig_, 1);
    ASSERT_NO_FATAL_FAILURE(step(stores, {{0, 50}, {1, 1}}, rng));
    for (int i = 0; i < 6; ++i) {
        keep_all(*lanes_, i % 2);
        ASSERT_NO_FATAL_FAILURE(step(stores, {{0, 1}, {1, 1}}, rng));
    }
    // Compaction unmaps map-ahead headroom past the last kept row, nothing more.
    EXPECT_LE(lanes_->pool().n_used(), (*other)->pool().n_used());
}

TEST_F(KvUneven, BadKeepListsChangeNothing) {
    std::mt19937 rng(93);
    ASSERT_NO_FATAL_FAILURE(step({contig_.get(), lanes_.get()}, {{0, 20}}, rng));
    const int32_t unsorted[] = {3, 2}, past_end[] = {0, 20}, negative[] = {-1};
    for (KvCache *kv : {static_cast<KvCache *>(contig_.get()), static_cast<KvCache *>(lanes_.get())}) {
        EXPECT_FALSE(kv->compact(0, 1, 0, unsorted, 2).ok());
        EXPECT_FALSE(kv->compact(0, 1, 0, past_end, 2).ok());
        EXPECT_FALSE(kv->compact(0, 1, 0, negative, 1).ok());
        EXPECT_FALSE(kv->compact(0, 1, 0, unsorted, 21).ok());
        // One bad list in a layer call: no head of the layer moves.
        const int32_t good[] = {0, 5};
        const int32_t *lists[] = {good, unsorted, good, good};
        const int64_t n_keep[] = {2, 2, 2, 2};
        Status st = kv->compact_layer(0, 2, lists, n_keep);
        EXPECT_FALSE(st.ok());
        EXPECT_NE(st.message().find("kv head 1"), std::string::npos) << st.message();
        for (int64_t h = 0; h < shape_.n_head_kv; ++h) EXPECT_EQ(kv->n_rows(0, 2, h), 20);
    }
    ASSERT_NO_FATAL_FAILURE(step({contig_.get(), lanes_.get()}, {{0, 1}}, rng));
}

TEST_F(KvUneven, CappedLanesNeverGrowPastTheirCap) {
    // A budgeted lane (a policy keeps at most N rows) carries a cap: map-ahead
    // never maps pages for rows past it, and a reservation past it is an
    // error naming the lane, with nothing mapped.
    std::mt19937 rng(94);
    ASSERT_NO_FATAL_FAILURE(step({lanes_.get()}, {{0, 100}}, rng));
    for (int64_t il = 0; il < shape_.n_layer; ++il)
        for (int64_t h = 0; h < shape_.n_head_kv; ++h) {
            std::vector<int32_t> keep;
            for (int32_t r = 0; r < 100; r += 10) keep.push_back(r);
            ASSERT_TRUE(lanes_->compact(0, il, h, keep.data(), static_cast<int64_t>(keep.size())).ok());
            lanes_->set_lane_cap(0, il, h, 12);
        }
    ASSERT_TRUE(lanes_->map_ahead(0).ok());
    // 12 rows of 32 bytes fit in one 4 KiB page: one page per K and V lane.
    EXPECT_EQ(lanes_->seq_mapped_pages(0), shape_.n_layer * shape_.n_head_kv * 2);
    ASSERT_NO_FATAL_FAILURE(step({lanes_.get()}, {{0, 2}}, rng));
    const int64_t used = lanes_->pool().n_used();
    Status st = lanes_->reserve(0, lanes_->n_pos(0) + 1);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("row cap"), std::string::npos) << st.message();
    EXPECT_EQ(lanes_->pool().n_used(), used);
    EXPECT_EQ(lanes_->pages_to_reserve(0, lanes_->n_pos(0)), 0);
    ASSERT_TRUE(lanes_->check_accounting().ok()) << lanes_->check_accounting().message();
}

}  // namespace
}  // namespace sieve
