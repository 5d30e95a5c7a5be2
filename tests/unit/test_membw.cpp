// The bandwidth probe behind `sieve bench`: its read loop sums every word
// (so the loads cannot be dropped and none are skipped), and bad options are
// errors, not crashes. No timing is asserted.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "sieve/core/membw.h"

namespace sieve {
namespace {

TEST(MemBw, SumMatchesNaiveOnOddLengths) {
    std::mt19937_64 rng(7);
    for (int64_t n : {1, 7, 8, 9, 63, 1000, 4097}) {
        std::vector<uint64_t> w(static_cast<size_t>(n));
        uint64_t want = 0;
        for (uint64_t &x : w) {
            x = rng() | 1;  // never zero
            want += x;
        }
        EXPECT_EQ(membw_sum_words(w.data(), n), want) << "n = " << n;
        for (int streams : {2, 3, 4, 8})  // lockstep parts plus the leftover words
            EXPECT_EQ(membw_sum_words(w.data(), n, streams), want) << "n = " << n << ", " << streams << " streams";
    }
}

TEST(MemBw, MeasuresSmallBuffer) {
    MemBwOptions o;
    o.buffer_bytes = int64_t{4} << 20;
    o.n_passes = 2;
    o.thread_counts = {1, 2};
    Result<MemBwResult> r = measure_read_bandwidth(o);
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_EQ(r->median_gbps.size(), 2u);
    EXPECT_GT(r->gbps, 0.0);
    EXPECT_TRUE(r->best_threads == 1 || r->best_threads == 2);
    EXPECT_TRUE(r->best_streams == 1 || r->best_streams == 2 || r->best_streams == 4);
    EXPECT_EQ(r->gbps, std::max(r->median_gbps[0], r->median_gbps[1]));
}

TEST(MemBw, BadOptionsAreErrors) {
    MemBwOptions o;
    o.thread_counts = {};
    EXPECT_FALSE(measure_read_bandwidth(o).ok());
    o = MemBwOptions();
    o.buffer_bytes = 1000;
    Result<MemBwResult> r = measure_read_bandwidth(o);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("too small"), std::string::npos);
    o = MemBwOptions();
    o.buffer_bytes = int64_t{2} << 20;
    o.thread_counts = {0};
    EXPECT_FALSE(measure_read_bandwidth(o).ok());
    o = MemBwOptions();
    o.buffer_bytes = int64_t{2} << 20;
    o.streams_per_thread = {9};
    r = measure_read_bandwidth(o);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("streams per thread"), std::string::npos);
}

}  // namespace
}  // namespace sieve
