#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "sieve/engine/sampler.h"

using namespace sieve;

namespace {

// Random logits with a spread like a real model's: mostly N(0, 3), a few large
// outliers, positive and negative values, never all equal.
std::vector<float> random_logits(int32_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.0f, 3.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto &x : v) x = dist(rng);
    for (int i = 0; i < 3; ++i) v[rng() % v.size()] += 12.0f;
    return v;
}

int32_t argmax_ref(const std::vector<float> &v) {
    return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());  // first max
}

SamplerParams plain(float temperature) {
    SamplerParams p;
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 1234;
    return p;
}

// Tokens drawn at least once in n_draws.
std::set<int32_t> drawn_set(const SamplerParams &p, const std::vector<float> &logits, int n_draws) {
    Sampler s(p, static_cast<int32_t>(logits.size()));
    std::set<int32_t> seen;
    for (int i = 0; i < n_draws; ++i) seen.insert(s.sample(logits.data()));
    return seen;
}

std::vector<float> logits_from_probs(const std::vector<double> &probs) {
    std::vector<float> v;
    for (double p : probs) v.push_back(static_cast<float>(std::log(p)) + 1.7f);  // shift: softmax-invariant
    return v;
}

}  // namespace

TEST(Sampler, GreedyPicksArgmaxWithTiesToLowestId) {
    for (int32_t n : {1, 2, 17, 1001, 49153}) {
        for (uint64_t seed = 1; seed <= 5; ++seed) {
            std::vector<float> logits = random_logits(n, seed * 7919 + static_cast<uint64_t>(n));
            Sampler s(plain(0.0f), n);
            ASSERT_EQ(s.sample(logits.data()), argmax_ref(logits)) << "n=" << n;
            if (n > 10) {  // make a tie between a later and an earlier id at the max
                const float m = *std::max_element(logits.begin(), logits.end());
                logits[static_cast<size_t>(n - 1)] = m;
                logits[3] = m;
                ASSERT_EQ(s.sample(logits.data()), std::min(3, argmax_ref(logits)));
            }
        }
    }
}

TEST(Sampler, TopKOneEqualsGreedy) {
    const int32_t n = 517;
    SamplerParams p = plain(1.3f);
    p.top_k = 1;
    Sampler s(p, n);
    Sampler g(plain(0.0f), n);
    for (uint64_t seed = 0; seed < 200; ++seed) {
        const std::vector<float> logits = random_logits(n, seed + 11);
        ASSERT_EQ(s.sample(logits.data()), g.sample(logits.data()));
    }
}

// Draws from a 7-token distribution at temperature 0.7 and compares the counts
// with softmax(logits / 0.7) by Pearson's chi-square. 6 degrees of freedom:
// P(chi2 > 40) < 1e-6, so a correct sampler passes for any seed, while a wrong
// temperature (1.0 instead of 0.7) gives chi2 in the thousands at this size.
TEST(Sampler, DrawsMatchTheSoftmaxDistribution) {
    const std::vector<float> logits = {0.3f, -1.2f, 2.1f, 0.9f, -0.4f, 1.6f, -2.5f};
    const float temp = 0.7f;
    const int n_draws = 200000;
    Sampler s(plain(temp), 7);
    std::vector<int> counts(7, 0);
    for (int i = 0; i < n_draws; ++i) ++counts[static_cast<size_t>(s.sample(logits.data()))];

    std::vector<double> expect(7);
    double z = 0.0;
    for (size_t i = 0; i < 7; ++i) z += expect[i] = std::exp(static_cast<double>(logits[i]) / temp);
    double chi2 = 0.0;
    for (size_t i = 0; i < 7; ++i) {
        const double e = expect[i] / z * n_draws;
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
    }
    EXPECT_LT(chi2, 40.0);
}

TEST(Sampler, SameSeedSameSequenceAndResetReplays) {
    const int32_t n = 300;
    SamplerParams p;  // llama-cli defaults: every filter active
    p.temperature = 1.5f;
    p.top_p = 0.9f;
    p.min_p = 0.01f;
    p.repeat_penalty = 1.1f;
    p.seed = 99;
    auto run = [&](Sampler &s) {
        std::vector<int32_t> out;
        for (uint64_t step = 0; step < 100; ++step) {
            const std::vector<float> logits = random_logits(n, step);
            const int32_t t = s.sample(logits.data());
            s.accept(t);
            out.push_back(t);
        }
        return out;
    };
    Sampler a(p, n), b(p, n);
    const std::vector<int32_t> first = run(a);
    EXPECT_EQ(first, run(b));
    a.reset();
    EXPECT_EQ(first, run(a));
    p.seed = 100;
    Sampler c(p, n);
    EXPECT_NE(first, run(c));
    EXPECT_GT(std::set<int32_t>(first.begin(), first.end()).size(), 10u);  // it really sampled
}

// Reads back the penalised logits through logprob(): logprob(t) - logprob(r)
// equals penalised[t] - penalised[r], and r is a token never accepted.
TEST(Sampler, PenaltiesChangeExactlyTheSeenLogits) {
    const int32_t n = 41;
    std::vector<float> logits = random_logits(n, 5);
    logits[3] = 2.5f;    // positive, seen twice
    logits[5] = -1.5f;   // negative, seen once
    logits[9] = 0.75f;   // seen once, but before the window
    logits[12] = -0.2f;  // seen three times
    SamplerParams p = plain(0.0f);
    p.repeat_penalty = 1.3f;
    p.presence_penalty = 0.4f;
    p.frequency_penalty = 0.25f;
    p.repeat_last_n = 6;
    Sampler s(p, n);
    for (int32_t t : {9, 3, 12, 5, 12, 3, 12}) s.accept(t);  // window: 3 12 5 12 3 12

    s.sample(logits.data());
    const int32_t ref = 0;
    std::vector<float> expect = logits;
    auto penalise = [&](int32_t t, int count) {
        float &l = expect[static_cast<size_t>(t)];
        l = l > 0 ? l / p.repeat_penalty : l * p.repeat_penalty;
        l -= p.presence_penalty + p.frequency_penalty * static_cast<float>(count);
    };
    penalise(3, 2);
    penalise(5, 1);
    penalise(12, 3);
    const float lp_ref = s.logprob(ref);
    for (int32_t t = 0; t < n; ++t) {
        const float got = s.logprob(t) - lp_ref + logits[ref];
        EXPECT_NEAR(got, expect[static_cast<size_t>(t)], 1e-4f) << "token " << t;
    }
}

TEST(Sampler, TopPAndMinPAndTopKCutTheRightSets) {
    const std::vector<float> logits = logits_from_probs({0.07, 0.5, 0.03, 0.25, 0.15});
    SamplerParams p = plain(1.0f);
    // Sorted: 1 (.5), 3 (.25), 4 (.15), 0 (.07), 2 (.03).
    p.top_p = 0.8f;  // .5 + .25 = .75 < .8; + .15 = .9 reaches it
    EXPECT_EQ(drawn_set(p, logits, 3000), (std::set<int32_t>{1, 3, 4}));
    p.top_p = 1.0f;
    p.min_p = 0.1f;  // p >= .05: drops only token 2
    EXPECT_EQ(drawn_set(p, logits, 3000), (std::set<int32_t>{0, 1, 3, 4}));
    p.min_p = 0.45f;  // p >= .225
    EXPECT_EQ(drawn_set(p, logits, 3000), (std::set<int32_t>{1, 3}));
    p.min_p = 0.0f;
    p.top_k = 2;
    EXPECT_EQ(drawn_set(p, logits, 3000), (std::set<int32_t>{1, 3}));
    p.top_k = 0;  // nothing cut: every token appears
    EXPECT_EQ(drawn_set(p, logits, 5000), (std::set<int32_t>{0, 1, 2, 3, 4}));
    p.top_p = 0.0f;  // keeps at least one token
    EXPECT_EQ(drawn_set(p, logits, 500), (std::set<int32_t>{1}));
}

TEST(Sampler, LogprobsAreANormalisedDistributionInOrder) {
    const int32_t n = 1003;
    const std::vector<float> logits = random_logits(n, 77);
    Sampler s(plain(0.9f), n);
    s.sample(logits.data());
    double total = 0.0;
    for (int32_t t = 0; t < n; ++t) total += std::exp(static_cast<double>(s.logprob(t)));
    EXPECT_NEAR(total, 1.0, 1e-4);

    std::vector<TokenLogprob> top(10);
    ASSERT_EQ(s.top_logprobs(10, top.data()), 10);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = i;
    std::stable_sort(ids.begin(), ids.end(),
                     [&](int32_t a, int32_t b) { return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)]; });
    for (size_t i = 0; i < 10; ++i) {
        EXPECT_EQ(top[i].token, ids[i]);
        EXPECT_FLOAT_EQ(top[i].logprob, s.logprob(ids[i]));
    }
    std::vector<TokenLogprob> all(static_cast<size_t>(n) + 5);
    EXPECT_EQ(s.top_logprobs(n + 5, all.data()), n);
}

TEST(Sampler, ValidateNamesTheBadParameter) {
    SamplerParams p;
    EXPECT_TRUE(sampler_params_validate(p).ok());
    p.top_p = 1.5f;
    EXPECT_NE(sampler_params_validate(p).message().find("top_p"), std::string::npos);
    p = {};
    p.min_p = -0.1f;
    EXPECT_NE(sampler_params_validate(p).message().find("min_p"), std::string::npos);
    p = {};
    p.repeat_penalty = 0.0f;
    EXPECT_NE(sampler_params_validate(p).message().find("repeat_penalty"), std::string::npos);
    p = {};
    p.repeat_last_n = -1;
    EXPECT_NE(sampler_params_validate(p).message().find("repeat_last_n"), std::string::npos);
    p = {};
    p.temperature = std::nanf("");
    EXPECT_NE(sampler_params_validate(p).message().find("temperature"), std::string::npos);
}
