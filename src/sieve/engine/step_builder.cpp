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
    bool any_sink = false, any_selector = false;
    for (const ScheduledSeq &p : plan) {
        Sequence &s = *p.seq;
        AttnScoreSink *sink = s.pstate && s.pstate->scoring ? &s.pstate->sink : nullptr;
        any_sink = any_sink || sink;
        // Page selection is for decode queries: past the policy's after-prefill point.
        AttnRowSelector *sel = s.pstate && s.policy_applied ? s.pstate->selector.get() : nullptr;
        any_selector = any_selector || sel;
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
    return b;
}

}  // namespace sieve
