// The arithmetic of `sieve bench-serve`: latency summaries (the percentile
// rule of numpy.percentile, which vLLM's benchmark uses, so numbers compare),
// the seeded workload (lengths, prompt token ids) and the arrival process.
//
// Header-only for the same reason as bench_serve_sse.h: the unit tests link
// only libsieve, which does not contain the command-line front end.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace sieve::cli {

// q in [0, 100]; linear interpolation between closest ranks:
//   pos = q/100 * (n-1), value = v[floor(pos)] + frac(pos) * (v[floor+1] - v[floor]).
// `sorted` must be ascending and non-empty.
inline double percentile_sorted(const std::vector<double> &sorted, double q) {
    double pos = q / 100.0 * double(sorted.size() - 1);
    size_t lo = size_t(std::floor(pos));
    if (lo + 1 >= sorted.size()) return sorted.back();
    double frac = pos - double(lo);
    return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

// Summary of one latency metric over a run, in milliseconds.
struct LatencySummary {
    size_t n = 0;  // 0: no samples; every other field is then 0
    double mean = 0, std = 0, min = 0, median = 0, p90 = 0, p99 = 0, max = 0;
};

inline LatencySummary summarize(std::vector<double> values) {
    LatencySummary s;
    if (values.empty()) return s;
    std::sort(values.begin(), values.end());
    s.n = values.size();
    double sum = 0;
    for (double v : values) sum += v;
    s.mean = sum / double(s.n);
    double ss = 0;
    for (double v : values) ss += (v - s.mean) * (v - s.mean);
    s.std = std::sqrt(ss / double(s.n));  // population std, as numpy.std
    s.min = values.front();
    s.max = values.back();
    s.median = percentile_sorted(values, 50);
    s.p90 = percentile_sorted(values, 90);
    s.p99 = percentile_sorted(values, 99);
    return s;
}

// One request of the workload.
struct RequestSpec {
    int64_t input_len = 0;           // prompt tokens asked for (words for text prompts)
    int64_t output_len = 0;          // max_tokens, with ignore_eos
    std::vector<int32_t> token_ids;  // the prompt as ids, or indices into the word list
};

// Lengths as vLLM's random dataset draws them: uniform integers in
// [floor(len * (1 - r)), ceil(len * (1 + r))], at least 1; r = 0 gives `len`.
inline int64_t draw_length(std::mt19937_64 &rng, int64_t len, double range_ratio) {
    if (range_ratio <= 0) return len;
    int64_t lo = std::max<int64_t>(1, int64_t(std::floor(double(len) * (1.0 - range_ratio))));
    int64_t hi = std::max<int64_t>(lo, int64_t(std::ceil(double(len) * (1.0 + range_ratio))));
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// The whole workload from one seed: the same seed gives the same requests,
// so the runs of a sweep (and sieve vs llama-server) see identical prompts.
// Ids are drawn from [0, n_choices): token ids below the vocabulary size, or
// indices into the word list of text prompts. With prefix_len > 0 every
// request starts with the same prefix_len ids (vLLM's --random-prefix-len: a
// shared system prompt), drawn once from its own stream, so the per-request
// parts are the same with or without a prefix.
inline std::vector<RequestSpec> make_workload(uint64_t seed, int64_t n, int64_t input_len, int64_t output_len,
                                              double range_ratio, int32_t n_choices, int64_t prefix_len = 0) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int32_t> pick(0, n_choices - 1);
    std::vector<int32_t> prefix(static_cast<size_t>(prefix_len));
    std::mt19937_64 prefix_rng(seed ^ 0x7f4a7c159e3779b9ull);
    for (int32_t &id : prefix) id = pick(prefix_rng);
    std::vector<RequestSpec> out(static_cast<size_t>(n));
    for (RequestSpec &r : out) {
        const int64_t own = draw_length(rng, input_len, range_ratio);
        r.input_len = prefix_len + own;
        r.output_len = draw_length(rng, output_len, range_ratio);
        r.token_ids = prefix;
        r.token_ids.resize(size_t(r.input_len));
        for (size_t i = size_t(prefix_len); i < r.token_ids.size(); ++i) r.token_ids[i] = pick(rng);
    }
    return out;
}

// Send times in seconds from the start of a run. A Poisson process of `rate`
// requests per second has exponential gaps of mean 1/rate; an infinite rate
// sends everything at t = 0. Gaps come from the inverse CDF of a uniform draw,
// -ln(1 - u) / rate, so a seed gives the same times with any standard library.
inline std::vector<double> arrival_times(uint64_t seed, int64_t n, double rate) {
    std::vector<double> t(size_t(n), 0.0);
    if (std::isinf(rate)) return t;
    std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
    double now = 0;
    for (double &x : t) {
        // 53 random bits -> u in [0, 1)
        double u = double(rng() >> 11) * (1.0 / 9007199254740992.0);
        now += -std::log1p(-u) / rate;
        x = now;
    }
    return t;
}

}  // namespace sieve::cli
