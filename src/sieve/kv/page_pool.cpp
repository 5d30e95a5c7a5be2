#include "sieve/kv/page_pool.h"

#include <fcntl.h>
#include <linux/memfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "sieve/core/log.h"
#include "sieve/core/sysmem.h"

namespace sieve {

namespace {

// Multiplier of a unit suffix (lower-cased), or 0 when unknown.
int64_t unit_scale(const std::string &u) {
    struct Unit {
        const char *name;
        int64_t scale;
    };
    static constexpr Unit k_units[] = {
        {"", 1},
        {"b", 1},
        {"k", int64_t{1} << 10},
        {"kib", int64_t{1} << 10},
        {"kb", 1000},
        {"m", int64_t{1} << 20},
        {"mib", int64_t{1} << 20},
        {"mb", 1000 * 1000},
        {"g", int64_t{1} << 30},
        {"gib", int64_t{1} << 30},
        {"gb", int64_t{1000} * 1000 * 1000},
        {"t", int64_t{1} << 40},
        {"tib", int64_t{1} << 40},
        {"tb", int64_t{1000} * 1000 * 1000 * 1000},
    };
    for (const Unit &unit : k_units)
        if (u == unit.name) return unit.scale;
    return 0;
}

}  // namespace

Status parse_bytes(const std::string &text, int64_t *out) {
    const auto bad = [&](const char *why) {
        return Status::errorf("byte size '%s': %s; expected a number with an optional unit, e.g. 4096, 64KiB, "
                              "512MiB, 4GiB",
                              text.c_str(), why);
    };
    size_t i = 0;
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    // Integer part and optional fraction, kept exact: value = whole + frac_num / frac_den.
    int64_t whole = 0, frac_num = 0, frac_den = 1;
    size_t n_digits = 0;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i, ++n_digits) {
        if (__builtin_mul_overflow(whole, 10, &whole) || __builtin_add_overflow(whole, text[i] - '0', &whole))
            return bad("number too large");
    }
    if (i < text.size() && text[i] == '.') {
        ++i;
        for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i, ++n_digits) {
            if (frac_den > int64_t{1} << 40) continue;  // digits past 1e-12 cannot matter below
            frac_num = frac_num * 10 + (text[i] - '0');
            frac_den *= 10;
        }
    }
    if (n_digits == 0) return bad("no number");
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    std::string unit;
    for (; i < text.size() && !std::isspace(static_cast<unsigned char>(text[i])); ++i)
        unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i != text.size()) return bad("trailing characters after the unit");
    const int64_t scale = unit_scale(unit);
    if (scale == 0) return bad(("unknown unit '" + unit + "'").c_str());
    int64_t bytes = 0;
    if (__builtin_mul_overflow(whole, scale, &bytes)) return bad("does not fit in 64 bits");
    // frac_num < 1e13 and scale <= 1e12, so the product fits in 128 bits.
    const __int128 frac_bytes = static_cast<__int128>(frac_num) * scale;
    if (frac_bytes % frac_den != 0) return bad("not a whole number of bytes");
    if (__builtin_add_overflow(bytes, static_cast<int64_t>(frac_bytes / frac_den), &bytes))
        return bad("does not fit in 64 bits");
    if (bytes < 1) return bad("must be at least 1 byte");
    *out = bytes;
    return Status();
}

Result<std::unique_ptr<PagePool>> PagePool::create(const PagePoolOptions &opt) {
    const int64_t sys_page = sysconf(_SC_PAGESIZE);
    const int64_t pb = opt.page_bytes;
    if (pb < 4096 || pb > (int64_t{2} << 20) || pb % 4096 != 0 || pb % sys_page != 0) {
        return Status::errorf(
            "KV page size %lld bytes: expected a multiple of 4 KiB and of the system page size "
            "(%lld) from 4 KiB to 2 MiB",
            static_cast<long long>(pb), static_cast<long long>(sys_page));
    }
    const int64_t n_pages = opt.budget_bytes / pb;
    if (n_pages < 1 || n_pages > INT32_MAX) {
        return Status::errorf("KV memory %lld bytes: expected at least one page (%lld bytes) and at most 2^31 pages; "
                              "raise --kv-memory or lower the page size",
                              static_cast<long long>(opt.budget_bytes), static_cast<long long>(pb));
    }
    // The pages are backed as they are handed out, so a budget the machine
    // cannot hold would not fail here but end the process (the OOM killer)
    // once the pool fills: refuse it now, naming both sizes.
    const int64_t bytes = n_pages * pb;
    if (const MemInfo mi = read_meminfo(); mi.available >= 0) {
        const bool huge = pb == (int64_t{2} << 20) && opt.try_huge_pages;
        const int64_t limit = mi.available + (huge ? mi.huge_free : 0);
        if (bytes > limit) {
            return Status::errorf(
                "KV memory of %s is more than this machine has available (%s%s); the pool backs "
                "its pages as they fill, and past that the kernel would kill the process — "
                "ask for at most %s",
                format_bytes(bytes).c_str(), format_bytes(limit).c_str(),
                huge && mi.huge_free > 0 ? ", with the free huge pages" : "",
                format_bytes(static_cast<int64_t>(k_kv_default_share * static_cast<double>(limit))).c_str());
        }
    }
    std::unique_ptr<PagePool> pool(new PagePool());
    pool->page_bytes_ = pb;
    if (pb == (int64_t{2} << 20) && opt.try_huge_pages) {
#ifdef MFD_HUGETLB
        pool->fd_ = memfd_create("sieve-kv", MFD_CLOEXEC | MFD_HUGETLB | MFD_HUGE_2MB);
        if (pool->fd_ >= 0 && ftruncate(pool->fd_, n_pages * pb) == 0 && fallocate(pool->fd_, 0, 0, pb) == 0) {
            pool->huge_ = true;
        } else {
            if (pool->fd_ >= 0) close(pool->fd_);
            pool->fd_ = -1;
            SIEVE_LOG_INFO("KV pool: no 2 MiB huge pages available (%s); using normal pages",
                           std::strerror(errno));
        }
#endif
    }
    if (pool->fd_ < 0) {
        pool->fd_ = memfd_create("sieve-kv", MFD_CLOEXEC);
        if (pool->fd_ < 0) return Status::errorf("KV pool: memfd_create failed: %s", std::strerror(errno));
        if (ftruncate(pool->fd_, n_pages * pb) != 0) {
            return Status::errorf("KV pool: sizing the memfd to %lld bytes failed: %s",
                                  static_cast<long long>(n_pages * pb), std::strerror(errno));
        }
    }
    pool->refcount_.assign(static_cast<size_t>(n_pages), 0);
    pool->cached_.assign(static_cast<size_t>(n_pages), 0);
    pool->backed_.assign(static_cast<size_t>(n_pages), 0);
    if (pool->huge_) pool->backed_[0] = 1;
    pool->free_.resize(static_cast<size_t>(n_pages));
    // Stack top = page 0, so pages are handed out in file order at first.
    for (int64_t p = 0; p < n_pages; ++p) pool->free_[static_cast<size_t>(p)] = static_cast<int32_t>(n_pages - 1 - p);
    return pool;
}

PagePool::~PagePool() {
    if (fd_ >= 0) close(fd_);
}

Result<int32_t> PagePool::alloc() {
    if (free_.empty()) {
        return Status::errorf("KV pool exhausted: all %lld pages of %lld KiB (%lld MiB) are in use; raise "
                              "--kv-memory or run fewer sequences",
                              static_cast<long long>(n_pages()), static_cast<long long>(page_bytes_ >> 10),
                              static_cast<long long>((n_pages() * page_bytes_) >> 20));
    }
    const int32_t p = free_.back();
    if (!backed_[static_cast<size_t>(p)]) {
        // Back the page now: a MAP_SHARED mapping of a hole could SIGBUS (hugetlbfs)
        // or hit the OOM killer at the first write; here it is a Status.
        int rc;
        do {
            rc = fallocate(fd_, 0, file_offset(p), page_bytes_);
        } while (rc != 0 && errno == EINTR);
        if (rc != 0) {
            return Status::errorf("KV pool: cannot back page %d (%lld KiB) with memory: %s; lower --kv-memory",
                                  p, static_cast<long long>(page_bytes_ >> 10), std::strerror(errno));
        }
        backed_[static_cast<size_t>(p)] = 1;
    }
    free_.pop_back();
    refcount_[static_cast<size_t>(p)] = 1;
    ++n_refs_;
    return p;
}

void PagePool::add_ref(int32_t page) {
    SIEVE_CHECKF(page >= 0 && page < n_pages() && refcount_[static_cast<size_t>(page)] > 0,
                 "add_ref of page %d (refcount %d)", page, page >= 0 && page < n_pages() ? refcount(page) : -1);
    if (++refcount_[static_cast<size_t>(page)] == 2 && cached_[static_cast<size_t>(page)]) --n_cache_only_;
    ++n_refs_;
}

void PagePool::release(int32_t page) {
    SIEVE_CHECKF(page >= 0 && page < n_pages() && refcount_[static_cast<size_t>(page)] > 0,
                 "release of page %d (refcount %d)", page, page >= 0 && page < n_pages() ? refcount(page) : -1);
    --n_refs_;
    const int32_t left = --refcount_[static_cast<size_t>(page)];
    if (left == 1 && cached_[static_cast<size_t>(page)]) ++n_cache_only_;
    if (left == 0) free_.push_back(page);
}

void PagePool::cache_hold(int32_t page) {
    SIEVE_CHECKF(page >= 0 && page < n_pages() && refcount_[static_cast<size_t>(page)] > 0 &&
                     !cached_[static_cast<size_t>(page)],
                 "cache_hold of page %d (refcount %d, cached %d)", page,
                 page >= 0 && page < n_pages() ? refcount(page) : -1,
                 page >= 0 && page < n_pages() ? cached_[static_cast<size_t>(page)] : -1);
    add_ref(page);
    cached_[static_cast<size_t>(page)] = 1;
}

void PagePool::cache_drop(int32_t page) {
    SIEVE_CHECKF(page >= 0 && page < n_pages() && cached_[static_cast<size_t>(page)],
                 "cache_drop of page %d, which the cache does not hold", page);
    if (refcount_[static_cast<size_t>(page)] == 1) --n_cache_only_;
    cached_[static_cast<size_t>(page)] = 0;
    release(page);
}

int32_t PagePool::refcount(int32_t page) const {
    SIEVE_CHECKF(page >= 0 && page < n_pages(), "page %d out of [0, %lld)", page, static_cast<long long>(n_pages()));
    return refcount_[static_cast<size_t>(page)];
}

Status PagePool::check_accounting() const {
    int64_t refs = 0, n_zero = 0;
    for (int32_t r : refcount_) {
        if (r < 0) return Status::errorf("KV pool: negative refcount %d", r);
        refs += r;
        n_zero += r == 0;
    }
    if (refs != n_refs_)
        return Status::errorf("KV pool: refcounts sum to %lld, running total %lld", static_cast<long long>(refs),
                              static_cast<long long>(n_refs_));
    if (n_zero != n_free())
        return Status::errorf("KV pool: %lld pages with refcount 0, free list holds %lld",
                              static_cast<long long>(n_zero), static_cast<long long>(n_free()));
    int64_t cache_only = 0;
    for (size_t p = 0; p < refcount_.size(); ++p) {
        if (cached_[p] && refcount_[p] < 1)
            return Status::errorf("KV pool: page %zu is held by the prefix cache with refcount %d", p, refcount_[p]);
        cache_only += cached_[p] && refcount_[p] == 1;
    }
    if (cache_only != n_cache_only_)
        return Status::errorf("KV pool: %lld pages held by the prefix cache alone, running total %lld",
                              static_cast<long long>(cache_only), static_cast<long long>(n_cache_only_));
    std::vector<uint8_t> seen(refcount_.size(), 0);
    for (int32_t p : free_) {
        if (p < 0 || p >= n_pages() || refcount_[static_cast<size_t>(p)] != 0 || seen[static_cast<size_t>(p)])
            return Status::errorf("KV pool: free list entry %d is out of range, in use or duplicated", p);
        seen[static_cast<size_t>(p)] = 1;
    }
    return Status();
}

}  // namespace sieve
