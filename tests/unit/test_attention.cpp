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
#include "sieve/kernels/cpu/ops.h"

using namespace sieve;
using sieve::test::random_values;

namespace {

// A lane of n floats starting on a cache line like the KV stores' lanes
// (they start on pages), or `misalign` floats past one: the decode kernel has
// a register-resident path for aligned rows and a generic one otherwise.
struct Lane {
    std::vector<float> store;
    float *p = nullptr;
    Lane(std::vector<float> values, int64_t misalign) : store(values.size() + 16 + static_cast<size_t>(misalign)) {
        const uintptr_t a = reinterpret_cast<uintptr_t>(store.data());
        p = store.data() + (((a + 63) & ~uintptr_t(63)) - a) / sizeof(float) + misalign;
        std::copy(values.begin(), values.end(), p);
    }
    Lane(const Lane &) = delete;
    Lane(Lane &&) = default;
};

// One sequence's attention inputs. Rows of a lane past the last visible one
// (n_kv > n_past(g) + n_q) are filled with NaN: a kernel that reads them fails
// loudly. With per-head rows (lanes of different lengths, as after a sparse
// policy compacted some), lane g holds past[g] rows before the chunk.
struct AttnCase {
    int64_t n_head, n_head_kv, head_dim, n_q, n_kv;
    std::vector<int64_t> past;  // [n_head_kv]
    bool per_head = false;
    std::vector<float> q;
    std::vector<Lane> k, v;
    std::vector<const void *> k_ptr, v_ptr;
    cpu::KvRowTypes kv_type = cpu::RowType::f32;
    std::vector<std::vector<uint8_t>> k16, v16;  // narrowed copies (use_rows)
    const cpu::AttnLambda *lambda = nullptr;     // optional Λ mask (prefill)

    AttnCase(std::mt19937 &rng, int64_t nh, int64_t nh_kv, int64_t d, int64_t nq, int64_t pos0, int64_t nkv,
             int64_t misalign = 0)
        : AttnCase(rng, nh, nh_kv, d, nq, std::vector<int64_t>(static_cast<size_t>(nh_kv), pos0), nkv, misalign) {
        per_head = false;
    }
    AttnCase(std::mt19937 &rng, int64_t nh, int64_t nh_kv, int64_t d, int64_t nq, std::vector<int64_t> past_rows,
             int64_t nkv, int64_t misalign = 0)
        : n_head(nh), n_head_kv(nh_kv), head_dim(d), n_q(nq), n_kv(nkv), past(std::move(past_rows)), per_head(true) {
        // sigma 0.5 puts the scaled scores in a realistic range; the outliers
        // make some rows nearly one-hot.
        q = random_values(rng, static_cast<size_t>(nq * nh * d), 0.5f);
        for (int64_t h = 0; h < nh_kv; ++h) {
            const int64_t n_vis = past[static_cast<size_t>(h)] + nq;
            std::vector<float> kh = random_values(rng, static_cast<size_t>(nkv * d), 0.5f);
            std::vector<float> vh = random_values(rng, static_cast<size_t>(nkv * d));
            std::fill(kh.begin() + n_vis * d, kh.end(), NAN);
            std::fill(vh.begin() + n_vis * d, vh.end(), NAN);
            k.emplace_back(std::move(kh), misalign);
            v.emplace_back(std::move(vh), misalign);
        }
        for (auto &x : k) k_ptr.push_back(x.p);
        for (auto &x : v) v_ptr.push_back(x.p);
    }
    // Stores the lanes as rows of t (f16, bf16, q8_0, q4_0; K as t.k, V as
    // t.v): the kernels then read those, and the reference widens the same
    // rounded values (rows past the visible ones stay NaN rows).
    void use_rows(cpu::KvRowTypes t) {
        kv_type = t;
        k16.clear();
        v16.clear();
        for (const Lane &l : k) k16.push_back(test::narrow_rows(t.k, l.p, n_kv, head_dim));
        for (const Lane &l : v) v16.push_back(test::narrow_rows(t.v, l.p, n_kv, head_dim));
        for (size_t g = 0; g < k.size(); ++g) {
            k_ptr[g] = k16[g].data();
            v_ptr[g] = v16[g].data();
        }
    }
    cpu::AttnArgs args(float *o, float *lse) const {
        cpu::AttnArgs a;
        a.q = q.data();
        a.k = k_ptr.data();
        a.v = v_ptr.data();
        a.o = o;
        a.lse = lse;
        a.n_q = n_q;
        a.kv_type = kv_type;
        a.n_past = past[0];
        a.n_past_kv = per_head ? past.data() : nullptr;
        a.n_head = n_head;
        a.n_head_kv = n_head_kv;
        a.head_dim = head_dim;
        a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        a.lambda = lambda;
        return a;
    }
};

enum class Kernel { prefill, decode };

// O is a convex combination of value rows, so its error is measured against
// max |v| of the head: f32 exp/sum/fma rounding over a few thousand keys stays
// near 1e-6 of that; 2e-5 leaves room without hiding a wrong key or weight
// (those move O by a sizeable fraction of |v|). lse is compared absolutely
// with 1e-5 * (1 + |lse|): it is m + log(l) with l summed in f32.
// o / lse: a kernel's outputs for c (lse may be null: not checked).
//
// The AMX prefill tiles (half and quantized rows, where the CPU has them)
// multiply bf16 hi/lo splits: a score q.k is then within 2^-16 sum_c |q_c k_c|
// of its f32 value (the rounding of q's lo part; the split of a quantized
// row's 19-bit values adds as much), so with B = 2^-15 of that sum times the
// scale over the row's keys, times 2 for slack, lse moves by at most B and O
// by at most (2B + 2^-15) max |v| (probabilities within e^(2B), P's own split).
double amx_score_bound(const AttnCase &c, int64_t i, int64_t h) {
    const int64_t group = c.n_head / c.n_head_kv, g = h / group, d = c.head_dim;
    const float *q = c.q.data() + (i * c.n_head + h) * d;
    double most = 0.0;
    for (int64_t j = 0; j <= c.past[static_cast<size_t>(g)] + i; ++j) {
        double sum = 0.0;
        for (int64_t e = 0; e < d; ++e) sum += std::fabs(double(q[e]) * double(c.k[static_cast<size_t>(g)].p[j * d + e]));
        most = std::max(most, sum);
    }
    return 2.0 * std::ldexp(most, -15) / std::sqrt(static_cast<double>(d));
}

// decode: the reference takes the scores as the decode kernel does (a
// query rounded to 8 bits over quantized K rows, ops.h).
void expect_close(const AttnCase &c, const char *name, const std::vector<float> &o, const float *lse,
                  bool amx = false, bool decode = false) {
    const size_t n_o = static_cast<size_t>(c.n_q * c.n_head * c.head_dim);
    std::vector<float> o_ref(n_o), lse_ref(static_cast<size_t>(c.n_head * c.n_q));
    cpu::attention_ref(c.args(o_ref.data(), lse_ref.data()), decode);
    const int64_t group = c.n_head / c.n_head_kv;
    std::vector<float> vmax(static_cast<size_t>(c.n_head_kv), 0.0f);
    for (int64_t h = 0; h < c.n_head_kv; ++h)
        for (int64_t i = 0; i < (c.past[static_cast<size_t>(h)] + c.n_q) * c.head_dim; ++i)
            vmax[h] = std::max(vmax[h], std::fabs(c.v[static_cast<size_t>(h)].p[i]));
    int n_bad = 0;
    for (int64_t i = 0; i < c.n_q && n_bad < 5; ++i) {
        for (int64_t h = 0; h < c.n_head && n_bad < 5; ++h) {
            const double bound = amx ? amx_score_bound(c, i, h) : 0.0;
            const float tol = static_cast<float>((2e-5 + (amx ? 2.0 * bound + std::ldexp(1.0, -15) : 0.0)) * vmax[h / group]);
            for (int64_t e = 0; e < c.head_dim; ++e) {
                const size_t idx = static_cast<size_t>((i * c.n_head + h) * c.head_dim + e);
                if (!(std::fabs(o[idx] - o_ref[idx]) <= tol)) {
                    ADD_FAILURE() << name << " heads " << c.n_head << "/" << c.n_head_kv << " d=" << c.head_dim
                                   << " n_q=" << c.n_q << " n_past[0]=" << c.past[0] << " n_kv=" << c.n_kv << ": O[q=" << i
                                  << ", h=" << h << ", " << e << "] = " << o[idx] << ", want " << o_ref[idx];
                    ++n_bad;
                    break;
                }
            }
            const size_t li = static_cast<size_t>(h * c.n_q + i);
            if (lse && !(std::fabs(lse[li] - lse_ref[li]) <= 1e-5f * (1.0f + std::fabs(lse_ref[li])) + static_cast<float>(bound))) {
                ADD_FAILURE() << name << " lse[h=" << h << ", q=" << i << "] = " << lse[li] << ", want " << lse_ref[li]
                              << " (n_q=" << c.n_q << " n_kv=" << c.n_kv << ")";
                ++n_bad;
            }
        }
    }
}

void check(const AttnCase &c, Kernel kernel, ThreadPool &pool) {
    const size_t n_o = static_cast<size_t>(c.n_q * c.n_head * c.head_dim);
    std::vector<float> o(n_o, NAN), lse(static_cast<size_t>(c.n_head * c.n_q), NAN);
    if (kernel == Kernel::prefill)
        cpu::attention_prefill(c.args(o.data(), lse.data()), pool);
    else
        cpu::attention_decode(c.args(o.data(), lse.data()), pool);
    const bool amx = kernel == Kernel::prefill && c.kv_type != cpu::RowType::f32 && cpu::attention_prefill_uses_amx();
    expect_close(c, kernel == Kernel::prefill ? (amx ? "prefill (amx)" : "prefill") : "decode", o, lse.data(),
                 amx, kernel == Kernel::decode);
}

// Runs fn(name) once per prefill path the machine has for half and quantized
// rows: the f32 tiles over widened rows, then the AMX tiles where the CPU and
// OS offer them. Restores the switch.
template <class F>
void each_prefill_path(F fn) {
    const bool was = cpu::attention_prefill_uses_amx();
    cpu::attention_prefill_use_amx(false);
    fn("f32 tiles");
    if (cpu::attention_prefill_use_amx(true)) fn("amx tiles");
    cpu::attention_prefill_use_amx(was);
}

// Prefills c's n_q queries (one lane per KV head from position pos0) in
// consecutive calls of piece(q0) queries each, into o ([n_q, n_head, d]) and
// l (lse, [n_head, n_q]).
template <class Piece>
void prefill_in_pieces(const AttnCase &c, int64_t pos0, ThreadPool &pool, Piece piece, std::vector<float> &o,
                       std::vector<float> &l) {
    const int64_t n_q = c.n_q, per_q = c.n_head * c.head_dim;
    for (int64_t q0 = 0; q0 < n_q;) {
        const int64_t n = piece(q0);
        std::vector<float> lp(static_cast<size_t>(c.n_head * n), NAN);
        cpu::AttnArgs a = c.args(o.data() + q0 * per_q, lp.data());
        a.q = c.q.data() + q0 * per_q;
        a.n_q = n;
        a.n_past = pos0 + q0;
        a.n_past_kv = nullptr;
        cpu::attention_prefill(a, pool);
        for (int64_t h = 0; h < c.n_head; ++h)
            for (int64_t i = 0; i < n; ++i) l[static_cast<size_t>(h * n_q + q0 + i)] = lp[static_cast<size_t>(h * n + i)];
        q0 += n;
    }
}

struct Heads {
    int64_t n_head, n_head_kv;
};
const Heads k_heads[] = {{1, 1}, {4, 4}, {9, 3}, {8, 2}};

}  // namespace

TEST(Attention, PrefillMatchesReference) {
    std::mt19937 rng(42);
    ThreadPool pool(2);
    for (Heads hh : k_heads)
        for (int64_t d : {64, 48})
            for (int64_t n_q : {1, 5, 64, 130})
                for (int64_t pos0 : {0, 17}) check(AttnCase(rng, hh.n_head, hh.n_head_kv, d, n_q, pos0, pos0 + n_q), Kernel::prefill, pool);
}

TEST(Attention, PrefillIgnoresKeysPastTheLastQuery) {
    // A chunk whose lanes already hold more keys than it may see (n_kv > q_pos0 + n_q).
    std::mt19937 rng(43);
    ThreadPool pool(3);
    check(AttnCase(rng, 8, 2, 80, 37, 100, 150), Kernel::prefill, pool);
    check(AttnCase(rng, 4, 1, 128, 3, 0, 9), Kernel::prefill, pool);
}

TEST(Attention, DecodeMatchesReferenceAtManyLengths) {
    std::mt19937 rng(44);
    for (int n_threads : {1, 2, 3}) {
        ThreadPool pool(n_threads);
        for (Heads hh : k_heads)
            for (int64_t d : {64, 48, 80})
                for (int64_t n_kv : {1, 2, 3, 17, 63, 64, 65, 129, 1000, 3000}) {
                    if (n_threads != 2 && n_kv > 200) continue;  // long lanes once is enough
                    check(AttnCase(rng, hh.n_head, hh.n_head_kv, d, 1, n_kv - 1, n_kv), Kernel::decode, pool);
                }
    }
}

TEST(Attention, DecodeHeadDimsAndGroupsOfTheRegisterPath) {
    // Aligned lanes of head dims 32/64/128/256 take the register-resident
    // V accumulation, in tiles of 16/d*16 heads: groups 1, 5 and 7 leave
    // remainders after the tiles; the same cases misaligned by one and three
    // floats take the generic loop, and both must match the reference.
    std::mt19937 rng(51);
    ThreadPool pool(2);
    const Heads heads[] = {{2, 2}, {10, 2}, {14, 2}};
    for (int64_t misalign : {0, 1, 3})
        for (Heads hh : heads)
            for (int64_t d : {32, 64, 128, 256})
                for (int64_t n_kv : {1, 70, 1500})
                    check(AttnCase(rng, hh.n_head, hh.n_head_kv, d, 1, n_kv - 1, n_kv, misalign), Kernel::decode, pool);
}

TEST(Attention, DecodeIgnoresKeysPastTheQuery) {
    std::mt19937 rng(45);
    ThreadPool pool(2);
    check(AttnCase(rng, 9, 3, 64, 1, 700, 900), Kernel::decode, pool);
}

TEST(Attention, PrefillWithOneQueryEqualsDecode) {
    std::mt19937 rng(46);
    ThreadPool pool(2);
    for (int64_t n_kv : {1, 50, 777}) check(AttnCase(rng, 8, 2, 64, 1, n_kv - 1, n_kv), Kernel::prefill, pool);
}

TEST(Attention, PrefillDeepKvFewQueries) {
    // A short chunk after a long prefix (chunked prefill, speculative tails):
    // the causal diagonal falls inside one key tile, the rest is unmasked.
    std::mt19937 rng(47);
    ThreadPool pool(2);
    for (int64_t n_q : {1, 2, 7, 33, 130})
        for (int64_t pos0 : {1000, 3001}) check(AttnCase(rng, 9, 3, 64, n_q, pos0, pos0 + n_q), Kernel::prefill, pool);
}

TEST(Attention, PrefillGqaRatiosAndHeadDims) {
    // Group sizes 1/3/4/7 (row blocks then straddle queries unevenly), head
    // dims 64 and 128 and one that is not a multiple of 8 (36).
    std::mt19937 rng(48);
    ThreadPool pool(2);
    const Heads heads[] = {{2, 2}, {6, 2}, {8, 2}, {14, 2}};
    for (Heads hh : heads)
        for (int64_t d : {64, 128, 36})
            for (int64_t n_q : {3, 29, 70}) check(AttnCase(rng, hh.n_head, hh.n_head_kv, d, n_q, 211, 211 + n_q + 5), Kernel::prefill, pool);
}

TEST(Attention, PrefillResultDoesNotDependOnThreadCount) {
    std::mt19937 rng(49);
    const AttnCase c(rng, 14, 2, 64, 97, 300, 397);
    const size_t n_o = static_cast<size_t>(c.n_q * c.n_head * c.head_dim), n_l = static_cast<size_t>(c.n_head * c.n_q);
    std::vector<float> o1(n_o, NAN), l1(n_l, NAN);
    {
        ThreadPool pool(1);
        cpu::attention_prefill(c.args(o1.data(), l1.data()), pool);
    }
    for (int n_threads : {2, 3}) {
        ThreadPool pool(n_threads);
        std::vector<float> o(n_o, NAN), l(n_l, NAN);
        cpu::attention_prefill(c.args(o.data(), l.data()), pool);
        EXPECT_EQ(0, std::memcmp(o.data(), o1.data(), n_o * sizeof(float))) << n_threads << " threads";
        EXPECT_EQ(0, std::memcmp(l.data(), l1.data(), n_l * sizeof(float))) << n_threads << " threads";
    }
}

TEST(Attention, PrefillSplitsTheKeysOfFewRows) {
    // Under 8 (KV head, row block) tasks the keys are split into chunks and
    // merged; chunk counts that leave some chunks empty, one row, and the
    // bitwise thread-count invariance of the split path.
    std::mt19937 rng(50);
    ThreadPool pool(2);
    check(AttnCase(rng, 8, 2, 64, 3, 300, 303), Kernel::prefill, pool);
    check(AttnCase(rng, 8, 2, 64, 5, 2000, 2010), Kernel::prefill, pool);
    check(AttnCase(rng, 1, 1, 64, 1, 5000, 5001), Kernel::prefill, pool);
    check(AttnCase(rng, 14, 2, 128, 2, 700, 702), Kernel::prefill, pool);
    check(AttnCase(rng, 9, 3, 36, 16, 1500, 1516), Kernel::prefill, pool);
    const AttnCase c(rng, 8, 2, 64, 4, 1234, 1238);
    const size_t n_o = static_cast<size_t>(c.n_q * c.n_head * c.head_dim), n_l = static_cast<size_t>(c.n_head * c.n_q);
    std::vector<float> o1(n_o, NAN), l1(n_l, NAN);
    cpu::attention_prefill(c.args(o1.data(), l1.data()), pool);
    for (int n_threads : {1, 3}) {
        ThreadPool p(n_threads);
        std::vector<float> o(n_o, NAN), l(n_l, NAN);
        cpu::attention_prefill(c.args(o.data(), l.data()), p);
        EXPECT_EQ(0, std::memcmp(o.data(), o1.data(), n_o * sizeof(float))) << n_threads << " threads";
        EXPECT_EQ(0, std::memcmp(l.data(), l1.data(), n_l * sizeof(float))) << n_threads << " threads";
    }
}

// A query's output and lse do not depend on how its prompt is cut into
// calls: the whole chunk at once, random pieces (each after the rows of the
// pieces before it), or one query at a time (the few-rows path that runs key
// chunks as tasks) give the same bits, with 1, 2 or 3 threads. This is what
// lets a prompt prefilled after a prefix-cache hit, or chunked differently
// under load, give the same tokens.
static void expect_bits_independent_of_the_cut(cpu::RowType t, int64_t d, const std::string &path,
                                               std::vector<int64_t> pasts = {0, 37, 700, 2100}) {
    std::mt19937 rng(51);
    const Heads heads[] = {{4, 4}, {9, 3}, {14, 2}};
    for (Heads hh : heads)
        for (int64_t pos0 : pasts) {
            const int64_t n_q = 61;
            AttnCase c(rng, hh.n_head, hh.n_head_kv, d, n_q, pos0, pos0 + n_q);
            if (t != cpu::RowType::f32) c.use_rows(t);
            const size_t per_q = static_cast<size_t>(c.n_head * d);
            std::vector<float> o_all(per_q * n_q, NAN), l_all(static_cast<size_t>(c.n_head * n_q), NAN);
            ThreadPool pool2(2);
            cpu::attention_prefill(c.args(o_all.data(), l_all.data()), pool2);
            for (int cut : {0, 1, 2}) {
                for (int n_threads : {1, 3}) {
                    ThreadPool pool(n_threads);
                    std::vector<float> o(per_q * n_q, NAN), l(static_cast<size_t>(c.n_head * n_q), NAN);
                    prefill_in_pieces(c, pos0, pool, [&](int64_t q0) {
                        return cut == 0 ? int64_t{1} : cut == 1 ? std::min<int64_t>(n_q - q0, 1 + static_cast<int64_t>(rng() % 23)) : std::min<int64_t>(n_q - q0, 17);
                    }, o, l);
                    const std::string what = path + ", d " + std::to_string(d) + ", heads " + std::to_string(hh.n_head) + "/" + std::to_string(hh.n_head_kv) +
                                             ", past " + std::to_string(pos0) + ", cut " + std::to_string(cut) + ", " +
                                             std::to_string(n_threads) + " threads";
                    EXPECT_EQ(0, std::memcmp(o.data(), o_all.data(), o.size() * sizeof(float))) << what;
                    EXPECT_EQ(0, std::memcmp(l.data(), l_all.data(), l.size() * sizeof(float))) << what;
                }
            }
            check(c, Kernel::prefill, pool2);
        }
}

TEST(Attention, PrefillBitsDoNotDependOnHowThePromptIsCut) {
    expect_bits_independent_of_the_cut(cpu::RowType::f32, 64, "f32 rows");
    // half and quantized rows, on every prefill path (the AMX tiles too):
    // head dims that fill whole tiles (64), and that leave pad channels in
    // both products (36) or in the score product only (80)
    each_prefill_path([&](const char *path) {
        expect_bits_independent_of_the_cut(cpu::RowType::f16, 64, std::string("f16 rows, ") + path);
        expect_bits_independent_of_the_cut(cpu::RowType::f16, 36, std::string("f16 rows, ") + path, {37, 2100});
        expect_bits_independent_of_the_cut(cpu::RowType::bf16, 80, std::string("bf16 rows, ") + path, {0, 700});
        expect_bits_independent_of_the_cut(cpu::RowType::q8_0, 64, std::string("q8_0 rows, ") + path, {37});
    });
}

TEST(Attention, UnevenLanesMatchReference) {
    // Lanes of one layer holding different row counts (a sparse policy kept
    // different subsets per KV head): query i of head group g sees the first
    // n_past[g] + i + 1 rows of its own lane, NaN past that. Includes an empty
    // past (a lane compacted to nothing), a lane far longer than the others
    // (the decode plan is sized by it; short lanes get empty chunks) and the
    // prefill key split (few queries, one long lane).
    std::mt19937 rng(52);
    ThreadPool pool(2);
    const std::vector<std::vector<int64_t>> pasts = {{0, 5}, {300, 7}, {1, 2000, 64}, {129, 128, 63, 0}};
    for (const std::vector<int64_t> &past : pasts) {
        const int64_t nh_kv = static_cast<int64_t>(past.size()), most = *std::max_element(past.begin(), past.end());
        for (int64_t group : {1, 3})
            for (int64_t d : {64, 36}) {
                check(AttnCase(rng, group * nh_kv, nh_kv, d, 1, past, most + 9), Kernel::decode, pool);
                for (int64_t n_q : {1, 4, 70})
                    check(AttnCase(rng, group * nh_kv, nh_kv, d, n_q, past, most + n_q + 3), Kernel::prefill, pool);
            }
    }
}

TEST(Attention, EqualPerHeadRowsGiveTheUniformBits) {
    // n_past_kv with every lane at n_past is the dense call exactly: the same
    // plan, the same chunks, the same bits (what "sparse with everything kept
    // == dense" rests on).
    std::mt19937 rng(53);
    ThreadPool pool(2);
    for (int64_t n_q : {1, 6, 90}) {
        AttnCase c(rng, 9, 3, 64, n_q, 777, 777 + n_q);
        const size_t n_o = static_cast<size_t>(c.n_q * c.n_head * c.head_dim);
        const size_t n_l = static_cast<size_t>(c.n_head * c.n_q);
        std::vector<float> o1(n_o, NAN), l1(n_l, NAN), o2(n_o, NAN), l2(n_l, NAN);
        const auto run = [&](float *o, float *l) {
            if (n_q == 1)
                cpu::attention_decode(c.args(o, l), pool);
            else
                cpu::attention_prefill(c.args(o, l), pool);
        };
        run(o1.data(), l1.data());
        c.per_head = true;
        run(o2.data(), l2.data());
        EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), n_o * sizeof(float))) << "n_q " << n_q;
        EXPECT_EQ(0, std::memcmp(l1.data(), l2.data(), n_l * sizeof(float))) << "n_q " << n_q;
    }
}

TEST(Attention, HalfRowsMatchReference) {
    each_prefill_path([&](const char *) {
        // f16 and bf16 lanes (the default KV type): the kernels widen a block of
        // rows in L1 and run the f32 inner loops; the reference widens the same
        // rounded values, so the tolerance is the f32 one (on the AMX tiles, plus
        // their bf16 split's, expect_close). Uneven lanes, GQA, NaN
        // past every lane's end (NaN survives the narrowing).
        std::mt19937 rng(54);
        ThreadPool pool(2);
        for (cpu::RowType t : {cpu::RowType::f16, cpu::RowType::bf16})
            for (Heads hh : k_heads)
                for (int64_t d : {64, 36}) {
                    std::vector<int64_t> past(static_cast<size_t>(hh.n_head_kv));
                    for (auto &p : past) p = static_cast<int64_t>(rng() % 400);
                    const int64_t most = *std::max_element(past.begin(), past.end());
                    AttnCase dec(rng, hh.n_head, hh.n_head_kv, d, 1, past, most + 5);
                    dec.use_rows(t);
                    check(dec, Kernel::decode, pool);
                    for (int64_t n_q : {3, 77}) {
                        AttnCase pre(rng, hh.n_head, hh.n_head_kv, d, n_q, past, most + n_q + 2);
                        pre.use_rows(t);
                        check(pre, Kernel::prefill, pool);
                    }
                }
    });
}

TEST(Attention, QuantizedRowsMatchReference) {
    each_prefill_path([&](const char *) {
        // q8_0 / q4_0 lanes (llama.cpp's KV cache types): the decode kernel
        // dequantizes in registers, prefill in L1; the reference dequantizes the
        // same bytes with the GGUF reference dequantizer, so the tolerance is the
        // f32 one (on the AMX tiles, f32's plus their bf16 split's, expect_close).
        // Head sizes of the register paths (64, 128) and of the generic
        // one (32, 96), GQA 1/3/7, uneven lanes, NaN rows past every lane's end.
        std::mt19937 rng(55);
        ThreadPool pool(2);
        for (cpu::RowType t : {cpu::RowType::q8_0, cpu::RowType::q4_0})
            for (Heads hh : k_heads)
                for (int64_t d : {64, 128, 32, 96}) {
                    std::vector<int64_t> past(static_cast<size_t>(hh.n_head_kv));
                    for (auto &p : past) p = static_cast<int64_t>(rng() % 300);
                    const int64_t most = *std::max_element(past.begin(), past.end());
                    AttnCase dec(rng, hh.n_head, hh.n_head_kv, d, 1, past, most + 5);
                    dec.use_rows(t);
                    check(dec, Kernel::decode, pool);
                    AttnCase pre(rng, hh.n_head, hh.n_head_kv, d, 29, past, most + 31);
                    pre.use_rows(t);
                    check(pre, Kernel::prefill, pool);
                }
    });
}

TEST(Attention, MixedKAndVRowTypesMatchReference) {
    each_prefill_path([&](const char *) {
        // K and V lanes of different types (llama.cpp's -ctk / -ctv): the
        // decode kernel takes Q.K over K's type (in integers for quantized K,
        // the reference rounding the query the same way) and PV over V's;
        // prefill widens each lane by its own type. Every pairing of the half
        // and quantized types, head sizes of the register paths and of the
        // generic one, GQA 1/3/7, uneven lanes, NaN rows past every lane's end.
        std::mt19937 rng(58);
        ThreadPool pool(2);
        const cpu::RowType half_q[] = {cpu::RowType::f16, cpu::RowType::bf16, cpu::RowType::q8_0,
                                       cpu::RowType::q4_0};
        int ci = 0;
        for (cpu::RowType tk : half_q)
            for (cpu::RowType tv : half_q) {
                if (tk == tv) continue;  // the uniform pairs: the tests above
                const Heads hh = k_heads[static_cast<size_t>(ci) % std::size(k_heads)];
                const int64_t d = ci % 3 == 2 ? 96 : ci % 2 ? 128 : 64;
                ++ci;
                std::vector<int64_t> past(static_cast<size_t>(hh.n_head_kv));
                for (auto &p : past) p = static_cast<int64_t>(rng() % 700);
                const int64_t most = *std::max_element(past.begin(), past.end());
                AttnCase dec(rng, hh.n_head, hh.n_head_kv, d, 1, past, most + 5);
                dec.use_rows({tk, tv});
                check(dec, Kernel::decode, pool);
                AttnCase pre(rng, hh.n_head, hh.n_head_kv, d, 37, past, most + 40);
                pre.use_rows({tk, tv});
                check(pre, Kernel::prefill, pool);
            }
    });
}

namespace {

// One sequence of a decode step: n_q = 1 over lanes whose visible lengths
// mix 1 row, block edges (63/64/65), a few hundred and a few thousand rows.
// Half of them hold a different row count per KV head (n_past_kv, one lane
// the longest), and lanes hold a few NaN rows past the visible ones.
AttnCase decode_seq(std::mt19937 &rng, int64_t n_head, int64_t n_head_kv, int64_t d, cpu::KvRowTypes t,
                    int64_t n_vis, int64_t misalign = 0) {
    const int64_t n_kv = n_vis + static_cast<int64_t>(rng() % 4);
    std::vector<int64_t> past(static_cast<size_t>(n_head_kv), n_vis - 1);
    const bool uneven = rng() % 2 == 0;
    if (uneven)
        for (size_t g = 1; g < past.size(); ++g) past[g] = static_cast<int64_t>(rng() % static_cast<uint64_t>(n_vis));
    std::shuffle(past.begin(), past.end(), rng);
    AttnCase c = uneven ? AttnCase(rng, n_head, n_head_kv, d, 1, past, n_kv, misalign)
                        : AttnCase(rng, n_head, n_head_kv, d, 1, n_vis - 1, n_kv, misalign);
    if (t != cpu::RowType::f32) c.use_rows(t);
    return c;
}

int64_t random_length(std::mt19937 &rng) {
    static const int64_t edges[] = {1, 2, 63, 64, 65, 129};
    const uint32_t u = rng() % 20;
    if (u < 3) return 1000 + static_cast<int64_t>(rng() % 2001);   // long: 1000 ..= 3000
    if (u < 9) return edges[rng() % 6];
    return 1 + static_cast<int64_t>(rng() % 400);
}

// attention_decode_multi over the cases (lse requested where with_lse[i]):
// every sequence's o and lse must be bit-identical to attention_decode on it
// alone with the same pool, and close to the reference.
void check_multi(const std::vector<AttnCase> &cases, const std::vector<bool> &with_lse, ThreadPool &pool,
                 bool vs_ref = true) {
    const size_t n = cases.size();
    std::vector<std::vector<float>> o(n), lse(n), o1(n), lse1(n);
    std::vector<cpu::AttnArgs> args;
    for (size_t i = 0; i < n; ++i) {
        const AttnCase &c = cases[i];
        o[i].assign(static_cast<size_t>(c.n_head * c.head_dim), NAN);
        o1[i] = o[i];
        lse[i].assign(static_cast<size_t>(c.n_head), NAN);
        lse1[i] = lse[i];
        args.push_back(c.args(o[i].data(), with_lse[i] ? lse[i].data() : nullptr));
    }
    cpu::attention_decode_multi(args.data(), static_cast<int64_t>(n), pool);
    for (size_t i = 0; i < n; ++i) {
        const AttnCase &c = cases[i];
        cpu::attention_decode(c.args(o1[i].data(), with_lse[i] ? lse1[i].data() : nullptr), pool);
        const std::string what = "sequence " + std::to_string(i) + " of " + std::to_string(n) + ": heads " +
                                 std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) +
                                 " d=" + std::to_string(c.head_dim) + " rows " +
                                 std::to_string(c.past[0] + 1) + " type " + cpu::row_type_name(c.kv_type) +
                                 " threads " + std::to_string(pool.n_threads());
        EXPECT_EQ(0, std::memcmp(o[i].data(), o1[i].data(), o[i].size() * sizeof(float))) << what;
        // Without lse requested, neither kernel writes it (both stay NaN, which memcmp compares as bits).
        EXPECT_EQ(0, std::memcmp(lse[i].data(), lse1[i].data(), lse[i].size() * sizeof(float))) << what;
        if (vs_ref) expect_close(c, "decode_multi", o[i], with_lse[i] ? lse[i].data() : nullptr, false, true);
    }
}

}  // namespace

TEST(Attention, DecodeMultiEqualsPerSequenceDecode) {
    // One call per shape: groups 1/3/7 over 1..3 KV heads, head dims 64 and
    // 128, f32/f16/bf16 rows, 1..18 sequences of mixed lengths (sequence 0
    // long in every other call, sequence 1 a single row); f32 lanes sometimes
    // misaligned (the generic loop). 1 and 2 threads: the chunk plans differ.
    std::mt19937 rng(55);
    const int64_t groups[] = {1, 3, 7}, dims[] = {64, 128};
    const cpu::RowType types[] = {cpu::RowType::f32, cpu::RowType::f16, cpu::RowType::bf16, cpu::RowType::q8_0,
                                   cpu::RowType::q4_0};
    for (int n_threads : {1, 2}) {
        ThreadPool pool(n_threads);
        int ci = 0;
        for (int64_t group : groups)
            for (int64_t d : dims)
                for (cpu::RowType t : types) {
                    const int64_t n_seq = 1 + (ci + 7 * n_threads) % 18, n_head_kv = 1 + ci % 3;
                    std::vector<AttnCase> cases;
                    std::vector<bool> with_lse;
                    for (int64_t i = 0; i < n_seq; ++i) {
                        const int64_t n_vis = i == 0 && ci % 2 == 0 ? 2500 + static_cast<int64_t>(rng() % 501)
                                              : i == 1             ? 1
                                                                   : random_length(rng);
                        const int64_t misalign = t == cpu::RowType::f32 && i % 4 == 3 ? 1 : 0;
                        cases.push_back(decode_seq(rng, group * n_head_kv, n_head_kv, d, t, n_vis, misalign));
                        with_lse.push_back(rng() % 4 != 0);
                    }
                    check_multi(cases, with_lse, pool);
                    ++ci;
                }
    }
}

TEST(Attention, DecodeMultiManyLongSequencesGroupChunks) {
    // Enough (sequence, KV head, chunk) units that a task takes several
    // consecutive chunks of one head (24 x 3 heads x ~6 chunks on 2 threads),
    // with lanes ending mid-block and after one row of the next chunk (the
    // prefetch of the next block stops at the lane's end): still the bits of
    // each sequence alone.
    std::mt19937 rng(57);
    ThreadPool pool(2);
    for (cpu::RowType t : {cpu::RowType::f16, cpu::RowType::q8_0, cpu::RowType::f32}) {
        std::vector<AttnCase> cases;
        std::vector<bool> with_lse;
        for (int64_t i = 0; i < 24; ++i) {
            const int64_t n_vis = i % 3 == 0 ? 641 : 300 + static_cast<int64_t>(rng() % 700);
            cases.push_back(decode_seq(rng, 9, 3, 64, t, n_vis));
            with_lse.push_back(i % 2 == 0);
        }
        check_multi(cases, with_lse, pool);
    }
}

TEST(Attention, DecodeMultiMixedShapesAndRepeatedCalls) {
    // Sequences of one call may differ in heads, head dim and row types (K
    // and V alike or not); calls of growing and shrinking sizes reuse the
    // scratch (a stale counter or partial region would show as a wrong
    // sequence). n_seq = 0 does nothing.
    std::mt19937 rng(56);
    ThreadPool pool(2);
    cpu::attention_decode_multi(nullptr, 0, pool);
    const Heads heads[] = {{9, 3}, {14, 2}, {7, 1}, {4, 4}};
    using cpu::RowType;
    const cpu::KvRowTypes types[] = {RowType::f32,
                                     RowType::f16,
                                     RowType::bf16,
                                     RowType::q8_0,
                                     RowType::q4_0,
                                     {RowType::q8_0, RowType::q4_0},
                                     {RowType::f16, RowType::q8_0},
                                     {RowType::q4_0, RowType::bf16}};
    for (int64_t n_seq : {17, 3, 1, 12, 17}) {
        std::vector<AttnCase> cases;
        std::vector<bool> with_lse;
        for (int64_t i = 0; i < n_seq; ++i) {
            const Heads hh = heads[rng() % 4];
            const int64_t d = rng() % 2 ? 64 : 128;
            cases.push_back(decode_seq(rng, hh.n_head, hh.n_head_kv, d, types[rng() % std::size(types)],
                                       random_length(rng)));
            with_lse.push_back(rng() % 2 != 0);
        }
        check_multi(cases, with_lse, pool);
    }
}

TEST(Attention, DecodeMultiManyThreads) {
    // More threads than this machine has cores: more chunks per sequence and
    // merges racing on other threads; still the per-sequence bits.
    std::mt19937 rng(57);
    for (int n_threads : {3, 5}) {
        ThreadPool pool(n_threads);
        for (int rep = 0; rep < 3; ++rep) {
            std::vector<AttnCase> cases;
            std::vector<bool> with_lse;
            for (int64_t i = 0; i < 16; ++i) {
                cases.push_back(decode_seq(rng, 9, 3, 64, cpu::RowType::f16, i == 0 ? 3000 : random_length(rng)));
                with_lse.push_back(true);
            }
            check_multi(cases, with_lse, pool, /*vs_ref=*/rep == 0);
        }
    }
}

namespace {

// A Λ mask over some of a case's KV heads, and K rows no query of a
// streaming head sees (past the sink, before the first query's window)
// poisoned with keys 8x larger: one of them read unmasked would dominate its
// row's softmax and move the output far past the tolerance.
struct LambdaCase {
    std::vector<uint8_t> heads;
    cpu::AttnLambda lambda;
    LambdaCase(AttnCase &c, std::mt19937 &rng, int64_t sink, int64_t recent, bool all_streaming = false) {
        for (int64_t g = 0; g < c.n_head_kv; ++g) heads.push_back(all_streaming || rng() % 3 != 0 ? 1 : 0);
        lambda.heads = heads.data();
        lambda.sink = sink;
        lambda.recent = recent;
        for (int64_t g = 0; g < c.n_head_kv; ++g) {
            if (!heads[static_cast<size_t>(g)]) continue;
            const int64_t hidden_end = c.past[static_cast<size_t>(g)] - recent + 1;  // the first query's window start
            for (int64_t j = sink; j < hidden_end; ++j)
                for (int64_t e = 0; e < c.head_dim; ++e) c.k[static_cast<size_t>(g)].p[j * c.head_dim + e] *= 8.0f;
        }
        c.lambda = &lambda;
    }
};

}  // namespace

// Streaming heads' Λ-shaped prefill (sink + a window up to each query) against
// the scalar reference with the same mask: windows shorter than a tile,
// crossing tiles and chunks, sinks of 0 / odd sizes / past the window, deep
// prefixes (the few-rows path), uneven lanes, GQA groups, half and quantized
// rows, and heads of one call mixing streaming and dense.
TEST(Attention, LambdaPrefillMatchesReference) {
    each_prefill_path([&](const char *) {
        std::mt19937 rng(61);
        ThreadPool pool(2);
        struct Shape {
            int64_t nh, nkv, d, nq, past, sink, recent;
        };
        const Shape shapes[] = {
            {4, 2, 64, 97, 0, 4, 16},      {14, 2, 64, 300, 0, 64, 256}, {9, 3, 36, 61, 700, 5, 1},
            {8, 2, 64, 130, 2100, 0, 100}, {8, 2, 32, 3, 3000, 64, 256}, {1, 1, 64, 1, 5000, 16, 70},
            {14, 2, 128, 40, 1500, 300, 64}, {4, 4, 64, 200, 1100, 1, 1030},
        };
        for (const Shape &sh : shapes) {
            AttnCase c(rng, sh.nh, sh.nkv, sh.d, sh.nq, sh.past, sh.past + sh.nq + 3);
            LambdaCase lc(c, rng, sh.sink, sh.recent);
            check(c, Kernel::prefill, pool);
        }
        // Uneven lanes (a compacted layer) and every row type.
        for (cpu::RowType t : {cpu::RowType::f16, cpu::RowType::bf16, cpu::RowType::q8_0, cpu::RowType::q4_0}) {
            AttnCase c(rng, 14, 2, 64, 77, std::vector<int64_t>{1300, 410}, 1400);
            LambdaCase lc(c, rng, 32, 128, /*all_streaming=*/true);
            c.use_rows(t);
            check(c, Kernel::prefill, pool);
        }
    });
}

// A window covering every row is dense attention, bit for bit; and the Λ
// prefill keeps the dense kernel's guarantee that a query's bits do not
// depend on how its prompt is cut into calls or on the thread count.
TEST(Attention, LambdaPrefillBitsAreDenseForAWideWindowAndIndependentOfTheCut) {
    std::mt19937 rng(62);
    ThreadPool pool2(2);
    {
        AttnCase c(rng, 14, 2, 64, 150, 900, 1050);
        const size_t n_o = static_cast<size_t>(c.n_q * c.n_head * c.head_dim), n_l = static_cast<size_t>(c.n_head * c.n_q);
        std::vector<float> o_dense(n_o, NAN), l_dense(n_l, NAN), o(n_o, NAN), l(n_l, NAN);
        cpu::attention_prefill(c.args(o_dense.data(), l_dense.data()), pool2);
        const uint8_t all[2] = {1, 1};
        for (auto [sink, recent] : {std::pair<int64_t, int64_t>{0, 1050}, {16, 1040}, {1050, 1}}) {
            cpu::AttnLambda lam{all, sink, recent};
            c.lambda = &lam;
            cpu::attention_prefill(c.args(o.data(), l.data()), pool2);
            EXPECT_EQ(0, std::memcmp(o.data(), o_dense.data(), n_o * sizeof(float))) << sink << "+" << recent;
            EXPECT_EQ(0, std::memcmp(l.data(), l_dense.data(), n_l * sizeof(float))) << sink << "+" << recent;
        }
    }
    for (int64_t pos0 : {0, 700, 2100}) {
        const int64_t n_q = 61;
        AttnCase c(rng, 9, 3, 64, n_q, pos0, pos0 + n_q);
        LambdaCase lc(c, rng, 8, 90);
        const size_t per_q = static_cast<size_t>(c.n_head * c.head_dim);
        std::vector<float> o_all(per_q * n_q, NAN), l_all(static_cast<size_t>(c.n_head * n_q), NAN);
        cpu::attention_prefill(c.args(o_all.data(), l_all.data()), pool2);
        for (int n_threads : {1, 3}) {
            ThreadPool pool(n_threads);
            std::vector<float> o(per_q * n_q, NAN), l(static_cast<size_t>(c.n_head * n_q), NAN);
            prefill_in_pieces(c, pos0, pool, [&](int64_t q0) {
                return std::min<int64_t>(n_q - q0, 1 + static_cast<int64_t>(rng() % 23));
            }, o, l);
            const std::string what = "past " + std::to_string(pos0) + ", " + std::to_string(n_threads) + " threads";
            EXPECT_EQ(0, std::memcmp(o.data(), o_all.data(), o.size() * sizeof(float))) << what;
            EXPECT_EQ(0, std::memcmp(l.data(), l_all.data(), l.size() * sizeof(float))) << what;
        }
        check(c, Kernel::prefill, pool2);
    }
}
