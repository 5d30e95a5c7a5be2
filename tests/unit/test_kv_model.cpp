// The real forward pass over the vAttention lane store gives bitwise the same
// logits as over ContiguousKv (stories260K): same rows, same kernels, only the
// memory under the lanes differs. The lane store runs with 4 KiB pages, maps
// ahead after every step, and has a pool small enough that a new sequence
// reclaims pages cached by a cleared slot.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "sieve/gguf/gguf.h"
#include "sieve/kv/contiguous_kv.h"
#include "sieve/kv/vattention_kv.h"
#include "sieve/model/model.h"

namespace sieve {
namespace {

TEST(KvModel, VAttentionLogitsEqualContiguous) {
    const std::string path = std::string(SIEVE_TEST_MODELS) + "/stories260K.gguf";
    auto file = GgufFile::open(path);
    ASSERT_TRUE(file.ok()) << file.status().message() << " (tests need " << path << ")";
    auto model = Model::load(**file);
    ASSERT_TRUE(model.ok()) << model.status().message();
    const Model &m = **model;
    const int n_seq = 3;
    const int64_t n_ctx = 512;
    const KvShape shape = m.kv_shape(n_seq);

    auto contig = ContiguousKv::create(shape, n_ctx);
    ASSERT_TRUE(contig.ok());
    VAttentionKvOptions o;
    o.shape = shape;
    o.max_ctx = n_ctx;
    o.pool.page_bytes = 4096;
    // 3 pages per lane for two slots: the third sequence must reclaim pages
    // cached by a cleared slot, then headroom of running ones.
    const int64_t lanes_per_seq = shape.n_layer * shape.n_head_kv * 2;
    o.pool.budget_bytes = (6 * lanes_per_seq + 4) * 4096;
    auto lanes = VAttentionKv::create(o);
    ASSERT_TRUE(lanes.ok()) << lanes.status().message();
    VAttentionKv &vkv = **lanes;
    KvCache *stores[2] = {contig->get(), &vkv};

    std::mt19937 rng(17);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(m.config().n_vocab - 1));
    std::vector<int32_t> next(n_seq, 0);
    ThreadPool pool(2);
    auto ws = m.make_workspace(256);
    int n_steps = 0;
    // One forward step over both stores with `n` new tokens for each listed slot.
    auto step = [&](std::vector<std::pair<int, int>> parts) {
        std::vector<int32_t> tokens, pos, seq;
        for (auto [s, n] : parts)
            for (int i = 0; i < n; ++i) {
                tokens.push_back(tok(rng));
                pos.push_back(next[static_cast<size_t>(s)]++);
                seq.push_back(s);
            }
        Batch b;
        b.tokens = tokens.data();
        b.pos = pos.data();
        b.seq = seq.data();
        b.n_tokens = static_cast<int64_t>(tokens.size());
        std::vector<float> logits[2];
        for (int k = 0; k < 2; ++k) {
            Status st = m.forward(b, *stores[k], *ws, pool);
            ASSERT_TRUE(st.ok()) << "step " << n_steps << " store " << k << ": " << st.message();
            logits[k].assign(ws->logits(), ws->logits() + ws->n_outputs() * m.config().n_vocab);
        }
        ASSERT_EQ(logits[0].size(), logits[1].size());
        ASSERT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)), 0)
            << "logits differ at step " << n_steps;
        for (auto [s, n] : parts) ASSERT_TRUE(vkv.map_ahead(s).ok());
        ASSERT_TRUE(vkv.check_accounting().ok()) << vkv.check_accounting().message();
        ++n_steps;
    };
    ASSERT_NO_FATAL_FAILURE(step({{0, 140}}));
    ASSERT_NO_FATAL_FAILURE(step({{0, 1}, {1, 150}}));
    for (int i = 0; i < 10; ++i) ASSERT_NO_FATAL_FAILURE(step({{0, 1}, {1, 1}}));
    // Sequence 0 ends; its pages stay cached in slot 0 of the lane store.
    for (KvCache *kv : stores) kv->clear(0);
    next[0] = 0;
    ASSERT_NO_FATAL_FAILURE(step({{1, 1}, {2, 200}}));
    for (int i = 0; i < 10; ++i) ASSERT_NO_FATAL_FAILURE(step({{1, 1}, {2, 1}}));
    ASSERT_NO_FATAL_FAILURE(step({{0, 30}, {2, 1}}));
    for (int i = 0; i < 10; ++i) ASSERT_NO_FATAL_FAILURE(step({{0, 1}, {1, 1}, {2, 1}}));
    EXPECT_GT(vkv.stats().n_reclaimed_pages, 0);
    EXPECT_EQ(vkv.n_pos(2), 221);
}

}  // namespace
}  // namespace sieve
