// After a forward step: a sequence's logits row becomes its next token and the
// event that reports it.
//   1. sample with the sequence's own sampler; logprobs when asked;
//   2. accept the token (sampler history, sequence tokens);
//   3. end of generation (tokenizer.is_eog) unless ignore_eos -> stop;
//   4. detokenize (never half a UTF-8 character), then the stop matcher holds
//      back text that may still start a stop string; a match -> stop;
//   5. max_tokens (or the context) reached -> length;
//   6. on finishing without a match, release what was held back.
#pragma once

#include <cstdint>
#include <string>

#include "sieve/engine/engine.h"
#include "sieve/engine/sequence.h"

namespace sieve {

GenEvent output_next_token(Sequence &s, const float *logits, const Tokenizer &tok, int64_t max_ctx);

// The last event of a sequence that ends without a new token (cancelled, error).
GenEvent output_final_event(const Sequence &s, FinishReason reason, std::string error);

}  // namespace sieve
