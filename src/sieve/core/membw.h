// Memory read bandwidth of this machine, the ceiling decode speed is judged
// against (`sieve bench` prints tg GB/s as a fraction of it).
//
// Method: a buffer much larger than the last-level cache is written once (so
// every page is backed), then read end to end by n threads, each summing its
// own contiguous slice with several independent accumulators (the compiler
// vectorizes the loop; the sum is returned so the reads cannot be dropped).
// One pass = one sample; the result is the median over passes, taken for
// each thread count asked for, and the best thread count wins: on small
// machines one stream may not saturate the memory controller, two may.
#pragma once

#include <cstdint>
#include <vector>

#include "sieve/core/status.h"

namespace sieve {

struct MemBwOptions {
    int64_t buffer_bytes = int64_t{1} << 30;  // >> LLC
    int n_passes = 5;                         // per thread count
    std::vector<int> thread_counts = {1, 2};
};

struct MemBwResult {
    double gbps = 0.0;            // best median over thread counts, 1e9 bytes/s
    int best_threads = 0;
    std::vector<double> median_gbps;  // per thread count, in options order
    uint64_t checksum = 0;        // the sum read; keeps the loads observable
};

// Errors when the buffer cannot be allocated or the options are empty.
Result<MemBwResult> measure_read_bandwidth(const MemBwOptions &opt);

// Reads n_words 64-bit words and returns their wrapped sum (exposed for tests).
uint64_t membw_sum_words(const uint64_t *words, int64_t n_words);

}  // namespace sieve
