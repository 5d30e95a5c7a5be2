// One request's state inside the engine, from submit() to its final event.
//
// vLLM v1's rule: a sequence is n_total tokens (prompt + generated so far), of
// which n_computed have their KV in the store. A step gives it
// min(n_total - n_computed, budget) more; when n_computed reaches n_total the
// step's logits produce the next token and n_total grows by one.
//
//   tokens:  [ p0 p1 ... p(n_prompt-1) | g0 g1 ... ]
//              |<------ n_computed ------>|          KV in the store
//              |<---------------- n_total() ------->|
//
// Preemption either swaps the KV to host memory (the sequence resumes with
// n_computed unchanged once its image is mapped back) or, when the swap space
// is full, frees the KV and sets n_computed = 0 but keeps the generated
// tokens: the recompute prefill covers prompt + generated, so sampling resumes
// exactly where it stopped (the sampler keeps its history and PRNG state).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "sieve/engine/engine.h"
#include "sieve/engine/sampler.h"
#include "sieve/engine/stop_matcher.h"
#include "sieve/kv/kv_space.h"
#include "sieve/sparse/policy.h"
#include "sieve/tokenizer/tokenizer.h"

namespace sieve {

struct Sequence {
    Sequence(uint64_t id_, GenRequest req_, GenCallback cb_, const Tokenizer &tok, int32_t n_vocab)
        : id(id_),
          req(std::move(req_)),
          cb(std::move(cb_)),
          tokens(req.prompt),
          n_prompt(static_cast<int64_t>(req.prompt.size())),
          sampler(req.sampling, n_vocab),
          detok(tok, /*skip_special=*/true),
          stop(req.stop) {}

    int64_t n_total() const { return static_cast<int64_t>(tokens.size()); }
    int64_t n_gen() const { return n_total() - n_prompt; }
    // Tokens the next steps must still run through the model.
    int64_t n_uncomputed() const { return n_total() - n_computed; }

    uint64_t id;
    GenRequest req;
    GenCallback cb;
    std::vector<int32_t> tokens;  // prompt + generated
    int64_t n_prompt;
    int64_t n_computed = 0;       // tokens whose KV is in the store
    int64_t n_cached = 0;         // prompt tokens of the first admission that the prefix cache supplied
    bool prefill_begun = false;   // the policy's point 0 ran for the current KV (reset on recompute)
    int slot = -1;                // KV slot while running, -1 while waiting
    bool prompt_counted = false;  // prompt tokens added to the stats once
    bool policy_applied = false;  // the KV policy's after-prefill point ran on the current KV
    KvPolicyPtr policy;           // the request's KV policy (null: dense)
    std::unique_ptr<KvPolicyState> pstate;  // its per-sequence state (scores), if it needs one
    int64_t policy_n_prompt = 0;  // the rows its after-prefill point saw (budgets are fractions of it)
    std::unique_ptr<KvSwapImage> swapped;  // KV in host memory while preempted by a swap
    Sampler sampler;
    StreamDetokenizer detok;
    StopMatcher stop;
};

using SequencePtr = std::unique_ptr<Sequence>;

}  // namespace sieve
