// Automatic prefix caching through the engine, on stories260K: a request
// whose prompt starts with a cached prefix gives the greedy output it gives
// on an engine without the cache (and the sequential oracle's), reports how
// many prompt tokens the cache supplied, and costs no preemption when the
// cache must give its pages back; a sparse policy only ever publishes the
// uncompressed prompt.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "engine_fixture.h"
#include "sieve/sparse/policy_spec.h"

namespace sieve {
namespace {

class PrefixCacheTest : public EngineFixture {
protected:
    // prefix + a random tail of n_tail tokens (the tail's seed picks it).
    std::vector<int32_t> with_tail(const std::vector<int32_t> &prefix, int64_t n_tail, uint32_t seed) const {
        std::vector<int32_t> p = prefix;
        const std::vector<int32_t> tail = random_prompt(n_tail + 1, seed);
        p.insert(p.end(), tail.begin() + 1, tail.end());  // without its BOS
        return p;
    }

    // Stats once the engine thread has published the step that finished the
    // last request (events arrive before the step's stats are published).
    static EngineStats idle_stats(Engine &e) {
        EngineStats s = e.stats();
        for (int i = 0; i < 5000 && (s.n_running > 0 || s.n_waiting > 0); ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
            s = e.stats();
        }
        return s;
    }

    KvPolicyPtr policy(const std::string &text) {
        auto spec = kv_policy_spec_parse(text);
        EXPECT_TRUE(spec.ok()) << spec.status().message();
        auto p = kv_policy_make(*spec);
        EXPECT_TRUE(p.ok()) << p.status().message();
        return p.ok() ? *p : nullptr;
    }
};

// Small pages and f32 rows (32-byte rows, 128 a page) so a prompt spans
// several pages and hits end inside a page (copy on write), and the default
// f16 rows with 64 KiB pages (the whole prompt inside one page).
TEST_F(PrefixCacheTest, GreedyOutputIsTheSameWithAndWithoutAHit) {
    for (const bool small_pages : {true, false}) {
        SCOPED_TRACE(small_pages ? "4 KiB pages, f32 rows" : "64 KiB pages, f16 rows");
        EngineOptions o;
        o.max_seqs = 4;
        o.max_ctx = 512;
        o.max_batch_tokens = 48;  // prompts are chunked, hits and misses alike
        if (small_pages) {
            o.kv_page_bytes = 4096;
            o.kv_type = cpu::RowType::f32;
        }
        EngineOptions off = o;
        off.prefix_cache = false;
        auto e = make_engine(o), plain = make_engine(off);
        ASSERT_TRUE(e && plain);

        const std::vector<int32_t> shared = random_prompt(203, 7);
        std::vector<GenRequest> reqs;
        const int64_t tails[] = {0, 1, 5, 37, 90, 150};
        for (size_t i = 0; i < std::size(tails); ++i)
            reqs.push_back(greedy(with_tail(shared, tails[i], 50 + static_cast<uint32_t>(i)), 10 + 3 * static_cast<int64_t>(i)));

        // The first computes the prefix; the others run together after it and
        // map it (the one with no tail too: its last token is recomputed).
        const auto first = run_all(*e, {reqs[0]});
        EXPECT_EQ(first[0].back().n_cached_tokens, 0);
        const std::vector<GenRequest> rest(reqs.begin() + 1, reqs.end());
        const auto hits = run_all(*e, rest);
        const auto again = run_all(*e, {reqs[0]});  // the whole prompt is cached now
        const auto ref_first = run_all(*plain, {reqs[0]});
        ASSERT_EQ(hits.size(), rest.size());
        for (size_t i = 0; i < rest.size(); ++i) {
            ASSERT_NO_FATAL_FAILURE(expect_well_formed(hits[i]));
            const auto alone = run_all(*plain, {rest[i]});
            EXPECT_EQ(event_tokens(hits[i]), event_tokens(alone[0])) << "request " << i + 1;
            EXPECT_EQ(event_tokens(hits[i]), reference_greedy(rest[i].prompt, rest[i].max_tokens)) << "request " << i + 1;
            const int64_t cached = hits[i].back().n_cached_tokens;
            EXPECT_GE(cached, 192) << "request " << i + 1 << ": the 203-token prefix holds 12 whole 16-token blocks";
            EXPECT_LE(cached, static_cast<int64_t>(rest[i].prompt.size()) - 1);
            EXPECT_EQ(cached % o.prefix_block, 0);
            EXPECT_EQ(alone[0].back().n_cached_tokens, 0);
        }
        EXPECT_EQ(event_tokens(again[0]), event_tokens(ref_first[0]));
        EXPECT_EQ(again[0].back().n_cached_tokens, 192) << "203 tokens: the last one is computed, so 12 blocks";

        e->shutdown(true);
        const EngineStats s = e->stats();
        EXPECT_TRUE(s.prefix_cache);
        EXPECT_GT(s.prefix_hit_tokens, 5 * 192);
        int64_t queried = 0;
        for (const GenRequest &r : reqs) queried += static_cast<int64_t>(r.prompt.size());
        EXPECT_EQ(s.prefix_query_tokens, queried + static_cast<int64_t>(reqs[0].prompt.size()));
        EXPECT_EQ(s.kv_pages_used, 0) << "cached pages of finished requests count as free";
        EXPECT_GT(s.prefix_blocks, 0);
        EXPECT_EQ(s.prefix_pages_only, s.prefix_pages_held) << "idle: no running sequence maps a cached page";
        plain->shutdown(true);
        EXPECT_FALSE(plain->stats().prefix_cache);
        EXPECT_EQ(plain->stats().prefix_query_tokens, 0);
    }
}

// The logprobs of every generated token are the same bits whether the
// prompt's last token ran alone (a hit that leaves one token; a token budget
// that cuts the prompt to a one-token last chunk) or inside a longer chunk:
// a prompt token always takes the prefill kernel (Batch::in_prompt), whose
// bits do not depend on the cut. Logprobs, not greedy tokens: an argmax
// hides a last-bit difference that a seeded sample at temperature 1 may not.
TEST_F(PrefixCacheTest, APromptTokenAloneInItsChunkGivesTheBitsOfALongChunk) {
    EngineOptions o;
    o.max_seqs = 2;
    o.max_ctx = 512;
    EngineOptions off = o;
    off.prefix_cache = false;
    EngineOptions cut = off;
    cut.max_batch_tokens = 32;  // 193 = 6 x 32 + 1: the last chunk is one token
    auto e = make_engine(o), plain = make_engine(off), cut_e = make_engine(cut);
    ASSERT_TRUE(e && plain && cut_e);
    const std::vector<int32_t> shared = random_prompt(203, 11);
    const std::vector<int32_t> p193(shared.begin(), shared.begin() + 193);  // 12 blocks + 1
    const auto with_logprobs = [](std::vector<int32_t> prompt) {
        GenRequest r = greedy(std::move(prompt), 12);
        r.n_logprobs = 5;
        return r;
    };
    (void)run_all(*e, {with_logprobs(shared)});  // caches 12 blocks
    const auto hit = run_all(*e, {with_logprobs(p193)});
    ASSERT_EQ(hit[0].back().n_cached_tokens, 192) << "the hit leaves the last prompt token alone";
    const auto ref = run_all(*plain, {with_logprobs(p193)});
    const auto chunked = run_all(*cut_e, {with_logprobs(p193)});
    const std::vector<float> want = event_logprobs(ref[0]);
    ASSERT_GE(want.size(), 12u * 6u);
    for (const auto *got : {&hit, &chunked}) {
        const std::vector<float> g = event_logprobs((*got)[0]);
        ASSERT_EQ(g.size(), want.size());
        EXPECT_EQ(0, std::memcmp(g.data(), want.data(), g.size() * sizeof(float)))
            << (got == &hit ? "after a hit of 192 of 193 tokens" : "with a one-token last chunk");
    }
    e->shutdown(true);
    plain->shutdown(true);
    cut_e->shutdown(true);
}

// A pool of 6 pages per lane: finished requests leave their prompts cached
// until the cache holds most of the pool; then two requests that together
// need the whole pool run at once. Cached pages count as free, so both are
// admitted, the cache gives its pages back as they grow, and nobody is
// preempted.
TEST_F(PrefixCacheTest, CachedPagesAreReclaimedWithoutPreemption) {
    const KvShape shape = model_->kv_shape(1, cpu::RowType::f32);
    const int64_t lanes = shape.n_layer * shape.n_head_kv * 2;
    const int64_t rows_per_page = 4096 / shape.k_row_bytes();  // 128
    EngineOptions o;
    o.max_seqs = 2;
    o.max_ctx = 3 * rows_per_page;
    o.max_batch_tokens = 64;
    o.kv_page_bytes = 4096;
    o.kv_type = cpu::RowType::f32;
    o.kv_memory_bytes = 6 * lanes * 4096;
    o.swap_bytes = 0;
    auto e = make_engine(o);
    ASSERT_TRUE(e);
    for (uint32_t i = 0; i < 5; ++i) {
        const GenRequest r = greedy(random_prompt(2 * rows_per_page - 6, 900 + i), 4);
        const auto evs = run_all(*e, {r});
        ASSERT_NO_FATAL_FAILURE(expect_well_formed(evs[0]));
    }
    const EngineStats warm = idle_stats(*e);
    EXPECT_GE(warm.prefix_pages_only, 4 * lanes) << "the cache should hold most of the pool now";
    EXPECT_EQ(warm.kv_pages_used, 0);

    std::vector<GenRequest> reqs;
    for (uint32_t i = 0; i < 2; ++i)
        reqs.push_back(greedy(random_prompt(2 * rows_per_page - 10, 950 + i), rows_per_page - 20));
    const auto evs = run_all(*e, reqs);
    for (size_t i = 0; i < reqs.size(); ++i) {
        ASSERT_NO_FATAL_FAILURE(expect_well_formed(evs[i]));
        EXPECT_EQ(evs[i].back().finish_reason, FinishReason::length) << evs[i].back().error;
        EXPECT_EQ(event_tokens(evs[i]), reference_greedy(reqs[i].prompt, reqs[i].max_tokens)) << "request " << i;
    }
    e->shutdown(true);
    const EngineStats s = e->stats();
    EXPECT_EQ(s.n_preemptions, 0) << "cached pages must be reclaimed, not running sequences preempted";
    EXPECT_GT(s.prefix_blocks_evicted, 0);
    EXPECT_EQ(s.kv_pages_used, 0);
}

// The cache holds what a dense prefill computes: a SnapKV request publishes
// its prompt before compacting it, so a dense request sharing the prompt
// maps that uncompressed KV and matches the dense oracle; a policy request
// after a dense one keeps its observation window out of the hit and matches
// the same policy on an engine without the cache; H2O (which scores every
// prompt query) gets no hit.
TEST_F(PrefixCacheTest, SparsePoliciesShareOnlyTheUncompressedPrompt) {
    EngineOptions o;
    o.max_seqs = 4;
    o.max_ctx = 512;
    o.max_batch_tokens = 64;
    EngineOptions off = o;
    off.prefix_cache = false;
    const KvPolicyPtr snap = policy("snapkv:keep=0.3,window=8");
    const KvPolicyPtr h2o = policy("h2o:keep=0.5");
    ASSERT_TRUE(snap && h2o);
    const std::vector<int32_t> shared = random_prompt(180, 11);

    {
        auto e = make_engine(o);
        ASSERT_TRUE(e);
        GenRequest sparse_first = greedy(with_tail(shared, 20, 1), 12);
        sparse_first.kv_policy = snap;
        const auto a = run_all(*e, {sparse_first});
        ASSERT_NO_FATAL_FAILURE(expect_well_formed(a[0]));
        EXPECT_LT(a[0].back().kv_rows_kept, a[0].back().kv_rows_seen) << "the policy compacted the lanes";
        const GenRequest dense = greedy(with_tail(shared, 30, 2), 16);
        const auto b = run_all(*e, {dense});
        EXPECT_GE(b[0].back().n_cached_tokens, 176);
        EXPECT_EQ(event_tokens(b[0]), reference_greedy(dense.prompt, dense.max_tokens));
        e->shutdown(true);
    }
    {
        auto e = make_engine(o), plain = make_engine(off);
        ASSERT_TRUE(e && plain);
        const auto warm = run_all(*e, {greedy(with_tail(shared, 3, 3), 4)});
        ASSERT_NO_FATAL_FAILURE(expect_well_formed(warm[0]));
        for (const KvPolicyPtr &p : {snap, h2o}) {
            SCOPED_TRACE(p->name());
            GenRequest r = greedy(with_tail(shared, 40, 4), 14);
            r.kv_policy = p;
            const auto hit = run_all(*e, {r});
            const auto ref = run_all(*plain, {r});
            ASSERT_NO_FATAL_FAILURE(expect_well_formed(hit[0]));
            EXPECT_EQ(event_tokens(hit[0]), event_tokens(ref[0]));
            const int64_t n_prompt = static_cast<int64_t>(r.prompt.size());
            const int64_t cached = hit[0].back().n_cached_tokens;
            if (p == h2o) {
                EXPECT_EQ(cached, 0) << "H2O accumulates every prompt query's attention";
            } else {
                EXPECT_GE(cached, 176);
                EXPECT_LE(cached, n_prompt - 8) << "the observation window is computed";
            }
            EXPECT_EQ(hit[0].back().kv_rows_kept, ref[0].back().kv_rows_kept);
        }
        e->shutdown(true);
        EXPECT_EQ(e->stats().kv_pages_used, 0);
    }
}

// In a pool too small to copy pages, a policy that compacts lanes whose pages
// the cache also holds (its own prompt, published before compaction) makes
// the cache give those pages up instead of failing the request.
TEST_F(PrefixCacheTest, CompactionInATightPoolTakesPagesBackFromTheCache) {
    EngineOptions o;
    o.max_seqs = 4;
    o.max_ctx = 512;
    o.kv_page_bytes = 4096;
    o.kv_memory_bytes = 480 << 10;
    auto e = make_engine(o);
    ASSERT_TRUE(e);
    std::vector<int32_t> prompt;
    for (int32_t t = 10; t < 233; ++t) prompt.push_back(t);
    GenRequest r = greedy(prompt, 174);
    r.kv_policy = policy("h2o:budget=256");
    const auto evs = run_all(*e, {r, r, r});
    for (const auto &ev : evs) {
        ASSERT_NO_FATAL_FAILURE(expect_well_formed(ev));
        EXPECT_EQ(ev.back().finish_reason, FinishReason::length) << ev.back().error;
        EXPECT_EQ(event_tokens(ev), event_tokens(evs[0]));
    }
    e->shutdown(true);
    EXPECT_EQ(e->stats().kv_pages_used, 0);
}

}  // namespace
}  // namespace sieve
