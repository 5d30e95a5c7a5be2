#include "sieve/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace sieve {

Status sampler_params_validate(const SamplerParams &p) {
    if (!std::isfinite(p.temperature))
        return Status::errorf("temperature: expected a finite number (<= 0 for greedy), got %g",
                              static_cast<double>(p.temperature));
    if (!(p.top_p >= 0.0f && p.top_p <= 1.0f))
        return Status::errorf("top_p: expected a number in [0, 1] (1 = off), got %g", static_cast<double>(p.top_p));
    if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
        return Status::errorf("min_p: expected a number in [0, 1] (0 = off), got %g", static_cast<double>(p.min_p));
    if (!(std::isfinite(p.repeat_penalty) && p.repeat_penalty > 0.0f))
        return Status::errorf("repeat_penalty: expected a number > 0 (1 = off), got %g",
                              static_cast<double>(p.repeat_penalty));
    if (p.repeat_last_n < 0)
        return Status::errorf("repeat_last_n: expected >= 0 (0 = off), got %d", p.repeat_last_n);
    if (!std::isfinite(p.presence_penalty))
        return Status::errorf("presence_penalty: expected a finite number, got %g",
                              static_cast<double>(p.presence_penalty));
    if (!std::isfinite(p.frequency_penalty))
        return Status::errorf("frequency_penalty: expected a finite number, got %g",
                              static_cast<double>(p.frequency_penalty));
    return Status();
}

namespace {
size_t checked_vocab(int32_t n_vocab) {
    SIEVE_CHECKF(n_vocab > 0, "n_vocab = %d", n_vocab);
    return static_cast<size_t>(n_vocab);
}
}  // namespace

Sampler::Sampler(const SamplerParams &params, int32_t n_vocab)
    : params_(params),
      n_vocab_(static_cast<int32_t>(checked_vocab(n_vocab))),
      rng_(params.seed),
      logits_(static_cast<size_t>(n_vocab)),
      cand_(static_cast<size_t>(n_vocab)),
      probs_(static_cast<size_t>(n_vocab)),
      order_(static_cast<size_t>(n_vocab)),
      ring_(static_cast<size_t>(std::max(params.repeat_last_n, 0))),
      counts_(static_cast<size_t>(n_vocab)),
      stamp_(static_cast<size_t>(n_vocab)) {
    const Status st = sampler_params_validate(params);
    SIEVE_CHECKF(st.ok(), "%s", st.message().c_str());
}

void Sampler::reset() {
    rng_.seed(params_.seed);
    std::fill(counts_.begin(), counts_.end(), 0);
    ring_head_ = 0;
    ring_len_ = 0;
    sampled_ = false;
    lse_valid_ = false;
}

void Sampler::accept(int32_t token) {
    SIEVE_CHECKF(token >= 0 && token < n_vocab_, "token %d, n_vocab %d", token, n_vocab_);
    const int32_t cap = static_cast<int32_t>(ring_.size());
    if (cap == 0) return;
    if (ring_len_ == cap) {
        --counts_[ring_[ring_head_]];
    } else {
        ++ring_len_;
    }
    ring_[ring_head_] = token;
    ++counts_[token];
    ring_head_ = (ring_head_ + 1) % cap;
}

// Step 1. Each distinct token in the window is penalised once; the stamp
// marks tokens already done in this call without clearing an n_vocab array.
void Sampler::apply_penalties() {
    const SamplerParams &p = params_;
    if (ring_len_ == 0) return;
    if (p.repeat_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f) return;
    if (++stamp_now_ == 0) {  // wrapped: old stamps could collide with new ones
        std::fill(stamp_.begin(), stamp_.end(), 0u);
        stamp_now_ = 1;
    }
    for (int32_t i = 0; i < ring_len_; ++i) {
        const auto t = static_cast<size_t>(ring_[i]);
        if (stamp_[t] == stamp_now_) continue;
        stamp_[t] = stamp_now_;
        float &l = logits_[t];
        l = l > 0.0f ? l / p.repeat_penalty : l * p.repeat_penalty;
        const auto count = static_cast<float>(counts_[t]);
        l -= p.presence_penalty + p.frequency_penalty * count;
    }
}

int32_t Sampler::argmax() const {
    int32_t best = 0;
    for (int32_t i = 1; i < n_vocab_; ++i)
        if (logits_[i] > logits_[best]) best = i;  // strict: ties keep lower id
    return best;
}

namespace {
// Descending logit, then ascending id: a strict total order, so every sort
// and partial sort gives one well-defined result.
struct ByLogitDesc {
    template <class C>
    bool operator()(const C &a, const C &b) const {
        return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
    }
};
}  // namespace

void Sampler::sort_desc(int32_t n) {
    if (cand_sorted_) return;
    std::sort(cand_.begin(), cand_.begin() + n, ByLogitDesc{});
    cand_sorted_ = true;
}

// Step 3.
int32_t Sampler::keep_top_k(int32_t n, int32_t k) {
    if (k <= 0 || k >= n) return n;
    std::partial_sort(cand_.begin(), cand_.begin() + k, cand_.begin() + n, ByLogitDesc{});
    cand_sorted_ = true;
    return k;
}

// Step 4. Needs the candidates sorted; the sort is skipped when top-p is off.
int32_t Sampler::keep_top_p(int32_t n) {
    if (params_.top_p >= 1.0f || n <= 1) return n;
    sort_desc(n);
    const float max_l = cand_[0].logit;
    double sum = 0.0;
    for (int32_t i = 0; i < n; ++i) {
        probs_[i] = std::exp(cand_[i].logit - max_l);
        sum += probs_[i];
    }
    const double target = static_cast<double>(params_.top_p) * sum;
    double cum = 0.0;
    for (int32_t i = 0; i < n; ++i) {
        cum += probs_[i];
        if (cum >= target) return i + 1;
    }
    return n;
}

// Step 5. p_i >= min_p * p_max  <=>  logit_i >= max_logit + log(min_p).
// A stable in-place filter, so sortedness survives.
int32_t Sampler::keep_min_p(int32_t n) {
    if (params_.min_p <= 0.0f || n <= 1) return n;
    float max_l = -std::numeric_limits<float>::infinity();
    for (int32_t i = 0; i < n; ++i) max_l = std::max(max_l, cand_[i].logit);
    const float threshold = max_l + std::log(params_.min_p);
    int32_t kept = 0;
    for (int32_t i = 0; i < n; ++i)
        if (cand_[i].logit >= threshold) cand_[kept++] = cand_[i];
    return kept;  // >= 1: the max always passes
}

// Steps 6 and 7.
int32_t Sampler::draw(int32_t n) {
    const float inv_t = 1.0f / params_.temperature;
    float max_l = -std::numeric_limits<float>::infinity();
    for (int32_t i = 0; i < n; ++i) max_l = std::max(max_l, cand_[i].logit);
    double sum = 0.0;
    for (int32_t i = 0; i < n; ++i) {
        const float p = std::exp((cand_[i].logit - max_l) * inv_t);
        probs_[i] = p;
        sum += p;
    }
    // Top 53 bits -> a double in [0, 1): exact and the same on every platform,
    // unlike std::uniform_real_distribution whose algorithm is unspecified.
    const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    const double target = u * sum;
    double cum = 0.0;
    for (int32_t i = 0; i < n; ++i) {
        cum += probs_[i];
        if (target < cum) return cand_[i].id;
    }
    return cand_[n - 1].id;  // rounding left target == sum
}

int32_t Sampler::sample(const float *logits) {
    std::copy(logits, logits + n_vocab_, logits_.begin());
    sampled_ = true;
    lse_valid_ = false;
    apply_penalties();
    if (params_.temperature <= 0.0f) return argmax();

    for (int32_t i = 0; i < n_vocab_; ++i) cand_[i] = {i, logits_[i]};
    cand_sorted_ = false;
    int32_t n = n_vocab_;
    n = keep_top_k(n, params_.top_k);
    n = keep_top_p(n);
    n = keep_min_p(n);
    return draw(n);
}

float Sampler::log_sum_exp() {
    if (lse_valid_) return lse_;
    float max_l = -std::numeric_limits<float>::infinity();
    for (float l : logits_) max_l = std::max(max_l, l);
    double sum = 0.0;
    for (float l : logits_) sum += std::exp(static_cast<double>(l - max_l));
    lse_ = max_l + static_cast<float>(std::log(sum));
    lse_valid_ = true;
    return lse_;
}

float Sampler::logprob(int32_t token) {
    SIEVE_CHECK(sampled_);
    SIEVE_CHECKF(token >= 0 && token < n_vocab_, "token %d, n_vocab %d", token, n_vocab_);
    return logits_[token] - log_sum_exp();
}

int32_t Sampler::top_logprobs(int32_t n, TokenLogprob *out) {
    SIEVE_CHECK(sampled_);
    n = std::clamp(n, 0, n_vocab_);
    if (n == 0) return 0;
    std::iota(order_.begin(), order_.end(), 0);
    std::partial_sort(order_.begin(), order_.begin() + n, order_.end(), [&](int32_t a, int32_t b) {
        const float la = logits_[a], lb = logits_[b];
        return la > lb || (la == lb && a < b);
    });
    const float lse = log_sum_exp();
    for (int32_t i = 0; i < n; ++i) {
        const int32_t t = order_[i];
        out[i] = {t, logits_[t] - lse};
    }
    return n;
}

}  // namespace sieve
