// The numbers `sieve eval` reports beside task accuracy, as plain functions
// over plain arrays so each has its own unit test (tests/unit/test_eval_metrics.cpp).
//
// Per generated step, with p = the dense (reference) next-token distribution
// and q = the policy's on the same prefix (the dense continuation is teacher-
// forced through the policy):
//   KL(p || q) = sum_v p_v (log p_v - log q_v)   in nats, accumulated in double
//   agreement  = [argmax p == argmax q]
//   NLL        = -log q_t of the forced token t (and -log p_t for dense)
// Both distributions come from log_softmax() of the raw logits at
// temperature 1 (what the model "thinks", independent of sampling). When the
// logits are bit-identical, every term of the KL sum is exactly 0, so dense
// against itself reports 0, not a rounding residue.
//
// Accuracy of n samples with k correct gets the Wilson score interval
// (Wilson 1927; Brown, Cai & DasGupta 2001 recommend it over the normal
// approximation for small n and p near 0 or 1):
//   centre = (k/n + z^2/2n) / (1 + z^2/n)
//   half   = z / (1 + z^2/n) * sqrt(k/n (1 - k/n) / n + z^2 / 4n^2),  z = 1.96
#pragma once

#include <cstdint>
#include <vector>

namespace sieve {

// out[v] = logits[v] - log(sum exp(logits)), with the max subtracted first;
// the sum is taken in double so a 150k vocabulary loses no mass to rounding.
void eval_log_softmax(const float *logits, int64_t n_vocab, float *out);

// KL(p || q) in nats from two log-distributions of n_vocab entries.
// Terms with p_v == 0 (log p = -inf) contribute 0, as the limit says.
double eval_kl(const float *log_p, const float *log_q, int64_t n_vocab);

// Index of the largest entry; ties go to the lowest index (as the greedy sampler).
int32_t eval_argmax(const float *x, int64_t n);

struct WilsonInterval {
    double lo = 0, hi = 0;  // fractions in [0, 1]
};
// n == 0 gives [0, 1] (nothing is known).
WilsonInterval eval_wilson(int64_t k, int64_t n, double z = 1.96);

// What one teacher-forced sequence of steps yields: per-step KL, agreement and
// the forced tokens' NLL under both models, summarised.
struct StepMetrics {
    int64_t n_steps = 0;
    double kl_mean = 0, kl_max = 0;
    double agreement = 0;         // fraction of steps with equal argmax
    double nll_ref = 0, nll = 0;  // mean NLL of the forced tokens (nats), dense and policy
    // The dense model's smallest lead of its top token over the runner-up
    // (log-prob gap, nats) over the steps, and the step it was at: a sample
    // whose dense answer rests on a gap of 0.01 nats flips under any
    // perturbation (f16 rounding, a quantized row), whatever the policy.
    double ref_margin = 0;
    int64_t ref_margin_step = -1;
    int64_t first_disagree = -1;  // the first step whose argmax differs (-1: none)
    double disagree_margin = 0;   // the dense lead at that step (0 when none)
};

// Accumulates StepMetrics one step at a time (the policy's logits arrive
// step by step on the engine thread; nothing per step is kept).
class StepAccumulator {
  public:
    // log_p: dense log-probs of this step; log_q: the policy's; forced: the
    // token fed at this step (the dense continuation's).
    void add(const float *log_p, const float *log_q, int64_t n_vocab, int32_t forced);
    StepMetrics result() const;
    int64_t n_steps() const { return n_; }

  private:
    int64_t n_ = 0, n_agree_ = 0, margin_step_ = -1, first_disagree_ = -1;
    double kl_sum_ = 0, kl_max_ = 0, nll_ref_sum_ = 0, nll_sum_ = 0, margin_ = 0, disagree_margin_ = 0;
};

// Summary over the samples of one (policy, task, length) cell.
struct CellSummary {
    int64_t n_samples = 0;
    int64_t n_scored = 0;  // samples with answers (all but ppl)
    int64_t n_correct = 0;
    WilsonInterval acc_ci;
    double ruler = 0;             // mean RULER string_match_all over the scored samples, in [0, 1]
    double kl_mean = 0;           // mean over samples of the per-sample mean KL
    double kl_max = 0;            // max over samples of the per-sample max KL
    double agreement = 0;         // mean over samples
    double ppl_ref = 0, ppl = 0;  // exp(mean NLL) over all forced tokens of the cell
    double compression = 0;       // total dense rows / total kept rows
};

// One sample's contribution to a cell.
struct SampleOutcome {
    bool scored = false, correct = false;
    double ruler = 0;  // fraction of expected answers found (RULER), in [0, 1]
    StepMetrics steps;
    int64_t rows_dense = 0, rows_kept = 0;  // summed over every lane
};

CellSummary eval_summarise(const std::vector<SampleOutcome> &samples);

}  // namespace sieve
