#include "sieve/engine/output.h"

namespace sieve {

GenEvent output_next_token(Sequence &s, const float *logits, const Tokenizer &tok, int64_t max_ctx) {
    GenEvent ev;
    ev.request_id = s.id;

    if (s.req.on_logits) s.req.on_logits(logits, s.sampler.n_vocab());
    const int32_t sampled = s.sampler.sample(logits);
    const size_t i_gen = static_cast<size_t>(s.n_gen());
    const int32_t t = i_gen < s.req.forced_tokens.size() ? s.req.forced_tokens[i_gen] : sampled;
    ev.tokens.push_back(t);
    if (s.req.n_logprobs >= 0) {
        ev.logprobs.push_back({t, s.sampler.logprob(t)});
        std::vector<TokenLogprob> top(static_cast<size_t>(s.req.n_logprobs));
        top.resize(static_cast<size_t>(s.sampler.top_logprobs(s.req.n_logprobs, top.data())));
        ev.top_logprobs.push_back(std::move(top));
    }
    s.sampler.accept(t);
    s.tokens.push_back(t);

    FinishReason fin = FinishReason::none;
    bool matched = false;
    if (!s.req.ignore_eos && tok.is_eog(t)) {
        fin = FinishReason::stop;
    } else {
        ev.text = s.stop.push(s.detok.push(t), &matched);
        if (matched) {
            fin = FinishReason::stop;
        } else if (s.n_gen() >= s.req.max_tokens || s.n_total() >= max_ctx) {
            fin = FinishReason::length;
        }
    }
    if (fin != FinishReason::none && !matched) {
        // Bytes of an unfinished character become U+FFFD; they may still
        // complete a stop string.
        ev.text += s.stop.push(s.detok.finish(), &matched);
        if (matched) {
            fin = FinishReason::stop;
        } else {
            ev.text += s.stop.flush();
        }
    }
    if (fin != FinishReason::none) {
        ev.finished = true;
        ev.finish_reason = fin;
        ev.n_prompt_tokens = s.n_prompt;
        ev.n_cached_tokens = s.n_cached;
        ev.n_gen_tokens = s.n_gen();
    }
    return ev;
}

GenEvent output_final_event(const Sequence &s, FinishReason reason, std::string error) {
    GenEvent ev;
    ev.request_id = s.id;
    ev.finished = true;
    ev.finish_reason = reason;
    ev.error = std::move(error);
    ev.n_prompt_tokens = s.n_prompt;
    ev.n_cached_tokens = s.n_cached;
    ev.n_gen_tokens = s.n_gen();
    return ev;
}

}  // namespace sieve
