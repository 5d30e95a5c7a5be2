// Swapping a slot's KV to host memory and back: what lets the scheduler
// preempt a sequence whose lanes a sparse policy compacted. Such a sequence
// cannot be recomputed into the same KV (a fresh prefill would be dense, and
// the policy's choice depended on the prompt alone), so its lanes, rows,
// positions and n_pos are copied out, its pages go back to the pool, and the
// image is mapped back into a free slot when it resumes.
//
// On a CPU a swap is a memcpy at memory bandwidth, far cheaper than the
// prefill a recompute needs, so the scheduler swaps dense sequences too while
// the swap space has room (docs/architecture.md).
#pragma once

#include <cstdint>

#include "sieve/core/status.h"
#include "sieve/kv/kv_space.h"

namespace sieve {

class VAttentionKv;

// The implementations behind VAttentionKv's KvSpace swap methods.
// Host bytes kv_swap_out would take for slot seq.
int64_t kv_swap_bytes(const VAttentionKv &kv, int seq);
// Copies slot seq into *out (the slot is unchanged; the caller releases it).
Status kv_swap_out(VAttentionKv &kv, int seq, KvSwapImage *out);
// Pool pages kv_swap_in needs for img.
int64_t kv_swap_pages(const VAttentionKv &kv, const KvSwapImage &img);
// Maps img into the empty slot seq: every lane gets its rows, positions and
// the slot its n_pos. On an error (no pages) the slot is released again and
// nothing else changed.
Status kv_swap_in(VAttentionKv &kv, int seq, const KvSwapImage &img);

}  // namespace sieve
