#include "sieve/engine/step_builder.h"

namespace sieve {

Batch StepBuilder::build(const std::vector<ScheduledSeq> &plan) {
    tokens_.clear();
    pos_.clear();
    seq_.clear();
    want_.clear();
    in_prompt_.clear();
    sinks_.clear();
    selectors_.clear();
    masks_.clear();
    bool any_sink = false, any_selector = false, any_mask = false;
    for (const ScheduledSeq &p : plan) {
        Sequence &s = *p.seq;
        AttnScoreSink *sink = s.pstate && s.pstate->scoring ? &s.pstate->sink : nullptr;
        any_sink = any_sink || sink;
        // Page selection is for decode queries: past the policy's after-prefill point.
        AttnRowSelector *sel = s.pstate && s.policy_applied ? s.pstate->selector.get() : nullptr;
        any_selector = any_selector || sel;
        // A prefill mask is for the prefill (before the policy's first act).
        const PrefillMask *mask = s.policy && !s.policy_applied ? s.policy->prefill_mask() : nullptr;
        any_mask = any_mask || mask;
        for (int64_t i = 0; i < p.n_tokens; ++i) {
            const int64_t at = s.n_computed + i;
            tokens_.push_back(s.tokens[static_cast<size_t>(at)]);
            pos_.push_back(static_cast<int32_t>(at));
            seq_.push_back(s.slot);
            want_.push_back(p.wants_logits && i == p.n_tokens - 1 ? 1 : 0);
            // A prompt token is prefilled whatever its chunk's length (a hit
            // or the token budget may leave it alone in its chunk).
            in_prompt_.push_back(at < s.n_prompt ? 1 : 0);
            sinks_.push_back(sink);
            selectors_.push_back(sel);
            masks_.push_back(mask);
        }
    }
    Batch b;
    b.tokens = tokens_.data();
    b.pos = pos_.data();
    b.seq = seq_.data();
    b.n_tokens = static_cast<int64_t>(tokens_.size());
    b.want_logits = want_.data();
    b.in_prompt = in_prompt_.data();
    b.score_sinks = any_sink ? sinks_.data() : nullptr;
    b.selectors = any_selector ? selectors_.data() : nullptr;
    b.prefill_masks = any_mask ? masks_.data() : nullptr;
    return b;
}

}  // namespace sieve
