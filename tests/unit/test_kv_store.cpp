// The vAttention lane store: byte-size parsing, the page pool, lanes that grow
// and shrink by mapping pool pages, copy on write of shared pages, compaction,
// deferred reclamation and exhaustion (a Status, never a signal).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "sieve/core/sysmem.h"
#include "sieve/kv/page_pool.h"
#include "sieve/kv/vattention_kv.h"

namespace sieve {
namespace {

TEST(KvParseBytes, UnitsAndErrors) {
    struct Case {
        const char *text;
        int64_t bytes;
    };
    const Case good[] = {{"4096", 4096},           {"64KiB", 65536},         {"64k", 65536},
                         {"512MiB", 512LL << 20},  {"4GiB", 4LL << 30},      {"4gib", 4LL << 30},
                         {"1.5G", 3LL << 29},      {"2 TiB", 2LL << 40},     {"3KB", 3000},
                         {"7MB", 7000000},         {" 12b ", 12},            {"0.5KiB", 512}};
    for (const Case &c : good) {
        int64_t v = -1;
        Status st = parse_bytes(c.text, &v);
        ASSERT_TRUE(st.ok()) << c.text << ": " << st.message();
        EXPECT_EQ(v, c.bytes) << c.text;
    }
    const char *bad[] = {"", "KiB", "12XB", "-4GiB", "1.2.3", "0", "0.1B", "99999999999TiB", "4 GiB x", "1e9"};
    for (const char *t : bad) {
        int64_t v = -7;
        Status st = parse_bytes(t, &v);
        EXPECT_FALSE(st.ok()) << "'" << t << "' parsed as " << v;
        EXPECT_NE(st.message().find("byte size"), std::string::npos) << st.message();
        EXPECT_EQ(v, -7);
    }
}

TEST(KvPagePool, RejectsBadSizes) {
    // Too small, not a multiple of 4 KiB, too large (multiples of 4 KiB such
    // as 68 KiB are pages: test_kv_quant).
    for (int64_t pb : {int64_t{1024}, int64_t{12290}, int64_t{4} << 20}) {
        PagePoolOptions o;
        o.page_bytes = pb;
        o.budget_bytes = 1 << 20;
        auto p = PagePool::create(o);
        EXPECT_FALSE(p.ok()) << pb;
        EXPECT_NE(p.status().message().find("page size"), std::string::npos);
    }
    PagePoolOptions o;
    o.page_bytes = 64 << 10;
    o.budget_bytes = 1000;
    EXPECT_FALSE(PagePool::create(o).ok());
}

TEST(KvPagePool, MemInfoParses) {
    const MemInfo m = parse_meminfo("MemTotal:       24576000 kB\nMemFree:         1000 kB\n"
                                    "MemAvailable:   20971520 kB\nHugePages_Total:      16\n"
                                    "HugePages_Free:       12\nHugepagesize:       2048 kB\n");
    EXPECT_EQ(m.available, int64_t{20971520} * 1024);
    EXPECT_EQ(m.huge_free, int64_t{12} * 2048 * 1024);
    EXPECT_EQ(parse_meminfo("MemTotal: 100 kB\n").available, -1);  // no MemAvailable: unknown
    EXPECT_GT(read_meminfo().available, 0);                         // Linux has /proc/meminfo
}

// A budget past the memory the machine has available is refused up front
// (the pool backs pages lazily: it would end in the OOM killer, not an
// error), naming both sizes; a default sized past it is capped instead.
TEST(KvPagePool, RefusesABudgetThisMachineCannotHold) {
    const int64_t avail = read_meminfo().available;
    ASSERT_GT(avail, 0);
    PagePoolOptions o;
    o.budget_bytes = (avail / o.page_bytes + 1000) * o.page_bytes;
    auto pr = PagePool::create(o);
    ASSERT_FALSE(pr.ok());
    EXPECT_NE(pr.status().message().find("more than this machine has available"), std::string::npos)
        << pr.status().message();
    EXPECT_NE(pr.status().message().find("ask for at most"), std::string::npos) << pr.status().message();
    o.budget_bytes = 64 * o.page_bytes;  // a small one still works
    EXPECT_TRUE(PagePool::create(o).ok());

    const int64_t capped = cap_kv_default(4 * avail, "a test's default");
    EXPECT_GT(capped, 0);
    EXPECT_LE(capped, avail);
    EXPECT_EQ(cap_kv_default(int64_t{1} << 20, "a test's default"), int64_t{1} << 20);
    EXPECT_EQ(format_bytes(int64_t{3} << 29), "1.50 GiB");
    EXPECT_EQ(format_bytes(int64_t{640} << 20), "640.0 MiB");
}

TEST(KvPagePool, AllocReleaseRefcounts) {
    PagePoolOptions o;
    o.page_bytes = 4096;
    o.budget_bytes = 10 * 4096 + 100;  // rounds down to 10 pages
    auto pr = PagePool::create(o);
    ASSERT_TRUE(pr.ok()) << pr.status().message();
    PagePool &pool = **pr;
    EXPECT_EQ(pool.n_pages(), 10);
    std::vector<int32_t> got;
    for (int i = 0; i < 10; ++i) {
        auto p = pool.alloc();
        ASSERT_TRUE(p.ok());
        got.push_back(*p);
    }
    auto none = pool.alloc();
    ASSERT_FALSE(none.ok());
    EXPECT_NE(none.status().message().find("exhausted"), std::string::npos) << none.status().message();
    pool.add_ref(got[3]);
    EXPECT_EQ(pool.refcount(got[3]), 2);
    EXPECT_EQ(pool.n_refs(), 11);
    pool.release(got[3]);
    EXPECT_EQ(pool.n_free(), 0);
    for (int32_t p : got) pool.release(p);
    EXPECT_EQ(pool.n_free(), 10);
    EXPECT_TRUE(pool.check_accounting().ok());
}

VAttentionKvOptions small_opts(int n_seq, int64_t head_dim, int64_t max_ctx, int64_t n_pages, int64_t pb = 4096) {
    VAttentionKvOptions o;
    o.shape.n_seq = n_seq;
    o.shape.n_layer = 2;
    o.shape.n_head_kv = 2;
    o.shape.head_dim = head_dim;
    o.max_ctx = max_ctx;
    o.pool.page_bytes = pb;
    o.pool.budget_bytes = n_pages * pb;
    return o;
}

void fill_rows(float *lane, int64_t r0, int64_t r1, int64_t d, float tag) {
    for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = 0; c < d; ++c) lane[r * d + c] = tag + static_cast<float>(r) + 0.001f * static_cast<float>(c);
}

TEST(KvLanes, GrowShrinkAndStablePointers) {
    const int64_t d = 12;  // 48-byte rows straddle 4 KiB pages
    auto kr = VAttentionKv::create(small_opts(2, d, 1000, 128));
    ASSERT_TRUE(kr.ok()) << kr.status().message();
    VAttentionKv &kv = **kr;
    float *k00 = kv.k_lane(0, 1, 1);
    ASSERT_TRUE(kv.reserve(0, 300).ok());
    EXPECT_GE(kv.capacity(0), 300);
    fill_rows(k00, 0, 300, d, 7.0f);
    kv.set_n_pos(0, 300);
    ASSERT_TRUE(kv.reserve(0, 900).ok());
    EXPECT_EQ(kv.k_lane(0, 1, 1), k00);  // pointers never move
    fill_rows(k00, 300, 900, d, 7.0f);
    kv.set_n_pos(0, 900);
    for (int64_t r = 0; r < 900; ++r) ASSERT_EQ(k00[r * d + 5], 7.0f + static_cast<float>(r) + 0.005f) << r;
    // 900 rows x 48 B = 11 pages (+1 headroom, capped by the 12-page span) per lane, 8 lanes.
    EXPECT_EQ(kv.lane_mapped_bytes(0, 1, 1), 2 * 12 * 4096);
    EXPECT_EQ(kv.seq_mapped_bytes(0), 8 * 12 * 4096);
    EXPECT_EQ(kv.layer_mapped_bytes(0), 4 * 12 * 4096);
    EXPECT_EQ(kv.mapped_pages(), 96);
    ASSERT_TRUE(kv.check_accounting().ok());
    kv.release(0);
    EXPECT_EQ(kv.pool().n_free(), kv.pool().n_pages());
    EXPECT_TRUE(kv.check_accounting().ok());
}

TEST(KvLanes, ReserveBeyondContextIsAnError) {
    auto kr = VAttentionKv::create(small_opts(1, 8, 100, 64));
    ASSERT_TRUE(kr.ok());
    Status st = (*kr)->reserve(0, 101);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("at most 100"), std::string::npos) << st.message();
}

TEST(KvLanes, ExhaustionIsAStatusAndAllMemoryComesBack) {
    const int64_t d = 16;  // 64-byte rows, 64 rows per page
    auto kr = VAttentionKv::create(small_opts(6, d, 2048, 40));
    ASSERT_TRUE(kr.ok());
    VAttentionKv &kv = **kr;
    std::mt19937 rng(5);
    int n_fail = 0;
    // Grow every slot by odd amounts until the pool refuses; each failure must
    // leave consistent accounting and the data already written intact.
    for (int step = 0; step < 60; ++step) {
        const int seq = step % 6;
        const int64_t n0 = kv.n_pos(seq), n1 = std::min<int64_t>(2048, n0 + 1 + rng() % 90);
        Status st = kv.reserve(seq, n1);
        ASSERT_TRUE(kv.check_accounting().ok()) << kv.check_accounting().message();
        if (!st.ok()) {
            ++n_fail;
            EXPECT_NE(st.message().find("KV pool exhausted"), std::string::npos) << st.message();
            continue;
        }
        for (int64_t il = 0; il < 2; ++il)
            for (int64_t h = 0; h < 2; ++h) {
                fill_rows(kv.k_lane(seq, il, h), n0, n1, d, 100.0f * seq);
                fill_rows(kv.v_lane(seq, il, h), n0, n1, d, -100.0f * seq);
            }
        kv.set_n_pos(seq, n1);
    }
    EXPECT_GT(n_fail, 0);
    EXPECT_EQ(kv.pool().n_free(), 0);
    for (int seq = 0; seq < 6; ++seq) {
        const float *k = kv.k_lane(seq, 1, 0);
        for (int64_t r = 0; r < kv.n_pos(seq); ++r) ASSERT_EQ(k[r * d], 100.0f * seq + static_cast<float>(r));
    }
    // clear() caches pages (deferred reclamation); a new sequence in another
    // slot takes them back on demand.
    kv.clear(0);
    kv.clear(1);
    EXPECT_EQ(kv.pool().n_free(), 0);
    const int64_t before = kv.stats().n_reclaimed_pages;
    ASSERT_TRUE(kv.reserve(2, kv.n_pos(2) + 200).ok());
    EXPECT_GT(kv.stats().n_reclaimed_pages, before);
    for (int seq = 0; seq < 6; ++seq) kv.clear(seq);
    EXPECT_GT(kv.trim(), 0);
    EXPECT_EQ(kv.pool().n_free(), kv.pool().n_pages());
    EXPECT_EQ(kv.mapped_pages(), 0);
    EXPECT_TRUE(kv.check_accounting().ok());
}

TEST(KvLanes, DeferredReclamationReusesTheSlotsPages) {
    auto kr = VAttentionKv::create(small_opts(2, 8, 512, 64));
    ASSERT_TRUE(kr.ok());
    VAttentionKv &kv = **kr;
    ASSERT_TRUE(kv.reserve(0, 400).ok());
    kv.set_n_pos(0, 400);
    const int64_t mapped = kv.mapped_pages();
    kv.clear(0);
    EXPECT_EQ(kv.mapped_pages(), mapped);
    kv.reset_stats();
    ASSERT_TRUE(kv.reserve(0, 300).ok());  // the next sequence in slot 0 maps nothing
    EXPECT_EQ(kv.stats().n_map_calls, 0);
    EXPECT_EQ(kv.n_pos(0), 0);
}

// Within one step the engine reserves for several sequences before the
// forward pass writes any row. A later reserve() that runs the pool dry must
// not reclaim pages reserved earlier in the step, even for a slot whose rows
// are all still unwritten (n_tokens == 0 looks idle): it fails instead, and
// the first slot's rows stay writable.
TEST(KvLanes, ReclaimNeverTakesReservedButUnwrittenPages) {
    const int64_t d = 8, pb = 4096, rows_per_page = pb / (d * 4);
    // 2 layers x 2 heads x K/V = 8 lanes per slot; 16 pages = 2 pages per lane for one slot.
    auto kr = VAttentionKv::create(small_opts(2, d, 512, 16, pb));
    ASSERT_TRUE(kr.ok()) << kr.status().message();
    VAttentionKv &kv = **kr;
    ASSERT_TRUE(kv.reserve(0, 2 * rows_per_page).ok());
    Status st = kv.reserve(1, rows_per_page);
    EXPECT_FALSE(st.ok()) << "slot 1 took pages reserved for slot 0";
    for (int64_t l = 0; l < 2; ++l)
        for (int64_t h = 0; h < 2; ++h) {
            fill_rows(kv.k_lane(0, l, h), 0, 2 * rows_per_page, d, 1.0f);
            fill_rows(kv.v_lane(0, l, h), 0, 2 * rows_per_page, d, 2.0f);
        }
    kv.set_n_pos(0, 2 * rows_per_page);
    EXPECT_EQ(kv.k_lane(0, 1, 1)[(2 * rows_per_page - 1) * d + 3], 1.0f + static_cast<float>(2 * rows_per_page - 1) + 0.003f);
    // Once slot 0 is cleared its cached pages are fair game again.
    kv.clear(0);
    EXPECT_TRUE(kv.reserve(1, rows_per_page).ok());
    EXPECT_TRUE(kv.check_accounting().ok());
}

TEST(KvLanes, MapAheadKeepsMmapOutOfReserve) {
    const int64_t d = 16;  // 64 rows per 4 KiB page
    auto kr = VAttentionKv::create(small_opts(1, d, 4096, 512));
    ASSERT_TRUE(kr.ok());
    VAttentionKv &kv = **kr;
    ASSERT_TRUE(kv.reserve(0, 100).ok());
    kv.set_n_pos(0, 100);
    kv.reset_stats();
    for (int64_t n = 101; n <= 1000; ++n) {
        ASSERT_TRUE(kv.reserve(0, n).ok());
        kv.set_n_pos(0, n);
        ASSERT_TRUE(kv.map_ahead(0).ok());
    }
    EXPECT_EQ(kv.stats().n_map_calls_reserve, 0);
    EXPECT_GT(kv.stats().n_map_calls, 0);
}

TEST(KvLanes, SharedPagesAreCopiedOnWrite) {
    const int64_t d = 10;
    auto kr = VAttentionKv::create(small_opts(3, d, 1000, 128));
    ASSERT_TRUE(kr.ok());
    VAttentionKv &kv = **kr;
    ASSERT_TRUE(kv.reserve(0, 500).ok());
    for (int64_t il = 0; il < 2; ++il)
        for (int64_t h = 0; h < 2; ++h) {
            fill_rows(kv.k_lane(0, il, h), 0, 500, d, 1000.0f);
            fill_rows(kv.v_lane(0, il, h), 0, 500, d, 2000.0f);
        }
    kv.set_n_pos(0, 500);
    const int64_t used = kv.pool().n_used();
    ASSERT_TRUE(kv.share_prefix(1, 0, 450).ok());
    EXPECT_EQ(kv.pool().n_used(), used);  // no copy yet
    EXPECT_EQ(kv.n_pos(1), 450);
    EXPECT_EQ(std::memcmp(kv.k_lane(1, 1, 1), kv.k_lane(0, 1, 1), 450 * d * sizeof(float)), 0);
    // Slot 1 appends: rows 450.. sit on the last shared page, which is copied first.
    ASSERT_TRUE(kv.reserve(1, 460).ok());
    fill_rows(kv.k_lane(1, 1, 1), 450, 460, d, -5.0f);
    kv.set_n_pos(1, 460);
    EXPECT_GT(kv.stats().n_cow_pages, 0);
    EXPECT_EQ(kv.k_lane(0, 1, 1)[455 * d], 1000.0f + 455.0f);  // slot 0 unchanged
    // Slot 0 rewrites row 10 (a shared page): slot 1 keeps the old value.
    ASSERT_TRUE(kv.prepare_write(0, 10).ok());
    kv.v_lane(0, 0, 1)[10 * d + 3] = 42.0f;
    EXPECT_EQ(kv.v_lane(1, 0, 1)[10 * d + 3], 2000.0f + 10.0f + 0.003f);
    EXPECT_TRUE(kv.check_accounting().ok());
    // Releasing both returns every page.
    kv.release(0);
    kv.release(1);
    EXPECT_EQ(kv.pool().n_free(), kv.pool().n_pages());
    // Bad requests are errors.
    EXPECT_FALSE(kv.share_prefix(1, 1, 0).ok());
    EXPECT_FALSE(kv.share_prefix(1, 0, 5).ok());  // src holds 0 rows now
}

TEST(KvLanes, CompactKeepsRowsInOrderAndFreesTheTail) {
    const int64_t d = 8;  // 128 rows per page
    auto kr = VAttentionKv::create(small_opts(2, d, 2048, 256));
    ASSERT_TRUE(kr.ok());
    VAttentionKv &kv = **kr;
    ASSERT_TRUE(kv.reserve(0, 1000).ok());
    for (int64_t il = 0; il < 2; ++il)
        for (int64_t h = 0; h < 2; ++h) {
            fill_rows(kv.k_lane(0, il, h), 0, 1000, d, 10.0f);
            fill_rows(kv.v_lane(0, il, h), 0, 1000, d, 20.0f);
        }
    kv.set_n_pos(0, 1000);
    std::mt19937 rng(11);
    std::vector<int32_t> keep;
    for (int32_t r = 0; r < 1000; ++r)
        if (r < 4 || r >= 960 || rng() % 7 == 0) keep.push_back(r);
    const int64_t before = kv.lane_mapped_bytes(0, 1, 0);
    ASSERT_TRUE(kv.compact(0, 1, 0, keep.data(), static_cast<int64_t>(keep.size())).ok());
    EXPECT_EQ(kv.n_rows(0, 1, 0), static_cast<int64_t>(keep.size()));
    EXPECT_EQ(kv.n_rows(0, 1, 1), 1000);
    EXPECT_LT(kv.lane_mapped_bytes(0, 1, 0), before);
    EXPECT_EQ(kv.lane_mapped_bytes(0, 1, 0), 2 * 4096 * ((static_cast<int64_t>(keep.size()) * 32 + 4095) / 4096));
    for (size_t i = 0; i < keep.size(); ++i) {
        ASSERT_EQ(kv.k_lane(0, 1, 0)[i * d + 1], 10.0f + keep[i] + 0.001f);
        ASSERT_EQ(kv.v_lane(0, 1, 0)[i * d + 7], 20.0f + keep[i] + 0.007f);
    }
    // A dense step after compaction grows every lane by one row from its own end.
    const int64_t nk = static_cast<int64_t>(keep.size());
    ASSERT_TRUE(kv.reserve(0, 1001).ok());
    kv.k_lane(0, 1, 0)[nk * d] = -1.0f;
    kv.set_n_pos(0, 1001);
    EXPECT_EQ(kv.n_rows(0, 1, 0), nk + 1);
    EXPECT_EQ(kv.n_rows(0, 0, 0), 1001);
    EXPECT_TRUE(kv.check_accounting().ok());
    // Bad keep lists change nothing.
    const int32_t unsorted[] = {3, 2};
    const int32_t out_of_range[] = {0, 5000};
    EXPECT_FALSE(kv.compact(0, 0, 0, unsorted, 2).ok());
    EXPECT_FALSE(kv.compact(0, 0, 0, out_of_range, 2).ok());
    EXPECT_EQ(kv.n_rows(0, 0, 0), 1001);
}


// 2 MiB pages take hugetlbfs pages where the system has some reserved
// (/proc/sys/vm/nr_hugepages) and normal pages otherwise; the lanes behave
// the same either way.
TEST(KvLanes, TwoMiBPagesHugeOrNot) {
    constexpr int64_t k_2m = int64_t{2} << 20;
    const int64_t d = 64;  // 256-byte rows: 8192 per page
    VAttentionKvOptions o = small_opts(1, d, 3 * 8192, 16, k_2m);
    o.headroom_pages = 0;
    auto kr = VAttentionKv::create(o);
    ASSERT_TRUE(kr.ok()) << kr.status().message();
    VAttentionKv &kv = **kr;
    std::printf("2 MiB KV pages: %s\n", kv.pool().huge_pages() ? "hugetlbfs" : "normal pages (none reserved)");
    const int64_t rows = 8192 + 777;  // two pages per lane
    ASSERT_TRUE(kv.reserve(0, rows).ok());
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-3.0f, 3.0f);
    std::vector<float> want(static_cast<size_t>(rows * d));
    for (float &x : want) x = u(rng);
    for (int64_t l = 0; l < 2; ++l)
        for (int64_t h = 0; h < 2; ++h) {
            std::memcpy(kv.k_lane(0, l, h), want.data(), want.size() * sizeof(float));
            for (int64_t i = 0; i < rows * d; ++i) kv.v_lane(0, l, h)[i] = -want[static_cast<size_t>(i)];
        }
    kv.set_n_pos(0, rows);
    for (int64_t l = 0; l < 2; ++l)
        for (int64_t h = 0; h < 2; ++h) {
            EXPECT_EQ(std::memcmp(kv.k_lane(0, l, h), want.data(), want.size() * sizeof(float)), 0);
            EXPECT_EQ(kv.v_lane(0, l, h)[rows * d - 1], -want.back());
        }
    EXPECT_EQ(kv.seq_mapped_bytes(0), 8 * 2 * k_2m);
    EXPECT_TRUE(kv.check_accounting().ok());
    kv.release(0);
    EXPECT_EQ(kv.pool().n_free(), kv.pool().n_pages());
}

// A 2 MiB pool larger than the huge pages the system has: pages past them
// fail to allocate with a status naming the cause (never SIGBUS at first
// touch), and everything allocated goes back. Without reserved huge pages
// the pool is ordinary memory and every page allocates.
TEST(KvPagePool, MoreTwoMiBPagesThanTheSystemHas) {
    constexpr int64_t k_2m = int64_t{2} << 20;
    int64_t free_huge = 0;
    if (FILE *f = std::fopen("/proc/meminfo", "r")) {
        char line[256];
        while (std::fgets(line, sizeof line, f))
            if (std::sscanf(line, "HugePages_Free: %ld", &free_huge) == 1) break;
        std::fclose(f);
    }
    PagePoolOptions o;
    o.page_bytes = k_2m;
    o.budget_bytes = (free_huge + 3) * k_2m;
    auto pr = PagePool::create(o);
    ASSERT_TRUE(pr.ok()) << pr.status().message();
    PagePool &pool = **pr;
    std::vector<int32_t> got;
    Status last;
    for (int64_t i = 0; i < pool.n_pages(); ++i) {
        Result<int32_t> p = pool.alloc();
        if (!p.ok()) {
            last = p.status();
            break;
        }
        got.push_back(*p);
    }
    if (pool.huge_pages()) {
        ASSERT_FALSE(last.ok()) << "all " << pool.n_pages() << " huge pages allocated with " << free_huge << " free";
        EXPECT_NE(last.message().find("cannot back page"), std::string::npos) << last.message();
        EXPECT_GE(static_cast<int64_t>(got.size()), 1);
    } else {
        EXPECT_TRUE(last.ok()) << last.message();
        EXPECT_EQ(static_cast<int64_t>(got.size()), pool.n_pages());
    }
    for (int32_t p : got) pool.release(p);
    EXPECT_EQ(pool.n_free(), pool.n_pages());
    EXPECT_TRUE(pool.check_accounting().ok());
}

// ---------------------------------------------------------------------------
// Prefix cache
// ---------------------------------------------------------------------------

// 1 layer, 1 KV head, 8-float rows: 128 rows a 4 KiB page, 2 lanes a slot.
std::unique_ptr<VAttentionKv> prefix_store(int64_t n_pages, int64_t block = 16) {
    VAttentionKvOptions o;
    o.shape = KvShape{3, 1, 1, 8};
    o.max_ctx = 512;
    o.pool.page_bytes = 4096;
    o.pool.budget_bytes = n_pages * 4096;
    o.headroom_pages = 0;
    o.prefix_block_rows = block;
    auto r = VAttentionKv::create(o);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? std::move(r.value()) : nullptr;
}

// Fills slot s with n rows whose values come from the tokens (row i of K:
// tokens[i] + 0.5 in every column, V the negative), like a model's KV.
void fill_from_tokens(VAttentionKv &kv, int s, const std::vector<int32_t> &tokens) {
    const int64_t n0 = kv.n_pos(s), n = static_cast<int64_t>(tokens.size());
    ASSERT_TRUE(kv.reserve(s, n).ok());
    float *k = kv.k_lane(s, 0, 0), *v = kv.v_lane(s, 0, 0);
    for (int64_t i = n0; i < n; ++i)
        for (int c = 0; c < 8; ++c) {
            k[i * 8 + c] = static_cast<float>(tokens[static_cast<size_t>(i)]) + 0.5f;
            v[i * 8 + c] = -k[i * 8 + c];
        }
    kv.set_n_pos(s, n);
}

std::vector<int32_t> tokens_from(int32_t start, int64_t n) {
    std::vector<int32_t> t;
    for (int64_t i = 0; i < n; ++i) t.push_back(start + static_cast<int32_t>(i * 7 % 1000));
    return t;
}

TEST(KvPrefixCache, RejectsShapesWhereBlocksWouldStraddlePages) {
    const KvShape six{1, 1, 1, 6};  // 24-byte rows do not divide a page
    EXPECT_NE(VAttentionKv::prefix_block_check(six, 4096, 16).find("straddle"), std::string::npos);
    const KvShape eight{1, 1, 1, 8};  // 128 rows a page
    EXPECT_NE(VAttentionKv::prefix_block_check(eight, 4096, 48).find("neither divide"), std::string::npos);
    EXPECT_EQ(VAttentionKv::prefix_block_check(eight, 4096, 16), "");
    EXPECT_EQ(VAttentionKv::prefix_block_check(eight, 4096, 256), "");
    VAttentionKvOptions o;
    o.shape = six;
    o.max_ctx = 64;
    o.pool.page_bytes = 4096;
    o.pool.budget_bytes = 8 * 4096;
    o.prefix_block_rows = 16;
    auto r = VAttentionKv::create(o);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("prefix cache"), std::string::npos) << r.status().message();
}

// Publish a 200-row slot, attach 192 rows of it into another slot: the rows
// are the same bytes with no new page, the next write copies the page the hit
// ends in, and the cached rows stay what they were.
TEST(KvPrefixCache, AttachMapsTheSameRowsAndCopiesOnTheFirstWrite) {
    auto kv = prefix_store(16);
    ASSERT_TRUE(kv);
    const std::vector<int32_t> a = tokens_from(1, 200);
    ASSERT_NO_FATAL_FAILURE(fill_from_tokens(*kv, 0, a));
    kv->prefix_publish(0, a.data(), 200, /*whole_pages_only=*/true, 0);
    EXPECT_EQ(kv->prefix_stats().n_blocks, 8) << "only the first page (128 rows) is whole";
    kv->prefix_publish(0, a.data(), 200, false, 0);
    EXPECT_EQ(kv->prefix_stats().n_blocks, 12);
    std::vector<int32_t> b = a;
    b.resize(230);
    for (size_t i = 200; i < b.size(); ++i) b[i] = 5000 + static_cast<int32_t>(i);
    const PrefixHit hit = kv->prefix_lookup(b.data(), 230, 229, 0);
    EXPECT_EQ(hit.rows, 192);
    EXPECT_EQ(hit.pages_taken, 0) << "slot 0 still maps both pages";
    EXPECT_EQ(hit.pages_new, 2 * (2 - 1)) << "the page rows 128..191 sit in is copied on write";
    const int64_t free0 = kv->n_free_pages();
    ASSERT_TRUE(kv->prefix_attach(1, b.data(), 192, 0).ok());
    EXPECT_EQ(kv->n_free_pages(), free0);
    EXPECT_EQ(kv->n_pos(1), 192);
    EXPECT_EQ(std::memcmp(kv->k_lane(1, 0, 0), kv->k_lane(0, 0, 0), 192 * 32), 0);
    EXPECT_EQ(kv->pages_to_reserve(1, 230), hit.pages_new);
    ASSERT_NO_FATAL_FAILURE(fill_from_tokens(*kv, 1, b));
    EXPECT_EQ(kv->n_free_pages(), free0 - hit.pages_new);
    EXPECT_EQ(kv->k_lane(0, 0, 0)[199 * 8], 1.5f + static_cast<float>(199 * 7 % 1000)) << "slot 0 untouched";
    EXPECT_EQ(kv->k_lane(1, 0, 0)[199 * 8], 1.5f + static_cast<float>(199 * 7 % 1000));
    EXPECT_EQ(kv->k_lane(1, 0, 0)[210 * 8], 5210.5f);
    EXPECT_TRUE(kv->check_accounting().ok());
    // A different first block shares nothing, whatever follows.
    std::vector<int32_t> c = a;
    c[3] = 999999;
    EXPECT_EQ(kv->prefix_lookup(c.data(), 200, 199, 0).rows, 0);
}

// KV published in one namespace (a prefill with a mask) is found only in
// that namespace: the same tokens in the dense namespace or in another miss,
// and a chain attached in a namespace goes on being published in it.
TEST(KvPrefixCache, NamespacesKeepKvOfDifferentPrefillsApart) {
    auto kv = prefix_store(16);
    ASSERT_TRUE(kv);
    const uint64_t ns = 0x9e3779b97f4a7c15ull, other = 12345;
    const std::vector<int32_t> a = tokens_from(1, 200);
    ASSERT_NO_FATAL_FAILURE(fill_from_tokens(*kv, 0, a));
    kv->prefix_publish(0, a.data(), 128, false, ns);
    EXPECT_EQ(kv->prefix_stats().n_blocks, 8);
    EXPECT_EQ(kv->prefix_lookup(a.data(), 200, 199, 0).rows, 0) << "dense namespace";
    EXPECT_EQ(kv->prefix_lookup(a.data(), 200, 199, other).rows, 0) << "another namespace";
    EXPECT_EQ(kv->prefix_lookup(a.data(), 200, 199, ns).rows, 128);
    // Publishing goes on from block 8 in the slot's namespace.
    kv->prefix_publish(0, a.data(), 192, false, ns);
    EXPECT_EQ(kv->prefix_lookup(a.data(), 200, 199, ns).rows, 192);
    // The same tokens published densely by another slot: a second chain.
    ASSERT_NO_FATAL_FAILURE(fill_from_tokens(*kv, 1, a));
    kv->prefix_publish(1, a.data(), 64, false, 0);
    EXPECT_EQ(kv->prefix_stats().n_blocks, 12 + 4);
    EXPECT_EQ(kv->prefix_lookup(a.data(), 200, 199, 0).rows, 64);
    EXPECT_EQ(kv->prefix_lookup(a.data(), 200, 199, ns).rows, 192);
    kv->release(1);
    // Attached in ns, a slot publishes its next blocks in ns.
    std::vector<int32_t> b(a.begin(), a.begin() + 64);
    for (int i = 0; i < 100; ++i) b.push_back(4000 + i);
    ASSERT_TRUE(kv->prefix_attach(2, b.data(), 64, ns).ok());
    ASSERT_NO_FATAL_FAILURE(fill_from_tokens(*kv, 2, b));
    kv->prefix_publish(2, b.data(), 128, false, ns);
    EXPECT_EQ(kv->prefix_lookup(b.data(), 164, 163, ns).rows, 128);
    EXPECT_EQ(kv->prefix_lookup(b.data(), 164, 163, 0).rows, 64) << "the dense chain of slot 1's a[0, 64)";
    EXPECT_TRUE(kv->check_accounting().ok());
}

// Pages only the cache holds count free; when the pool runs dry they are
// taken back least recently used first, a chain's tail before its head.
TEST(KvPrefixCache, CachedPagesAreFreeAndEvictedLeastRecentlyUsedFirst) {
    auto kv = prefix_store(8);  // 4 slots' worth of one 128-row page per lane
    ASSERT_TRUE(kv);
    const std::vector<int32_t> a = tokens_from(1, 256), b = tokens_from(2000, 128);
    ASSERT_NO_FATAL_FAILURE(fill_from_tokens(*kv, 0, a));  // 2 pages a lane
    kv->prefix_publish(0, a.data(), 256, false, 0);
    kv->release(0);
    ASSERT_NO_FATAL_FAILURE(fill_from_tokens(*kv, 1, b));  // 1 page a lane
    kv->prefix_publish(1, b.data(), 128, false, 0);
    kv->release(1);
    EXPECT_EQ(kv->pool().n_free(), 2);
    EXPECT_EQ(kv->n_free_pages(), 8) << "cached pages count as free";
    EXPECT_EQ(kv->prefix_stats().n_pages_only, 6);
    // Touch a's first block only: b is now the least recently used chain
    // except for a's tail blocks, which are older than a's head.
    EXPECT_EQ(kv->prefix_lookup(a.data(), 256, 16, 0).rows, 16);
    std::vector<int32_t> head(a.begin(), a.begin() + 17);
    ASSERT_TRUE(kv->prefix_attach(2, head.data(), 16, 0).ok());
    kv->release(2);
    // 4 new pages (2 rows' pages a lane): the 2 free ones, then the oldest
    // cached page a lane: a's second page (its tail), not a's head, not b.
    const std::vector<int32_t> d = tokens_from(7000, 200);
    ASSERT_NO_FATAL_FAILURE(fill_from_tokens(*kv, 0, d));
    EXPECT_EQ(kv->prefix_lookup(a.data(), 256, 255, 0).rows, 128) << "a keeps its head page";
    EXPECT_EQ(kv->prefix_lookup(b.data(), 128, 128, 0).rows, 128) << "b untouched";
    EXPECT_GT(kv->prefix_stats().n_blocks_evicted, 0);
    EXPECT_TRUE(kv->check_accounting().ok());
    kv->release(0);
    kv->prefix_clear();
    EXPECT_EQ(kv->pool().n_free(), 8);
    EXPECT_TRUE(kv->check_accounting().ok());
}

// A rewrite below what a slot published restarts its chain: the new rows are
// published under their own tokens, the old ones stay cached under theirs.
TEST(KvPrefixCache, RollbackAndRewriteRepublishUnderTheNewTokens) {
    auto kv = prefix_store(16);
    ASSERT_TRUE(kv);
    const std::vector<int32_t> a = tokens_from(1, 64);
    ASSERT_NO_FATAL_FAILURE(fill_from_tokens(*kv, 0, a));
    kv->prefix_publish(0, a.data(), 64, false, 0);
    kv->set_n_pos(0, 20);
    std::vector<int32_t> b(a.begin(), a.begin() + 20);
    for (int i = 0; i < 44; ++i) b.push_back(3000 + i);
    ASSERT_NO_FATAL_FAILURE(fill_from_tokens(*kv, 0, b));
    kv->prefix_publish(0, b.data(), 64, false, 0);
    // b's block 0 is a's (one page); its blocks 1..3 are on the slot's copy of
    // that page: the attach gathers them into a fresh page.
    EXPECT_EQ(kv->prefix_lookup(b.data(), 64, 64, 0).pages_copied, 2);
    for (const std::vector<int32_t> *t : std::vector<const std::vector<int32_t> *>{&a, &b}) {
        ASSERT_TRUE(kv->prefix_lookup(t->data(), 64, 64, 0).rows == 64);
        ASSERT_TRUE(kv->prefix_attach(1, t->data(), 64, 0).ok());
        for (int64_t i = 0; i < 64; ++i)
            ASSERT_EQ(kv->k_lane(1, 0, 0)[i * 8], static_cast<float>((*t)[static_cast<size_t>(i)]) + 0.5f) << i;
        kv->release(1);
    }
    EXPECT_TRUE(kv->check_accounting().ok());
}

}  // namespace
}  // namespace sieve
