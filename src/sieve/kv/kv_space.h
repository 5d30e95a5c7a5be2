// What the scheduler sees of the KV store: free pages and what a
// reservation would cost, never the pool or a page formula (vLLM's
// KVCacheManager.allocate_slots(...) -> blocks | None is the model: the
// scheduler asks, the store answers and does the mapping).
//
// Pages are the store's unit of physical memory. A store that keeps lanes of
// different lengths (sparse policies) answers per slot from what each lane
// really holds, so a sequence whose lanes were compacted to 10% costs 10% of
// the pages in every later answer.
#pragma once

#include <cstdint>
#include <vector>

#include "sieve/core/status.h"

namespace sieve {

// One slot's KV copied to host memory (kv/kv_swap.h): what lets a sequence
// whose lanes a policy compacted be preempted and resumed unchanged.
//
//   bytes:  [ lane (layer 0, head 0): K rows | V rows | positions ] [ lane (0, 1) ... ] ...
struct KvSwapImage {
    int64_t n_pos = 0;
    std::vector<int64_t> rows;   // per (layer, kv head), K and V alike
    std::vector<uint8_t> bytes;  // every lane's K rows, V rows, then positions (if the store keeps them)
    bool with_positions = false;

    int64_t n_bytes() const { return static_cast<int64_t>(bytes.size()); }
};

// What the prefix cache could give a sequence (KvSpace::prefix_lookup).
struct PrefixHit {
    int64_t rows = 0;         // leading rows whose KV is cached (whole blocks)
    int64_t pages_taken = 0;   // cached pages it would map that count as free now (cache-only)
    int64_t pages_new = 0;     // pool pages a sequence of n_total rows still needs after the hit
    int64_t pages_copied = 0;  // ... of them taken by the attach itself (pages gathered from several cached ones)
};

struct PrefixCacheStats {
    bool enabled = false;
    int64_t block_rows = 0;
    int64_t n_blocks = 0;         // cached blocks
    int64_t n_pages_held = 0;     // pages the cache holds a reference on
    int64_t n_pages_only = 0;     // ... of them mapped by no lane (reclaimable)
    int64_t n_blocks_evicted = 0;
};

class KvSpace {
public:
    virtual ~KvSpace() = default;

    // Pages a reservation may take: free pool pages plus pages only the
    // prefix cache holds (they are reclaimed on demand, never by preemption).
    virtual int64_t n_free_pages() const = 0;
    virtual int64_t n_total_pages() const = 0;
    // Pages slot seq must still map to grow to position n_pos (0 when its
    // lanes have the room already).
    virtual int64_t pages_to_reserve(int seq, int64_t n_pos) const = 0;
    // Pages one sequence holds when each of its lanes holds n_rows rows (what
    // admission counts for a sequence not yet placed).
    virtual int64_t seq_pages_for_rows(int64_t n_rows) const = 0;
    // Pages mapped to slot seq's lanes now.
    virtual int64_t seq_mapped_pages(int seq) const = 0;
    // allocate_slots: maps what reserve(seq, n_pos) needs, or returns an error
    // with nothing newly mapped.
    virtual Status reserve(int seq, int64_t n_pos) = 0;
    // Forgets slot seq and returns every one of its pages to the pool now.
    virtual void release(int seq) = 0;
    // Rows a lane can ever hold.
    virtual int64_t max_ctx() const = 0;

    // ---- prefix cache (kv/prefix_cache.h); inert when the store has none ----
    // ns, the namespace: KV made the same way (0: a dense prefill; a policy
    // whose prefill masks attention names its own, KvPolicy::prefix_namespace)
    // is found only under the namespace it was published in.
    //
    // The longest cached prefix of tokens[0, n_tokens) no longer than n_max
    // rows, and what a sequence of n_tokens rows placed with it costs.
    virtual PrefixHit prefix_lookup(const int32_t *tokens, int64_t n_tokens, int64_t n_max, uint64_t ns) = 0;
    // Maps the cached KV of tokens[0, n_rows) (a prefix_lookup() answer) into
    // the empty slot seq: n_pos(seq) = n_rows. A page whose blocks come from
    // several cached pages is gathered into a fresh one; the first write past
    // the hit copies the page it lands in (copy on write). On an error the
    // slot is released.
    virtual Status prefix_attach(int seq, const int32_t *tokens, int64_t n_rows, uint64_t ns) = 0;
    // Offers the KV of slot seq for tokens[0, n_rows) to the cache, when every
    // lane of the slot is dense (never compacted): whole blocks only, and with
    // whole_pages_only only blocks in pages the slot will not write again.
    virtual void prefix_publish(int seq, const int32_t *tokens, int64_t n_rows, bool whole_pages_only,
                                uint64_t ns) = 0;
    virtual PrefixCacheStats prefix_stats() const = 0;

    // ---- swap (preemption without recompute) ----
    // Host bytes swap_out(seq) would take.
    virtual int64_t swap_bytes(int seq) const = 0;
    // Copies slot seq into *out; the slot is unchanged (the caller releases it).
    virtual Status swap_out(int seq, KvSwapImage *out) = 0;
    // Pool pages swap_in(img) needs.
    virtual int64_t swap_pages(const KvSwapImage &img) const = 0;
    // Maps img into the empty slot seq (rows, positions, n_pos); on an error
    // the slot is released again.
    virtual Status swap_in(int seq, const KvSwapImage &img) = 0;
};

}  // namespace sieve
