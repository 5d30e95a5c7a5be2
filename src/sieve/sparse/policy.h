// A KV policy decides, per layer and per KV head, which rows of a
// sequence's lanes to keep (eviction) or to read (page selection). The
// engine calls it at fixed points of a sequence's life:
//   1. after the sequence's last prefill chunk, once its whole prompt is in
//      the lanes and before its first decode step: score, choose, compact
//      (SnapKV / PyramidKV / layer-wise / StreamingLLM start here);
//   2. after each decode step (slide a window, evict by accumulated score);
//   3. before each decode step (select pages; Quest / LServe).
// Only point 1 exists so far; the others extend this interface. A policy
// compacts through KvCache::compact / compact_layer, so what it drops goes
// back to the pool at once and the scheduler sees it in the store's answers.
//
// A policy object is shared by every sequence it applies to and must not keep
// per-sequence state in itself (a per-sequence state object comes with the
// decode-time points).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "sieve/core/status.h"
#include "sieve/kv/kv_cache.h"

namespace sieve {

// What a policy sees at a call; fields are added as policies need them
// (attention scores of the observation window, the step's queries).
struct PolicyContext {
    KvCache *kv = nullptr;
    int slot = -1;             // the sequence's KV slot
    uint64_t request_id = 0;   // for logs and deterministic choices
    int64_t n_prompt = 0;      // tokens of the prompt (the rows just prefilled)
};

class KvPolicy {
public:
    virtual ~KvPolicy() = default;
    virtual std::string name() const = 0;
    // Point 1. An error fails the request (the store is left consistent).
    virtual Status after_prefill(const PolicyContext &ctx) const = 0;
    // Rows a lane keeps after after_prefill() for a prompt of n_prompt rows
    // (at most n_prompt); what admission counts as the steady state.
    virtual int64_t kept_rows(int64_t n_prompt) const { return n_prompt; }
};

using KvPolicyPtr = std::shared_ptr<const KvPolicy>;

}  // namespace sieve
