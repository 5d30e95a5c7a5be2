// Decode attention over selected row spans (page selection): all rows
// selected is the dense kernel bit for bit; a selection matches the scalar
// reference and never reads a row outside it (every unselected row is NaN).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels_test_util.h"
#include "sieve/core/fp16.h"
#include "sieve/kernels/cpu/kv_rows.h"
#include "sieve/kernels/cpu/ops.h"

using namespace sieve;
using sieve::test::random_values;

namespace {

// One decode query over n_head_kv lanes; lane g has past[g] + 1 visible rows
// (and a few NaN rows past them), stored as `type`, each starting on a cache
// line as the stores' lanes do.
struct SelCase {
    int64_t n_head = 0, n_head_kv = 0, d = 0;
    cpu::KvRowTypes type = cpu::RowType::f32;  // K rows of type.k, V rows of type.v
    std::vector<int64_t> past;
    std::vector<float> q;
    std::vector<std::vector<float>> kf, vf;           // f32 values (what the reference widens)
    std::vector<std::vector<uint8_t>> k16, v16;        // rows of a narrower type
    std::vector<const void *> k_ptr, v_ptr;
    std::vector<int32_t> span_rows;
    std::vector<int64_t> span_first;
    cpu::RowSpans spans;
    bool with_spans = false;

    SelCase(std::mt19937 &rng, int64_t nh, int64_t nkv, int64_t dim, cpu::KvRowTypes t,
            std::vector<int64_t> p)
        : n_head(nh), n_head_kv(nkv), d(dim), type(t), past(std::move(p)) {
        q = random_values(rng, static_cast<size_t>(nh * dim), 0.5f);
        for (int64_t g = 0; g < nkv; ++g) {
            const int64_t n = past[static_cast<size_t>(g)] + 1 + 16 + 3;  // 16 floats of alignment slack, 3 NaN rows
            std::vector<float> k = random_values(rng, static_cast<size_t>(n * dim), 0.5f);
            std::vector<float> v = random_values(rng, static_cast<size_t>(n * dim));
            std::fill(k.begin() + (past[static_cast<size_t>(g)] + 1) * dim, k.end(), NAN);
            std::fill(v.begin() + (past[static_cast<size_t>(g)] + 1) * dim, v.end(), NAN);
            kf.push_back(std::move(k));
            vf.push_back(std::move(v));
        }
        narrow();
    }
    // Rounds the f32 values to the row type (kf / vf then hold the values the
    // kernels and the reference read) and sets the lane pointers.
    void narrow() {
        k16.clear();
        v16.clear();
        k_ptr.clear();
        v_ptr.clear();
        for (int64_t g = 0; g < n_head_kv; ++g) {
            for (auto *src : {&kf[static_cast<size_t>(g)], &vf[static_cast<size_t>(g)]}) {
                const int64_t n = static_cast<int64_t>(src->size()) / d;
                const cpu::RowType t = src == &kf[static_cast<size_t>(g)] ? type.k : type.v;
                std::vector<uint8_t> h = test::narrow_rows(t, src->data(), n, d);
                if (t != cpu::RowType::f32)
                    for (int64_t i = 0; i < n * d; ++i)
                        (*src)[static_cast<size_t>(i)] = cpu::row_elem(t, h.data(), i);
                (src == &kf[static_cast<size_t>(g)] ? k16 : v16).push_back(std::move(h));
            }
        }
        for (int64_t g = 0; g < n_head_kv; ++g) {
            if (type.k == cpu::RowType::f32) {  // f32 pairs with f32 only
                k_ptr.push_back(aligned(kf[static_cast<size_t>(g)]));
                v_ptr.push_back(aligned(vf[static_cast<size_t>(g)]));
            } else {
                k_ptr.push_back(k16[static_cast<size_t>(g)].data());
                v_ptr.push_back(v16[static_cast<size_t>(g)].data());
            }
        }
    }
    // f32 lanes start on a cache line: their values are moved there.
    static const float *aligned(std::vector<float> &v) {
        const uintptr_t a = reinterpret_cast<uintptr_t>(v.data());
        const size_t off = (((a + 63) & ~uintptr_t(63)) - a) / sizeof(float);
        std::copy_backward(v.begin(), v.end() - static_cast<ptrdiff_t>(off), v.end());
        std::fill(v.begin(), v.begin() + static_cast<ptrdiff_t>(off), NAN);
        return v.data() + off;
    }
    // Selects spans (per head, sorted, disjoint, inside the visible rows).
    void select(const std::vector<std::vector<std::pair<int64_t, int64_t>>> &per_head) {
        span_rows.clear();
        span_first.assign(1, 0);
        for (const auto &h : per_head) {
            for (const auto &[b, e] : h) {
                span_rows.push_back(static_cast<int32_t>(b));
                span_rows.push_back(static_cast<int32_t>(e));
            }
            span_first.push_back(span_first.back() + static_cast<int64_t>(h.size()));
        }
        spans.rows = span_rows.data();
        spans.first = span_first.data();
        with_spans = true;
    }
    // Every row not in a span becomes NaN in K and V (a kernel reading one fails).
    void poison_unselected() {
        for (int64_t g = 0; g < n_head_kv; ++g) {
            std::vector<char> keep(static_cast<size_t>(past[static_cast<size_t>(g)] + 1), 0);
            for (int64_t i = 0; i < spans.n_spans(g); ++i)
                for (int64_t r = spans.begin(g, i); r < spans.end(g, i); ++r) keep[static_cast<size_t>(r)] = 1;
            const float *kp = type.k == cpu::RowType::f32
                                  ? static_cast<const float *>(k_ptr[static_cast<size_t>(g)])
                                  : nullptr;
            const std::vector<float> nan_row(static_cast<size_t>(d), NAN);
            const std::vector<uint8_t> nan_k = test::narrow_rows(type.k, nan_row.data(), 1, d);
            const std::vector<uint8_t> nan_v = test::narrow_rows(type.v, nan_row.data(), 1, d);
            const size_t kb = nan_k.size(), vb = nan_v.size();
            for (size_t r = 0; r < keep.size(); ++r) {
                if (keep[r]) continue;
                if (kp) {
                    for (int64_t c = 0; c < d; ++c) {
                        const size_t i = r * static_cast<size_t>(d) + static_cast<size_t>(c);
                        const_cast<float *>(kp)[i] = NAN;
                        const_cast<float *>(static_cast<const float *>(v_ptr[static_cast<size_t>(g)]))[i] = NAN;
                    }
                } else {
                    std::memcpy(k16[static_cast<size_t>(g)].data() + r * kb, nan_k.data(), kb);
                    std::memcpy(v16[static_cast<size_t>(g)].data() + r * vb, nan_v.data(), vb);
                }
            }
        }
    }
    cpu::AttnArgs args(float *o, float *lse) const {
        cpu::AttnArgs a;
        a.q = q.data();
        a.k = k_ptr.data();
        a.v = v_ptr.data();
        a.kv_type = type;
        a.o = o;
        a.lse = lse;
        a.n_q = 1;
        a.n_past = past[0];
        a.n_past_kv = past.data();
        a.n_head = n_head;
        a.n_head_kv = n_head_kv;
        a.head_dim = d;
        a.scale = 1.0f / std::sqrt(static_cast<float>(d));
        a.spans = with_spans ? &spans : nullptr;
        return a;
    }
};

// Random selection of a lane of n rows: units of `unit` rows picked with
// probability 1/3, plus always the first and the last unit (what a page
// selector keeps: sinks and the newest rows); adjacent units merge.
std::vector<std::pair<int64_t, int64_t>> random_spans(std::mt19937 &rng, int64_t n, int64_t unit) {
    std::vector<std::pair<int64_t, int64_t>> out;
    const int64_t n_units = (n + unit - 1) / unit;
    for (int64_t u = 0; u < n_units; ++u) {
        if (!(u == 0 || u == n_units - 1 || rng() % 3 == 0)) continue;
        const int64_t b = u * unit, e = std::min(n, b + unit);
        if (!out.empty() && out.back().second == b)
            out.back().second = e;
        else
            out.emplace_back(b, e);
    }
    return out;
}

std::vector<int64_t> random_past(std::mt19937 &rng, int64_t n_head_kv, bool uneven) {
    static const int64_t edges[] = {0, 1, 15, 16, 63, 64, 65, 127, 128, 200};
    std::vector<int64_t> past(static_cast<size_t>(n_head_kv));
    const int64_t base = rng() % 3 == 0 ? edges[rng() % 10] : 100 + static_cast<int64_t>(rng() % 3000);
    for (auto &p : past) p = uneven ? static_cast<int64_t>(rng() % static_cast<uint64_t>(base + 1)) : base;
    past[rng() % past.size()] = base;
    return past;
}

std::string describe(const SelCase &c, int n_threads) {
    std::ostringstream s;
    s << "heads " << c.n_head << "/" << c.n_head_kv << " d=" << c.d << " type " << cpu::row_type_name(c.type)
      << " threads " << n_threads << " rows";
    for (int64_t p : c.past) s << " " << p + 1;
    return s.str();
}

// The uniform types, and K and V of different types.
const cpu::KvRowTypes k_types[] = {cpu::RowType::f32,
                                   cpu::RowType::f16,
                                   cpu::RowType::bf16,
                                   cpu::RowType::q8_0,
                                   cpu::RowType::q4_0,
                                   {cpu::RowType::q8_0, cpu::RowType::q4_0},
                                   {cpu::RowType::f16, cpu::RowType::q4_0}};
constexpr size_t k_n_types = std::size(k_types);

}  // namespace

TEST(AttentionSelect, AllRowsSelectedIsDenseBitForBit) {
    // One span [0, n_past(g) + 1) per head: the plan, blocks and merge of the
    // dense call, so the same bits (decode and decode_multi), 1 to 3 threads.
    std::mt19937 rng(71);
    for (int n_threads : {1, 2, 3}) {
        ThreadPool pool(n_threads);
        for (int rep = 0; rep < 24; ++rep) {
            const int64_t group = std::vector<int64_t>{1, 3, 7}[rep % 3], nkv = 1 + rep % 3;
            const int64_t d = rep % 4 == 3 ? 128 : 64;
            SelCase c(rng, group * nkv, nkv, d, k_types[static_cast<size_t>(rep / 3) % k_n_types],
                      random_past(rng, nkv, rep % 2 == 1));
            std::vector<float> o_dense(static_cast<size_t>(c.n_head * d)), lse_dense(static_cast<size_t>(c.n_head));
            cpu::attention_decode(c.args(o_dense.data(), lse_dense.data()), pool);
            std::vector<std::vector<std::pair<int64_t, int64_t>>> all;
            for (int64_t p : c.past) all.push_back({{0, p + 1}});
            c.select(all);
            std::vector<float> o(o_dense.size(), NAN), lse(lse_dense.size(), NAN);
            cpu::attention_decode(c.args(o.data(), lse.data()), pool);
            EXPECT_EQ(0, std::memcmp(o.data(), o_dense.data(), o.size() * sizeof(float))) << describe(c, n_threads);
            EXPECT_EQ(0, std::memcmp(lse.data(), lse_dense.data(), lse.size() * sizeof(float)))
                << describe(c, n_threads);
            std::fill(o.begin(), o.end(), NAN);
            const cpu::AttnArgs a = c.args(o.data(), nullptr);
            cpu::attention_decode_multi(&a, 1, pool);
            EXPECT_EQ(0, std::memcmp(o.data(), o_dense.data(), o.size() * sizeof(float))) << describe(c, n_threads);
        }
    }
}

TEST(AttentionSelect, SelectedRowsMatchTheReferenceAndNoOtherRowIsRead) {
    // Random spans of 1-, 16-, 64- and 100-row units (blocks of the kernel
    // straddle span edges for the odd ones), every unselected row NaN; the
    // output must be finite and within the decode tolerance of the reference
    // over the same rows.
    std::mt19937 rng(72);
    const int64_t units[] = {1, 16, 64, 100};
    for (int n_threads : {1, 2, 3}) {
        ThreadPool pool(n_threads);
        for (int rep = 0; rep < 36; ++rep) {
            const int64_t group = std::vector<int64_t>{1, 3, 7}[rep % 3], nkv = 1 + (rep / 3) % 3;
            const int64_t d = rep % 5 == 4 ? 128 : 64;
            SelCase c(rng, group * nkv, nkv, d, k_types[static_cast<size_t>(rep) % k_n_types],
                      random_past(rng, nkv, rep % 2 == 0));
            std::vector<std::vector<std::pair<int64_t, int64_t>>> sel;
            for (int64_t p : c.past) sel.push_back(random_spans(rng, p + 1, units[(rep / 2) % 4]));
            c.select(sel);
            std::vector<float> o_ref(static_cast<size_t>(c.n_head * d)), lse_ref(static_cast<size_t>(c.n_head));
            cpu::attention_ref(c.args(o_ref.data(), lse_ref.data()), /*decode=*/true);
            c.poison_unselected();
            std::vector<float> o(o_ref.size(), NAN), lse(lse_ref.size(), NAN);
            cpu::attention_decode(c.args(o.data(), lse.data()), pool);
            for (int64_t h = 0; h < c.n_head; ++h) {
                float vmax = 0.0f;
                for (float x : c.vf[static_cast<size_t>(h / group)])
                    if (std::isfinite(x)) vmax = std::max(vmax, std::fabs(x));
                for (int64_t e = 0; e < d; ++e) {
                    const size_t i = static_cast<size_t>(h * d + e);
                    ASSERT_TRUE(std::fabs(o[i] - o_ref[i]) <= 2e-5f * vmax)
                        << describe(c, n_threads) << " unit " << units[(rep / 2) % 4] << ": O[h=" << h << ", " << e
                        << "] = " << o[i] << ", want " << o_ref[i];
                }
                ASSERT_TRUE(std::fabs(lse[h] - lse_ref[h]) <= 1e-5f * (1.0f + std::fabs(lse_ref[h])))
                    << describe(c, n_threads) << ": lse[" << h << "] = " << lse[h] << ", want " << lse_ref[h];
            }
        }
    }
}

TEST(AttentionSelect, MultiSequenceStepWithSelectionsEqualsEachAlone) {
    // A decode step mixing sequences with and without spans: each sequence's
    // bits are those of attention_decode on it alone.
    std::mt19937 rng(73);
    ThreadPool pool(2);
    std::vector<SelCase> cases;
    for (int i = 0; i < 11; ++i) {
        cases.emplace_back(rng, 14, 2, 64, k_types[static_cast<size_t>(i) % k_n_types],
                           random_past(rng, 2, i % 2 == 0));
        if (i % 3 != 2) {
            std::vector<std::vector<std::pair<int64_t, int64_t>>> sel;
            for (int64_t p : cases.back().past) sel.push_back(random_spans(rng, p + 1, 16));
            cases.back().select(sel);
        }
    }
    std::vector<std::vector<float>> o(cases.size()), o1(cases.size());
    std::vector<cpu::AttnArgs> args;
    for (size_t i = 0; i < cases.size(); ++i) {
        o[i].assign(static_cast<size_t>(14 * 64), NAN);
        o1[i] = o[i];
        args.push_back(cases[i].args(o[i].data(), nullptr));
    }
    cpu::attention_decode_multi(args.data(), static_cast<int64_t>(args.size()), pool);
    for (size_t i = 0; i < cases.size(); ++i) {
        cpu::attention_decode(cases[i].args(o1[i].data(), nullptr), pool);
        EXPECT_EQ(0, std::memcmp(o[i].data(), o1[i].data(), o[i].size() * sizeof(float)))
            << "sequence " << i << ": " << describe(cases[i], 2);
    }
}

TEST(AttentionSelect, SpansAreChecked) {
    std::mt19937 rng(74);
    SelCase c(rng, 4, 2, 64, cpu::RowType::f16, {99, 49});
    std::vector<float> o(4 * 64);
    c.select({{{0, 16}, {32, 100}}, {{0, 50}}});
    EXPECT_EQ("", cpu::attn_spans_error(c.args(o.data(), nullptr)));
    c.select({{{0, 16}, {8, 100}}, {{0, 50}}});  // overlapping
    EXPECT_NE(std::string::npos, cpu::attn_spans_error(c.args(o.data(), nullptr)).find("kv head 0 span 1"));
    c.select({{{0, 16}}, {{0, 51}}});  // past the visible rows
    EXPECT_NE(std::string::npos, cpu::attn_spans_error(c.args(o.data(), nullptr)).find("kv head 1 span 0"));
    c.select({{{0, 16}}, {}});  // a head reading nothing
    EXPECT_NE(std::string::npos, cpu::attn_spans_error(c.args(o.data(), nullptr)).find("reads no rows"));
}
