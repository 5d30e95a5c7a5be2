// Memory read bandwidth of this machine, the ceiling decode speed is judged
// against (`sieve bench` prints tg GB/s as a fraction of it).
//
// Method: a buffer much larger than the last-level cache is written once (so
// every page is backed), then read end to end by n threads, each summing its
// own contiguous slice with several independent accumulators (the compiler
// vectorizes the loop; the sum is returned so the reads cannot be dropped).
// Each thread may also split its slice into several sub-slices read in
// lockstep (one cache line from each in turn): more concurrent streams per
// core, as a kernel reading several weight rows at once has. One pass = one
// sample; the result is the median over passes, taken for each (threads,
// streams per thread) pair asked for, and the best pair wins: on small
// machines one stream may not saturate the memory controller, several may.
#pragma once

#include <cstdint>
#include <vector>

#include "sieve/core/status.h"

namespace sieve {

struct MemBwOptions {
    int64_t buffer_bytes = int64_t{1} << 30;  // >> LLC
    int n_passes = 5;                         // per thread count
    std::vector<int> thread_counts = {1, 2};
    std::vector<int> streams_per_thread = {1, 2, 4};  // each 1..8
};

struct MemBwResult {
    double gbps = 0.0;            // best median over (threads, streams), 1e9 bytes/s
    int best_threads = 0;
    int best_streams = 0;
    // Per thread count (options order), the best median over stream counts.
    std::vector<double> median_gbps;
    uint64_t checksum = 0;        // the sum read; keeps the loads observable
};

// Errors when the buffer cannot be allocated or the options are empty.
Result<MemBwResult> measure_read_bandwidth(const MemBwOptions &opt);

// Reads n_words 64-bit words and returns their wrapped sum (exposed for
// tests). With n_streams > 1 (up to 8) the words are read as that many
// contiguous parts in lockstep; the sum is the same.
uint64_t membw_sum_words(const uint64_t *words, int64_t n_words, int n_streams = 1);

}  // namespace sieve
