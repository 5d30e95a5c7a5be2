// A KV policy decides, per layer and per KV head, which rows of a
// sequence's lanes to keep (eviction) or to read (page selection). The
// engine calls it at fixed points of a sequence's life:
//   0. before the sequence's prefill starts (a fresh prompt, or a recompute
//      after preemption): say which queries' attention to accumulate;
//   1. after the sequence's last prefill chunk, once its whole prompt is in
//      the lanes and before its first decode step: score, choose, compact
//      (SnapKV / PyramidKV / layer-wise / StreamingLLM / H2O start here);
//   2. after each decode step (slide a window, evict by accumulated score);
//   3. before each decode step's attention (select pages): inside the forward
//      pass, per layer, once the token's query exists — the state's
//      AttnRowSelector (model.h) says which rows each KV head reads (Quest).
// A policy compacts through KvCache::compact / compact_layer, so what it
// drops goes back to the pool at once and the scheduler sees it in the
// store's answers.
//
// A policy object is shared by every sequence it applies to and keeps no
// per-sequence state in itself; what a sequence needs (the attention sums
// the forward pass accumulates) lives in its KvPolicyState, owned by the
// engine beside the sequence and carried through swaps.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sieve/core/status.h"
#include "sieve/kv/kv_cache.h"
#include "sieve/model/model.h"

namespace sieve {

// One sequence's policy state. sink is what the step builder hands the
// forward pass (model.h, AttnScoreSink); `scoring` says whether it should.
struct KvPolicyState {
    std::vector<float> acc;  // [n_layer][n_head][sink.cap] attention sums per lane row
    AttnScoreSink sink;
    bool scoring = false;    // pass &sink to the forward pass (the queries at >= sink.from_pos)
    // Page selection (sparse/quest.h): handed to the forward pass for the
    // sequence's decode tokens once its after-prefill point ran.
    std::unique_ptr<AttnRowSelector> selector;

    KvPolicyState() = default;
    KvPolicyState(const KvPolicyState &o) { *this = o; }
    KvPolicyState &operator=(const KvPolicyState &o) {
        if (this == &o) return *this;
        acc = o.acc;
        sink = o.sink;
        sink.acc = acc.empty() ? nullptr : acc.data();
        scoring = o.scoring;
        n_head = o.n_head;
        n_layer = o.n_layer;
        max_rows = o.max_rows;
        selector = o.selector ? o.selector->clone() : nullptr;
        return *this;
    }
    int64_t n_head = 0;      // query heads of the model
    int64_t n_layer = 0;
    int64_t max_rows = 0;    // the most rows a lane of the sequence can hold (prompt + max_tokens)

    float *head_acc(int64_t layer, int64_t head) { return acc.data() + (layer * n_head + head) * sink.cap; }
    const float *head_acc(int64_t layer, int64_t head) const {
        return acc.data() + (layer * n_head + head) * sink.cap;
    }
};

// What a policy sees at a call.
struct PolicyContext {
    KvCache *kv = nullptr;
    int slot = -1;              // the sequence's KV slot
    uint64_t request_id = 0;    // for logs
    int64_t n_prompt = 0;       // after_prefill: tokens just prefilled (prompt, + generated on a recompute)
    int64_t n_head = 0;         // query heads (n_head / n_head_kv of them share a lane)
    KvPolicyState *state = nullptr;  // the sequence's state (null when the policy made none)
};

inline PolicyContext policy_context(KvCache *kv, int slot, int64_t n_prompt, int64_t n_head, KvPolicyState *state,
                                    uint64_t request_id = 0) {
    PolicyContext ctx;
    ctx.kv = kv;
    ctx.slot = slot;
    ctx.request_id = request_id;
    ctx.n_prompt = n_prompt;
    ctx.n_head = n_head;
    ctx.state = state;
    return ctx;
}

class KvPolicy {
public:
    virtual ~KvPolicy() = default;
    // The spec label ("snapkv:keep=0.1"): parsing it gives this policy again.
    virtual std::string name() const = 0;

    // Point 0: the state one sequence needs (null: none), sized for lanes that
    // will hold at most max_rows rows, and prepared for a prefill of n_total
    // tokens. Called again (with the same state) before a recompute.
    virtual std::unique_ptr<KvPolicyState> make_state(const KvShape &shape, int64_t n_head, int64_t max_rows) const {
        return nullptr;
    }
    virtual void begin_prefill(KvPolicyState *state, int64_t n_total) const {}
    // Point 1. An error fails the request (the store is left consistent).
    virtual Status after_prefill(const PolicyContext &ctx) const = 0;
    // Point 2, after every decode step that followed point 1.
    virtual bool acts_after_decode() const { return false; }
    virtual Status after_decode(const PolicyContext &ctx) const { return Status(); }

    // Rows a lane of `layer` (of n_layer) keeps after after_prefill() for a
    // prompt of n_prompt rows (at most n_prompt): what admission and request
    // validation count as the steady state.
    virtual int64_t kept_rows(int64_t n_prompt, int64_t layer, int64_t n_layer) const { return n_prompt; }
    // Rows a lane of `layer` holds at most once n_gen tokens were generated
    // after a prompt of n_prompt (kept + n_gen unless the policy slides).
    virtual int64_t decode_rows(int64_t n_prompt, int64_t n_gen, int64_t layer, int64_t n_layer) const {
        return kept_rows(n_prompt, layer, n_layer) + n_gen;
    }
    // Whether the policy fits a model with these lanes and n_head query heads
    // (a head profile made for another model does not); checked when a
    // request is validated.
    virtual Status check_model(const KvShape &shape, int64_t n_head) const { return Status(); }
    // Of a prefill of n_total tokens, how many leading ones may come from the
    // prefix cache, i.e. be left out of the forward pass: a policy that scores
    // queries needs those queries computed (SnapKV's window: the last
    // `window`; H2O: all of them). Their keys may be cached either way.
    virtual int64_t reusable_prefix(int64_t n_total) const { return n_total; }
    // The mask the sequence's prefill attention runs with (LServe's Λ for
    // streaming heads), or null: dense prefill.
    virtual const PrefillMask *prefill_mask() const { return nullptr; }
    // Which prefix-cache blocks the sequence may map and publish: 0 for KV
    // made by a dense prefill (every policy without a prefill mask shares
    // it); a policy whose prefill changes the KV (a mask changes the layers'
    // outputs, so every later layer's keys) names its own, the same for
    // every policy object that would make the same KV.
    virtual uint64_t prefix_namespace() const { return 0; }
};

using KvPolicyPtr = std::shared_ptr<const KvPolicy>;

}  // namespace sieve
