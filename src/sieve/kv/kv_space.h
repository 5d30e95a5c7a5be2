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

#include "sieve/core/status.h"

namespace sieve {

class KvSpace {
public:
    virtual ~KvSpace() = default;

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
};

}  // namespace sieve
