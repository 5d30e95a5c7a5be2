// Causal GQA prefill attention over contiguous per-KV-head lanes.
//
// FlashAttention-2 (Dao 2023, §3.1: queries outer, keys inner, online
// softmax), with the query rows laid along the SIMD lanes.
//
// Rows. The g = n_head / n_head_kv query heads that share a KV head are
// processed together: for KV head kvh the "rows" are (query i, head in group
// gi) in the order row = i * g + gi, so one K/V tile serves all of them and
// the causal limit grows monotonically with the row. A task is (KV head,
// block of k_rb consecutive rows); tasks are independent, so the result does
// not depend on the number of threads.
//
// Layout. Everything per row is a vector over the rows of the block:
//   qt[c][r]  the block's queries, transposed and pre-scaled      [d][k_rb]
//   s[j][r]   scores, then probabilities, of one key tile          [k_kt][k_rb]
//   ot[c][r]  unnormalized output accumulator                      [d][k_rb]
//   m[r], l[r] running max and sum of exp(s - m)
// so the softmax (max over keys, exp, sums, the rescale by exp(m_old - m_new))
// is vertical vector arithmetic with no horizontal reductions, and K and V
// are read in place: each element K[j][c] (V[j][c]) is broadcast and
// multiplied with a vector of rows.
//
// Micro-kernels (register blocks of accumulators):
//   S = Q K^T:  acc[k_jb keys][k_rv row vectors] += bcast(K[j][c]) * qt[c][rows]
//   O += P V:   acc[k_cb dims][k_rv row vectors] += bcast(V[j][c]) * s[j][rows]
//
// Causality. Row r (query i) of KV head g sees rows [0, n_past(g) + i] of its
// lane (AttnArgs::past: lanes may hold different row counts). A block walks key
// tiles up to the last key its last row sees; only tiles past the first row's
// limit (at most two per block) are masked, lane by lane.
//
// Key chunks. Every row takes its keys in fixed chunks of k_chunk keys from
// key 0 ([0, 1024), [1024, 2048), ...): each chunk gets its own online softmax
// (m_c, l_c, ot_c), and the chunks are folded left to right,
//   M = max(m, m_c),  l = l e^(m - M) + l_c e^(m_c - M),  ot = ot e^(m - M) + ot_c e^(m_c - M),
// so a row's result depends on its query, its keys and nothing else: not on
// which other queries share its chunk of the prompt, where that chunk starts,
// or the number of threads. A token therefore gets the same bits whether its
// prompt was prefilled in one call, in chunks of any size (continuous
// batching), or after a prefix mapped from the prefix cache. A chunk a row
// sees no key of (past its limit) leaves l_c = 0 and is skipped.
//
// Few rows, deep prefix (a short chunk after a long prompt): fewer than
// k_min_tasks (KV head, row block) tasks would leave a thread idle, so the
// chunks of a block run as tasks of their own and are folded afterwards, in
// the same order: the same bits, on every thread.
//
// Streaming heads (AttnArgs::lambda, a Λ-shaped mask): a row sees the
// lane's first `sink` keys and its last `recent` up to itself. Tiles and
// chunks that no row of a block sees are skipped, the tiles the window's
// lower edge (or the sink's end) crosses are masked from below as the
// causal edge is from above. A row that sees no key of a tile leaves it
// exactly as it found it, so skipping changes no bit: the result still
// depends on the row's query and visible keys only.
//
// lse = m + log l is the log of sum exp(scale * q.k) over visible keys.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <utility>
#include <vector>

#include "sieve/core/aligned.h"
#include "sieve/kernels/cpu/attention_args.h"
#include "sieve/kernels/cpu/ops.h"
#include "sieve/kernels/cpu/simd.h"

namespace sieve::cpu {

namespace {

// ---------------------------------------------------------------------------
// A minimal vector of W floats per ISA, plus the block sizes that fill its
// register file: k_jb * k_rv (and k_cb * k_rv) accumulators, leaving room for
// the k_rv row vectors and a broadcast.

#if defined(__AVX512F__)
constexpr int W = 16;
using V = __m512;
inline V vzero() { return _mm512_setzero_ps(); }
inline V vload(const float *p) { return _mm512_load_ps(p); }
inline void vstore(float *p, V x) { _mm512_store_ps(p, x); }
inline V vset1(float x) { return _mm512_set1_ps(x); }
inline V vfma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline V vmax(V a, V b) { return _mm512_max_ps(a, b); }
inline V vsub(V a, V b) { return _mm512_sub_ps(a, b); }
inline V vadd(V a, V b) { return _mm512_add_ps(a, b); }
inline V vmul(V a, V b) { return _mm512_mul_ps(a, b); }
inline V vexp_neg(V x) { return simd::exp_neg(x); }
// x where idx <= lim, -inf elsewhere.
inline V vmask_gt(V x, V idx, V lim) {
    return _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(idx, lim, _CMP_GT_OQ), _mm512_set1_ps(-INFINITY));
}
constexpr int k_rv = 3, k_jb = 8, k_cb = 8;
#elif defined(__AVX2__)
constexpr int W = 8;
using V = __m256;
inline V vzero() { return _mm256_setzero_ps(); }
inline V vload(const float *p) { return _mm256_load_ps(p); }
inline void vstore(float *p, V x) { _mm256_store_ps(p, x); }
inline V vset1(float x) { return _mm256_set1_ps(x); }
inline V vfma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V vmax(V a, V b) { return _mm256_max_ps(a, b); }
inline V vsub(V a, V b) { return _mm256_sub_ps(a, b); }
inline V vadd(V a, V b) { return _mm256_add_ps(a, b); }
inline V vmul(V a, V b) { return _mm256_mul_ps(a, b); }
inline V vexp_neg(V x) { return simd::exp_neg(x); }
inline V vmask_gt(V x, V idx, V lim) {
    return _mm256_blendv_ps(x, _mm256_set1_ps(-INFINITY), _mm256_cmp_ps(idx, lim, _CMP_GT_OQ));
}
constexpr int k_rv = 2, k_jb = 4, k_cb = 4;
#else
constexpr int W = 4;
struct V {
    float x[W];
};
inline V vmap2(V a, V b, float (*f)(float, float)) {
    V r;
    for (int i = 0; i < W; ++i) r.x[i] = f(a.x[i], b.x[i]);
    return r;
}
inline V vzero() { return V{}; }
inline V vload(const float *p) {
    V r;
    for (int i = 0; i < W; ++i) r.x[i] = p[i];
    return r;
}
inline void vstore(float *p, V a) {
    for (int i = 0; i < W; ++i) p[i] = a.x[i];
}
inline V vset1(float s) {
    V r;
    for (int i = 0; i < W; ++i) r.x[i] = s;
    return r;
}
inline V vfma(V a, V b, V c) {
    for (int i = 0; i < W; ++i) c.x[i] += a.x[i] * b.x[i];
    return c;
}
inline V vmax(V a, V b) { return vmap2(a, b, [](float p, float q) { return std::max(p, q); }); }
inline V vsub(V a, V b) { return vmap2(a, b, [](float p, float q) { return p - q; }); }
inline V vadd(V a, V b) { return vmap2(a, b, [](float p, float q) { return p + q; }); }
inline V vmul(V a, V b) { return vmap2(a, b, [](float p, float q) { return p * q; }); }
inline V vexp_neg(V a) {
    for (int i = 0; i < W; ++i) a.x[i] = std::exp(a.x[i]);
    return a;
}
inline V vmask_gt(V a, V idx, V lim) {
    for (int i = 0; i < W; ++i)
        if (idx.x[i] > lim.x[i]) a.x[i] = -INFINITY;
    return a;
}
constexpr int k_rv = 1, k_jb = 4, k_cb = 4;
#endif

constexpr int64_t k_rb = k_rv * W;  // rows per task
constexpr int64_t k_kt = 64;        // keys per tile

// s[jj][0..NV*W) = qt^T k_jj for NJ keys k (rows of a lane, stride d).
template <int NV, int NJ>
inline void qk_block(const float *qt, const float *k, int64_t d, float *s) {
    V acc[NJ][NV];
    for (int j = 0; j < NJ; ++j)
        for (int v = 0; v < NV; ++v) acc[j][v] = vzero();
    for (int64_t c = 0; c < d; ++c) {
        V q[NV];
        for (int v = 0; v < NV; ++v) q[v] = vload(qt + c * k_rb + v * W);
        for (int j = 0; j < NJ; ++j) {
            const V kb = vset1(k[j * d + c]);
            for (int v = 0; v < NV; ++v) acc[j][v] = vfma(kb, q[v], acc[j][v]);
        }
    }
    for (int j = 0; j < NJ; ++j)
        for (int v = 0; v < NV; ++v) vstore(s + j * k_rb + v * W, acc[j][v]);
}

// ot[c0 + cc][rows] = ot[c0 + cc][rows] * alpha + sum_j vrows[j][c0 + cc] * p[j][rows], cc < NC.
template <int NV, int NC>
inline void pv_block(float *ot, const V *alpha, const float *p, const float *vrows, int64_t nk, int64_t d) {
    V acc[NC][NV];
    for (int cc = 0; cc < NC; ++cc)
        for (int v = 0; v < NV; ++v) acc[cc][v] = vmul(vload(ot + cc * k_rb + v * W), alpha[v]);
    for (int64_t j = 0; j < nk; ++j) {
        V pj[NV];
        for (int v = 0; v < NV; ++v) pj[v] = vload(p + j * k_rb + v * W);
        for (int cc = 0; cc < NC; ++cc) {
            const V vb = vset1(vrows[j * d + cc]);
            for (int v = 0; v < NV; ++v) acc[cc][v] = vfma(vb, pj[v], acc[cc][v]);
        }
    }
    for (int cc = 0; cc < NC; ++cc)
        for (int v = 0; v < NV; ++v) vstore(ot + cc * k_rb + v * W, acc[cc][v]);
}

struct Block {
    float *qt, *ot, *s, *m, *l;
    float *rel;   // masked tiles: rel[r] = last key row r sees - k0, clamped to [-1, k_kt]
    float *relo;  // Λ-masked tiles: relo[r] = first key past the sink row r sees - k0, clamped to [0, k_kt]
};

// One key tile [k0, k0 + nk) for the NV row vectors of a block. causal:
// mask keys past each row's last (rel); keys jj >= lam0 of the tile are
// past a streaming head's sink and hidden below each row's window (relo);
// lam0 = nk: no Λ mask.
template <int NV>
void tile(const Block &b, const float *k, const float *v, int64_t k0, int64_t nk, int64_t d, bool causal,
          int64_t lam0) {
    int64_t j = 0;
    for (; j + k_jb <= nk; j += k_jb) qk_block<NV, k_jb>(b.qt, k + (k0 + j) * d, d, b.s + j * k_rb);
    for (; j < nk; ++j) qk_block<NV, 1>(b.qt, k + (k0 + j) * d, d, b.s + j * k_rb);
    V alpha[NV];
    for (int r = 0; r < NV; ++r) {
        float *s = b.s + r * W;
        if (causal) {
            // key k0 + jj is visible to a row iff jj <= rel (small integers, exact in f32)
            const V rel = vload(b.rel + r * W);
            for (int64_t jj = 0; jj < nk; ++jj)
                vstore(s + jj * k_rb, vmask_gt(vload(s + jj * k_rb), vset1(static_cast<float>(jj)), rel));
        }
        if (lam0 < nk) {
            // ... and, past the sink, iff jj >= relo. A row that sees no key
            // of the tile ends it as it began (alpha = 1, p = 0).
            const V relo = vload(b.relo + r * W);
            for (int64_t jj = lam0; jj < nk; ++jj)
                vstore(s + jj * k_rb, vmask_gt(vload(s + jj * k_rb), relo, vset1(static_cast<float>(jj))));
        }
        const V m_old = vload(b.m + r * W);
        // -FLT_MAX, not -inf, for a row that has seen no key yet (a chunk past
        // its limit): its p and alpha are then exp of -inf (0) or of 0 (1 times
        // zero accumulators), never exp(-inf + inf). A seen key's score is
        // finite, so this changes nothing for the rows that see one.
        V mx = vmax(m_old, vset1(-FLT_MAX));
        for (int64_t jj = 0; jj < nk; ++jj) mx = vmax(mx, vload(s + jj * k_rb));
        // on a row's first visible tile m_old <= -FLT_MAX and alpha = 0 (the accumulators are 0)
        alpha[r] = vexp_neg(vsub(m_old, mx));
        V sum = vzero();
        for (int64_t jj = 0; jj < nk; ++jj) {
            const V p = vexp_neg(vsub(vload(s + jj * k_rb), mx));
            vstore(s + jj * k_rb, p);
            sum = vadd(sum, p);
        }
        vstore(b.m + r * W, mx);
        vstore(b.l + r * W, vfma(vload(b.l + r * W), alpha[r], sum));
    }
    int64_t c = 0;
    for (; c + k_cb <= d; c += k_cb) pv_block<NV, k_cb>(b.ot + c * k_rb, alpha, b.s, v + k0 * d + c, nk, d);
    for (; c < d; c += 4) pv_block<NV, 4>(b.ot + c * k_rb, alpha, b.s, v + k0 * d + c, nk, d);
}

using TileFn = void (*)(const Block &, const float *, const float *, int64_t, int64_t, int64_t, bool, int64_t);

template <int... NV>
constexpr TileFn tile_fn(int nv, std::integer_sequence<int, NV...>) {
    TileFn fns[] = {tile<NV + 1>...};
    return fns[nv - 1];
}

// thread_local for the same reason as in matmul.cpp: persistent pool threads
// keep their buffers, which only grow, so steady-state calls do not allocate.
float *grow(AlignedBuffer<float> &b, int64_t n) {
    if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
    return b.data();
}
float *tile_scratch(int64_t n) {
    static thread_local AlignedBuffer<float> b;
    return grow(b, n);
}
float *split_scratch(int64_t n) {  // calling thread only
    static thread_local AlignedBuffer<float> b;
    return grow(b, n);
}

// Fewer tasks than this (a short chunk after a long prefix) run their key
// chunks as tasks of their own.
constexpr int64_t k_min_tasks = 8;
constexpr int64_t k_chunk = 16 * k_kt;  // keys per chunk (the fold's unit)

// Rows [r0, r0 + nr) of KV head kvh over keys [kb, ke): leaves (m, l, ot) in
// b. kb is a multiple of k_kt; a row that sees none of the keys ends with
// l = 0 and ot = 0.
// b.qt <- the queries of rows [r0, r0 + nr), transposed and scaled (pad rows:
// zero queries; never stored). Once per block: its chunks share it.
void pack_rows(const AttnArgs &a, const Block &b, int64_t kvh, int64_t r0, int64_t nr) {
    const int64_t d = a.head_dim, g = a.n_head / a.n_head_kv;
    for (int64_t r = 0; r < k_rb; ++r) {
        const int64_t row = r0 + std::min(r, nr - 1), i = row / g, h = kvh * g + row % g;
        const float *q = a.q + (i * a.n_head + h) * d;
        for (int64_t c = 0; c < d; ++c) b.qt[c * k_rb + r] = r < nr ? q[c] * a.scale : 0.0f;
    }
}

// A streaming head's window: row r of a block (query i = r / g) sees, past
// the sink, the keys from lim - recent + 1 on. Rows of a block see windows
// that start later the later the row.
bool lambda_head(const AttnArgs &a, int64_t kvh) { return a.lambda && a.lambda->streaming(kvh); }
int64_t window_start(const AttnArgs &a, int64_t kvh, int64_t row) {
    const int64_t g = a.n_head / a.n_head_kv;
    return a.past(kvh) + row / g - a.lambda->recent + 1;
}
// Keys [k0, k1) hidden from every row of the block at r0 (a streaming head:
// past the sink and before its first row's window).
bool hidden_from_block(const AttnArgs &a, int64_t kvh, int64_t r0, int64_t k0, int64_t k1) {
    return lambda_head(a, kvh) && k0 >= a.lambda->sink && k1 <= window_start(a, kvh, r0);
}

// Precondition: pack_rows() filled b.qt for these rows.
void run_rows(const AttnArgs &a, const Block &b, int64_t kvh, int64_t r0, int64_t nr, int64_t kb, int64_t ke) {
    const int64_t d = a.head_dim, g = a.n_head / a.n_head_kv;
    const bool lam = lambda_head(a, kvh);
    int64_t lim[k_rb], lo[k_rb];  // last key row r sees, first past the sink (pad rows: the last row's)
    for (int64_t r = 0; r < k_rb; ++r) {
        const int64_t row = r0 + std::min(r, nr - 1);
        lim[r] = a.past(kvh) + row / g;
        lo[r] = lam ? std::max(a.lambda->sink, window_start(a, kvh, row)) : 0;
        b.m[r] = -INFINITY;
        b.l[r] = 0.0f;
    }
    std::fill(b.ot, b.ot + d * k_rb, 0.0f);
    const int64_t first_lim = a.past(kvh) + r0 / g;
    const int64_t sink = lam ? a.lambda->sink : 0, last_lo = lo[k_rb - 1];
    const TileFn fn = tile_fn(static_cast<int>((nr + W - 1) / W), std::make_integer_sequence<int, k_rv>{});
    for (int64_t k0 = kb; k0 < ke; k0 += k_kt) {
        const int64_t nk = std::min(k_kt, ke - k0);
        if (hidden_from_block(a, kvh, r0, k0, k0 + nk)) continue;  // no row sees a key of it: a no-op
        const bool masked = k0 + nk - 1 > first_lim;
        if (masked)
            for (int64_t r = 0; r < k_rb; ++r) b.rel[r] = static_cast<float>(std::clamp<int64_t>(lim[r] - k0, -1, k_kt));
        // Λ: keys of the tile in [sink, lo[r]) are hidden from row r.
        int64_t lam0 = nk;
        if (lam && k0 + nk > sink && k0 < last_lo) {
            lam0 = std::max<int64_t>(0, sink - k0);
            for (int64_t r = 0; r < k_rb; ++r) b.relo[r] = static_cast<float>(std::clamp<int64_t>(lo[r] - k0, 0, k_kt));
        }
        fn(b, static_cast<const float *>(a.k[kvh]), static_cast<const float *>(a.v[kvh]), k0, nk, d, masked, lam0);
    }
}

// o and lse of rows [r0, r0 + nr) from their (m, l, ot).
void store_rows(const AttnArgs &a, int64_t kvh, int64_t r0, int64_t nr, const float *m, const float *l,
                const float *ot) {
    const int64_t d = a.head_dim, g = a.n_head / a.n_head_kv;
    for (int64_t r = 0; r < nr; ++r) {
        const int64_t row = r0 + r, i = row / g, h = kvh * g + row % g;
        float *out = a.o + (i * a.n_head + h) * d;
        const float inv = 1.0f / l[r];
        for (int64_t c = 0; c < d; ++c) out[c] = ot[c * k_rb + r] * inv;
        if (a.lse) a.lse[h * a.n_q + i] = m[r] + std::log(l[r]);
    }
}

// A row block's (ot, m, l) for one chunk of keys, or the fold of several.
struct Partial {
    float *ot, *m, *l;  // [d][k_rb], [k_rb], [k_rb]
};

// run <- run folded with the next chunk's partial, rows [0, nr). A partial
// with l = 0 (no key seen) changes nothing; into an empty run (l = 0) a
// partial is copied as it is, so one chunk gives exactly its own online
// softmax. The same code folds in both paths of attention_prefill(), in the
// same order: that is what makes the result independent of how rows are
// batched.
// Not inlined: both call sites must run the very same instructions.
__attribute__((noinline)) void fold(const Partial &run, const Partial &c, int64_t nr, int64_t d) {
    for (int64_t r = 0; r < nr; ++r) {
        if (c.l[r] == 0.0f) continue;
        if (run.l[r] == 0.0f) {
            run.m[r] = c.m[r];
            run.l[r] = c.l[r];
            for (int64_t e = 0; e < d; ++e) run.ot[e * k_rb + r] = c.ot[e * k_rb + r];
            continue;
        }
        const float mx = std::max(run.m[r], c.m[r]);
        const float wa = std::exp(run.m[r] - mx), wb = std::exp(c.m[r] - mx);
        run.m[r] = mx;
        run.l[r] = run.l[r] * wa + c.l[r] * wb;
        for (int64_t e = 0; e < d; ++e) run.ot[e * k_rb + r] = run.ot[e * k_rb + r] * wa + c.ot[e * k_rb + r] * wb;
    }
}

// f16 / bf16 lanes: every row the chunk sees is widened to f32 once per call,
// across the pool, then the f32 kernel runs on the copies. The tiles read
// each K/V element many times (once per row block), so widening once is far
// cheaper than widening per tile, and the extra pass (read 2 bytes, write 4 per
// element) is a few percent of a chunk's arithmetic at any depth.
void prefill_widened(const AttnArgs &a, ThreadPool &pool) {
    static thread_local AlignedBuffer<float> wide;  // calling thread only
    static thread_local std::vector<const void *> ptrs;
    const int64_t d = a.head_dim, n_kv = a.n_head_kv;
    static thread_local std::vector<int64_t> off;
    off.assign(static_cast<size_t>(n_kv + 1), 0);
    for (int64_t g = 0; g < n_kv; ++g)
        off[static_cast<size_t>(g + 1)] = off[static_cast<size_t>(g)] + (a.past(g) + a.n_q) * d;
    float *buf = grow(wide, 2 * off.back());
    ptrs.assign(static_cast<size_t>(2 * n_kv), nullptr);
    constexpr int64_t k_rows_per_task = 1024;
    static thread_local std::vector<std::pair<int64_t, int64_t>> tasks;  // (lane 0 .. 2 n_kv, first row)
    tasks.clear();
    for (int64_t l = 0; l < 2 * n_kv; ++l) {
        const int64_t g = l / 2;
        ptrs[static_cast<size_t>(l)] = buf + 2 * off[static_cast<size_t>(g)] + (l % 2) * (a.past(g) + a.n_q) * d;
        for (int64_t r = 0; r < a.past(g) + a.n_q; r += k_rows_per_task) tasks.emplace_back(l, r);
    }
    // The pool's threads see their own thread_local objects: hand them the
    // calling thread's by pointer.
    const std::pair<int64_t, int64_t> *task = tasks.data();
    const void *const *lane = ptrs.data();
    pool.run(static_cast<int64_t>(tasks.size()), [&, task, lane](int64_t t, int) {
        const auto [l, r0] = task[t];
        const int64_t g = l / 2, n = std::min(k_rows_per_task, a.past(g) + a.n_q - r0);
        const void *src = l % 2 ? a.v[g] : a.k[g];
        float *dst = const_cast<float *>(static_cast<const float *>(lane[l])) + r0 * d;
        const float *w = attn_rows_f32(a.kv_type, src, r0, n, d, dst);
        if (w != dst) std::copy(w, w + n * d, dst);
    });
    static thread_local std::vector<const void *> kp, vp;
    kp.resize(static_cast<size_t>(n_kv));
    vp.resize(static_cast<size_t>(n_kv));
    for (int64_t g = 0; g < n_kv; ++g) {
        kp[static_cast<size_t>(g)] = ptrs[static_cast<size_t>(2 * g)];
        vp[static_cast<size_t>(g)] = ptrs[static_cast<size_t>(2 * g + 1)];
    }
    AttnArgs f = a;
    f.k = kp.data();
    f.v = vp.data();
    f.kv_type = RowType::f32;
    attention_prefill(f, pool);
}

}  // namespace

void attention_prefill(const AttnArgs &a, ThreadPool &pool) {
    attn_check_args(a, "attention_prefill");
    if (a.kv_type != RowType::f32) return prefill_widened(a, pool);
    const int64_t d = a.head_dim, g = a.n_head / a.n_head_kv;
    const int64_t n_rows = a.n_q * g;  // per KV head
    const int64_t n_blocks = (n_rows + k_rb - 1) / k_rb, n_tasks = a.n_head_kv * n_blocks;
    const int64_t scratch = d * k_rb + k_kt * k_rb + 2 * k_rb;  // qt, s, rel, relo
    const int64_t slot = (d + 2) * k_rb;                    // a partial: ot, m, l
    const auto block_of = [&](int64_t t, int64_t *kvh, int64_t *r0, int64_t *nr) {
        // One KV head after another, so both threads stream the same K/V lane
        // while it is in cache (Llama-1B's 8 heads x 4.4 MB at depth 8192 do
        // not fit L3 together: 20% faster than interleaving the heads); within
        // a head, blocks late in the sequence see the most keys: hand them out
        // first so the short ones fill the gaps at the end.
        *kvh = t / n_blocks;
        *r0 = (n_blocks - 1 - t % n_blocks) * k_rb;
        *nr = std::min(k_rb, n_rows - *r0);
    };
    // Keys [0, end) of block t: up to its last row's limit.
    const auto keys_end = [&](int64_t kvh, int64_t r0, int64_t nr) { return a.past(kvh) + (r0 + nr - 1) / g + 1; };
    const auto partial = [&](float *p) { return Partial{p, p + d * k_rb, p + d * k_rb + k_rb}; };
    int64_t n_chunks = 1;  // the most any block has
    for (int64_t kvh = 0; kvh < a.n_head_kv; ++kvh)
        n_chunks = std::max(n_chunks, (keys_end(kvh, (n_blocks - 1) * k_rb, n_rows - (n_blocks - 1) * k_rb) +
                                       k_chunk - 1) / k_chunk);
    if (n_tasks >= k_min_tasks || n_chunks == 1) {
        // Each task computes its block's chunks one after another and folds
        // them as it goes.
        pool.run(n_tasks, [&](int64_t t, int) {
            int64_t kvh, r0, nr;
            block_of(t, &kvh, &r0, &nr);
            float *buf = tile_scratch(scratch + 2 * slot);
            const Partial run = partial(buf + scratch), part = partial(buf + scratch + slot);
            const Block b{buf, part.ot, buf + d * k_rb, part.m, part.l, buf + d * k_rb + k_kt * k_rb,
                          buf + d * k_rb + k_kt * k_rb + k_rb};
            const int64_t end = keys_end(kvh, r0, nr);
            std::fill(run.l, run.l + k_rb, 0.0f);
            pack_rows(a, b, kvh, r0, nr);
            for (int64_t kb = 0; kb < end; kb += k_chunk) {
                const int64_t ke = std::min(end, kb + k_chunk);
                if (hidden_from_block(a, kvh, r0, kb, ke)) continue;  // l = 0: the fold would skip it
                run_rows(a, b, kvh, r0, nr, kb, ke);
                fold(run, part, nr, d);
            }
            store_rows(a, kvh, r0, nr, run.m, run.l, run.ot);
        });
        return;
    }
    // Flash-decoding style: chunk c of block t leaves its partial in its slot;
    // a second pass folds a block's chunks in order.
    float *parts = split_scratch(n_tasks * n_chunks * slot);
    pool.run(n_tasks * n_chunks, [&](int64_t task, int) {
        const int64_t t = task / n_chunks, c = task % n_chunks;
        int64_t kvh, r0, nr;
        block_of(t, &kvh, &r0, &nr);
        const int64_t end = keys_end(kvh, r0, nr), kb = c * k_chunk;
        const Partial part = partial(parts + task * slot);
        if (kb >= end || hidden_from_block(a, kvh, r0, kb, std::min(end, kb + k_chunk))) {
            // past the block's keys, or hidden from all its rows: an empty partial
            std::fill(part.l, part.l + k_rb, 0.0f);
            return;
        }
        float *buf = tile_scratch(scratch);
        const Block b{buf, part.ot, buf + d * k_rb, part.m, part.l, buf + d * k_rb + k_kt * k_rb,
                      buf + d * k_rb + k_kt * k_rb + k_rb};
        pack_rows(a, b, kvh, r0, nr);
        run_rows(a, b, kvh, r0, nr, kb, std::min(end, kb + k_chunk));
    });
    pool.run(n_tasks, [&](int64_t t, int) {
        int64_t kvh, r0, nr;
        block_of(t, &kvh, &r0, &nr);
        const Partial run = partial(parts + t * n_chunks * slot);  // folded in place into chunk 0
        for (int64_t c = 1; c < n_chunks; ++c) fold(run, partial(parts + (t * n_chunks + c) * slot), nr, d);
        store_rows(a, kvh, r0, nr, run.m, run.l, run.ot);
    });
}

}  // namespace sieve::cpu
