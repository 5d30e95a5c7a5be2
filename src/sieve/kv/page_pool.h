// The physical KV memory: one memfd cut into fixed-size pages. Lanes
// (lane_store.h) map pages of this file into their virtual ranges; the pool
// only hands out page indices and counts references.
//
//   memfd:  [ page 0 | page 1 | page 2 | ... | page n_pages-1 ]
//   page p lives at file offset p * page_bytes
//
// A page is backed (fallocate) the first time it is handed out, so a mapping
// of it can never SIGBUS, and a system out of memory shows up as a Status from
// alloc() instead of a signal at the first write. Freed pages stay backed and
// are reused first (last in, first out: their cache lines may still be warm).
//
// Refcounts: a page mapped into k lanes has refcount k (prefix sharing maps
// one page into several lanes); the prefix cache (prefix_cache.h) holds one
// more reference on each page it keeps. A page whose only reference is the
// cache's is "cache-only": no lane reads it, and evicting its cache entries
// frees it, so the lane store counts it as reclaimable. Not thread-safe: the
// lane store owning the pool serializes calls.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sieve/core/status.h"

namespace sieve {

// Parses a byte count with an optional unit: "4096", "64KiB", "512MiB",
// "4GiB", "1.5G", "2TiB". K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024,
// KB/MB/GB/TB powers of 1000, B or nothing is bytes; case-insensitive. The
// result must be a whole number of bytes >= 1 that fits in int64.
Status parse_bytes(const std::string &text, int64_t *out);

struct PagePoolOptions {
    int64_t budget_bytes = int64_t{512} << 20;  // rounded down to whole pages
    int64_t page_bytes = int64_t{64} << 10;     // a multiple of 4 KiB, 4 KiB .. 2 MiB (huge pages at 2 MiB)
    // 2 MiB pages only: ask for hugetlbfs pages; falls back to normal pages
    // (with a log line) when the system has none reserved.
    bool try_huge_pages = true;
};

class PagePool {
public:
    static Result<std::unique_ptr<PagePool>> create(const PagePoolOptions &opt);
    ~PagePool();
    PagePool(const PagePool &) = delete;
    PagePool &operator=(const PagePool &) = delete;

    int fd() const { return fd_; }
    int64_t page_bytes() const { return page_bytes_; }
    bool huge_pages() const { return huge_; }
    int64_t n_pages() const { return static_cast<int64_t>(refcount_.size()); }
    int64_t n_free() const { return static_cast<int64_t>(free_.size()); }
    int64_t n_used() const { return n_pages() - n_free(); }
    // Sum of refcounts: lane pages mapped, a shared page counted once per lane.
    int64_t n_refs() const { return n_refs_; }
    int64_t file_offset(int32_t page) const { return static_cast<int64_t>(page) * page_bytes_; }

    // A free page with refcount 1, or an error naming the pool size when none
    // is left (the caller may reclaim cached pages and retry).
    Result<int32_t> alloc();
    void add_ref(int32_t page);
    // Drops one reference; the page returns to the free list at zero.
    void release(int32_t page);
    int32_t refcount(int32_t page) const;

    // ---- the prefix cache's reference ----
    // Takes the cache's reference on a page in use (refcount >= 1, not held yet).
    void cache_hold(int32_t page);
    // Drops it; the page returns to the free list when no lane maps it.
    void cache_drop(int32_t page);
    bool cached(int32_t page) const { return cached_[static_cast<size_t>(page)] != 0; }
    // Pages whose only reference is the cache's.
    int64_t n_cache_only() const { return n_cache_only_; }

    // Recounts everything from scratch and compares with the running totals
    // (tests call it after every operation).
    Status check_accounting() const;

private:
    PagePool() = default;

    int fd_ = -1;
    int64_t page_bytes_ = 0;
    bool huge_ = false;
    std::vector<int32_t> refcount_;   // per page
    std::vector<uint8_t> backed_;     // per page: fallocate done
    std::vector<int32_t> free_;       // stack of free pages
    std::vector<uint8_t> cached_;     // per page: the prefix cache holds a reference
    int64_t n_refs_ = 0;
    int64_t n_cache_only_ = 0;
};

}  // namespace sieve
