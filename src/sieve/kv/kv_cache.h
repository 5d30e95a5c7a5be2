// The KV store as the forward pass sees it: per (sequence slot, layer, KV
// head) a K lane and a V lane, each a plain contiguous [capacity, head_dim]
// f32 array. Kernels get a pointer and a length, never pages.
//
//   seq slot s ─┬─ layer 0 ─┬─ kv head 0:  K lane [cap, head_dim]   V lane [cap, head_dim]
//               │           └─ kv head 1:  K lane ...               V lane ...
//               └─ layer 1 ...
//   row p of a lane holds the token at position p (dense KV: index == position)
//
// Implementations: ContiguousKv (one allocation, fixed capacity per slot),
// later the vAttention lane store (memfd pool + mmap'd lanes that grow by
// mapping pages at their tail) and a paged baseline.
//
// Contract for the forward pass of one step:
//   1. reserve(seq, n) before writing rows [0, n) of seq's lanes; it may move
//      or grow lanes, so lane pointers are fetched after it;
//   2. rows [n_tokens(seq), n) are written, attention reads rows [0, n);
//   3. set_n_tokens(seq, n) once the step's rows are written.
// Lane pointers stay valid until the next reserve() or clear() of that slot.
#pragma once

#include <cstdint>

#include "sieve/core/status.h"

namespace sieve {

// Shape every lane of a store shares.
struct KvShape {
    int n_seq = 0;        // sequence slots
    int64_t n_layer = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;
};

class KvCache {
public:
    virtual ~KvCache() = default;

    virtual const KvShape &shape() const = 0;

    // Makes rows [0, n_tokens) of every lane of slot seq writable. Keeps the
    // rows already there. Returns an error (never crashes) when the store has
    // no room: the caller (the scheduler) decides whom to preempt.
    virtual Status reserve(int seq, int64_t n_tokens) = 0;
    // Rows lanes of slot seq can hold without another reserve().
    virtual int64_t capacity(int seq) const = 0;

    // Lane of (seq, layer, kv head): [capacity(seq), head_dim] f32, row-major.
    virtual float *k_lane(int seq, int64_t layer, int64_t kv_head) = 0;
    virtual float *v_lane(int seq, int64_t layer, int64_t kv_head) = 0;

    // Rows of slot seq that hold valid KV (the next position to write).
    virtual int64_t n_tokens(int seq) const = 0;
    // Precondition: n <= capacity(seq). Shrinking forgets the rows past n
    // (rollback); growing declares rows just written valid.
    virtual void set_n_tokens(int seq, int64_t n) = 0;
    // Forgets slot seq (n_tokens = 0) and may return its memory.
    virtual void clear(int seq) = 0;
};

}  // namespace sieve
