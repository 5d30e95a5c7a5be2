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
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <utility>
#include <vector>

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__) && defined(__AVX512BW__)
#define SIEVE_AMX 1
#include <cpuid.h>
#else
#define SIEVE_AMX 0
#endif

#include "sieve/core/aligned.h"
#include "sieve/kernels/cpu/amx.h"
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
    uint16_t *qb = nullptr, *pb = nullptr;  // AMX only: bf16 hi/lo pairs of the queries and of P
};

// The lanes of one KV head as the f32 tiles read them.
struct F32Lanes {
    const float *k, *v;
};

// One key tile [k0, k0 + nk) for the NV row vectors of a block. causal:
// mask keys past each row's last (rel); keys jj >= lam0 of the tile are
// past a streaming head's sink and hidden below each row's window (relo);
// lam0 = nk: no Λ mask.
// The masks and the online softmax of a tile whose scores s[jj][r] (jj < nk)
// are in place: s becomes the probabilities, m and l move on, alpha[r] is
// the factor the accumulators of row vector r are rescaled by.
template <int NV>
inline void softmax_tile(const Block &b, int64_t nk, bool causal, int64_t lam0, V *alpha) {
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
}

template <int NV>
void tile(const Block &b, const F32Lanes &lanes, int64_t k0, int64_t nk, int64_t d, bool causal, int64_t lam0) {
    const float *k = lanes.k, *v = lanes.v;
    int64_t j = 0;
    for (; j + k_jb <= nk; j += k_jb) qk_block<NV, k_jb>(b.qt, k + (k0 + j) * d, d, b.s + j * k_rb);
    for (; j < nk; ++j) qk_block<NV, 1>(b.qt, k + (k0 + j) * d, d, b.s + j * k_rb);
    V alpha[NV];
    softmax_tile<NV>(b, nk, causal, lam0, alpha);
    int64_t c = 0;
    for (; c + k_cb <= d; c += k_cb) pv_block<NV, k_cb>(b.ot + c * k_rb, alpha, b.s, v + k0 * d + c, nk, d);
    for (; c < d; c += 4) pv_block<NV, 4>(b.ot + c * k_rb, alpha, b.s, v + k0 * d + c, nk, d);
}

template <class Lanes>
using TileFn = void (*)(const Block &, const Lanes &, int64_t, int64_t, int64_t, bool, int64_t);

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

// The walk of rows [r0, r0 + nr) of KV head kvh over key tiles: begin()
// starts a chunk's online softmax (m, l, ot in b), step(k0, ke) takes the
// tile at k0 of a chunk that ends at ke. Precondition: the kernel's pack()
// filled the block's queries for these rows.
template <class Kern>
struct RowWalk {
    const AttnArgs &a;
    const Kern &kern;
    const Block &b;
    int64_t kvh, r0, nr;
    bool lam;
    int64_t lim[k_rb], lo[k_rb];  // last key row r sees, first past the sink (pad rows: the last row's)
    int64_t first_lim, sink, last_lo;
    decltype(kern.tile_fn(1)) fn;
    decltype(kern.lanes(0)) lanes;

    RowWalk(const AttnArgs &args, const Kern &k, const Block &blk, int64_t head, int64_t row0, int64_t rows)
        : a(args), kern(k), b(blk), kvh(head), r0(row0), nr(rows), lam(lambda_head(args, head)) {
        const int64_t g = a.n_head / a.n_head_kv;
        for (int64_t r = 0; r < k_rb; ++r) {
            const int64_t row = r0 + std::min(r, nr - 1);
            lim[r] = a.past(kvh) + row / g;
            lo[r] = lam ? std::max(a.lambda->sink, window_start(a, kvh, row)) : 0;
        }
        first_lim = a.past(kvh) + r0 / g;
        sink = lam ? a.lambda->sink : 0;
        last_lo = lo[k_rb - 1];
        fn = kern.tile_fn(static_cast<int>((nr + W - 1) / W));
        lanes = kern.lanes(kvh);
    }
    void begin() const {
        std::fill(b.m, b.m + k_rb, -INFINITY);
        std::fill(b.l, b.l + k_rb, 0.0f);
        std::fill(b.ot, b.ot + kern.ot_rows * k_rb, 0.0f);
    }
    void step(int64_t k0, int64_t ke) const {
        const int64_t nk = std::min(k_kt, ke - k0);
        if (hidden_from_block(a, kvh, r0, k0, k0 + nk)) return;  // no row sees a key of it: a no-op
        const bool masked = k0 + nk - 1 > first_lim;
        if (masked)
            for (int64_t r = 0; r < k_rb; ++r) b.rel[r] = static_cast<float>(std::clamp<int64_t>(lim[r] - k0, -1, k_kt));
        // Λ: keys of the tile in [sink, lo[r]) are hidden from row r.
        int64_t lam0 = nk;
        if (lam && k0 + nk > sink && k0 < last_lo) {
            lam0 = std::max<int64_t>(0, sink - k0);
            for (int64_t r = 0; r < k_rb; ++r) b.relo[r] = static_cast<float>(std::clamp<int64_t>(lo[r] - k0, 0, k_kt));
        }
        fn(b, lanes, k0, nk, a.head_dim, masked, lam0);
    }
};

// Keys [kb, ke) for one block: leaves its (m, l, ot) in b.
template <class Kern>
void run_rows(const AttnArgs &a, const Kern &kern, const Block &b, int64_t kvh, int64_t r0, int64_t nr, int64_t kb,
              int64_t ke) {
    const RowWalk<Kern> w(a, kern, b, kvh, r0, nr);
    w.begin();
    for (int64_t k0 = kb; k0 < ke; k0 += k_kt) w.step(k0, ke);
}

// The f32 tiles: FMA micro-kernels over f32 lanes.
struct F32Kernel {
    const AttnArgs &a;
    int64_t ot_rows;  // rows of ot a block accumulates (head_dim)
    static constexpr int64_t extra_scratch = 0, qb_floats = 0;
    static constexpr int64_t blocks_per_task = 1;
    struct Scope {};  // per task: nothing to set up
    explicit F32Kernel(const AttnArgs &args) : a(args), ot_rows(args.head_dim) {}
    F32Lanes lanes(int64_t kvh) const {
        return {static_cast<const float *>(a.k[kvh]), static_cast<const float *>(a.v[kvh])};
    }
    template <int... NV>
    static TileFn<F32Lanes> pick(int nv, std::integer_sequence<int, NV...>) {
        TileFn<F32Lanes> fns[] = {tile<NV + 1>...};
        return fns[nv - 1];
    }
    TileFn<F32Lanes> tile_fn(int nv) const { return pick(nv, std::make_integer_sequence<int, k_rv>{}); }
    void pack(const Block &b, int64_t kvh, int64_t r0, int64_t nr) const { pack_rows(a, b, kvh, r0, nr); }
};

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
        const float *w = attn_rows_f32(l % 2 ? a.kv_type.v : a.kv_type.k, src, r0, n, d, dst);
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

// The task structure of a prefill call over the kernel's tiles.
template <class Kern>
void prefill_tasks(const AttnArgs &a, const Kern &kern, ThreadPool &pool) {
    const int64_t d = a.head_dim, g = a.n_head / a.n_head_kv;
    const int64_t n_rows = a.n_q * g;  // per KV head
    const int64_t n_blocks = (n_rows + k_rb - 1) / k_rb, n_tasks = a.n_head_kv * n_blocks;
    const int64_t scratch = d * k_rb + k_kt * k_rb + 2 * k_rb + kern.extra_scratch;  // qt, s, rel, relo, kernel's
    const int64_t dot = kern.ot_rows;                                               // rows of ot (>= d)
    const int64_t slot = (dot + 2) * k_rb;                                          // a partial: ot, m, l
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
    const auto partial = [&](float *p) { return Partial{p, p + dot * k_rb, p + dot * k_rb + k_rb}; };
    // A block's scratch: qt [d][k_rb], s [k_kt][k_rb], rel, relo, then the
    // kernel's bf16 pairs (queries, then P); its m, l and ot are a partial's.
    const auto block_at = [&](float *buf, const Partial &part) {
        float *extra = buf + d * k_rb + k_kt * k_rb + 2 * k_rb;
        return Block{buf,
                     part.ot,
                     buf + d * k_rb,
                     part.m,
                     part.l,
                     buf + d * k_rb + k_kt * k_rb,
                     buf + d * k_rb + k_kt * k_rb + k_rb,
                     reinterpret_cast<uint16_t *>(extra),
                     reinterpret_cast<uint16_t *>(extra + kern.qb_floats)};
    };
    int64_t n_chunks = 1;  // the most any block has
    for (int64_t kvh = 0; kvh < a.n_head_kv; ++kvh)
        n_chunks = std::max(n_chunks, (keys_end(kvh, (n_blocks - 1) * k_rb, n_rows - (n_blocks - 1) * k_rb) +
                                       k_chunk - 1) / k_chunk);
    if (n_tasks >= k_min_tasks || n_chunks == 1) {
        // Each task takes R adjacent blocks of one KV head and computes their
        // chunks one after another, folding as it goes; the blocks of a task
        // take each key tile in turn. A block's tiles, chunks and folds are
        // its own, in the same order whatever R: the same bits.
        constexpr int64_t R = Kern::blocks_per_task;
        const int64_t n_units = (n_blocks + R - 1) / R;
        pool.run(a.n_head_kv * n_units, [&](int64_t u, int) {
            float *buf = tile_scratch(R * (scratch + 2 * slot));
            [[maybe_unused]] const typename Kern::Scope scope;
            struct Rows {
                int64_t r0, nr, end;
                Partial run, part;
            };
            Rows rows[R];
            std::optional<Block> blocks[R];
            std::optional<RowWalk<Kern>> walks[R];
            const int64_t first = (u / n_units) * n_blocks + (u % n_units) * R;
            const int64_t nb = std::min(R, (u / n_units + 1) * n_blocks - first);
            int64_t kvh = 0, end = 0;
            for (int64_t i = 0; i < nb; ++i) {
                Rows &w = rows[i];
                block_of(first + i, &kvh, &w.r0, &w.nr);
                float *p = buf + i * (scratch + 2 * slot);
                w.run = partial(p + scratch);
                w.part = partial(p + scratch + slot);
                w.end = keys_end(kvh, w.r0, w.nr);
                end = std::max(end, w.end);
                blocks[i].emplace(block_at(p, w.part));
                std::fill(w.run.l, w.run.l + k_rb, 0.0f);
                kern.pack(*blocks[i], kvh, w.r0, w.nr);
                walks[i].emplace(a, kern, *blocks[i], kvh, w.r0, w.nr);
            }
            for (int64_t kb = 0; kb < end; kb += k_chunk) {
                bool on[R] = {};
                for (int64_t i = 0; i < nb; ++i) {
                    const int64_t ke = std::min(rows[i].end, kb + k_chunk);
                    // l = 0 for a chunk past the block or hidden from it: the fold would skip it
                    on[i] = kb < rows[i].end && !hidden_from_block(a, kvh, rows[i].r0, kb, ke);
                    if (on[i]) walks[i]->begin();
                }
                for (int64_t k0 = kb; k0 < std::min(end, kb + k_chunk); k0 += k_kt)
                    for (int64_t i = 0; i < nb; ++i) {
                        const int64_t ke = std::min(rows[i].end, kb + k_chunk);
                        if (on[i] && k0 < ke) walks[i]->step(k0, ke);
                    }
                for (int64_t i = 0; i < nb; ++i)
                    if (on[i]) fold(rows[i].run, rows[i].part, rows[i].nr, d);
            }
            for (int64_t i = 0; i < nb; ++i) store_rows(a, kvh, rows[i].r0, rows[i].nr, rows[i].run.m, rows[i].run.l, rows[i].run.ot);
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
        const Block b = block_at(buf, part);
        [[maybe_unused]] const typename Kern::Scope scope;
        kern.pack(b, kvh, r0, nr);
        run_rows(a, kern, b, kvh, r0, nr, kb, std::min(end, kb + k_chunk));
    });
    pool.run(n_tasks, [&](int64_t t, int) {
        int64_t kvh, r0, nr;
        block_of(t, &kvh, &r0, &nr);
        const Partial run = partial(parts + t * n_chunks * slot);  // folded in place into chunk 0
        for (int64_t c = 1; c < n_chunks; ++c) fold(run, partial(parts + (t * n_chunks + c) * slot), nr, d);
        store_rows(a, kvh, r0, nr, run.m, run.l, run.ot);
    });
}


#if SIEVE_AMX
// ---------------------------------------------------------------------------
// AMX tiles (Intel AMX-BF16) for the two products, the softmax as above.
//
// Both products are taken transposed so that their results land in the
// layout the softmax reads: S^T = K Q^T gives s[j][r] (a C tile of 16 keys
// x 16 rows), O^T += V^T P gives ot[c][r] (16 channels x 16 rows). A tile
// product C[m][n] += sum_p A[m][2p] B[p][2n] + A[m][2p+1] B[p][2n+1] takes
// A as 16 rows of 32 bf16 (K rows over 32 channels; V^T rows over 32 keys)
// and B as 16 rows of 16 bf16 pairs (the block's queries in channel pairs;
// P in key pairs), so the lanes are packed once per call, K as it is and V
// transposed, and the queries once per block, P once per tile. The lanes are
// packed tile-major: every A tile is 1 KB of consecutive memory, and the
// tiles of one key tile (64 keys) follow each other in the order the
// products read them, so a block's walk over the keys is one stream.
//
// bf16 keeps 8 bits of mantissa where an f16 row holds 11: every operand is
// split x = hi + lo (hi = bf16(x), lo = bf16(x - hi); exact for f16 and bf16
// rows, within 2^-16 of x for f32 values and dequantized q8_0 / q4_0 rows),
// and a product is a sum of tile products of the parts, each accumulated in
// f32 by the tile unit. The scores take all four (hi*hi + hi*lo + lo*hi +
// lo*lo), so a score is within about 2^-16 sum_c |q_c k_c| of its f32 value;
// dropping lo*lo there let a stories260K logit move by a quarter of what the
// f16 rounding of its KV cache moves it (tests/model), with it by a twentieth.
// The output takes three (lo*lo of P and V measured no better), so a
// probability's share of it is within about 2^-15 of itself.
//
// A row's bits still depend on its query and visible keys only: a C tile's
// element (key, row) is one dot product of that row and that key, pad rows
// and pad channels are zeros, keys a tile holds past its end get p = 0, and
// the key tiles sit at the f32 kernel's fixed positions.
//
// Tile registers: tmm0-2 accumulate the row vectors (16 rows each) of a
// block; tmm3/4 hold A's hi/lo, tmm5/6 B's.

constexpr bool k_qk_lolo = true, k_pv_lolo = false;
constexpr int64_t k_pairs = 16 * 32;  // bf16 of one B tile: 16 pairs x 16 rows x 2

// One KV head's lanes as A tiles (bf16, zero past the lane's rows and past
// head_dim), for a multiple of k_kt rows, ncb = ceil(d / 32) channel blocks
// and ncg = ceil(d / 16) channel groups:
//   k[key / 16][channel / 32][hi, lo][key % 16][channel % 32]
//   v[key / 64][channel / 16][(key % 64) / 32][hi, lo][channel % 16][key % 32]
struct AmxLanes {
    const uint16_t *k, *v;
    int64_t ncb, ncg;
};
constexpr int64_t k_tile = 16 * 32;  // bf16 of one A tile (16 rows of 64 bytes)
inline int64_t amx_k_at(const AmxLanes &L, int64_t key, int64_t c) {
    return ((key / 16 * L.ncb + c / 32) * 2) * k_tile + key % 16 * 32 + c % 32;
}
inline int64_t amx_v_at(const AmxLanes &L, int64_t key, int64_t c) {
    return (((key / 64 * L.ncg + c / 16) * 2 + key % 64 / 32) * 2) * k_tile + c % 16 * 32 + key % 32;
}

// Every tile 16 rows of 64 bytes; loaded per task, released after it.
struct AmxScope {
    AmxScope() {
        amx::TileConfig c;
        for (int i = 0; i < 8; ++i) c.set(i, 16, 64);
        amx::load_config(c);
    }
    ~AmxScope() { amx::release(); }
    AmxScope(const AmxScope &) = delete;
    AmxScope &operator=(const AmxScope &) = delete;
};

// hi = bf16(x) widened back to f32.
inline __m512 bf16_widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
inline __m256i bf16_round(__m512 x) { return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x)); }

// 16 values of x (the even member of each pair) and of y (the odd one) as
// 16 interleaved pairs [x0 y0 x1 y1 ...] of bf16, hi and lo parts.
inline void pack_pairs(__m512 x, __m512 y, uint16_t *hi, uint16_t *lo) {
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i h = _mm512_permutexvar_epi16(idx, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(y, x)));
    const __m512 hx = _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
    const __m512 hy = _mm512_castsi512_ps(_mm512_and_si512(h, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
    const __m512i l = _mm512_permutexvar_epi16(
        idx, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(_mm512_sub_ps(y, hy), _mm512_sub_ps(x, hx))));
    _mm512_storeu_si512(hi, h);
    _mm512_storeu_si512(lo, l);
}

// B tiles from rows of k_rb floats (qt's channels, s's keys): rows [0, n)
// of src, zero up to n_pad (a multiple of 32), for row vectors r < nv, as
// [j / 32][r][(j % 32) / 2][row][j % 2] in hi and in lo.
inline void pack_b_tiles(const float *src, int64_t n, int64_t n_pad, int nv, uint16_t *hi, uint16_t *lo) {
    for (int64_t j = 0; j < n_pad; j += 2)
        for (int r = 0; r < nv; ++r) {
            const V x = j < n ? vload(src + j * k_rb + r * W) : vzero();
            const V y = j + 1 < n ? vload(src + (j + 1) * k_rb + r * W) : vzero();
            const int64_t at = ((j / 32) * 3 + r) * k_pairs + (j % 32) / 2 * 32;
            pack_pairs(x, y, hi + at, lo + at);
        }
}

// C(tmm ACC) += A(3, 4) * B: B's hi and lo from bh / bl (one B tile each),
// the lo * lo product too when LOLO. GCC's tile intrinsics paste their
// register numbers into the assembly, so they take literals, not template
// arguments.
#define SIEVE_DP(ACC, bh, bl)                           \
    do {                                                \
        _tile_loadd(5, (bh), 64);                       \
        _tile_loadd(6, (bl), 64);                       \
        _tile_dpbf16ps(ACC, 3, 5);                      \
        _tile_dpbf16ps(ACC, 3, 6);                      \
        _tile_dpbf16ps(ACC, 4, 5);                      \
        if constexpr (LOLO) _tile_dpbf16ps(ACC, 4, 6); \
    } while (0)
template <int NV, bool LOLO>
inline void dp_rows(const uint16_t *bh, const uint16_t *bl) {
    SIEVE_DP(0, bh, bl);
    if constexpr (NV > 1) SIEVE_DP(1, bh + k_pairs, bl + k_pairs);
    if constexpr (NV > 2) SIEVE_DP(2, bh + 2 * k_pairs, bl + 2 * k_pairs);
}
#undef SIEVE_DP
template <int NV>
inline void tiles_zero() {
    _tile_zero(0);
    if constexpr (NV > 1) _tile_zero(1);
    if constexpr (NV > 2) _tile_zero(2);
}
template <int NV>
inline void tiles_load(const float *p) {
    _tile_loadd(0, p, k_rb * 4);
    if constexpr (NV > 1) _tile_loadd(1, p + W, k_rb * 4);
    if constexpr (NV > 2) _tile_loadd(2, p + 2 * W, k_rb * 4);
}
template <int NV>
inline void tiles_store(float *p) {
    _tile_stored(0, p, k_rb * 4);
    if constexpr (NV > 1) _tile_stored(1, p + W, k_rb * 4);
    if constexpr (NV > 2) _tile_stored(2, p + 2 * W, k_rb * 4);
}

template <int NV>
void tile_amx(const Block &b, const AmxLanes &L, int64_t k0, int64_t nk, int64_t d, bool causal, int64_t lam0) {
    static_assert(W == 16 && k_rv == 3, "AMX tiles take the rows of a block 16 at a time");
    // S^T = K Q^T, 16 keys at a time (keys past nk: scores the softmax never reads)
    const int64_t ncb = L.ncb;
    for (int64_t j = 0; j < nk; j += 16) {
        tiles_zero<NV>();
        const uint16_t *kt = L.k + amx_k_at(L, k0 + j, 0);
        for (int64_t cb = 0; cb < ncb; ++cb, kt += 2 * k_tile) {
            _tile_loadd(3, kt, 64);
            _tile_loadd(4, kt + k_tile, 64);
            dp_rows<NV, k_qk_lolo>(b.qb + cb * 3 * k_pairs, b.qb + (ncb + cb) * 3 * k_pairs);
        }
        tiles_store<NV>(b.s + j * k_rb);
    }
    V alpha[NV];
    softmax_tile<NV>(b, nk, causal, lam0, alpha);
    // P in key pairs, zero past nk; 32 keys (one B tile per row vector) at a time
    const int64_t nkp = (nk + 31) / 32 * 32;
    uint16_t *ph = b.pb, *pl = b.pb + (k_kt / 32) * 3 * k_pairs;
    pack_b_tiles(b.s, nk, nkp, NV, ph, pl);
    // O^T = O^T alpha + V^T P, 16 channels at a time
    for (int64_t c = 0; c < 16 * L.ncg; c += 16) {
        float *o = b.ot + c * k_rb;
        for (int64_t cc = 0; cc < 16; ++cc)
            for (int r = 0; r < NV; ++r) vstore(o + cc * k_rb + r * W, vmul(vload(o + cc * k_rb + r * W), alpha[r]));
        tiles_load<NV>(o);
        const uint16_t *vt = L.v + amx_v_at(L, k0, c);
        for (int64_t j = 0; j < nkp; j += 32, vt += 2 * k_tile) {
            _tile_loadd(3, vt, 64);
            _tile_loadd(4, vt + k_tile, 64);
            dp_rows<NV, k_pv_lolo>(ph + (j / 32) * 3 * k_pairs, pl + (j / 32) * 3 * k_pairs);
        }
        tiles_store<NV>(o);
    }
}

struct AmxKernel {
    const AttnArgs &a;
    const AmxLanes *lane;  // [n_head_kv]
    int64_t dp, ot_rows, qb_floats, extra_scratch;
    // Two blocks walk the keys side by side, so each tile of the packed
    // lanes is read from memory once for 96 rows, and from cache the second
    // time: the tile products outrun the L3 stream of a long lane otherwise.
    static constexpr int64_t blocks_per_task = 2;
    using Scope = AmxScope;
    AmxKernel(const AttnArgs &args, const AmxLanes *lanes)
        : a(args),
          lane(lanes),
          dp((args.head_dim + 31) / 32 * 32),
          ot_rows((args.head_dim + 15) / 16 * 16),
          qb_floats(dp * k_rb),              // hi and lo pairs of the queries: 2 x dp x k_rb bf16
          extra_scratch(dp * k_rb + k_kt * k_rb) {}  // ... and of P: 2 x k_kt x k_rb bf16
    AmxLanes lanes(int64_t kvh) const { return lane[kvh]; }
    template <int... NV>
    static TileFn<AmxLanes> pick(int nv, std::integer_sequence<int, NV...>) {
        TileFn<AmxLanes> fns[] = {tile_amx<NV + 1>...};
        return fns[nv - 1];
    }
    TileFn<AmxLanes> tile_fn(int nv) const { return pick(nv, std::make_integer_sequence<int, k_rv>{}); }
    // qt as for the f32 tiles, then its channel pairs per row vector:
    // qb[half][c / 32][r][(c % 32) / 2][row][c % 2], half 0 = hi, 1 = lo.
    void pack(const Block &b, int64_t kvh, int64_t r0, int64_t nr) const {
        pack_rows(a, b, kvh, r0, nr);
        pack_b_tiles(b.qt, a.head_dim, dp, k_rv, b.qb, b.qb + (dp / 32) * 3 * k_pairs);
    }
};

// The lanes of the call as bf16 hi/lo A tiles (AmxLanes), packed across the
// pool in tasks of up to 1024 rows, then the AMX tiles.
void prefill_amx(const AttnArgs &a, ThreadPool &pool) {
    static thread_local AlignedBuffer<uint16_t> packed;  // calling thread only
    static thread_local std::vector<AmxLanes> lanes;
    static thread_local std::vector<std::pair<int64_t, int64_t>> tasks;  // (KV head, first row)
    const int64_t d = a.head_dim, n_kv = a.n_head_kv, ncb = (d + 31) / 32, ncg = (d + 15) / 16;
    constexpr int64_t k_rows_per_task = 1024;  // a multiple of k_kt
    const auto rows_of = [&](int64_t g) { return (a.past(g) + a.n_q + k_kt - 1) / k_kt * k_kt; };
    std::vector<int64_t> off(static_cast<size_t>(n_kv + 1), 0);
    for (int64_t g = 0; g < n_kv; ++g)
        off[static_cast<size_t>(g + 1)] = off[static_cast<size_t>(g)] + 2 * rows_of(g) * 16 * (2 * ncb + ncg);
    if (packed.size() < static_cast<size_t>(off.back())) packed.resize(static_cast<size_t>(off.back()));
    lanes.resize(static_cast<size_t>(n_kv));
    tasks.clear();
    for (int64_t g = 0; g < n_kv; ++g) {
        uint16_t *p = packed.data() + off[static_cast<size_t>(g)];
        lanes[static_cast<size_t>(g)] = {p, p + 2 * rows_of(g) * 32 * ncb, ncb, ncg};
        for (int64_t r = 0; r < rows_of(g); r += k_rows_per_task) tasks.emplace_back(g, r);
    }
    const std::pair<int64_t, int64_t> *task = tasks.data();
    const AmxLanes *lane = lanes.data();
    pool.run(static_cast<int64_t>(tasks.size()), [&, task, lane](int64_t t, int) {
        const auto [g, r0] = task[t];
        const AmxLanes &L = lane[g];
        const int64_t r1 = std::min(r0 + k_rows_per_task, rows_of(g));
        const int64_t nr = std::clamp<int64_t>(a.past(g) + a.n_q - r0, 0, r1 - r0);  // real rows of the task
        float *wide = tile_scratch(k_rows_per_task * d);
        uint16_t *k = const_cast<uint16_t *>(L.k), *v = const_cast<uint16_t *>(L.v);
        const auto store_split = [](__m512 x, uint16_t *hi, uint16_t *lo) {
            const __m256i h = bf16_round(x);
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(hi), h);
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(lo), bf16_round(_mm512_sub_ps(x, bf16_widen(h))));
        };
        // K: 16 channels of a row at a time; channels past d and rows past the lane's are zero
        const float *kr = nr ? attn_rows_f32(a.kv_type.k, a.k[g], r0, nr, d, wide) : wide;
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = 0; c < 32 * ncb; c += 16) {
                const int64_t left = r - r0 < nr ? std::clamp<int64_t>(d - c, 0, 16) : 0;
                const __mmask16 m = static_cast<__mmask16>((1u << left) - 1);
                uint16_t *at = k + amx_k_at(L, r, c);
                store_split(_mm512_maskz_loadu_ps(m, kr + (r - r0) * d + c), at, at + k_tile);
            }
        // V transposed: one channel of 16 rows per gather
        const float *vr = nr ? attn_rows_f32(a.kv_type.v, a.v[g], r0, nr, d, wide) : wide;
        const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                               _mm512_set1_epi32(static_cast<int>(d)));
        for (int64_t r = r0; r < r1; r += 16) {
            const int64_t left = std::clamp<int64_t>(nr - (r - r0), 0, 16);
            const __mmask16 rows = static_cast<__mmask16>((1u << left) - 1);
            for (int64_t c = 0; c < 16 * ncg; ++c) {
                const __m512 x = c < d ? _mm512_mask_i32gather_ps(_mm512_setzero_ps(), rows, idx, vr + (r - r0) * d + c, 4)
                                       : _mm512_setzero_ps();
                uint16_t *at = v + amx_v_at(L, r, c);
                store_split(x, at, at + k_tile);
            }
        }
    });
    prefill_tasks(a, AmxKernel(a, lanes.data()), pool);
}
#endif  // SIEVE_AMX


// Whether this process may use the tiles: compiled for them, the CPU has
// AMX-TILE, AMX-BF16 and AVX512-BF16, and the kernel grants the tile state.
bool amx_probe() {
#if SIEVE_AMX
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) || !(eax & (1u << 5))) return false;
    return amx::cpu_has(amx::k_bf16);
#else
    return false;
#endif
}

std::atomic<int> g_amx{-1};  // -1: not decided yet

bool amx_enabled() {
    int on = g_amx.load(std::memory_order_relaxed);
    if (on < 0) {
        on = attention_prefill_amx_available() && amx::env_allows();
        g_amx.store(on, std::memory_order_relaxed);
    }
    return on != 0;
}

}  // namespace

bool attention_prefill_amx_available() {
    static const bool ok = amx_probe();
    return ok;
}

bool attention_prefill_use_amx(bool on) {
    g_amx.store(on && attention_prefill_amx_available(), std::memory_order_relaxed);
    return g_amx.load(std::memory_order_relaxed) != 0;
}

bool attention_prefill_uses_amx() { return amx_enabled(); }

void attention_prefill(const AttnArgs &a, ThreadPool &pool) {
    attn_check_args(a, "attention_prefill");
    if (a.kv_type != KvRowTypes(RowType::f32)) {
#if SIEVE_AMX
        if (amx_enabled()) return prefill_amx(a, pool);
#endif
        return prefill_widened(a, pool);
    }
    prefill_tasks(a, F32Kernel(a), pool);
}

}  // namespace sieve::cpu
