#include "sieve/core/membw.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>

namespace sieve {

namespace {

struct FreeDeleter {
    void operator()(void *p) const { std::free(p); }
};

double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

uint64_t membw_sum_words(const uint64_t *words, int64_t n_words) {
    // Eight independent accumulators: no loop-carried dependency limits the
    // load rate, and -march=native turns each group into vector adds.
    uint64_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n_words; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] += words[i + j];
    uint64_t s = 0;
    for (; i < n_words; ++i) s += words[i];
    for (uint64_t a : acc) s += a;
    return s;
}

Result<MemBwResult> measure_read_bandwidth(const MemBwOptions &opt) {
    if (opt.thread_counts.empty() || opt.n_passes < 1)
        return Status::error("memory bandwidth: need at least one thread count and one pass");
    if (opt.buffer_bytes < (int64_t{1} << 20))
        return Status::errorf("memory bandwidth: buffer of %lld bytes is too small (at least 1 MiB)",
                              static_cast<long long>(opt.buffer_bytes));
    const int64_t n_words = opt.buffer_bytes / 64 * 8;  // whole cache lines
    std::unique_ptr<uint64_t, FreeDeleter> buf(
        static_cast<uint64_t *>(std::aligned_alloc(64, static_cast<size_t>(n_words) * sizeof(uint64_t))));
    if (!buf) return Status::errorf("memory bandwidth: cannot allocate %lld bytes", static_cast<long long>(opt.buffer_bytes));
    // Nonzero, varying contents; writing them also faults every page in, so
    // no pass pays for page faults.
    uint64_t *w = buf.get();
    for (int64_t i = 0; i < n_words; ++i) w[i] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;

    MemBwResult res;
    for (int n_threads : opt.thread_counts) {
        if (n_threads < 1) return Status::errorf("memory bandwidth: thread count %d must be >= 1", n_threads);
        std::vector<double> gbps;
        std::vector<uint64_t> sums(static_cast<size_t>(n_threads));
        // Slices in whole cache lines so threads never share a line.
        const int64_t lines = n_words / 8;
        for (int pass = 0; pass < opt.n_passes; ++pass) {
            const auto t0 = std::chrono::steady_clock::now();
            std::vector<std::thread> threads;
            for (int t = 0; t < n_threads; ++t) {
                const int64_t l0 = lines * t / n_threads, l1 = lines * (t + 1) / n_threads;
                threads.emplace_back(
                    [&sums, t, w, l0, l1] { sums[static_cast<size_t>(t)] = membw_sum_words(w + l0 * 8, (l1 - l0) * 8); });
            }
            for (std::thread &th : threads) th.join();
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            for (uint64_t x : sums) res.checksum += x;
            gbps.push_back(static_cast<double>(n_words * 8) / s / 1e9);
        }
        const double med = median_of(gbps);
        res.median_gbps.push_back(med);
        if (med > res.gbps) {
            res.gbps = med;
            res.best_threads = n_threads;
        }
    }
    return res;
}

}  // namespace sieve
