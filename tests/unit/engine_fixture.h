// The engine-level test fixture on stories260K (tests/data/models): loads the
// model, makes engines, runs requests to completion, and holds the
// sequential greedy oracle every engine output is compared with.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine_test_util.h"
#include "sieve/core/thread_pool.h"
#include "sieve/engine/engine.h"
#include "sieve/gguf/gguf.h"
#include "sieve/kv/contiguous_kv.h"
#include "sieve/model/model.h"
#include "sieve/tokenizer/tokenizer.h"
#include "sieve/tokenizer/unicode.h"

namespace sieve {

inline const std::string k_engine_test_model = std::string(SIEVE_TEST_MODELS) + "/stories260K.gguf";

inline std::string event_text(const std::vector<GenEvent> &evs) {
    std::string out;
    for (const GenEvent &e : evs) out += e.text;
    return out;
}

// Exactly one finished event, and it is the last.
inline void expect_well_formed(const std::vector<GenEvent> &evs) {
    ASSERT_FALSE(evs.empty());
    for (size_t i = 0; i + 1 < evs.size(); ++i) EXPECT_FALSE(evs[i].finished) << "event " << i;
    EXPECT_TRUE(evs.back().finished);
    for (const GenEvent &e : evs) EXPECT_TRUE(utf8_is_valid(e.text)) << "event text is not valid UTF-8";
    EXPECT_EQ(static_cast<int64_t>(event_tokens(evs).size()), evs.back().n_gen_tokens);
}

class EngineFixture : public ::testing::Test {
protected:
    void SetUp() override {
        auto f = GgufFile::open(k_engine_test_model);
        ASSERT_TRUE(f.ok()) << f.status().message() << " (tests need " << k_engine_test_model << ")";
        file_ = std::move(f.value());
        auto m = Model::load(*file_);
        ASSERT_TRUE(m.ok()) << m.status().message();
        model_ = std::move(m.value());
        auto t = Tokenizer::from_gguf(*file_);
        ASSERT_TRUE(t.ok()) << t.status().message();
        tok_ = std::move(t.value());
        n_vocab_ = static_cast<int32_t>(model_->config().n_vocab);
    }

    std::unique_ptr<Engine> make_engine(EngineOptions o) {
        if (o.n_threads == 0) o.n_threads = 2;  // both cores, as users run it: exercises the pool under the engine
        auto e = Engine::create(*model_, *tok_, o);
        EXPECT_TRUE(e.ok()) << e.status().message();
        return e.ok() ? std::move(e.value()) : nullptr;
    }

    // Random prompt that starts with BOS (ids never all the same).
    std::vector<int32_t> random_prompt(int64_t n, uint32_t seed) const {
        return random_prompt_ids(n, seed, n_vocab_, tok_->bos_id());
    }

    static GenRequest greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
        return greedy_request(std::move(prompt), max_tokens);
    }

    // The oracle: one sequence, whole prompt in one forward, then one token
    // per forward, argmax (lowest id on ties, as the greedy sampler).
    std::vector<int32_t> reference_greedy(const std::vector<int32_t> &prompt, int64_t max_tokens) {
        auto kv = ContiguousKv::create(model_->kv_shape(1), static_cast<int64_t>(prompt.size()) + max_tokens);
        EXPECT_TRUE(kv.ok());
        auto ws = model_->make_workspace(static_cast<int64_t>(prompt.size()));
        std::vector<int32_t> toks = prompt, out;
        int64_t done = 0;
        while (static_cast<int64_t>(out.size()) < max_tokens) {
            const int64_t n = static_cast<int64_t>(toks.size()) - done;
            std::vector<int32_t> pos, seq(static_cast<size_t>(n), 0);
            for (int64_t i = 0; i < n; ++i) pos.push_back(static_cast<int32_t>(done + i));
            Batch b{toks.data() + done, pos.data(), seq.data(), n, nullptr};
            Status st = model_->forward(b, **kv, *ws, pool_);
            EXPECT_TRUE(st.ok()) << st.message();
            if (!st.ok()) return out;
            done += n;
            const float *l = ws->logits();
            const int32_t best = static_cast<int32_t>(std::max_element(l, l + n_vocab_) - l);
            out.push_back(best);
            toks.push_back(best);
        }
        return out;
    }

    // Submits all requests at once and returns each one's events.
    std::vector<std::vector<GenEvent>> run_all(Engine &e, const std::vector<GenRequest> &reqs) {
        return run_requests(e, reqs);
    }

    ThreadPool pool_{1};
    std::unique_ptr<GgufFile> file_;
    std::unique_ptr<Model> model_;
    std::unique_ptr<Tokenizer> tok_;
    int32_t n_vocab_ = 0;
};

}  // namespace sieve
