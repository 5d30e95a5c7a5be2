// Automatic prefix caching (vLLM's APC, Kwon et al. 2023 §4.4 and vLLM v1's
// kv_cache_manager): KV of prompt blocks is kept after its sequence is gone
// and mapped into later sequences whose tokens start the same way, so a
// shared system prompt, chat history or few-shot header is computed once.
//
// A block is `block_rows` consecutive token positions. Block k of a token
// sequence is named by a hash chain over token ids,
//
//   h(-1) = seed(ns),   h(k) = H(h(k-1), tokens[k*B .. (k+1)*B))
//
// so one hash names the whole prefix up to the block's end, not just the
// block; ns keeps KV made by different prefills apart (0: dense). The entry stores its parent hash and its tokens and a lookup checks
// both, so a 64-bit collision costs a miss, never a wrong KV.
//
// An entry holds, for every lane of a slot (layer, KV head, K|V), the pool
// pages that carry the block's rows. Blocks never straddle pages: either a
// page holds several blocks (rows_per_page a multiple of block_rows; the
// entries of those blocks share the page) or a block spans whole pages.
//
//   lane rows   0 ........ 511 | 512 ....... 1023 | 1024 ...          rows_per_page = 512
//   pages       [ page 7        | page 2            | page 9 ...
//   blocks      b0 b1 ... b31   | b32 ... b63       | b64 ...           block_rows = 16
//   entry b33 holds page 2 of this lane (and of every other lane)
//
// The cache takes one pool reference per page it holds (PagePool::cache_hold),
// however many entries use it. A page that no lane maps any more is
// cache-only: the lane store counts it as free for admission and evicts
// entries, least recently used first (deepest first among equals, so a
// chain shrinks from its tail), when the pool runs dry.
//
// Not thread-safe: the lane store owning it serializes calls.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "sieve/kv/page_pool.h"

namespace sieve {

class PrefixCache {
public:
    // n_lanes: lanes of one slot; pages_per_block: pages of one lane a block
    // covers (1 when several blocks share a page).
    PrefixCache(PagePool &pool, int64_t n_lanes, int64_t block_rows, int64_t pages_per_block);
    ~PrefixCache();
    PrefixCache(const PrefixCache &) = delete;
    PrefixCache &operator=(const PrefixCache &) = delete;

    static constexpr uint64_t k_seed = 0x5eed5eed5eed5eedull;
    // h(-1) of namespace ns (KvSpace::prefix_lookup): k_seed for 0.
    static uint64_t chain_seed(uint64_t ns);
    // h(k) from h(k-1) and the block's tokens.
    static uint64_t chain_hash(uint64_t parent, const int32_t *tokens, int64_t n);

    int64_t block_rows() const { return block_rows_; }
    int64_t pages_per_block() const { return ppb_; }
    int64_t n_blocks() const { return static_cast<int64_t>(entries_.size()); }
    int64_t n_pages_held() const { return static_cast<int64_t>(page_uses_.size()); }

    // The cached blocks of namespace ns that start tokens[0, n_blocks *
    // block_rows): their pages, lane-major per block (block k, lane i, page p
    // at out[k][i * pages_per_block + p]). Returns how many match (stops at
    // the first miss). touch = mark them used now (LRU).
    int64_t match(const int32_t *tokens, int64_t n_blocks, std::vector<const int32_t *> *pages, bool touch,
                  uint64_t ns);

    // A new use time. Blocks used together share one, so among them the
    // deepest is evicted first (the LRU order is (time, -depth)).
    uint64_t tick() { return ++clock_; }
    // Adds block k (hash h, parent hash parent) with the given pages
    // [n_lanes * pages_per_block] and use time `now`, unless a block of that
    // hash is cached: then that one is only touched. Returns false when the
    // hash is taken by other tokens (a collision: the block is simply not
    // cached).
    bool insert(uint64_t parent, uint64_t h, int64_t depth, const int32_t *tokens, const int32_t *pages, uint64_t now);
    // The cached entry for hash h whose parent and tokens match, or null.
    const int32_t *find(uint64_t parent, uint64_t h, const int32_t *tokens, bool touch);

    // Drops least recently used entries until the pool has `want` free pages
    // or no entry whose eviction could free a page is left. Entries whose
    // pages all are mapped by lanes too are in use: kept (dropping them frees
    // nothing) and marked used now. Returns the entries dropped.
    int64_t evict(int64_t want_free);
    // Drops every entry that holds `page` (so the cache no longer references
    // it); the number dropped.
    int64_t drop_page(int32_t page);
    // Drops every entry.
    void clear();

    // Recounts the cache's page references against the pool's flags.
    bool check(std::string *why) const;

private:
    struct Entry {
        uint64_t parent = 0;
        int64_t depth = 0;       // block index in its chain
        uint64_t last_use = 0;
        std::vector<int32_t> tokens;
        std::vector<int32_t> pages;  // [n_lanes * pages_per_block]
    };
    using LruKey = std::tuple<uint64_t, int64_t, uint64_t>;  // (last_use, -depth, hash)

    void touch(uint64_t h, Entry &e, uint64_t now);
    void drop(std::unordered_map<uint64_t, Entry>::iterator it);
    bool frees_a_page(const Entry &e) const;

    PagePool &pool_;
    int64_t n_lanes_;
    int64_t block_rows_;
    int64_t ppb_;
    uint64_t clock_ = 0;
    std::unordered_map<uint64_t, Entry> entries_;
    std::set<LruKey> lru_;
    std::unordered_map<int32_t, int32_t> page_uses_;  // entries holding each page
};

}  // namespace sieve
