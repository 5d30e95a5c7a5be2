// Token sampler: turns one row of logits into the next token.
//
// Each sample() runs these steps, in this order (llama.cpp's default chain,
// so the same flags mean the same thing in both):
//   1. Penalties over the last `repeat_last_n` accepted tokens (0 = off):
//        repetition (llama.cpp / CTRL semantics): a seen token's logit is
//          divided by repeat_penalty when positive, multiplied when negative;
//        presence / frequency (OpenAI semantics):
//          logit -= presence_penalty * (count > 0) + frequency_penalty * count,
//          where count is how often the token occurs in that window.
//   2. Greedy when temperature <= 0: argmax of the penalised logits, ties go
//      to the lowest token id. Steps 3-7 are skipped.
//   3. top-k: keep the k largest logits (k <= 0 or k >= n_vocab: keep all).
//   4. top-p (nucleus): keep the shortest prefix, by descending probability,
//      whose mass reaches top_p (1 = off). Probabilities at temperature 1.
//   5. min-p: keep tokens with p >= min_p * p_max (0 = off).
//   6. temperature: divide the surviving logits by `temperature`.
//   7. softmax over the survivors and draw one with the seeded PRNG.
// Every filter keeps at least one token. Ties in every ordering are broken by
// the lower token id, so the result depends only on logits, history and seed.
//
// PRNG: std::mt19937_64 (fully specified by the standard) seeded with `seed`;
// a draw is the top 53 bits scaled to [0, 1). Same seed, same logits and same
// accepted tokens give the same tokens on every platform.
//
// Log-probabilities (for the server's logprobs / top_logprobs) are those of
// the model's distribution after step 1: log-softmax of the penalised logits
// over the whole vocabulary at temperature 1, before any truncation — what
// the model "thinks", independent of how the token was then drawn.
//
// No allocation per token: every buffer is sized to n_vocab at construction.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "sieve/core/status.h"

namespace sieve {

struct SamplerParams {
    float temperature = 0.8f;
    int32_t top_k = 40;
    float top_p = 0.95f;
    float min_p = 0.05f;
    float repeat_penalty = 1.0f;  // 1 = off
    int32_t repeat_last_n = 64;   // window for all three penalties; 0 = off
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    uint64_t seed = 0;
};

// Checks ranges a user can get wrong (flags, request JSON). The error names
// the parameter, the expected range and the value given.
Status sampler_params_validate(const SamplerParams &p);

struct TokenLogprob {
    int32_t token = -1;
    float logprob = 0.0f;
};

class Sampler {
public:
    // Precondition: sampler_params_validate(params).ok() and n_vocab > 0.
    Sampler(const SamplerParams &params, int32_t n_vocab);

    // Picks the next token from logits[0 .. n_vocab). Does not accept it:
    // the caller calls accept() with the token it actually appends (which may
    // differ, e.g. a forced token), so history always matches the sequence.
    int32_t sample(const float *logits);

    // Appends a token to the penalty history.
    void accept(int32_t token);

    // Clears the history and re-seeds the PRNG with params.seed.
    void reset();

    // Log-probability of `token` under the last sample()'s distribution (see
    // the header comment). Precondition: sample() was called since reset.
    float logprob(int32_t token);

    // Writes the n most likely tokens of the last sample()'s distribution,
    // most likely first (ties: lower id), into out[0 .. min(n, n_vocab)) and
    // returns how many were written.
    int32_t top_logprobs(int32_t n, TokenLogprob *out);

    const SamplerParams &params() const { return params_; }
    int32_t n_vocab() const { return n_vocab_; }

private:
    struct Candidate {
        int32_t id;
        float logit;
    };

    void apply_penalties();
    int32_t argmax() const;
    int32_t keep_top_k(int32_t n, int32_t k);
    int32_t keep_top_p(int32_t n);
    int32_t keep_min_p(int32_t n);
    int32_t draw(int32_t n);
    void sort_desc(int32_t n);
    float log_sum_exp();

    SamplerParams params_;
    int32_t n_vocab_;
    std::mt19937_64 rng_;

    std::vector<float> logits_;       // [n_vocab] penalised logits of the last sample()
    std::vector<Candidate> cand_;     // [n_vocab] working set, truncated by steps 3-5
    std::vector<float> probs_;        // [n_vocab] scratch probabilities for cand_
    std::vector<int32_t> order_;      // [n_vocab] scratch for top_logprobs
    bool cand_sorted_ = false;        // cand_[0 .. n) sorted by descending logit
    float lse_ = 0.0f;                // log-sum-exp of logits_, valid when lse_valid_
    bool lse_valid_ = false;
    bool sampled_ = false;

    // Penalty window: a ring of the last repeat_last_n accepted tokens and each
    // token's count within it (kept incrementally, so a step costs O(window)).
    std::vector<int32_t> ring_;       // [repeat_last_n]
    int32_t ring_head_ = 0;           // next slot to write
    int32_t ring_len_ = 0;
    std::vector<int32_t> counts_;     // [n_vocab]
    std::vector<uint32_t> stamp_;     // [n_vocab] last sample() that penalised the token
    uint32_t stamp_now_ = 0;
};

}  // namespace sieve
