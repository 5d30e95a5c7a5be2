// Prometheus metrics of the server, in the text exposition format (0.0.4).
//
// Names mirror vLLM's where the concept is the same, with a `sieve:` prefix
// (docs/serving.md maps each to its vLLM counterpart). Latency histograms are
// observed by the HTTP layer from engine events; gauges and token counters are
// read from Engine::stats() at scrape time, so they are never out of step with
// the engine.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "sieve/engine/engine.h"

namespace sieve {

// Cumulative-bucket histogram; not thread-safe (ServerMetrics locks).
class Histogram {
public:
    explicit Histogram(std::vector<double> bounds);  // ascending upper bounds; +Inf is implicit
    void observe(double v);
    // "# HELP", "# TYPE" and the _bucket / _sum / _count lines.
    void render(const std::string &name, const std::string &help, std::string *out) const;
    uint64_t count() const { return count_; }

private:
    std::vector<double> bounds_;
    std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = +Inf
    double sum_ = 0.0;
    uint64_t count_ = 0;
};

class ServerMetrics {
public:
    ServerMetrics();
    void observe_ttft(double seconds);
    void observe_itl(double seconds);
    void observe_e2e(double seconds);
    void count_finished(FinishReason r);
    void count_http_error(int status);
    // The whole exposition; `stats` comes from Engine::stats() (null while loading).
    std::string render(const EngineStats *stats) const;

private:
    mutable std::mutex mu_;
    Histogram ttft_;
    Histogram itl_;
    Histogram e2e_;
    uint64_t finished_[5] = {};     // by FinishReason
    uint64_t http_4xx_ = 0;
    uint64_t http_5xx_ = 0;
};

}  // namespace sieve
