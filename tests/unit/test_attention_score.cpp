// cpu::attention_scores (the eviction policies' attention-probability sums)
// against its scalar oracle, with the lse of the real attention kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels_test_util.h"
#include "sieve/core/fp16.h"
#include "sieve/kernels/cpu/attention_score.h"
#include "sieve/kernels/cpu/ops.h"

using namespace sieve;
using sieve::test::random_values;

namespace {

// Entries of acc no query reaches (j >= past(g) + n_q, up to acc_stride) hold
// this and are compared bitwise: -0 also catches a kernel that adds a zero
// sum there (-0 + 0 = +0).
constexpr float k_sentinel = -0.0f;

// One call's inputs: q, K/V lanes (rows past a lane's last visible one are
// NaN, so a kernel that reads them fails loudly), the lse attention_prefill's
// f32 tiles computed for them, and the score arguments over those queries.
struct ScoreCase {
    int64_t n_head, n_head_kv, d, n_q;
    std::vector<int64_t> past;  // [n_head_kv]
    bool per_head;
    cpu::RowType type;
    int64_t acc_stride;
    std::vector<float> q, lse;
    std::vector<std::vector<float>> k32, v32;
    std::vector<std::vector<uint8_t>> k16, v16;
    std::vector<const void *> kp, vp;

    ScoreCase(std::mt19937 &rng, int64_t nh, int64_t nh_kv, int64_t hd, int64_t nq, std::vector<int64_t> past_rows,
              cpu::RowType t, bool per_head_rows = true, int64_t extra_rows = 3)
        : n_head(nh), n_head_kv(nh_kv), d(hd), n_q(nq), past(std::move(past_rows)), per_head(per_head_rows), type(t) {
        const int64_t most = *std::max_element(past.begin(), past.end());
        acc_stride = most + n_q + extra_rows;
        // sigma 0.5 puts the scaled scores in a realistic range; the outliers
        // make some queries nearly one-hot.
        q = random_values(rng, static_cast<size_t>(n_q * n_head * d), 0.5f);
        for (int64_t g = 0; g < n_head_kv; ++g) {
            const int64_t n_vis = rows(g), n_lane = n_vis + 5;
            std::vector<float> k = random_values(rng, static_cast<size_t>(n_lane * d), 0.5f);
            std::vector<float> v = random_values(rng, static_cast<size_t>(n_lane * d));
            std::fill(k.begin() + n_vis * d, k.end(), NAN);
            std::fill(v.begin() + n_vis * d, v.end(), NAN);
            if (t == cpu::RowType::f32) {
                k32.push_back(std::move(k));
                v32.push_back(std::move(v));
                continue;
            }
            const auto narrow = [t, hd](const std::vector<float> &x) {
                return test::narrow_rows(t, x.data(), static_cast<int64_t>(x.size()) / hd, hd);
            };
            k16.push_back(narrow(k));
            v16.push_back(narrow(v));
        }
        for (int64_t g = 0; g < n_head_kv; ++g) {
            const size_t gi = static_cast<size_t>(g);
            kp.push_back(t == cpu::RowType::f32 ? static_cast<const void *>(k32[gi].data()) : k16[gi].data());
            vp.push_back(t == cpu::RowType::f32 ? static_cast<const void *>(v32[gi].data()) : v16[gi].data());
        }
        // lse from the real attention kernel, layout [n_head, n_q].
        lse.assign(static_cast<size_t>(n_head * n_q), NAN);
        std::vector<float> o(q.size());
        cpu::AttnArgs a;
        a.q = q.data();
        a.k = kp.data();
        a.v = vp.data();
        a.kv_type = type;
        a.o = o.data();
        a.lse = lse.data();
        a.n_q = n_q;
        a.n_past = past[0];
        a.n_past_kv = per_head ? past.data() : nullptr;
        a.n_head = n_head;
        a.n_head_kv = n_head_kv;
        a.head_dim = d;
        a.scale = scale();
        // The f32 tiles' lse: the AMX tiles' (where the CPU has them) is
        // within 2^-16 sum |q.k| of it (test_attention), which would scale
        // each query's probabilities here by up to that, and this test is of
        // the score kernel.
        ThreadPool pool(2);
        const bool amx = cpu::attention_prefill_uses_amx();
        cpu::attention_prefill_use_amx(false);
        cpu::attention_prefill(a, pool);
        cpu::attention_prefill_use_amx(amx);
    }
    int64_t rows(int64_t g) const { return past[static_cast<size_t>(g)] + n_q; }
    float scale() const { return 1.0f / std::sqrt(static_cast<float>(d)); }
    std::string name() const {
        std::string s = std::string(cpu::row_type_name(type)) + " heads " + std::to_string(n_head) + "/" +
                        std::to_string(n_head_kv) + " d=" + std::to_string(d) + " n_q=" + std::to_string(n_q) + " past=";
        for (int64_t p : past) s += std::to_string(p) + ",";
        return s;
    }
    cpu::AttnScoreArgs args(float *acc) const {
        cpu::AttnScoreArgs a;
        a.q = q.data();
        a.lse = lse.data();
        a.lse_stride = n_q;
        a.k = kp.data();
        a.kv_type = type;
        a.n_q = n_q;
        a.n_past = past[0];
        a.n_past_kv = per_head ? past.data() : nullptr;
        a.n_head = n_head;
        a.n_head_kv = n_head_kv;
        a.head_dim = d;
        a.scale = scale();
        a.acc = acc;
        a.acc_stride = acc_stride;
        return a;
    }
    // 0 where some query reaches the entry, the sentinel elsewhere.
    std::vector<float> fresh_acc() const {
        std::vector<float> acc(static_cast<size_t>(n_head * acc_stride), k_sentinel);
        const int64_t group = n_head / n_head_kv;
        for (int64_t h = 0; h < n_head; ++h)
            std::fill_n(acc.begin() + h * acc_stride, rows(h / group), 0.0f);
        return acc;
    }
};

// Each sum within 1e-4 relative of the oracle (1e-6 absolute for tiny ones);
// entries past a lane's reach bitwise untouched; per head, the sums over rows
// add up to n_q (every query's probabilities sum to 1).
void check(const ScoreCase &c, ThreadPool &pool) {
    std::vector<float> acc = c.fresh_acc(), ref = c.fresh_acc();
    cpu::attention_scores(c.args(acc.data()), pool);
    cpu::attention_scores_ref(c.args(ref.data()));
    const int64_t group = c.n_head / c.n_head_kv;
    int n_bad = 0;
    for (int64_t h = 0; h < c.n_head && n_bad < 5; ++h) {
        const int64_t n_rows = c.rows(h / group);
        double total = 0.0;
        for (int64_t j = 0; j < c.acc_stride && n_bad < 5; ++j) {
            const float got = acc[static_cast<size_t>(h * c.acc_stride + j)];
            if (j >= n_rows) {
                if (std::memcmp(&got, &k_sentinel, sizeof got) != 0) {
                    ADD_FAILURE() << c.name() << ": acc[h=" << h << ", " << j << "] past the lane's " << n_rows
                                  << " rows was written: " << got;
                    ++n_bad;
                }
                continue;
            }
            const float want = ref[static_cast<size_t>(h * c.acc_stride + j)];
            total += got;
            if (!(std::fabs(got - want) <= std::max(1e-4f * std::fabs(want), 1e-6f))) {
                ADD_FAILURE() << c.name() << ": acc[h=" << h << ", " << j << "] = " << got << ", want " << want;
                ++n_bad;
            }
        }
        if (!(std::fabs(total - static_cast<double>(c.n_q)) <= 1e-4 * static_cast<double>(c.n_q))) {
            ADD_FAILURE() << c.name() << ": head " << h << " probabilities sum to " << total << ", want " << c.n_q;
            ++n_bad;
        }
    }
}

struct Heads {
    int64_t n_head, n_head_kv;
};
// GQA groups 1, 3, 4, 7.
const Heads k_groups[] = {{2, 2}, {6, 2}, {8, 2}, {7, 1}};
const cpu::RowType k_types[] = {cpu::RowType::f32, cpu::RowType::f16, cpu::RowType::bf16, cpu::RowType::q8_0};

std::vector<int64_t> same(int64_t n_head_kv, int64_t past) { return std::vector<int64_t>(static_cast<size_t>(n_head_kv), past); }

}  // namespace

TEST(AttentionScores, MatchesReferenceAcrossShapes) {
    // f32 rows; every group size, head dim (36: not a multiple of 16), query
    // count and past around the 64-key blocks.
    std::mt19937 rng(60);
    ThreadPool pool(2);
    for (Heads hh : k_groups)
        for (int64_t d : {36, 64, 128})
            for (int64_t n_q : {1, 5, 32, 77})
                for (int64_t past : {0, 1, 63, 64, 1000})
                    check(ScoreCase(rng, hh.n_head, hh.n_head_kv, d, n_q, same(hh.n_head_kv, past), cpu::RowType::f32,
                                    /*per_head_rows=*/false),
                          pool);
}

TEST(AttentionScores, HalfRowsMatchReference) {
    // f16 / bf16 rows (and q8_0 / q4_0, dequantized exactly) are widened exactly, so the oracle (which widens the
    // same rounded values) is as tight as for f32. The K block is transposed
    // in groups of 16 dims: 36 leaves a tail of 4 (widened one by one), 80 is
    // an odd number of groups.
    std::mt19937 rng(61);
    ThreadPool pool(2);
    for (cpu::RowType t : {cpu::RowType::f16, cpu::RowType::bf16, cpu::RowType::q8_0, cpu::RowType::q4_0})
        for (Heads hh : k_groups)
            for (int64_t d : {36, 64, 80, 96, 128})
                if (cpu::row_type_fits(t, d))  // quantized rows: whole blocks of 32
                for (int64_t n_q : {1, 32, 77})
                    for (int64_t past : {0, 63, 300})
                        check(ScoreCase(rng, hh.n_head, hh.n_head_kv, d, n_q, same(hh.n_head_kv, past), t, false), pool);
}

TEST(AttentionScores, DeepLanes) {
    // 4099 rows before the queries: many key blocks, a chunk per task of
    // several blocks, and a last block of 3 keys plus the queries' own rows.
    std::mt19937 rng(62);
    ThreadPool pool(2);
    for (cpu::RowType t : k_types)
        for (int64_t n_q : {1, 5, 32, 77}) {
            check(ScoreCase(rng, 7, 1, 64, n_q, {4099}, t), pool);
            if (n_q != 5 && n_q != 32) check(ScoreCase(rng, 4, 4, 64, n_q, same(4, 4099), t), pool);
        }
    check(ScoreCase(rng, 6, 2, 128, 32, same(2, 4099), cpu::RowType::f16), pool);
    check(ScoreCase(rng, 8, 2, 36, 5, same(2, 4099), cpu::RowType::bf16), pool);
}

TEST(AttentionScores, UnevenLanesMatchReference) {
    // Lanes of one layer holding different row counts (a sparse policy kept
    // different subsets per KV head): an empty past, one lane far longer than
    // the others (tasks past a short lane's end do nothing), past 63/64/129
    // around block boundaries.
    std::mt19937 rng(63);
    ThreadPool pool(2);
    const std::vector<std::vector<int64_t>> pasts = {{0, 5}, {300, 7}, {1, 2000, 64}, {129, 128, 63, 0}, {4099, 0}};
    for (const std::vector<int64_t> &past : pasts) {
        const int64_t nh_kv = static_cast<int64_t>(past.size());
        for (int64_t group : {1, 3, 7})
            for (int64_t n_q : {1, 5, 32})
                for (cpu::RowType t : {cpu::RowType::f32, cpu::RowType::f16})
                    check(ScoreCase(rng, group * nh_kv, nh_kv, 64, n_q, past, t), pool);
    }
}

TEST(AttentionScores, HeadDims4And256) {
    // The smallest head dim and the largest supported one; acc_stride equal
    // to the longest lane (no slack past it).
    std::mt19937 rng(64);
    ThreadPool pool(2);
    check(ScoreCase(rng, 4, 2, 256, 9, same(2, 150), cpu::RowType::f16, true, 0), pool);
    check(ScoreCase(rng, 4, 2, 4, 9, same(2, 70), cpu::RowType::f32, true, 0), pool);
    check(ScoreCase(rng, 7, 1, 64, 32, {4099}, cpu::RowType::bf16, true, 0), pool);
}

TEST(AttentionScoresDeathTest, HeadDimOver256) {
    // A programmer error, caught before any work.
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    std::mt19937 rng(65);
    const ScoreCase c(rng, 2, 1, 260, 2, {10}, cpu::RowType::f32);
    std::vector<float> acc = c.fresh_acc();
    EXPECT_DEATH(
        {
            ThreadPool p(1);
            cpu::attention_scores(c.args(acc.data()), p);
        },
        "head_dim 260 > 256");
}

TEST(AttentionScores, AccumulatesIntoAcc) {
    // acc is added to: a second call doubles every reached entry and still
    // leaves the rest alone.
    std::mt19937 rng(65);
    ThreadPool pool(2);
    for (int64_t n_q : {1, 32}) {
        const ScoreCase c(rng, 14, 2, 64, n_q, {700, 333}, cpu::RowType::f16, true, 77);
        std::vector<float> once = c.fresh_acc(), twice = c.fresh_acc();
        cpu::attention_scores(c.args(once.data()), pool);
        cpu::attention_scores(c.args(twice.data()), pool);
        cpu::attention_scores(c.args(twice.data()), pool);
        for (int64_t h = 0; h < c.n_head; ++h)
            for (int64_t j = 0; j < c.acc_stride; ++j) {
                const size_t i = static_cast<size_t>(h * c.acc_stride + j);
                if (j >= c.rows(h / 7)) {
                    ASSERT_EQ(0, std::memcmp(&twice[i], &k_sentinel, sizeof(float))) << "h=" << h << " j=" << j;
                    continue;
                }
                ASSERT_GT(once[i], 0.0f) << "h=" << h << " j=" << j;
                ASSERT_NEAR(twice[i], 2.0f * once[i], 1e-6f * once[i]) << "h=" << h << " j=" << j;
            }
    }
}

TEST(AttentionScores, ScoresASuffixOfTheChunk) {
    // How the forward pass calls it: attention over a chunk of n queries
    // wrote lse [n_head, n]; only the queries from `first` on are scored, so
    // q and lse start there, lse_stride is n, and each lane's past grows by
    // `first` (those queries' rows precede the scored ones).
    std::mt19937 rng(66);
    ThreadPool pool(2);
    const int64_t n = 40, first = 9, n_head = 14, n_kv = 2, d = 64;
    const ScoreCase c(rng, n_head, n_kv, d, n, {500, 130}, cpu::RowType::f16);
    const std::vector<int64_t> past = {500 + first, 130 + first};
    const auto args = [&](float *acc) {
        cpu::AttnScoreArgs a = c.args(acc);
        a.q = c.q.data() + first * n_head * d;
        a.lse = c.lse.data() + first;
        a.lse_stride = n;
        a.n_q = n - first;
        a.n_past_kv = past.data();
        return a;
    };
    std::vector<float> acc = c.fresh_acc(), ref = c.fresh_acc();
    cpu::attention_scores(args(acc.data()), pool);
    cpu::attention_scores_ref(args(ref.data()));
    for (int64_t h = 0; h < n_head; ++h) {
        double total = 0.0;
        for (int64_t j = 0; j < c.acc_stride; ++j) {
            const size_t i = static_cast<size_t>(h * c.acc_stride + j);
            if (j >= c.rows(h / 7)) {
                ASSERT_EQ(0, std::memcmp(&acc[i], &k_sentinel, sizeof(float))) << "h=" << h << " j=" << j;
                continue;
            }
            total += acc[i];
            ASSERT_LE(std::fabs(acc[i] - ref[i]), std::max(1e-4f * std::fabs(ref[i]), 1e-6f)) << "h=" << h << " j=" << j;
        }
        EXPECT_NEAR(total, static_cast<double>(n - first), 1e-4 * (n - first)) << "head " << h;
    }
}

// The forward pass scores a policy's window chunk by chunk (a window that
// spans chunks, a prompt prefilled after a prefix-cache hit, chunking that
// varies with load): however the queries are split across calls, acc ends
// with the same bits, because every query's p is added to it in query order.
TEST(AttentionScores, SumsDoNotDependOnHowTheQueriesAreSplit) {
    std::mt19937 rng(68);
    ThreadPool pool(2);
    const ScoreCase cases[] = {
        ScoreCase(rng, 14, 2, 64, 41, {700, 130}, cpu::RowType::f16),
        ScoreCase(rng, 9, 3, 64, 33, same(3, 90), cpu::RowType::f32),
    };
    for (const ScoreCase &c : cases) {
        std::vector<float> whole = c.fresh_acc();
        cpu::attention_scores(c.args(whole.data()), pool);
        for (const std::vector<int64_t> &cuts : {std::vector<int64_t>{1, 2, 3, 40}, std::vector<int64_t>{13, 26},
                                                 std::vector<int64_t>{5, 6, 7, 8, 9, 30}}) {
            std::vector<float> acc = c.fresh_acc();
            int64_t q0 = 0;
            std::vector<int64_t> ends = cuts;
            ends.push_back(c.n_q);
            for (int64_t q1 : ends) {
                q1 = std::min(q1, c.n_q);
                if (q1 <= q0) continue;
                std::vector<int64_t> past;
                for (int64_t p : c.past) past.push_back(p + q0);
                cpu::AttnScoreArgs a = c.args(acc.data());
                a.q = c.q.data() + q0 * c.n_head * c.d;
                a.lse = c.lse.data() + q0;
                a.lse_stride = c.n_q;
                a.n_q = q1 - q0;
                a.n_past = past[0];
                a.n_past_kv = c.per_head ? past.data() : nullptr;
                cpu::attention_scores(a, pool);
                q0 = q1;
            }
            EXPECT_EQ(0, std::memcmp(acc.data(), whole.data(), acc.size() * sizeof(float)))
                << c.name() << ": split at " << cuts.size() << " points";
        }
    }
}

TEST(AttentionScores, ResultDoesNotDependOnThreadCount) {
    // Every task writes only its own keys, summed in a fixed order: 1, 2 and
    // 3 threads give bitwise equal sums, for decode-sized, window-sized and
    // chunk-sized query counts, even and uneven lanes.
    std::mt19937 rng(67);
    const ScoreCase cases[] = {
        ScoreCase(rng, 14, 2, 64, 1, same(2, 5000), cpu::RowType::f16),
        ScoreCase(rng, 14, 2, 64, 32, {3000, 1234}, cpu::RowType::f16),
        ScoreCase(rng, 9, 3, 36, 77, {100, 0, 900}, cpu::RowType::bf16),
        ScoreCase(rng, 8, 2, 128, 200, same(2, 300), cpu::RowType::f32),
    };
    for (const ScoreCase &c : cases) {
        std::vector<float> one = c.fresh_acc();
        {
            ThreadPool pool(1);
            cpu::attention_scores(c.args(one.data()), pool);
        }
        for (int n_threads : {2, 3}) {
            ThreadPool pool(n_threads);
            std::vector<float> acc = c.fresh_acc();
            cpu::attention_scores(c.args(acc.data()), pool);
            EXPECT_EQ(0, std::memcmp(acc.data(), one.data(), acc.size() * sizeof(float)))
                << c.name() << ": " << n_threads << " threads";
        }
    }
}
