#include "sieve/kv/prefix_cache.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "sieve/core/status.h"

namespace sieve {

namespace {

// splitmix64's finalizer: a cheap 64-bit mixer with full avalanche.
uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

}  // namespace

PrefixCache::PrefixCache(PagePool &pool, int64_t n_lanes, int64_t block_rows, int64_t pages_per_block)
    : pool_(pool), n_lanes_(n_lanes), block_rows_(block_rows), ppb_(pages_per_block) {
    SIEVE_CHECKF(n_lanes >= 1 && block_rows >= 1 && pages_per_block >= 1,
                 "PrefixCache(n_lanes %lld, block_rows %lld, pages_per_block %lld)", static_cast<long long>(n_lanes),
                 static_cast<long long>(block_rows), static_cast<long long>(pages_per_block));
}

PrefixCache::~PrefixCache() { clear(); }

uint64_t PrefixCache::chain_hash(uint64_t parent, const int32_t *tokens, int64_t n) {
    uint64_t h = mix(parent ^ static_cast<uint64_t>(n));
    for (int64_t i = 0; i < n; ++i) h = mix(h + static_cast<uint32_t>(tokens[i]) + 0x9e3779b97f4a7c15ull);
    return h;
}

uint64_t PrefixCache::chain_seed(uint64_t ns) {
    if (ns == 0) return k_seed;
    const int32_t w[2] = {static_cast<int32_t>(ns & 0xffffffffu), static_cast<int32_t>(ns >> 32)};
    return chain_hash(k_seed ^ 0x6e616d6573706163ull, w, 2);
}

void PrefixCache::touch(uint64_t h, Entry &e, uint64_t now) {
    lru_.erase(LruKey{e.last_use, -e.depth, h});
    e.last_use = now;
    lru_.insert(LruKey{e.last_use, -e.depth, h});
}

const int32_t *PrefixCache::find(uint64_t parent, uint64_t h, const int32_t *tokens, bool touch_it) {
    auto it = entries_.find(h);
    if (it == entries_.end()) return nullptr;
    Entry &e = it->second;
    if (e.parent != parent ||
        std::memcmp(e.tokens.data(), tokens, static_cast<size_t>(block_rows_) * sizeof(int32_t)) != 0)
        return nullptr;
    if (touch_it) touch(h, e, tick());
    return e.pages.data();
}

int64_t PrefixCache::match(const int32_t *tokens, int64_t n_blocks, std::vector<const int32_t *> *pages,
                           bool touch_them, uint64_t ns) {
    if (pages) pages->clear();
    const uint64_t seed = chain_seed(ns);
    uint64_t parent = seed;
    int64_t k = 0;
    for (; k < n_blocks; ++k) {
        const int32_t *t = tokens + k * block_rows_;
        const uint64_t h = chain_hash(parent, t, block_rows_);
        const int32_t *p = find(parent, h, t, false);
        if (!p) break;
        if (pages) pages->push_back(p);
        parent = h;
    }
    if (touch_them) {
        // One use time for the chain: among its blocks the tail is evicted
        // first, so what stays is still a whole prefix.
        const uint64_t now = tick();
        parent = seed;
        for (int64_t j = 0; j < k; ++j) {
            parent = chain_hash(parent, tokens + j * block_rows_, block_rows_);
            touch(parent, entries_.at(parent), now);
        }
    }
    return k;
}

bool PrefixCache::insert(uint64_t parent, uint64_t h, int64_t depth, const int32_t *tokens, const int32_t *pages,
                         uint64_t now) {
    auto it = entries_.find(h);
    if (it != entries_.end()) {
        Entry &e = it->second;
        if (e.parent != parent ||
            std::memcmp(e.tokens.data(), tokens, static_cast<size_t>(block_rows_) * sizeof(int32_t)) != 0)
            return false;
        touch(h, e, now);
        return true;
    }
    Entry e;
    e.parent = parent;
    e.depth = depth;
    e.tokens.assign(tokens, tokens + block_rows_);
    e.pages.assign(pages, pages + n_lanes_ * ppb_);
    for (int32_t p : e.pages)
        if (page_uses_[p]++ == 0) pool_.cache_hold(p);
    e.last_use = now;
    lru_.insert(LruKey{e.last_use, -e.depth, h});
    entries_.emplace(h, std::move(e));
    return true;
}

void PrefixCache::drop(std::unordered_map<uint64_t, Entry>::iterator it) {
    Entry &e = it->second;
    lru_.erase(LruKey{e.last_use, -e.depth, it->first});
    for (int32_t p : e.pages) {
        auto u = page_uses_.find(p);
        SIEVE_CHECKF(u != page_uses_.end() && u->second > 0, "prefix cache: page %d not counted", p);
        if (--u->second == 0) {
            page_uses_.erase(u);
            pool_.cache_drop(p);
        }
    }
    entries_.erase(it);
}

bool PrefixCache::frees_a_page(const Entry &e) const {
    for (int32_t p : e.pages)
        if (pool_.refcount(p) == 1) return true;
    return false;
}

int64_t PrefixCache::evict(int64_t want_free) {
    int64_t n = 0;
    // Each entry is looked at once. One whose pages running sequences map
    // too is in use: it moves to the recent end, so the next call does not
    // walk past it again.
    for (size_t i = 0, n_keys = lru_.size(); i < n_keys && pool_.n_free() < want_free; ++i) {
        const uint64_t h = std::get<2>(*lru_.begin());
        auto it = entries_.find(h);
        if (frees_a_page(it->second)) {
            drop(it);
            ++n;
        } else {
            touch(h, it->second, tick());
        }
    }
    return n;
}

int64_t PrefixCache::drop_page(int32_t page) {
    std::vector<uint64_t> hs;
    for (const auto &[h, e] : entries_)
        if (std::find(e.pages.begin(), e.pages.end(), page) != e.pages.end()) hs.push_back(h);
    for (uint64_t h : hs) drop(entries_.find(h));
    return static_cast<int64_t>(hs.size());
}

void PrefixCache::clear() {
    while (!entries_.empty()) drop(entries_.begin());
}

bool PrefixCache::check(std::string *why) const {
    std::unordered_map<int32_t, int32_t> uses;
    for (const auto &[h, e] : entries_) {
        if (static_cast<int64_t>(e.pages.size()) != n_lanes_ * ppb_ ||
            static_cast<int64_t>(e.tokens.size()) != block_rows_) {
            *why = "prefix cache: an entry has the wrong number of pages or tokens";
            return false;
        }
        if (lru_.count(LruKey{e.last_use, -e.depth, h}) != 1) {
            *why = "prefix cache: an entry is missing from the LRU order";
            return false;
        }
        for (int32_t p : e.pages) ++uses[p];
    }
    if (lru_.size() != entries_.size() || uses != page_uses_) {
        *why = "prefix cache: LRU order or page use counts out of step with the entries";
        return false;
    }
    for (const auto &[p, n] : uses) {
        if (!pool_.cached(p)) {
            *why = "prefix cache: page " + std::to_string(p) + " is used by an entry but not held in the pool";
            return false;
        }
    }
    return true;
}

}  // namespace sieve
