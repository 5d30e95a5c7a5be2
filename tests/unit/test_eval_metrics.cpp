// sieve eval's metrics (src/sieve/eval/eval_metrics.h) against float64
// references computed here from the definitions, on random logits with
// outliers (kernels_test_util.h) and an odd vocabulary size; the Wilson
// interval against values worked by hand; the cell summary against a
// hand-made cell.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "kernels_test_util.h"
#include "sieve/eval/eval_metrics.h"

using namespace sieve;

namespace {

// Logits of an odd vocabulary: N(0, 3) with the shared outliers, so the
// softmax is peaked as real next-token distributions are.
std::vector<float> random_logits(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    return test::random_values(rng, static_cast<size_t>(n), 3.0f);
}

std::vector<double> log_softmax_f64(const std::vector<float> &x) {
    double mx = -1e300, s = 0;
    for (float v : x) mx = std::max(mx, static_cast<double>(v));
    for (float v : x) s += std::exp(v - mx);
    std::vector<double> out;
    for (float v : x) out.push_back(v - mx - std::log(s));
    return out;
}

std::vector<float> log_softmax(const std::vector<float> &x) {
    std::vector<float> out(x.size());
    eval_log_softmax(x.data(), static_cast<int64_t>(x.size()), out.data());
    return out;
}

TEST(EvalMetrics, LogSoftmaxMatchesFloat64) {
    const std::vector<float> x = random_logits(4099, 1);
    const std::vector<float> got = log_softmax(x);
    const std::vector<double> want = log_softmax_f64(x);
    double mass = 0;
    for (size_t v = 0; v < x.size(); ++v) {
        EXPECT_NEAR(got[v], want[v], 1e-5 * std::max(1.0, std::fabs(want[v]))) << "v=" << v;
        mass += std::exp(static_cast<double>(got[v]));
    }
    EXPECT_NEAR(mass, 1.0, 1e-5);
}

TEST(EvalMetrics, KlOfIdenticalDistributionsIsExactlyZero) {
    const std::vector<float> lp = log_softmax(random_logits(4099, 2));
    const std::vector<float> copy = lp;
    EXPECT_EQ(eval_kl(lp.data(), copy.data(), static_cast<int64_t>(lp.size())), 0.0);
}

TEST(EvalMetrics, KlMatchesFloat64AndHandValue) {
    // Hand value: p = (1/2, 1/2), q = (1/4, 3/4): KL = 1/2 ln 2 + 1/2 ln(2/3).
    const float lp[2] = {std::log(0.5f), std::log(0.5f)};
    const float lq[2] = {std::log(0.25f), std::log(0.75f)};
    EXPECT_NEAR(eval_kl(lp, lq, 2), 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0), 1e-7);

    const std::vector<float> p = log_softmax(random_logits(4099, 3));
    const std::vector<float> q = log_softmax(random_logits(4099, 4));
    double want = 0;
    for (size_t v = 0; v < p.size(); ++v)
        want += std::exp(static_cast<double>(p[v])) * (static_cast<double>(p[v]) - static_cast<double>(q[v]));
    EXPECT_NEAR(eval_kl(p.data(), q.data(), 4099), want, 1e-9 * std::max(1.0, want));
    EXPECT_GT(eval_kl(p.data(), q.data(), 4099), 0.0);
}

TEST(EvalMetrics, KlSkipsZeroMassTerms) {
    const float inf = std::numeric_limits<float>::infinity();
    const float lp[3] = {0.0f, -inf, -inf};  // p = (1, 0, 0)
    const float lq[3] = {std::log(0.5f), std::log(0.5f), -inf};
    EXPECT_NEAR(eval_kl(lp, lq, 3), std::log(2.0), 1e-7);
}

TEST(EvalMetrics, ArgmaxTiesGoToTheLowestIndex) {
    const float x[5] = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
    EXPECT_EQ(eval_argmax(x, 5), 1);
    EXPECT_EQ(eval_argmax(x, 1), 0);
}

TEST(EvalMetrics, WilsonIntervalHandValues) {
    // 8 of 10: centre (0.8 + 1.9208/10) / 1.38416, half 1.96/1.38416 sqrt(0.016 + 0.00960)
    const WilsonInterval a = eval_wilson(8, 10);
    EXPECT_NEAR(a.lo, 0.4902, 1e-4);
    EXPECT_NEAR(a.hi, 0.9433, 1e-4);
    // 0 of 2: the lower end is exactly 0, the upper 3.8416 / 5.8416.
    const WilsonInterval b = eval_wilson(0, 2);
    EXPECT_NEAR(b.lo, 0.0, 1e-12);
    EXPECT_NEAR(b.hi, 3.8416 / 5.8416, 1e-9);
    // All correct mirrors none correct.
    const WilsonInterval c = eval_wilson(2, 2);
    EXPECT_NEAR(c.lo, 1.0 - b.hi, 1e-9);
    EXPECT_NEAR(c.hi, 1.0, 1e-12);
    // Nothing scored: nothing known.
    const WilsonInterval d = eval_wilson(0, 0);
    EXPECT_EQ(d.lo, 0.0);
    EXPECT_EQ(d.hi, 1.0);
    // The interval narrows as n grows around the same proportion.
    const WilsonInterval e = eval_wilson(80, 100);
    EXPECT_LT(e.hi - e.lo, a.hi - a.lo);
    EXPECT_LT(e.lo, 0.8);
    EXPECT_GT(e.hi, 0.8);
}

TEST(EvalMetrics, StepAccumulatorSummarisesSteps) {
    const std::vector<float> p0 = log_softmax(random_logits(511, 5));
    const std::vector<float> q0 = log_softmax(random_logits(511, 6));
    const std::vector<float> p1 = log_softmax(random_logits(511, 7));
    StepAccumulator acc;
    acc.add(p0.data(), q0.data(), 511, 3);
    acc.add(p1.data(), p1.data(), 511, 9);  // identical step: KL 0, agreement
    const StepMetrics m = acc.result();
    const double kl0 = eval_kl(p0.data(), q0.data(), 511);
    EXPECT_EQ(m.n_steps, 2);
    EXPECT_DOUBLE_EQ(m.kl_mean, kl0 / 2);
    EXPECT_DOUBLE_EQ(m.kl_max, kl0);
    const bool agree0 = eval_argmax(p0.data(), 511) == eval_argmax(q0.data(), 511);
    EXPECT_DOUBLE_EQ(m.agreement, (agree0 ? 2.0 : 1.0) / 2.0);
    EXPECT_NEAR(m.nll_ref, -(static_cast<double>(p0[3]) + p1[9]) / 2, 1e-9);
    EXPECT_NEAR(m.nll, -(static_cast<double>(q0[3]) + p1[9]) / 2, 1e-9);
    EXPECT_EQ(m.first_disagree, agree0 ? -1 : 0);
    // The dense lead: top minus runner-up of p, the smaller of the two steps.
    const auto lead = [](std::vector<float> v) {
        std::sort(v.begin(), v.end(), std::greater<float>());
        return static_cast<double>(v[0]) - v[1];
    };
    const double l0 = lead(p0), l1 = lead(p1);
    EXPECT_DOUBLE_EQ(m.ref_margin, std::min(l0, l1));
    EXPECT_EQ(m.ref_margin_step, l1 < l0 ? 1 : 0);
    EXPECT_DOUBLE_EQ(m.disagree_margin, agree0 ? 0.0 : l0);
    EXPECT_EQ(StepAccumulator().result().n_steps, 0);
}

TEST(EvalMetrics, SummaryAggregatesACell) {
    std::vector<SampleOutcome> cell(3);
    cell[0].scored = true;
    cell[0].correct = true;
    cell[0].ruler = 1.0;
    cell[0].steps = {2, 0.2, 0.5, 1.0, 1.0, 2.0};
    cell[0].rows_dense = 1000;
    cell[0].rows_kept = 250;
    cell[1].scored = true;
    cell[1].correct = false;
    cell[1].ruler = 0.5;
    cell[1].steps = {6, 0.4, 0.9, 0.5, 2.0, 3.0};
    cell[1].rows_dense = 1000;
    cell[1].rows_kept = 250;
    cell[2].scored = false;  // counted in n_samples, not in accuracy, no steps
    cell[2].ruler = 1.0;     // ignored: not scored
    cell[2].rows_dense = 500;
    cell[2].rows_kept = 500;
    const CellSummary s = eval_summarise(cell);
    EXPECT_EQ(s.n_samples, 3);
    EXPECT_EQ(s.n_scored, 2);
    EXPECT_EQ(s.n_correct, 1);
    EXPECT_NEAR(s.acc_ci.lo, eval_wilson(1, 2).lo, 1e-12);
    EXPECT_NEAR(s.ruler, 0.75, 1e-12);  // mean over the scored samples
    EXPECT_NEAR(s.kl_mean, 0.3, 1e-12);  // mean of per-sample means
    EXPECT_NEAR(s.kl_max, 0.9, 1e-12);
    EXPECT_NEAR(s.agreement, 0.75, 1e-12);
    // Perplexity over the cell's 8 tokens, each sample weighted by its steps.
    EXPECT_NEAR(s.ppl_ref, std::exp((2 * 1.0 + 6 * 2.0) / 8), 1e-9);
    EXPECT_NEAR(s.ppl, std::exp((2 * 2.0 + 6 * 3.0) / 8), 1e-9);
    EXPECT_NEAR(s.compression, 2500.0 / 1000.0, 1e-12);
    const CellSummary empty = eval_summarise({});
    EXPECT_EQ(empty.n_samples, 0);
    EXPECT_EQ(empty.compression, 0.0);
}

}  // namespace
