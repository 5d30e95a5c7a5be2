// Quest page selection: the page-score kernel against its scalar reference,
// and the selector's spans against a selection made here from the same
// scores by a full sort (forced sink / recent / newest units, budget, reuse
// across `interval` steps, dense lanes within the budget).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <set>
#include <vector>

#include "kernels_test_util.h"
#include "sieve/core/fp16.h"
#include "sieve/core/thread_pool.h"
#include "sieve/kernels/cpu/kv_rows.h"
#include "sieve/kernels/cpu/page_select.h"
#include "sieve/kv/contiguous_kv.h"
#include "sieve/kv/page_summary.h"
#include "sieve/sparse/policy_spec.h"
#include "sieve/sparse/quest.h"

namespace sieve {
namespace {

// The kernel's arguments for a group of queries over n_pages summaries, at
// the attention's scale.
cpu::PageScoreArgs page_args(const float *q, int64_t group, int64_t d, const uint16_t *summary,
                             int64_t n_pages, cpu::PageAgg agg, float *out) {
    cpu::PageScoreArgs a;
    a.q = q;
    a.group = group;
    a.d = d;
    a.summary = summary;
    a.n_pages = n_pages;
    a.agg = agg;
    a.scale = 1.0f / std::sqrt(static_cast<float>(d));
    a.out = out;
    return a;
}

// The exact scores' arguments for a group of queries over n_rows keys of
// type t in pages of page_rows, at the attention's scale.
cpu::PageExactArgs exact_args(const float *q, int64_t group, int64_t d, cpu::RowType t, const void *keys,
                              int64_t n_rows, int64_t page_rows, cpu::PageAgg agg, float *out) {
    cpu::PageExactArgs e;
    e.q = q;
    e.group = group;
    e.d = d;
    e.type = t;
    e.keys = keys;
    e.n_rows = n_rows;
    e.page_rows = page_rows;
    e.agg = agg;
    e.scale = 1.0f / std::sqrt(static_cast<float>(d));
    e.out = out;
    return e;
}

TEST(QuestScores, KernelMatchesReferenceAndBoundsEveryKey) {
    std::mt19937 rng(91);
    for (int rep = 0; rep < 40; ++rep) {
        const int64_t group = 1 + rep % 7, d = std::vector<int64_t>{8, 24, 64, 128}[rep % 4];
        const int64_t n_rows = 1 + static_cast<int64_t>(rng() % 300), n_pages = summary_pages(n_rows);
        std::vector<uint16_t> keys(static_cast<size_t>(n_rows * d));
        const std::vector<float> kv = test::random_values(rng, keys.size(), 1.5f);
        for (size_t i = 0; i < keys.size(); ++i) keys[i] = fp32_to_fp16(kv[i]);
        std::vector<uint16_t> summary(static_cast<size_t>(n_pages * 2 * d));
        summarize_lane_ref(cpu::RowType::f16, keys.data(), n_rows, d, summary.data());
        const std::vector<float> q = test::random_values(rng, static_cast<size_t>(group * d));
        for (cpu::PageAgg agg :
             {cpu::PageAgg::max, cpu::PageAgg::mean, cpu::PageAgg::mass, cpu::PageAgg::maxprob}) {
            std::vector<float> got(static_cast<size_t>(n_pages)), want(got.size());
            cpu::PageScoreArgs a = page_args(q.data(), group, d, summary.data(), n_pages, agg, got.data());
            cpu::quest_page_scores(a);
            a.out = want.data();
            cpu::quest_page_scores_ref(a);
            for (int64_t p = 0; p < n_pages; ++p) {
                ASSERT_NEAR(got[p], want[p], 1e-4f * (1.0f + std::fabs(want[p]))) << "page " << p;
                // The bound: no key of the page scores above it (for max, per head).
                if (agg != cpu::PageAgg::max) continue;
                for (int64_t r = p * k_summary_rows; r < std::min(n_rows, (p + 1) * k_summary_rows); ++r)
                    for (int64_t h = 0; h < group; ++h) {
                        double dot = 0.0;
                        for (int64_t c = 0; c < d; ++c) dot += q[h * d + c] * fp16_to_fp32(keys[r * d + c]);
                        ASSERT_LE(dot, want[p] + 1e-3 * (1.0 + std::fabs(want[p]))) << "page " << p << " row " << r;
                    }
            }
        }
    }
}

// agg=mass: each head's bounds become a softmax over the pages, so the
// group's scores add up to the group size whatever the query norms, and one
// head alone ranks the pages as its raw bounds do.
TEST(QuestScores, MassGivesEveryHeadOneUnitAndKeepsOneHeadsOrder) {
    std::mt19937 rng(92);
    for (int rep = 0; rep < 20; ++rep) {
        const int64_t group = 1 + rep % 7, d = rep % 2 ? 64 : 40;
        const int64_t n_rows = 17 + static_cast<int64_t>(rng() % 900), n_pages = summary_pages(n_rows);
        std::vector<uint16_t> keys(static_cast<size_t>(n_rows * d));
        const std::vector<float> kv = test::random_values(rng, keys.size(), 3.0f);
        for (size_t i = 0; i < keys.size(); ++i) keys[i] = fp32_to_fp16(kv[i]);
        std::vector<uint16_t> summary(static_cast<size_t>(n_pages * 2 * d));
        summarize_lane_ref(cpu::RowType::f16, keys.data(), n_rows, d, summary.data());
        std::vector<float> q = test::random_values(rng, static_cast<size_t>(group * d));
        for (int64_t c = 0; c < d; ++c) q[static_cast<size_t>(c)] *= 25.0f;  // one head with a large norm
        std::vector<float> mass(static_cast<size_t>(n_pages)), mx(mass.size());
        cpu::PageScoreArgs a =
            page_args(q.data(), group, d, summary.data(), n_pages, cpu::PageAgg::mass, mass.data());
        cpu::quest_page_scores(a);
        double total = 0.0;
        for (float m : mass) {
            ASSERT_GE(m, 0.0f);
            total += m;
        }
        EXPECT_NEAR(total, static_cast<double>(group), 1e-4 * static_cast<double>(group));
        if (group != 1) continue;
        a.agg = cpu::PageAgg::max;
        a.out = mx.data();
        cpu::quest_page_scores(a);
        for (int64_t i = 0; i < n_pages; ++i)
            for (int64_t j = 0; j < n_pages; ++j)
                if (mx[i] > mx[j] + 1e-3f * (1.0f + std::fabs(mx[j]))) {
                    ASSERT_GE(mass[i], mass[j]) << i << " " << j;
                }
    }
}

// score=exact: the kernel against its double-precision reference for every
// key type and mode, on odd lengths and page sizes; mass adds up to the group.
TEST(QuestScores, ExactScoresMatchTheirReference) {
    std::mt19937 rng(94);
    const cpu::RowType types[] = {cpu::RowType::f16, cpu::RowType::q8_0, cpu::RowType::f32,
                                  cpu::RowType::bf16, cpu::RowType::q4_0};
    for (int rep = 0; rep < 45; ++rep) {
        // every type with every head size (the 64- and 128-wide ones take the
        // decode's register paths) and group size, pages of 16 rows, odd ones
        // and ones longer than the decode's block of 64 rows
        const cpu::RowType t = types[rep % 5];
        const int64_t group = std::vector<int64_t>{1, 3, 7}[rep % 3],
                      d = std::vector<int64_t>{64, 96, 128}[rep / 3 % 3];
        const int64_t n_rows = 1 + static_cast<int64_t>(rng() % 700);
        const int64_t page_rows = std::vector<int64_t>{5, 16, 16, 100}[rep % 4];
        const int64_t n_pages = (n_rows + page_rows - 1) / page_rows;
        std::vector<uint8_t> keys(static_cast<size_t>(cpu::row_bytes(t, n_rows * d)));
        const std::vector<float> kv = test::random_values(rng, static_cast<size_t>(n_rows * d), 1.5f);
        cpu::f32_to_rows(t, kv.data(), keys.data(), n_rows * d);
        const std::vector<float> q = test::random_values(rng, static_cast<size_t>(group * d));
        for (cpu::PageAgg agg :
             {cpu::PageAgg::max, cpu::PageAgg::mean, cpu::PageAgg::mass, cpu::PageAgg::maxprob}) {
            std::vector<float> got(static_cast<size_t>(n_pages)), want(got.size());
            cpu::PageExactArgs a =
                exact_args(q.data(), group, d, t, keys.data(), n_rows, page_rows, agg, got.data());
            cpu::page_scores_exact(a);
            a.out = want.data();
            cpu::page_scores_exact_ref(a);
            double total = 0.0;
            for (int64_t p = 0; p < n_pages; ++p) {
                ASSERT_NEAR(got[p], want[p], 2e-4f * (1.0f + std::fabs(want[p])))
                    << cpu::row_type_name(t) << " page " << p << " of " << n_pages;
                total += want[p];
            }
            if (agg == cpu::PageAgg::mass) {
                EXPECT_NEAR(total, static_cast<double>(group), 1e-6 * static_cast<double>(group));
            }
            // A page list: every page listed gives the same bits as none;
            // a random ascending subset matches the reference over its keys.
            std::vector<int32_t> all(static_cast<size_t>(n_pages)), some;
            for (int32_t p = 0; p < n_pages; ++p) {
                all[static_cast<size_t>(p)] = p;
                if (rng() % 3 == 0) some.push_back(p);
            }
            if (some.empty()) some.push_back(static_cast<int32_t>(n_pages - 1));
            std::vector<float> listed(got.size());
            a.pages = all.data();
            a.n_list = n_pages;
            a.out = listed.data();
            cpu::page_scores_exact(a);
            for (int64_t p = 0; p < n_pages; ++p) ASSERT_EQ(listed[p], got[p]) << "page " << p;
            std::vector<float> sub(some.size()), sub_ref(some.size());
            a.pages = some.data();
            a.n_list = static_cast<int64_t>(some.size());
            a.out = sub.data();
            cpu::page_scores_exact(a);
            a.out = sub_ref.data();
            cpu::page_scores_exact_ref(a);
            for (size_t i = 0; i < some.size(); ++i)
                ASSERT_NEAR(sub[i], sub_ref[i], 2e-4f * (1.0f + std::fabs(sub_ref[i])))
                    << "listed page " << some[i];
        }
    }
}

// Where the bound and the keys disagree: a page of keys each on one channel
// (wide per-channel ranges, a high bound, no key near q) against a page whose
// keys all lie along q. The bound prefers the first, the keys the second.
TEST(QuestScores, ExactScoresRankByTheKeysNotTheirRanges) {
    const int64_t d = 32, n_rows = 32;
    std::vector<uint16_t> keys(static_cast<size_t>(n_rows * d), fp32_to_fp16(0.0f));
    for (int64_t r = 0; r < 16; ++r)
        keys[static_cast<size_t>(r * d + r)] = fp32_to_fp16(4.0f);  // q.k = 4, bound 64
    for (int64_t r = 16; r < 32; ++r)
        for (int64_t c = 0; c < d; ++c)
            keys[static_cast<size_t>(r * d + c)] = fp32_to_fp16(0.5f);  // q.k = 16
    const std::vector<float> q(static_cast<size_t>(d), 1.0f);
    std::vector<uint16_t> summary(static_cast<size_t>(2 * 2 * d));
    summarize_lane_ref(cpu::RowType::f16, keys.data(), n_rows, d, summary.data());
    for (cpu::PageAgg agg : {cpu::PageAgg::max, cpu::PageAgg::mass}) {
        float bound[2], exact[2];
        cpu::PageScoreArgs b = page_args(q.data(), 1, d, summary.data(), 2, agg, bound);
        cpu::quest_page_scores(b);
        cpu::page_scores_exact(
            exact_args(q.data(), 1, d, cpu::RowType::f16, keys.data(), n_rows, 16, agg, exact));
        EXPECT_GT(bound[0], bound[1]);
        EXPECT_GT(exact[1], exact[0]);
        if (agg == cpu::PageAgg::max) {
            EXPECT_FLOAT_EQ(exact[0], 4.0f);
            EXPECT_FLOAT_EQ(exact[1], 16.0f);
        }
    }
}

// A store with one slot of random f16 keys per lane.
struct Lanes {
    KvShape shape;
    std::unique_ptr<ContiguousKv> kv;
    Lanes(std::mt19937 &rng, int64_t n_layer, int64_t n_kv, int64_t d, const std::vector<int64_t> &rows) {
        shape.n_seq = 1;
        shape.n_layer = n_layer;
        shape.n_head_kv = n_kv;
        shape.head_dim = d;
        shape.type = cpu::RowType::f16;
        kv = std::move(ContiguousKv::create(shape, 4096).value());
        const int64_t n = *std::max_element(rows.begin(), rows.end());
        EXPECT_TRUE(kv->reserve(0, n).ok());
        for (int64_t l = 0; l < n_layer; ++l)
            for (int64_t g = 0; g < n_kv; ++g) {
                const std::vector<float> v = test::random_values(rng, static_cast<size_t>(n * d), 1.5f);
                auto *k = static_cast<uint16_t *>(kv->k_data(0, l, g));
                for (size_t i = 0; i < v.size(); ++i) k[i] = fp32_to_fp16(v[i]);
            }
        kv->set_n_pos(0, n);
        // Lanes of different lengths (a compacted lane): keep each lane's first rows.
        for (int64_t l = 0; l < n_layer; ++l)
            for (int64_t g = 0; g < n_kv; ++g) {
                const int64_t r = rows[static_cast<size_t>(g % rows.size())];
                std::vector<int32_t> keep(static_cast<size_t>(r));
                for (int32_t i = 0; i < r; ++i) keep[static_cast<size_t>(i)] = i;
                EXPECT_TRUE(kv->compact(0, l, g, keep.data(), r).ok());
            }
    }
};

// The units (of `page` rows) the selector should read for lane (layer, g) of
// n rows, the token's own included: chosen here by a full sort.
std::set<int64_t> expected_units(const QuestParams &p, KvCache &kv, int64_t layer, int64_t g, const float *q,
                                 int64_t group, int64_t n) {
    const int64_t d = kv.shape().head_dim, unit = p.page, newest = (n + unit - 1) / unit - 1;
    const int64_t n_logical = summary_pages(n - 1);
    std::vector<uint16_t> summary(static_cast<size_t>(n_logical * 2 * d));
    summarize_lane_ref(kv.shape().type.k, kv.k_data(0, layer, g), n - 1, d, summary.data());
    std::vector<float> logical(static_cast<size_t>(n_logical));
    cpu::PageScoreArgs a =
        page_args(q + g * group * d, group, d, summary.data(), n_logical, p.agg, logical.data());
    // The exact scores' arguments over the lane's rows before the token's own.
    const auto lane_exact_args = [&](float *out) {
        return exact_args(a.q, group, d, kv.shape().type.k, kv.k_data(0, layer, g), n - 1, k_summary_rows,
                          p.agg, out);
    };
    if (p.exact) {
        cpu::page_scores_exact_ref(lane_exact_args(logical.data()));
    } else {
        cpu::quest_page_scores(a);
    }
    std::set<int64_t> units = {newest};
    for (int64_t u = 0; u < newest; ++u)
        if (u * unit < p.sink || (p.recent > 0 && (u + 1) * unit > n - p.recent)) units.insert(u);
    std::vector<std::pair<float, int64_t>> rest;
    for (int64_t u = 0; u < newest; ++u) {
        if (units.count(u)) continue;
        float s = -INFINITY;
        for (int64_t j = u * unit / k_summary_rows; j < (u + 1) * unit / k_summary_rows; ++j) s = std::max(s, logical[j]);
        rest.emplace_back(-s, u);
    }
    std::sort(rest.begin(), rest.end());
    const int64_t want = std::max<int64_t>(0, p.budget / unit - static_cast<int64_t>(units.size()));
    const int64_t n_cand =
        std::min<int64_t>(static_cast<int64_t>(rest.size()),
                          static_cast<int64_t>(std::ceil(p.refine * static_cast<double>(want))));
    if (!p.exact && p.refine > 0 && n_cand > want) {
        // refine: the bound's best n_cand units, re-ranked by the exact
        // scores of their pages (softmax over the candidates' keys alone).
        std::vector<int64_t> cand;
        for (int64_t i = 0; i < n_cand; ++i) cand.push_back(rest[i].second);
        std::sort(cand.begin(), cand.end());
        std::vector<int32_t> pages;
        for (int64_t u : cand)
            for (int64_t j = u * unit / k_summary_rows; j < (u + 1) * unit / k_summary_rows; ++j)
                pages.push_back(static_cast<int32_t>(j));
        std::vector<float> ex(pages.size());
        cpu::PageExactArgs e = lane_exact_args(ex.data());
        e.pages = pages.data();
        e.n_list = static_cast<int64_t>(pages.size());
        cpu::page_scores_exact_ref(e);
        rest.clear();
        for (size_t i = 0; i < cand.size(); ++i) {
            const int64_t per = unit / k_summary_rows;
            const float sc = *std::max_element(ex.begin() + static_cast<std::ptrdiff_t>(i * per),
                                               ex.begin() + static_cast<std::ptrdiff_t>((i + 1) * per));
            rest.emplace_back(-sc, cand[i]);
        }
        std::sort(rest.begin(), rest.end());
    }
    for (int64_t i = 0; i < std::min<int64_t>(want, static_cast<int64_t>(rest.size())); ++i) units.insert(rest[i].second);
    return units;
}

std::set<int64_t> units_of(const cpu::RowSpans &sp, int64_t g, int64_t unit, int64_t n) {
    std::set<int64_t> out;
    for (int64_t i = 0; i < sp.n_spans(g); ++i) {
        EXPECT_EQ(0, sp.begin(g, i) % unit);
        EXPECT_TRUE(sp.end(g, i) % unit == 0 || sp.end(g, i) == n);
        for (int64_t r = sp.begin(g, i); r < sp.end(g, i); r += unit) out.insert(r / unit);
    }
    return out;
}

TEST(QuestSelector, SpansAreTheBestUnitsWithinTheBudgetPlusSinkRecentAndNewest) {
    std::mt19937 rng(92);
    struct Case {
        const char *spec;
        std::vector<int64_t> rows;  // per KV head (cycled)
    };
    const Case cases[] = {
        {"quest:budget=256,page=64,full_layers=0", {1000, 700}},
        {"quest:budget=128,page=16,sink=40,recent=50,full_layers=1", {333, 129}},
        {"quest:budget=64,page=32,agg=mean,full_layers=0", {97, 300}},
        {"quest:budget=64,agg=mass,full_layers=0", {97, 300}},
        {"quest:budget=48,agg=maxprob,full_layers=0", {97, 300}},
        {"quest:budget=64,score=exact,full_layers=0", {97, 300}},
        {"quest:budget=80,agg=mass,score=exact,sink=20,full_layers=0", {250, 131}},
        {"quest:budget=64,refine=3,full_layers=0", {300, 97}},
        {"quest:budget=128,page=32,agg=mass,refine=2.5,full_layers=0", {700, 333}},
        {"quest:budget=512,page=64,full_layers=0", {400, 2000}},  // head 0 within the budget: dense
        {"quest:budget=64,page=64,sink=0,full_layers=0", {600, 600}},
    };
    ThreadPool pool(3);
    for (int rep = 0; rep < 2 * static_cast<int>(std::size(cases)); ++rep) {
        // each case on one thread and with its KV heads choosing over a pool
        const Case &c = cases[rep / 2];
        ThreadPool *tp = rep % 2 ? &pool : nullptr;
        auto spec = kv_policy_spec_parse(c.spec);
        ASSERT_TRUE(spec.ok()) << spec.status().message();
        auto pol = kv_policy_make(*spec);
        ASSERT_TRUE(pol.ok()) << pol.status().message();
        const QuestParams p = static_cast<const QuestPolicy &>(**pol).params();
        const int64_t n_layer = 3, n_kv = 2, group = 3, d = 64, n_head = n_kv * group;
        Lanes lanes(rng, n_layer, n_kv, d, c.rows);
        QuestSelector sel(p, lanes.shape, n_head);
        const std::vector<float> q = test::random_values(rng, static_cast<size_t>(n_head * d));
        for (int64_t l = 0; l < n_layer; ++l) {
            std::vector<int64_t> vis(static_cast<size_t>(n_kv));
            for (int64_t g = 0; g < n_kv; ++g) vis[static_cast<size_t>(g)] = lanes.kv->n_rows(0, l, g) + 1;
            const cpu::RowSpans *sp = sel.select(l, q.data(), *lanes.kv, 0, vis.data(), tp);
            if (l < p.full_layers) {
                EXPECT_EQ(sp, nullptr) << c.spec;
                continue;
            }
            bool any_sparse = false;
            for (int64_t g = 0; g < n_kv; ++g) any_sparse = any_sparse || vis[static_cast<size_t>(g)] > p.budget;
            if (!any_sparse) {
                EXPECT_EQ(sp, nullptr) << c.spec;
                continue;
            }
            ASSERT_NE(sp, nullptr) << c.spec;
            for (int64_t g = 0; g < n_kv; ++g) {
                const int64_t n = vis[static_cast<size_t>(g)];
                if (n <= p.budget) {
                    ASSERT_EQ(sp->n_spans(g), 1);
                    EXPECT_EQ(sp->begin(g, 0), 0);
                    EXPECT_EQ(sp->end(g, 0), n) << c.spec << ": a lane within the budget is read whole";
                    continue;
                }
                EXPECT_EQ(units_of(*sp, g, p.page, n), expected_units(p, *lanes.kv, l, g, q.data(), group, n))
                    << c.spec << " layer " << l << " head " << g;
                if (p.sink == 0 && p.recent == 0) {
                    EXPECT_LE(sp->n_rows(g), p.budget) << c.spec;
                }
            }
        }
    }
}

TEST(QuestSelector, ASelectionIsReusedForIntervalStepsAndCoversNewRows) {
    std::mt19937 rng(93);
    auto spec = kv_policy_spec_parse("quest:budget=128,page=16,interval=3,full_layers=0");
    const QuestParams p = static_cast<const QuestPolicy &>(**kv_policy_make(*spec)).params();
    Lanes lanes(rng, 1, 1, 64, {500});
    QuestSelector sel(p, lanes.shape, 2);
    std::set<int64_t> chosen;
    for (int step = 0; step < 7; ++step) {
        // A new query each step; the lane grows by one row each step.
        const std::vector<float> q = test::random_values(rng, 2 * 64);
        const int64_t n = lanes.kv->n_rows(0, 0, 0) + 1;
        const cpu::RowSpans *sp = sel.select(0, q.data(), *lanes.kv, 0, &n, nullptr);
        ASSERT_NE(sp, nullptr);
        std::set<int64_t> units = units_of(*sp, 0, p.page, n);
        EXPECT_EQ(sp->end(0, sp->n_spans(0) - 1), n) << "the newest rows are always read";
        if (step % 3 == 0) {
            EXPECT_EQ(units, expected_units(p, *lanes.kv, 0, 0, q.data(), 2, n)) << "step " << step;
            chosen = units;
        } else {
            // Reused: the earlier choice, plus units the newest one grew into.
            for (int64_t u : chosen) EXPECT_TRUE(units.count(u)) << "step " << step << " unit " << u;
            for (int64_t u : units) EXPECT_TRUE(chosen.count(u) || u >= *chosen.rbegin()) << "step " << step;
        }
        // Append a row (16 rows a page: the newest unit moves on at step 12).
        ASSERT_TRUE(lanes.kv->reserve(0, lanes.kv->n_pos(0) + 1).ok());
        auto *k = static_cast<uint16_t *>(lanes.kv->k_data(0, 0, 0)) + lanes.kv->n_rows(0, 0, 0) * 64;
        for (int c = 0; c < 64; ++c) k[c] = fp32_to_fp16(static_cast<float>(rng() % 100) / 50.0f - 1.0f);
        lanes.kv->set_n_pos(0, lanes.kv->n_pos(0) + 1);
    }
    EXPECT_EQ(sel.stats().n_selects, 3);
    EXPECT_EQ(sel.stats().n_reuses, 4);
}

TEST(QuestSelector, BadSpecsSayWhatIsExpected) {
    for (const auto &[text, want] : std::vector<std::pair<const char *, const char *>>{
             {"quest:page=24", "page=24: expected a multiple of 16"},
             {"quest:budget=32,page=64", "budget=32 is below one page"},
             {"quest:interval=0", "interval=0: expected an integer"},
             {"quest:agg=median", "agg=median: expected max, mean, mass or maxprob"},
             {"quest:score=oracle", "score=oracle: expected bound"},
             {"quest:refine=0.5", "refine=0.5: expected 0 (off) or a factor of at least 1"},
             {"quest:keep=0.1", "quest has no key 'keep'"}}) {
        auto spec = kv_policy_spec_parse(text);
        std::string msg = spec.ok() ? kv_policy_make(*spec).status().message() : spec.status().message();
        EXPECT_NE(msg.find(want), std::string::npos) << text << ": " << msg;
    }
}

}  // namespace
}  // namespace sieve
