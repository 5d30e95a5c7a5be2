// Lays a step's plan out as one Batch: each scheduled sequence's tokens
// contiguous, at consecutive positions from its n_computed, in plan order.
//
//   plan:   [ A: 1 decode token | B: 1 decode token | C: prefill chunk of 5 ]
//   tokens: [ a9 | b4 | c0 c1 c2 c3 c4 ]
//   pos:    [ 9  | 4  | 0  1  2  3  4  ]
//   want:   [ 1  | 1  | 0  0  0  0  w  ]   w = 1 when the chunk ends C's prompt
// Output row i of the logits belongs to the i-th plan entry with wants_logits.
#pragma once

#include <cstdint>
#include <vector>

#include "sieve/engine/scheduler.h"
#include "sieve/model/model.h"

namespace sieve {

class StepBuilder {
public:
    // The returned Batch points into this builder until the next build().
    Batch build(const std::vector<ScheduledSeq> &plan);

private:
    std::vector<int32_t> tokens_, pos_, seq_;
    std::vector<int8_t> want_, in_prompt_;
    std::vector<AttnScoreSink *> sinks_;  // per token: its sequence's policy score sink, or null
    std::vector<AttnRowSelector *> selectors_;  // per token: its sequence's page selector (decoding), or null
    std::vector<const PrefillMask *> masks_;     // per token: its sequence's prefill mask (prefilling), or null
};

}  // namespace sieve
