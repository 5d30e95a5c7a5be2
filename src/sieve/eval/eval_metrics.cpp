#include "sieve/eval/eval_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sieve {

void eval_log_softmax(const float *logits, int64_t n_vocab, float *out) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t v = 0; v < n_vocab; ++v) mx = std::max(mx, logits[v]);
    double sum = 0;
    for (int64_t v = 0; v < n_vocab; ++v) sum += std::exp(static_cast<double>(logits[v]) - mx);
    const double log_z = static_cast<double>(mx) + std::log(sum);
    for (int64_t v = 0; v < n_vocab; ++v) out[v] = static_cast<float>(static_cast<double>(logits[v]) - log_z);
}

double eval_kl(const float *log_p, const float *log_q, int64_t n_vocab) {
    double kl = 0;
    for (int64_t v = 0; v < n_vocab; ++v) {
        if (log_p[v] == -std::numeric_limits<float>::infinity()) continue;  // p_v = 0: the term's limit is 0
        kl += std::exp(static_cast<double>(log_p[v])) * (static_cast<double>(log_p[v]) - log_q[v]);
    }
    // Rounding can leave a tiny negative sum for near-identical distributions;
    // KL is never negative.
    return std::max(0.0, kl);
}

int32_t eval_argmax(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
        if (x[i] > x[best]) best = i;
    return static_cast<int32_t>(best);
}

WilsonInterval eval_wilson(int64_t k, int64_t n, double z) {
    if (n <= 0) return {0.0, 1.0};
    const double nd = static_cast<double>(n);
    const double p = static_cast<double>(k) / nd;
    const double z2 = z * z;
    const double denom = 1.0 + z2 / nd;
    const double centre = (p + z2 / (2.0 * nd)) / denom;
    const double half = z / denom * std::sqrt(p * (1.0 - p) / nd + z2 / (4.0 * nd * nd));
    return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

void StepAccumulator::add(const float *log_p, const float *log_q, int64_t n_vocab, int32_t forced) {
    const double kl = eval_kl(log_p, log_q, n_vocab);
    kl_sum_ += kl;
    kl_max_ = std::max(kl_max_, kl);
    const bool agree = eval_argmax(log_p, n_vocab) == eval_argmax(log_q, n_vocab);
    n_agree_ += agree ? 1 : 0;
    float top = -std::numeric_limits<float>::infinity(), second = top;
    for (int64_t v = 0; v < n_vocab; ++v) {
        if (log_p[v] > top) {
            second = top;
            top = log_p[v];
        } else if (log_p[v] > second) {
            second = log_p[v];
        }
    }
    const double margin = static_cast<double>(top) - static_cast<double>(second);
    if (!agree && first_disagree_ < 0) {
        first_disagree_ = n_;
        disagree_margin_ = margin;
    }
    if (margin_step_ < 0 || margin < margin_) {
        margin_ = margin;
        margin_step_ = n_;
    }
    nll_ref_sum_ -= log_p[forced];
    nll_sum_ -= log_q[forced];
    ++n_;
}

StepMetrics StepAccumulator::result() const {
    StepMetrics m;
    m.n_steps = n_;
    if (n_ == 0) return m;
    const double n = static_cast<double>(n_);
    m.kl_mean = kl_sum_ / n;
    m.kl_max = kl_max_;
    m.agreement = static_cast<double>(n_agree_) / n;
    m.nll_ref = nll_ref_sum_ / n;
    m.nll = nll_sum_ / n;
    m.ref_margin = margin_;
    m.ref_margin_step = margin_step_;
    m.first_disagree = first_disagree_;
    m.disagree_margin = disagree_margin_;
    return m;
}

CellSummary eval_summarise(const std::vector<SampleOutcome> &samples) {
    CellSummary c;
    double kl_sum = 0, agree_sum = 0, nll_ref_tok = 0, nll_tok = 0, ruler_sum = 0;
    int64_t n_with_steps = 0, n_tokens = 0, rows_dense = 0, rows_kept = 0;
    for (const SampleOutcome &s : samples) {
        ++c.n_samples;
        c.n_scored += s.scored ? 1 : 0;
        c.n_correct += s.scored && s.correct ? 1 : 0;
        ruler_sum += s.scored ? s.ruler : 0.0;
        rows_dense += s.rows_dense;
        rows_kept += s.rows_kept;
        if (s.steps.n_steps == 0) continue;
        ++n_with_steps;
        kl_sum += s.steps.kl_mean;
        c.kl_max = std::max(c.kl_max, s.steps.kl_max);
        agree_sum += s.steps.agreement;
        // Perplexity over the cell's tokens: weight each sample by its steps.
        const double steps = static_cast<double>(s.steps.n_steps);
        nll_ref_tok += s.steps.nll_ref * steps;
        nll_tok += s.steps.nll * steps;
        n_tokens += s.steps.n_steps;
    }
    c.acc_ci = eval_wilson(c.n_correct, c.n_scored);
    if (c.n_scored > 0) c.ruler = ruler_sum / static_cast<double>(c.n_scored);
    if (n_with_steps > 0) {
        c.kl_mean = kl_sum / static_cast<double>(n_with_steps);
        c.agreement = agree_sum / static_cast<double>(n_with_steps);
        c.ppl_ref = std::exp(nll_ref_tok / static_cast<double>(n_tokens));
        c.ppl = std::exp(nll_tok / static_cast<double>(n_tokens));
    }
    c.compression = rows_kept > 0 ? static_cast<double>(rows_dense) / static_cast<double>(rows_kept) : 0.0;
    return c;
}

}  // namespace sieve
