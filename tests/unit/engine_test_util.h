// Helpers shared by the engine-level tests: an event collector that waits
// for finished requests (with a timeout instead of a hang) and token lists.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <vector>

#include "sieve/engine/engine.h"

namespace sieve {

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

inline std::vector<int32_t> event_tokens(const std::vector<GenEvent> &evs) {
    std::vector<int32_t> out;
    for (const GenEvent &e : evs) out.insert(out.end(), e.tokens.begin(), e.tokens.end());
    return out;
}

// A random prompt of n tokens that starts with BOS (ids in [3, n_vocab)).
inline std::vector<int32_t> random_prompt_ids(int64_t n, uint32_t seed, int32_t n_vocab, int32_t bos) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> d(3, n_vocab - 1);
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (auto &x : p) x = d(rng);
    p[0] = bos;
    return p;
}

// Greedy decoding of max_tokens tokens, EOS ignored.
inline GenRequest greedy_request(std::vector<int32_t> prompt, int64_t max_tokens) {
    GenRequest r;
    r.prompt = std::move(prompt);
    r.sampling.temperature = 0.0f;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    return r;
}

// Every logprob a request's events carry (each token's, then its top
// alternatives'), in order: for bit-for-bit comparisons.
inline std::vector<float> event_logprobs(const std::vector<GenEvent> &evs) {
    std::vector<float> v;
    for (const GenEvent &ev : evs) {
        for (const TokenLogprob &t : ev.logprobs) v.push_back(t.logprob);
        for (const auto &top : ev.top_logprobs)
            for (const TokenLogprob &t : top) v.push_back(t.logprob);
    }
    return v;
}

// Submits all requests at once and returns each one's events.
inline std::vector<std::vector<GenEvent>> run_requests(Engine &e, const std::vector<GenRequest> &reqs) {
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

}  // namespace sieve
