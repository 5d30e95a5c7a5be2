// Helpers shared by the engine-level tests: an event collector that waits
// for finished requests (with a timeout instead of a hang) and token lists.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
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

}  // namespace sieve
