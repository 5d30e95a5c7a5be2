// The continuous-batching engine on stories260K: greedy outputs do not depend
// on batch composition, chunking or preemption (and match a plain sequential
// Model::forward + argmax); cancellation from another thread frees every KV
// page; stop strings, max_tokens, validation and the queue limit.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "sieve/engine/engine.h"
#include "sieve/engine/stop_matcher.h"
#include "sieve/gguf/gguf.h"
#include "sieve/kv/contiguous_kv.h"
#include "sieve/model/model.h"
#include "sieve/tokenizer/tokenizer.h"
#include "sieve/tokenizer/unicode.h"

namespace sieve {
namespace {

const std::string k_model = std::string(SIEVE_SHARED_MODELS) + "/stories260K.gguf";

// Gathers every request's events; wait() blocks until n requests finished.
class Collector {
public:
    GenCallback callback() {
        return [this](const GenEvent &e) {
            std::lock_guard<std::mutex> lk(mu_);
            events_[e.request_id].push_back(e);
            if (e.finished) {
                ++n_done_;
                cv_.notify_all();
            }
        };
    }
    // Fails (instead of hanging the suite) if the engine never finishes them.
    bool wait(int n) {
        std::unique_lock<std::mutex> lk(mu_);
        return cv_.wait_for(lk, std::chrono::seconds(300), [&] { return n_done_ >= n; });
    }
    std::vector<GenEvent> events(uint64_t id) {
        std::lock_guard<std::mutex> lk(mu_);
        return events_[id];
    }

private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::map<uint64_t, std::vector<GenEvent>> events_;
    int n_done_ = 0;
};

std::vector<int32_t> event_tokens(const std::vector<GenEvent> &evs) {
    std::vector<int32_t> out;
    for (const GenEvent &e : evs) out.insert(out.end(), e.tokens.begin(), e.tokens.end());
    return out;
}

std::string event_text(const std::vector<GenEvent> &evs) {
    std::string out;
    for (const GenEvent &e : evs) out += e.text;
    return out;
}

// Exactly one finished event, and it is the last.
void expect_well_formed(const std::vector<GenEvent> &evs) {
    ASSERT_FALSE(evs.empty());
    for (size_t i = 0; i + 1 < evs.size(); ++i) EXPECT_FALSE(evs[i].finished) << "event " << i;
    EXPECT_TRUE(evs.back().finished);
    for (const GenEvent &e : evs) EXPECT_TRUE(utf8_is_valid(e.text)) << "event text is not valid UTF-8";
    EXPECT_EQ(static_cast<int64_t>(event_tokens(evs).size()), evs.back().n_gen_tokens);
}

class EngineTest : public ::testing::Test {
protected:
    void SetUp() override {
        auto f = GgufFile::open(k_model);
        ASSERT_TRUE(f.ok()) << f.status().message() << " (tests need " << k_model << ")";
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
        if (o.n_threads == 0) o.n_threads = 2;
        auto e = Engine::create(*model_, *tok_, o);
        EXPECT_TRUE(e.ok()) << e.status().message();
        return e.ok() ? std::move(e.value()) : nullptr;
    }

    // Random prompt that starts with BOS (ids never all the same).
    std::vector<int32_t> random_prompt(int64_t n, uint32_t seed) const {
        std::mt19937 rng(seed);
        std::uniform_int_distribution<int32_t> d(3, n_vocab_ - 1);
        std::vector<int32_t> p(static_cast<size_t>(n));
        for (auto &x : p) x = d(rng);
        p[0] = tok_->bos_id();
        return p;
    }

    static GenRequest greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
        GenRequest r;
        r.prompt = std::move(prompt);
        r.sampling.temperature = 0.0f;
        r.max_tokens = max_tokens;
        r.ignore_eos = true;
        return r;
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
        Collector c;
        std::vector<uint64_t> ids;
        for (const GenRequest &r : reqs) {
            auto id = e.submit(r, c.callback());
            EXPECT_TRUE(id.ok()) << id.status().message();
            if (!id.ok()) return {};
            ids.push_back(*id);
        }
        EXPECT_TRUE(c.wait(static_cast<int>(reqs.size()))) << "requests did not finish";
        std::vector<std::vector<GenEvent>> out;
        for (uint64_t id : ids) out.push_back(c.events(id));
        return out;
    }

    ThreadPool pool_{2};
    std::unique_ptr<GgufFile> file_;
    std::unique_ptr<Model> model_;
    std::unique_ptr<Tokenizer> tok_;
    int32_t n_vocab_ = 0;
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

}  // namespace
}  // namespace sieve
