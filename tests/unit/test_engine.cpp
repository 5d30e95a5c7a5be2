// The continuous-batching engine on stories260K: greedy outputs do not depend
// on batch composition, chunking or preemption (and match a plain sequential
// Model::forward + argmax); cancellation from another thread frees every KV
// page; stop strings, max_tokens, validation and the queue limit.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine_fixture.h"
#include "sieve/engine/engine.h"
#include "sieve/engine/stop_matcher.h"
#include "sieve/gguf/gguf.h"
#include "sieve/kv/contiguous_kv.h"
#include "sieve/model/model.h"
#include "sieve/sparse/policy_spec.h"
#include "sieve/tokenizer/tokenizer.h"
#include "sieve/tokenizer/unicode.h"

namespace sieve {
namespace {

class EngineTest : public EngineFixture {
protected:
    void check_preemption(int64_t batch_tokens, int64_t swap_bytes);
};

TEST_F(EngineTest, RunsOneRequestEndToEnd) {
    auto e = make_engine(EngineOptions{});
    ASSERT_TRUE(e);
    const auto prompt = tok_->encode("Once upon a time, there was a little dog", true, false);
    const auto evs = run_all(*e, {greedy(prompt, 20)});
    ASSERT_EQ(evs.size(), 1u);
    ASSERT_NO_FATAL_FAILURE(expect_well_formed(evs[0]));
    EXPECT_EQ(evs[0].back().finish_reason, FinishReason::length);
    EXPECT_EQ(evs[0].back().n_gen_tokens, 20);
    EXPECT_EQ(evs[0].back().n_prompt_tokens, static_cast<int64_t>(prompt.size()));
    EXPECT_EQ(event_tokens(evs[0]), reference_greedy(prompt, 20));
    EXPECT_EQ(event_text(evs[0]), utf8_sanitize(tok_->decode(event_tokens(evs[0]), true)));
    e->shutdown(true);
    const EngineStats s = e->stats();
    EXPECT_EQ(s.kv_pages_used, 0);
    EXPECT_EQ(s.gen_tokens_total, 20);
    EXPECT_EQ(s.prompt_tokens_total, static_cast<int64_t>(prompt.size()));
    EXPECT_GT(s.n_steps, 0);
}


// Nine requests with prompts of 3..150 tokens at once, 32 tokens per step:
// prompts are chunked and mixed with decodes of the others, yet each greedy
// output equals its run alone and the sequential oracle.
TEST_F(EngineTest, GreedyOutputIndependentOfBatchComposition) {
    EngineOptions o;
    o.max_seqs = 9;
    o.max_batch_tokens = 32;
    o.max_ctx = 256;
    auto e = make_engine(o);
    ASSERT_TRUE(e);
    const int64_t lens[] = {3, 150, 17, 40, 1, 65, 33, 90, 9};
    std::vector<GenRequest> reqs;
    for (size_t i = 0; i < std::size(lens); ++i)
        reqs.push_back(greedy(random_prompt(lens[i], 100 + static_cast<uint32_t>(i)), 12 + static_cast<int64_t>(i) * 3));

    const auto together = run_all(*e, reqs);
    ASSERT_EQ(together.size(), reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
        const auto alone = run_all(*e, {reqs[i]});
        ASSERT_EQ(alone.size(), 1u);
        ASSERT_NO_FATAL_FAILURE(expect_well_formed(together[i]));
        ASSERT_NO_FATAL_FAILURE(expect_well_formed(alone[0]));
        const auto ref = reference_greedy(reqs[i].prompt, reqs[i].max_tokens);
        EXPECT_EQ(event_tokens(alone[0]), ref) << "request " << i << " alone";
        EXPECT_EQ(event_tokens(together[i]), ref) << "request " << i << " among others";
        EXPECT_EQ(event_text(together[i]), event_text(alone[0])) << "request " << i;
        EXPECT_EQ(together[i].back().finish_reason, FinishReason::length);
    }
    e->shutdown(true);
    EXPECT_EQ(e->stats().kv_pages_used, 0);
}

// A pool of 5 pages per lane for 8 requests that each grow to 2 pages per
// lane: the scheduler must preempt, and every output is still the one of the
// request run alone.
TEST_F(EngineTest, PreemptionKeepsGreedyOutputs) {
    // 64 tokens per step, and 7 so that preemption also hits sequences in the
    // middle of a chunked prefill.
    // Swap space for all of them (swap), and none (recompute).
    for (int64_t swap_bytes : {int64_t{1} << 30, int64_t{0}})
        for (int64_t batch_tokens : {64, 7}) {
            SCOPED_TRACE("max_batch_tokens " + std::to_string(batch_tokens) + " swap " + std::to_string(swap_bytes));
            ASSERT_NO_FATAL_FAILURE(check_preemption(batch_tokens, swap_bytes));
        }
}

void EngineTest::check_preemption(int64_t batch_tokens, int64_t swap_bytes) {
    const KvShape shape = model_->kv_shape(1);
    const int64_t lanes = shape.n_layer * shape.n_head_kv * 2;
    const int64_t rows_per_page = 4096 / (shape.head_dim * 4);
    EngineOptions o;
    o.max_seqs = 8;
    o.max_batch_tokens = batch_tokens;
    o.max_ctx = 2 * rows_per_page;
    o.kv_page_bytes = 4096;
    o.kv_type = cpu::RowType::f32;  // the page counts below assume f32 rows (32 B)
    o.kv_memory_bytes = 5 * lanes * 4096;
    o.swap_bytes = swap_bytes;
    auto e = make_engine(o);
    ASSERT_TRUE(e);
    std::vector<GenRequest> reqs;
    for (int i = 0; i < 8; ++i) {
        const int64_t n = rows_per_page - 40 + i * 7;  // crosses the first page while decoding
        reqs.push_back(greedy(random_prompt(n, 300 + static_cast<uint32_t>(i)), 60));
    }
    const auto together = run_all(*e, reqs);
    ASSERT_EQ(together.size(), reqs.size());
    EXPECT_GT(e->stats().n_preemptions, 0);
    if (swap_bytes > 0) {
        EXPECT_EQ(e->stats().n_swap_out, e->stats().n_preemptions);
    } else {
        EXPECT_EQ(e->stats().n_swap_out, 0);
    }
    for (size_t i = 0; i < reqs.size(); ++i) {
        ASSERT_NO_FATAL_FAILURE(expect_well_formed(together[i]));
        EXPECT_EQ(together[i].back().finish_reason, FinishReason::length) << together[i].back().error;
        EXPECT_EQ(event_tokens(together[i]), reference_greedy(reqs[i].prompt, reqs[i].max_tokens)) << "request " << i;
    }
    e->shutdown(true);
    const EngineStats s = e->stats();
    EXPECT_EQ(s.kv_pages_used, 0);
    EXPECT_EQ(s.kv_pages_total, 5 * lanes);
    EXPECT_EQ(s.n_running, 0);
    EXPECT_EQ(s.n_waiting, 0);
    EXPECT_EQ(s.gen_tokens_total, 8 * 60);
    EXPECT_EQ(s.n_swap_in, s.n_swap_out);
    EXPECT_EQ(s.swap_bytes_used, 0);
}

// Test-only policy: after prefill, every lane keeps a fixed pseudo-random
// subset of its rows that differs per (layer, KV head) — about keep_pct % of
// them, and always the first and the last — so lanes of one layer end up with
// different lengths. The choice depends on the rows only, never on the slot,
// so a request gives the same output alone or among others.
class DropUnevenPolicy : public KvPolicy {
public:
    explicit DropUnevenPolicy(uint32_t keep_pct) : keep_pct_(keep_pct) {}
    std::string name() const override { return "test-drop-uneven"; }
    Status after_prefill(const PolicyContext &c) const override {
        const KvShape &sh = c.kv->shape();
        for (int64_t il = 0; il < sh.n_layer; ++il) {
            std::vector<std::vector<int32_t>> keep(static_cast<size_t>(sh.n_head_kv));
            std::vector<const int32_t *> ptrs;
            std::vector<int64_t> n_keep;
            for (int64_t h = 0; h < sh.n_head_kv; ++h) {
                const int64_t rows = c.kv->n_rows(c.slot, il, h);
                for (int64_t r = 0; r < rows; ++r) {
                    const uint32_t x = static_cast<uint32_t>((il * 131 + h * 71 + r) * 2654435761u) >> 7;
                    if (r == 0 || r + 1 == rows || x % 100 < keep_pct_) keep[static_cast<size_t>(h)].push_back(static_cast<int32_t>(r));
                }
                ptrs.push_back(keep[static_cast<size_t>(h)].data());
                n_keep.push_back(static_cast<int64_t>(keep[static_cast<size_t>(h)].size()));
            }
            SIEVE_TRY(c.kv->compact_layer(c.slot, il, ptrs.data(), n_keep.data()));
        }
        return Status();
    }

private:
    uint32_t keep_pct_;
};

// Compacted lanes survive preemption: 16 concurrent requests whose lanes a
// policy compacted unevenly, in a pool that forces preemption while they
// decode, give each the greedy output it gives alone. Their KV cannot be
// recomputed, so every preemption swaps; every page and every swap byte
// comes back.
TEST_F(EngineTest, CompactedSequencesSwapAndKeepTheirOutputs) {
    const KvShape shape = model_->kv_shape(1);
    const int64_t lanes = shape.n_layer * shape.n_head_kv * 2;
    auto policy = std::make_shared<DropUnevenPolicy>(55);
    std::vector<GenRequest> reqs;
    for (int i = 0; i < 16; ++i) reqs.push_back(greedy(random_prompt(150 + 9 * i, 700 + static_cast<uint32_t>(i)), 200));
    EngineOptions o;
    o.max_seqs = 16;
    o.max_ctx = 512;
    o.kv_page_bytes = 4096;
    o.kv_type = cpu::RowType::f32;  // 128 rows per page: prompts take 2-3 pages per lane, kept rows 1-2
    o.kv_policy = policy;
    // Alone: one request at a time in a pool with room to spare.
    std::vector<std::vector<int32_t>> alone;
    {
        auto e = make_engine(o);
        ASSERT_TRUE(e);
        for (const GenRequest &r : reqs) alone.push_back(event_tokens(run_all(*e, {r}).at(0)));
        EXPECT_EQ(e->stats().n_preemptions, 0);
    }
    // The policy acts: some request's output differs from the dense model's.
    int n_differ = 0;
    for (size_t i = 0; i < reqs.size(); ++i) n_differ += alone[i] != reference_greedy(reqs[i].prompt, 200) ? 1 : 0;
    EXPECT_GT(n_differ, 0);
    // Together, in a pool of 4 pages per lane: one prompt's dense peak, or two
    // or three compacted sequences, which then grow past a page as they decode.
    o.kv_memory_bytes = 4 * lanes * 4096;
    auto e = make_engine(o);
    ASSERT_TRUE(e);
    const auto together = run_all(*e, reqs);
    ASSERT_EQ(together.size(), reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
        ASSERT_NO_FATAL_FAILURE(expect_well_formed(together[i]));
        EXPECT_EQ(event_tokens(together[i]), alone[i]) << "request " << i;
    }
    e->shutdown(true);
    const EngineStats s = e->stats();
    EXPECT_GT(s.n_preemptions, 0);
    EXPECT_EQ(s.n_swap_out, s.n_preemptions);
    EXPECT_EQ(s.n_swap_in, s.n_swap_out);
    EXPECT_EQ(s.swap_bytes_used, 0);
    EXPECT_EQ(s.kv_pages_used, 0);
}

// Admission counts what compacted lanes really hold: with a policy keeping
// ~30% of 300-token prompts, 16 sequences fit a pool in which dense ones
// could only run a few at a time, they all run together, and no preemption
// happens (their real need never exceeds the pool).
TEST_F(EngineTest, CompactionLetsMoreSequencesIn) {
    const KvShape shape = model_->kv_shape(1);
    const int64_t lanes = shape.n_layer * shape.n_head_kv * 2;
    std::vector<GenRequest> reqs;
    // 300-row prompts (3 pages per lane dense); ~30% kept + 25 generated stays in one page.
    for (int i = 0; i < 16; ++i) reqs.push_back(greedy(random_prompt(300, 900 + static_cast<uint32_t>(i)), 25));
    EngineOptions o;
    o.max_seqs = 16;
    o.max_ctx = 512;
    o.max_batch_tokens = 256;
    o.kv_page_bytes = 4096;
    o.kv_type = cpu::RowType::f32;
    o.kv_memory_bytes = (16 + 3 + 2) * lanes * 4096;  // every kept lane + one dense prompt + spare
    const auto max_running = [&](EngineOptions opt) {
        auto e = make_engine(opt);
        EXPECT_TRUE(e);
        Collector c;
        std::atomic<int> most{0};
        Engine *ep = e.get();
        for (const GenRequest &r : reqs) {
            auto cb = c.callback();
            auto id = e->submit(r, [&, cb, ep](const GenEvent &ev) {
                most = std::max(most.load(), ep->stats().n_running);
                cb(ev);
            });
            EXPECT_TRUE(id.ok());
        }
        EXPECT_TRUE(c.wait(static_cast<int>(reqs.size())));
        e->shutdown(true);
        EXPECT_EQ(e->stats().kv_pages_used, 0);
        return std::make_pair(most.load(), e->stats().n_preemptions);
    };
    const auto dense = max_running(o);
    o.kv_policy = std::make_shared<DropUnevenPolicy>(28);
    const auto sparse = max_running(o);
    EXPECT_EQ(sparse.second, 0) << "a preemption although the pool holds every compacted sequence";
    EXPECT_GE(sparse.first, 12) << "dense ran " << dense.first << " at most";
    EXPECT_LE(dense.first, 7);
}

// Map-ahead: decode steps find their KV rows mapped. Two sequences decode
// across three page boundaries each; every mmap after their prefills happens
// between steps (kv_map_calls_ahead), none inside a step's reservations, and
// the outputs are the oracle's.
TEST_F(EngineTest, DecodeStepsFindTheirKvRowsMappedAhead) {
    const KvShape shape = model_->kv_shape(1);
    const int64_t rows_per_page = 4096 / (shape.head_dim * 4);
    EngineOptions o;
    o.max_seqs = 2;
    o.max_ctx = 4 * rows_per_page;
    o.kv_page_bytes = 4096;
    o.kv_type = cpu::RowType::f32;  // the page counts below assume f32 rows (32 B)
    const std::vector<GenRequest> prefill_only = {greedy(random_prompt(9, 41), 1), greedy(random_prompt(23, 42), 1)};
    std::vector<GenRequest> long_decode = prefill_only;
    for (GenRequest &r : long_decode) r.max_tokens = 3 * rows_per_page + 5;

    auto e1 = make_engine(o);
    ASSERT_TRUE(e1);
    run_all(*e1, prefill_only);
    e1->shutdown(true);
    const EngineStats s1 = e1->stats();
    EXPECT_GT(s1.kv_map_calls_in_step, 0);  // the prompts' first pages

    auto e2 = make_engine(o);
    ASSERT_TRUE(e2);
    const auto evs = run_all(*e2, long_decode);
    e2->shutdown(true);
    const EngineStats s2 = e2->stats();
    EXPECT_EQ(s2.kv_map_calls_in_step, s1.kv_map_calls_in_step);
    EXPECT_GT(s2.kv_map_calls_ahead, 0);
    EXPECT_EQ(s2.kv_pages_used, 0);
    ASSERT_EQ(evs.size(), 2u);
    for (size_t i = 0; i < evs.size(); ++i)
        EXPECT_EQ(event_tokens(evs[i]), reference_greedy(long_decode[i].prompt, long_decode[i].max_tokens)) << i;
}

// 32 requests (sampled, each with its own seed) and a second thread that
// cancels a random third of them at random moments.
TEST_F(EngineTest, ConcurrentCancellationsFreeEverything) {
    EngineOptions o;
    o.max_seqs = 8;
    o.max_batch_tokens = 48;
    o.max_ctx = 256;
    o.kv_page_bytes = 4096;
    o.kv_type = cpu::RowType::f32;  // the page counts below assume f32 rows (32 B)
    auto e = make_engine(o);
    ASSERT_TRUE(e);
    std::mt19937 rng(7);
    Collector c;
    std::vector<uint64_t> ids;
    std::vector<int64_t> max_tokens;
    for (int i = 0; i < 32; ++i) {
        GenRequest r;
        r.prompt = random_prompt(std::uniform_int_distribution<int64_t>(2, 90)(rng), 500 + static_cast<uint32_t>(i));
        r.max_tokens = std::uniform_int_distribution<int64_t>(5, 60)(rng);
        r.ignore_eos = true;
        r.sampling.temperature = 0.9f;
        r.sampling.seed = static_cast<uint64_t>(i) * 7919;
        r.n_logprobs = i % 3 == 0 ? 2 : -1;
        auto id = e->submit(r, c.callback());
        ASSERT_TRUE(id.ok()) << id.status().message();
        ids.push_back(*id);
        max_tokens.push_back(r.max_tokens);
    }
    std::vector<uint64_t> to_cancel;
    for (uint64_t id : ids)
        if (rng() % 3 == 0) to_cancel.push_back(id);
    std::thread canceller([&, seed = rng()] {
        std::mt19937 r2(static_cast<uint32_t>(seed));
        for (uint64_t id : to_cancel) {
            std::this_thread::sleep_for(std::chrono::microseconds(r2() % 3000));
            e->cancel(id);
        }
    });
    canceller.join();
    ASSERT_TRUE(c.wait(32)) << "requests did not finish";
    int n_cancelled = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
        const auto evs = c.events(ids[i]);
        ASSERT_NO_FATAL_FAILURE(expect_well_formed(evs));
        const GenEvent &last = evs.back();
        const bool asked = std::find(to_cancel.begin(), to_cancel.end(), ids[i]) != to_cancel.end();
        if (last.finish_reason == FinishReason::cancelled) {
            EXPECT_TRUE(asked) << "request " << i << " cancelled without being asked";
            EXPECT_LT(last.n_gen_tokens, max_tokens[i]);
            ++n_cancelled;
            continue;
        }
        EXPECT_EQ(last.finish_reason, FinishReason::length) << "request " << i << ": " << last.error;
        EXPECT_EQ(last.n_gen_tokens, max_tokens[i]) << "request " << i;
        if (i % 3 == 0) {
            for (const GenEvent &ev : evs) {
                ASSERT_EQ(ev.logprobs.size(), ev.tokens.size());
                ASSERT_EQ(ev.top_logprobs.size(), ev.tokens.size());
                for (size_t k = 0; k < ev.tokens.size(); ++k) {
                    EXPECT_EQ(ev.logprobs[k].token, ev.tokens[k]);
                    ASSERT_EQ(ev.top_logprobs[k].size(), 2u);
                    EXPECT_GE(ev.top_logprobs[k][0].logprob, ev.top_logprobs[k][1].logprob);
                    EXPECT_LE(ev.logprobs[k].logprob, 0.0f);
                }
            }
        }
    }
    EXPECT_GT(n_cancelled, 0) << "no cancellation landed before its request finished";
    e->shutdown(true);
    const EngineStats s = e->stats();
    EXPECT_EQ(s.kv_pages_used, 0);
    EXPECT_EQ(s.n_running, 0);
    EXPECT_EQ(s.n_waiting, 0);
}

TEST(StopMatcher, HoldsBackPossibleStartsAndCutsAtTheMatch) {
    StopMatcher m({"The end", "xyz"});
    bool hit = false;
    EXPECT_EQ(m.push("Hello. Th", &hit), "Hello. ");  // "Th" may start "The end"
    EXPECT_FALSE(hit);
    EXPECT_EQ(m.push("e e", &hit), "");
    EXPECT_FALSE(hit);
    EXPECT_EQ(m.push("ndless", &hit), "");  // matched "The end" across three pushes
    EXPECT_TRUE(hit);

    StopMatcher n({"ab", "bc"});
    EXPECT_EQ(n.push("xa", &hit), "x");
    EXPECT_EQ(n.push("c", &hit), "ac");  // "ac" starts neither
    EXPECT_FALSE(hit);
    EXPECT_EQ(n.push("b", &hit), "");
    EXPECT_EQ(n.push("c!", &hit), "");  // "bc": earliest match wins, nothing after it
    EXPECT_TRUE(hit);

    StopMatcher f({"\xC3\xA9t\xC3\xA9"});  // "été"
    EXPECT_EQ(f.push("caf\xC3\xA9", &hit), "caf");
    EXPECT_EQ(f.push("!", &hit), "\xC3\xA9!");
    EXPECT_EQ(f.push("\xC3\xA9t", &hit), "");
    EXPECT_EQ(f.flush(), "\xC3\xA9t");

    StopMatcher none({});
    EXPECT_EQ(none.push("abc", &hit), "abc");
    EXPECT_FALSE(hit);
}

// A stop string taken from the middle of a greedy output (so it spans token
// boundaries) cuts the output right before its first occurrence.
TEST_F(EngineTest, StopStringCutsTheOutput) {
    auto e = make_engine(EngineOptions{});
    ASSERT_TRUE(e);
    const auto prompt = tok_->encode("Once upon a time, there was a big red ball", true, false);
    const auto base = run_all(*e, {greedy(prompt, 40)});
    ASSERT_EQ(base.size(), 1u);
    const std::string full = event_text(base[0]);
    ASSERT_GT(full.size(), 40u) << full;
    // Byte offsets where one token's text ends and the next begins.
    std::vector<size_t> bounds;
    size_t at = 0;
    for (int32_t t : event_tokens(base[0])) bounds.push_back(at += tok_->token_to_piece(t).size());
    ASSERT_EQ(at, full.size()) << "pieces do not add up to the streamed text";
    int n_checked = 0, n_spanning = 0;
    for (size_t start : {size_t{5}, size_t{13}, full.size() / 2}) {
        for (size_t len : {size_t{2}, size_t{7}}) {
            const std::string stop = full.substr(start, len);
            if (!utf8_is_valid(stop)) continue;
            GenRequest r = greedy(prompt, 40);
            r.stop = {stop, "zzzzzzzz"};
            const auto evs = run_all(*e, {r});
            ASSERT_EQ(evs.size(), 1u);
            ASSERT_NO_FATAL_FAILURE(expect_well_formed(evs[0]));
            EXPECT_EQ(evs[0].back().finish_reason, FinishReason::stop) << "stop '" << stop << "'";
            EXPECT_EQ(event_text(evs[0]), full.substr(0, full.find(stop))) << "stop '" << stop << "'";
            // Events only append text, so this equality also shows that the
            // stop string's first tokens were held back, not streamed.
            EXPECT_LT(evs[0].back().n_gen_tokens, 40);
            ++n_checked;
            n_spanning += std::any_of(bounds.begin(), bounds.end(), [&](size_t b) { return b > start && b < start + len; });
        }
    }
    EXPECT_GE(n_checked, 4);
    EXPECT_GE(n_spanning, 2) << "no stop string crossed a token boundary";

    // Without a match the held-back tail is released at max_tokens.
    GenRequest r = greedy(prompt, 40);
    r.stop = {full.substr(full.size() - 3) + "\x01"};
    const auto tail = run_all(*e, {r});
    ASSERT_EQ(tail.size(), 1u);
    EXPECT_EQ(tail[0].back().finish_reason, FinishReason::length);
    EXPECT_EQ(event_text(tail[0]), full);
}

TEST_F(EngineTest, MaxTokensAndEos) {
    auto e = make_engine(EngineOptions{});
    ASSERT_TRUE(e);
    const auto prompt = tok_->encode("The cat sat", true, false);
    for (int64_t n : {1, 2, 7}) {
        const auto evs = run_all(*e, {greedy(prompt, n)});
        ASSERT_EQ(evs.size(), 1u);
        ASSERT_NO_FATAL_FAILURE(expect_well_formed(evs[0]));
        EXPECT_EQ(evs[0].back().n_gen_tokens, n);
        EXPECT_EQ(evs[0].back().finish_reason, FinishReason::length);
    }
    // Without ignore_eos a story ends at EOS: that token is counted but has no text.
    GenRequest r = greedy(prompt, 400);
    r.ignore_eos = false;
    const auto evs = run_all(*e, {r});
    ASSERT_EQ(evs.size(), 1u);
    ASSERT_NO_FATAL_FAILURE(expect_well_formed(evs[0]));
    if (evs[0].back().finish_reason == FinishReason::stop) {
        EXPECT_TRUE(tok_->is_eog(event_tokens(evs[0]).back()));
        EXPECT_LT(evs[0].back().n_gen_tokens, 400);
    } else {
        EXPECT_EQ(evs[0].back().finish_reason, FinishReason::length);
        EXPECT_EQ(evs[0].back().n_gen_tokens, 400);
    }
}

TEST_F(EngineTest, SubmitRejectsBadRequests) {
    EngineOptions o;
    o.max_ctx = 100;
    auto e = make_engine(o);
    ASSERT_TRUE(e);
    auto cb = [](const GenEvent &) {};
    auto expect_error = [&](GenRequest r, const std::string &needle) {
        auto id = e->submit(std::move(r), cb);
        ASSERT_FALSE(id.ok()) << "accepted a request that should fail with '" << needle << "'";
        EXPECT_NE(id.status().message().find(needle), std::string::npos) << id.status().message();
        EXPECT_FALSE(Engine::is_queue_full_error(id.status()));
    };
    const auto ok_prompt = random_prompt(10, 1);
    expect_error(greedy({}, 5), "empty");
    expect_error(greedy({1, -1}, 5), "[0, " + std::to_string(n_vocab_) + ")");
    expect_error(greedy({1, n_vocab_}, 5), std::to_string(n_vocab_));
    expect_error(greedy(ok_prompt, 0), "max_tokens");
    expect_error(greedy(ok_prompt, 91), "prompt (10 tokens) + max_tokens (91)");
    expect_error(greedy(random_prompt(101, 2), 1), "100");
    GenRequest r = greedy(ok_prompt, 5);
    r.sampling.temperature = std::nanf("");
    expect_error(r, "temperature");
    r = greedy(ok_prompt, 5);
    r.sampling.top_p = 1.5f;
    expect_error(r, "top_p");
    r = greedy(ok_prompt, 5);
    r.n_logprobs = 21;
    expect_error(r, "logprobs");
    r.n_logprobs = -2;
    expect_error(r, "logprobs");
    r = greedy(ok_prompt, 5);
    r.stop = {"ok", ""};
    expect_error(r, "stop string 1 is empty");
    r.stop = {"\xC3"};
    expect_error(r, "UTF-8");
    // A request bigger than the whole KV pool can never run.
    EngineOptions small;
    small.max_ctx = 1000;
    small.kv_page_bytes = 4096;
    small.kv_type = cpu::RowType::f32;
    small.kv_memory_bytes = 3 * 40 * 4096;
    auto e2 = make_engine(small);
    ASSERT_TRUE(e2);
    auto id = e2->submit(greedy(random_prompt(300, 3), 200), cb);
    ASSERT_FALSE(id.ok());
    EXPECT_NE(id.status().message().find("KV pool"), std::string::npos) << id.status().message();
    // The engine still serves good requests.
    EXPECT_EQ(run_all(*e, {greedy(ok_prompt, 3)}).at(0).back().n_gen_tokens, 3);
}

TEST_F(EngineTest, QueueLimitAndCancellingWaitingRequests) {
    EngineOptions o;
    o.max_seqs = 1;
    o.max_waiting = 3;
    o.max_ctx = 1024;
    auto e = make_engine(o);
    ASSERT_TRUE(e);
    Collector c;
    std::vector<uint64_t> ids;
    Status full;
    // One runs, three wait; the fifth submit cannot find room, whatever the
    // engine thread has done meanwhile (each runs 900 tokens).
    for (int i = 0; i < 5 && full.ok(); ++i) {
        auto id = e->submit(greedy(random_prompt(20, 10 + static_cast<uint32_t>(i)), 900), c.callback());
        if (id.ok()) {
            ids.push_back(*id);
        } else {
            full = id.status();
        }
    }
    ASSERT_FALSE(full.ok()) << "submitted 5 requests past a queue of 3";
    EXPECT_TRUE(Engine::is_queue_full_error(full)) << full.message();
    EXPECT_FALSE(Engine::is_queue_full_error(Status()));
    // Cancel every one; waiting ones never ran.
    for (uint64_t id : ids) e->cancel(id);
    ASSERT_TRUE(c.wait(static_cast<int>(ids.size())));
    for (uint64_t id : ids) {
        const auto evs = c.events(id);
        ASSERT_NO_FATAL_FAILURE(expect_well_formed(evs));
        EXPECT_EQ(evs.back().finish_reason, FinishReason::cancelled);
    }
    e->shutdown(true);
    EXPECT_EQ(e->stats().kv_pages_used, 0);
    auto late = e->submit(greedy(random_prompt(5, 1), 2), c.callback());
    EXPECT_FALSE(late.ok());
}

// submit_all queues every request or none: sizes must match, one bad
// request or a queue without room for all of them refuses the lot; the ones
// queued run to the oracle's greedy outputs.
TEST_F(EngineTest, SubmitAllQueuesTogetherOrNothing) {
    EngineOptions o;
    o.max_seqs = 2;
    o.max_waiting = 3;
    o.max_ctx = 256;
    auto e = make_engine(o);
    ASSERT_TRUE(e);
    Collector c;
    const auto batch = [&](int n, bool one_bad) {
        std::vector<GenRequest> reqs;
        std::vector<GenCallback> cbs;
        for (int i = 0; i < n; ++i) {
            reqs.push_back(greedy(random_prompt(30 + i, 40 + static_cast<uint32_t>(i)), 6));
            cbs.push_back(c.callback());
        }
        if (one_bad) reqs.back().prompt.back() = n_vocab_;  // id out of range
        return std::make_pair(std::move(reqs), std::move(cbs));
    };
    auto [r1, c1] = batch(2, false);
    c1.pop_back();
    EXPECT_FALSE(e->submit_all(std::move(r1), std::move(c1)).ok()) << "2 requests with 1 callback";
    auto [r2, c2] = batch(3, true);
    Result<std::vector<uint64_t>> bad = e->submit_all(std::move(r2), std::move(c2));
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("token"), std::string::npos) << bad.status().message();
    auto [r3, c3] = batch(4, false);
    Result<std::vector<uint64_t>> full = e->submit_all(std::move(r3), std::move(c3));
    ASSERT_FALSE(full.ok());
    EXPECT_TRUE(Engine::is_queue_full_error(full.status())) << full.status().message();
    EXPECT_EQ(e->stats().n_waiting + e->stats().n_running, 0) << "a refused batch queued something";

    auto [r4, c4] = batch(3, false);
    const std::vector<GenRequest> sent = r4;
    Result<std::vector<uint64_t>> ids = e->submit_all(std::move(r4), std::move(c4));
    ASSERT_TRUE(ids.ok()) << ids.status().message();
    ASSERT_EQ(ids->size(), 3u);
    EXPECT_EQ((*ids)[1], (*ids)[0] + 1);
    EXPECT_EQ((*ids)[2], (*ids)[0] + 2);
    ASSERT_TRUE(c.wait(3));
    for (size_t i = 0; i < 3; ++i) {
        const auto evs = c.events((*ids)[i]);
        ASSERT_NO_FATAL_FAILURE(expect_well_formed(evs));
        EXPECT_EQ(event_tokens(evs), reference_greedy(sent[i].prompt, 6)) << "request " << i;
    }
}

// shutdown(false) cancels what is running and waiting; each gets a final event.
TEST_F(EngineTest, ShutdownWithoutDrainCancelsEverything) {
    EngineOptions o;
    o.max_seqs = 2;
    o.max_ctx = 1024;
    auto e = make_engine(o);
    ASSERT_TRUE(e);
    Collector c;
    std::vector<uint64_t> ids;
    for (int i = 0; i < 5; ++i) {
        auto id = e->submit(greedy(random_prompt(30, 40 + static_cast<uint32_t>(i)), 900), c.callback());
        ASSERT_TRUE(id.ok());
        ids.push_back(*id);
    }
    e->shutdown(false);
    ASSERT_TRUE(c.wait(5));
    for (uint64_t id : ids) {
        const auto evs = c.events(id);
        ASSERT_NO_FATAL_FAILURE(expect_well_formed(evs));
        EXPECT_EQ(evs.back().finish_reason, FinishReason::cancelled);
    }
    EXPECT_EQ(e->stats().kv_pages_used, 0);
}

}  // namespace
}  // namespace sieve

namespace sieve {
namespace {

// Evaluation hooks: teacher forcing yields exactly the forced tokens; the
// logits hook sees one [n_vocab] row per generated token, and those rows are
// the oracle's (forced prefix, greedy argmax checked at every step); the
// prefilled hook sees the dense lanes once, holding the prompt.
TEST_F(EngineTest, TeacherForcingAndLogitsHooks) {
    auto e = make_engine(EngineOptions{});
    ASSERT_TRUE(e);
    GenRequest r = greedy(random_prompt(37, 4242), 12);
    r.forced_tokens = random_prompt(12, 4343);
    std::vector<std::vector<float>> rows;
    std::vector<int64_t> lane_rows;
    int n_prefilled = 0;
    r.on_logits = [&](const float *l, int64_t n) { rows.emplace_back(l, l + n); };
    r.on_prefilled = [&](const KvCache &kv, int slot) {
        ++n_prefilled;
        for (int64_t il = 0; il < kv.shape().n_layer; ++il)
            for (int64_t h = 0; h < kv.shape().n_head_kv; ++h) lane_rows.push_back(kv.n_rows(slot, il, h));
    };
    const auto evs = run_all(*e, {r}).at(0);
    ASSERT_NO_FATAL_FAILURE(expect_well_formed(evs));
    EXPECT_EQ(event_tokens(evs), r.forced_tokens);
    ASSERT_EQ(rows.size(), 12u);
    EXPECT_EQ(n_prefilled, 1);
    for (int64_t n : lane_rows) EXPECT_EQ(n, 37);
    // Step i's logits are those after prompt + forced[0 .. i): the argmax of
    // the last row equals the oracle's greedy token after that prefix.
    std::vector<int32_t> prefix = r.prompt;
    for (size_t i = 0; i < rows.size(); ++i) {
        const int32_t best = static_cast<int32_t>(std::max_element(rows[i].begin(), rows[i].end()) - rows[i].begin());
        EXPECT_EQ(best, reference_greedy(prefix, 1).at(0)) << "step " << i;
        prefix.push_back(r.forced_tokens[i]);
    }
    GenRequest bad = greedy(random_prompt(5, 1), 4);
    bad.forced_tokens = {1, 2};
    auto id = e->submit(bad, [](const GenEvent &) {});
    ASSERT_FALSE(id.ok());
    EXPECT_NE(id.status().message().find("forced_tokens"), std::string::npos) << id.status().message();
}

// Requests name their KV policy freely; the per-policy counters (and the
// /metrics series made from them) stay bounded: past 32 labels the rest are
// counted as "other".
TEST_F(EngineTest, PolicyCountersStayBounded) {
    EngineOptions o;
    o.max_seqs = 4;
    auto e = make_engine(o);
    ASSERT_TRUE(e);
    std::vector<GenRequest> reqs;
    for (int i = 0; i < 40; ++i) {
        auto spec = kv_policy_spec_parse("snapkv:budget=" + std::to_string(16 + i));
        ASSERT_TRUE(spec.ok());
        auto p = kv_policy_make(*spec);
        ASSERT_TRUE(p.ok());
        GenRequest r = greedy(random_prompt(40, 70 + static_cast<uint32_t>(i)), 2);
        r.kv_policy = *p;
        reqs.push_back(r);
    }
    run_all(*e, reqs);
    e->shutdown(true);
    const EngineStats s = e->stats();
    EXPECT_EQ(s.policies.size(), 33u);
    int64_t total = 0, other = 0;
    for (const PolicyCounters &pc : s.policies) {
        total += pc.requests;
        if (pc.policy == "other") other = pc.requests;
    }
    EXPECT_EQ(total, 40);
    EXPECT_EQ(other, 8);
}

}  // namespace
}  // namespace sieve
