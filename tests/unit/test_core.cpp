#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "sieve/core/fp16.h"
#include "sieve/core/page_buffer.h"
#include "sieve/core/status.h"
#include "sieve/core/thread_pool.h"
#include "sieve/quant/types.h"

using namespace sieve;

TEST(Status, CarriesMessageAndContext) {
    Status ok;
    EXPECT_TRUE(ok.ok());
    Status e = Status::errorf("field '%s': expected %d, got %d", "n_dims", 4, 7);
    EXPECT_FALSE(e.ok());
    EXPECT_EQ(e.message(), "field 'n_dims': expected 4, got 7");
    EXPECT_EQ(e.with_context("x.gguf").message(), "x.gguf: field 'n_dims': expected 4, got 7");
}

TEST(ThreadPool, EveryTaskRunsOnceAcrossManyJobs) {
    for (int n_threads : {1, 2, 3, 5}) {
        ThreadPool pool(n_threads);
        for (int job = 0; job < 200; ++job) {
            const int64_t n = 1 + (job * 37) % 101;
            std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
            std::atomic<int> bad_thread{0};
            pool.run(n, [&](int64_t task, int thread) {
                hits[static_cast<size_t>(task)].fetch_add(1);
                if (thread < 0 || thread >= n_threads) bad_thread.fetch_add(1);
            });
            for (auto &h : hits) ASSERT_EQ(h.load(), 1);
            ASSERT_EQ(bad_thread.load(), 0);
        }
    }
}

// Back-to-back tiny jobs stress the hand-over between generations (late
// workers, workers falling asleep and waking): every task of every job runs
// exactly once and the caller never hangs.
TEST(ThreadPool, BackToBackTinyJobsNeverHangOrRepeat) {
    for (int n_threads : {2, 3}) {
        ThreadPool pool(n_threads);
        std::vector<std::atomic<int>> hits(8);
        for (int job = 0; job < 20000; ++job) {
            const int64_t n = 2 + job % 7;
            pool.run(n, [&](int64_t task, int) { hits[static_cast<size_t>(task)].fetch_add(1); });
            for (int64_t t = 0; t < n; ++t) ASSERT_EQ(hits[static_cast<size_t>(t)].exchange(0), 1) << job;
        }
    }
}

TEST(Fp16, RoundTripsEveryHalf) {
    for (uint32_t h = 0; h < 65536; ++h) {
        float f = fp16_to_fp32(static_cast<uint16_t>(h));
        if (std::isnan(f)) continue;
        ASSERT_EQ(fp32_to_fp16(f), h) << "half bits " << h;
    }
}

TEST(Fp16, RoundsToNearestEven) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-70000.f, 70000.f);
    for (int i = 0; i < 100000; ++i) {
        float x = dist(rng) * (i % 3 == 0 ? 1e-5f : 1.f);
        uint16_t h = fp32_to_fp16(x);
        float y = fp16_to_fp32(h);
        if (std::isinf(y)) continue;
        // Neighbours of h must not be strictly closer to x.
        float up = fp16_to_fp32(static_cast<uint16_t>(h + 1));
        float dn = fp16_to_fp32(static_cast<uint16_t>(h - 1));
        ASSERT_LE(std::fabs(y - x), std::fabs(up - x)) << x;
        ASSERT_LE(std::fabs(y - x), std::fabs(dn - x)) << x;
    }
}

TEST(Bf16, RoundTripAndRounding) {
    EXPECT_EQ(bf16_to_fp32(fp32_to_bf16(1.5f)), 1.5f);
    EXPECT_EQ(fp32_to_bf16(1.0f + 1.0f / 256.0f), fp32_to_bf16(1.0f));  // tie to even
    EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(std::nanf("")))));
}

TEST(Types, RowBytes) {
    int64_t b = 0;
    EXPECT_TRUE(type_row_bytes(GgmlType::Q4_0, 64, &b));
    EXPECT_EQ(b, 36);
    EXPECT_TRUE(type_row_bytes(GgmlType::Q6_K, 512, &b));
    EXPECT_EQ(b, 420);
    EXPECT_FALSE(type_row_bytes(GgmlType::Q4_K, 100, &b));
    EXPECT_EQ(type_traits(999u), nullptr);
    GgmlType t;
    EXPECT_TRUE(type_from_name("q4_k", &t));
    EXPECT_EQ(t, GgmlType::Q4_K);
}

TEST(PageBuffer, AlignedWritableAndMovable) {
    std::mt19937 rng(12);
    const size_t n = (size_t{3} << 20) + 77;  // not a whole number of pages
    auto r = PageBuffer::allocate(n);
    ASSERT_TRUE(r.ok()) << r.status().message();
    PageBuffer b = std::move(r.value());
    ASSERT_EQ(b.size(), n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % PageBuffer::k_huge_page, 0u);
    std::vector<uint8_t> want(n);
    for (auto &x : want) x = static_cast<uint8_t>(rng() | 1);
    std::memcpy(b.data(), want.data(), n);
    PageBuffer moved = std::move(b);
    EXPECT_EQ(b.data(), nullptr);
    ASSERT_EQ(moved.size(), n);
    EXPECT_EQ(0, std::memcmp(moved.data(), want.data(), n));
    // Huge pages are the kernel's choice; never more than the mapping.
    EXPECT_LE(moved.huge_page_bytes(), size_t{4} << 20);

    auto zero = PageBuffer::allocate(0);
    ASSERT_FALSE(zero.ok());
    EXPECT_NE(zero.status().message().find("0 bytes"), std::string::npos) << zero.status().message();
}
