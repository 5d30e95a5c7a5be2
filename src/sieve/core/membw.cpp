#include "sieve/core/membw.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "sieve/core/page_buffer.h"

namespace sieve {

namespace {

double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

namespace {
// S parts of `lines` cache lines each, one line from each part in turn; 8
// accumulators per part, so no loop-carried dependency limits the load rate
// (-march=native turns each line into vector adds).
template <int S>
uint64_t sum_lockstep(const uint64_t *words, int64_t lines) {
    uint64_t acc[S][8] = {};
    for (int64_t l = 0; l < lines; ++l)
        for (int s = 0; s < S; ++s)
            for (int j = 0; j < 8; ++j) acc[s][j] += words[(s * lines + l) * 8 + j];
    uint64_t sum = 0;
    for (int s = 0; s < S; ++s)
        for (int j = 0; j < 8; ++j) sum += acc[s][j];
    return sum;
}
}  // namespace

uint64_t membw_sum_words(const uint64_t *words, int64_t n_words, int n_streams) {
    n_streams = std::clamp(n_streams, 1, 8);
    const int64_t lines = n_words / 8 / n_streams;
    uint64_t s = 0;
    switch (n_streams) {
        case 1: s = sum_lockstep<1>(words, lines); break;
        case 2: s = sum_lockstep<2>(words, lines); break;
        case 3: s = sum_lockstep<3>(words, lines); break;
        case 4: s = sum_lockstep<4>(words, lines); break;
        case 5: s = sum_lockstep<5>(words, lines); break;
        case 6: s = sum_lockstep<6>(words, lines); break;
        case 7: s = sum_lockstep<7>(words, lines); break;
        default: s = sum_lockstep<8>(words, lines); break;
    }
    for (int64_t i = lines * 8 * n_streams; i < n_words; ++i) s += words[i];
    return s;
}

Result<MemBwResult> measure_read_bandwidth(const MemBwOptions &opt) {
    if (opt.thread_counts.empty() || opt.n_passes < 1)
        return Status::error("memory bandwidth: need at least one thread count and one pass");
    if (opt.buffer_bytes < (int64_t{1} << 20))
        return Status::errorf("memory bandwidth: buffer of %lld bytes is too small (at least 1 MiB)",
                              static_cast<long long>(opt.buffer_bytes));
    const int64_t n_words = opt.buffer_bytes / 64 * 8;  // whole cache lines
    // Backed like the model's weights (PageBuffer: huge pages where the
    // kernel gives them), so the probe is not slowed by page walks the
    // forward pass does not pay.
    Result<PageBuffer> buf = PageBuffer::allocate(static_cast<size_t>(n_words) * sizeof(uint64_t));
    if (!buf.ok()) return buf.status().with_context("memory bandwidth");
    // Nonzero, varying contents; writing them also faults every page in, so
    // no pass pays for page faults.
    uint64_t *w = reinterpret_cast<uint64_t *>(buf.value().data());
    for (int64_t i = 0; i < n_words; ++i) w[i] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;

    MemBwResult res;
    for (int n_streams : opt.streams_per_thread)
        if (n_streams < 1 || n_streams > 8)
            return Status::errorf("memory bandwidth: %d streams per thread, expected 1..8", n_streams);
    for (int n_threads : opt.thread_counts) {
        if (n_threads < 1) return Status::errorf("memory bandwidth: thread count %d must be >= 1", n_threads);
        double best_for_threads = 0.0;
        for (int n_streams : opt.streams_per_thread) {
            std::vector<double> gbps;
            std::vector<uint64_t> sums(static_cast<size_t>(n_threads));
            // Slices in whole cache lines so threads never share a line.
            const int64_t lines = n_words / 8;
            for (int pass = 0; pass < opt.n_passes; ++pass) {
                const auto t0 = std::chrono::steady_clock::now();
                std::vector<std::thread> threads;
                for (int t = 0; t < n_threads; ++t) {
                    const int64_t l0 = lines * t / n_threads, l1 = lines * (t + 1) / n_threads;
                    threads.emplace_back([&sums, t, w, l0, l1, n_streams] {
                        sums[static_cast<size_t>(t)] = membw_sum_words(w + l0 * 8, (l1 - l0) * 8, n_streams);
                    });
                }
                for (std::thread &th : threads) th.join();
                const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                for (uint64_t x : sums) res.checksum += x;
                gbps.push_back(static_cast<double>(n_words * 8) / s / 1e9);
            }
            const double med = median_of(gbps);
            best_for_threads = std::max(best_for_threads, med);
            if (med > res.gbps) {
                res.gbps = med;
                res.best_threads = n_threads;
                res.best_streams = n_streams;
            }
        }
        res.median_gbps.push_back(best_for_threads);
    }
    return res;
}

}  // namespace sieve
