// Attention-probability sums over queries (attention_score.h).
//
// Task. (KV head g, chunk of keys): a chunk is a run of blocks of k_kt = 64
// keys, and one task serves every query head of g's group, so each K row is
// read from memory once per call. The chunk length depends on the shapes
// only, and every task writes only its own keys' sums (once, after summing
// them in a fixed order), so results do not depend on the thread count. Tasks
// whose keys lie past their lane's end return at once.
//
// Block. The block's K rows are widened to f32 and transposed once into L1,
//   kt[c][jj] = K[j0 + jj][c]                       [head_dim][k_kt]
// so one vector holds dimension c of W consecutive keys. The "rows" are the
// (query head, query) pairs that see some key of the block: query i sees keys
// j <= past(g) + i, so the queries before i0 = j0 - past(g) see none and are
// left out (a block no query sees costs nothing; n_q queries over n rows cost
// n * n_q dot products). Rows are processed in register tiles of up to k_nr
// rows x k_nv key vectors (balanced: 7 rows are tiles of 4 and 3):
//   acc[r][v] += bcast(q_r[c]) * kt[c][v * W ..]       for c < head_dim
// then p = exp(scale * acc - lse_r) lane by lane, and sum[head(r)][keys] += p
// where the key is visible to the row (only rows on the block's diagonal mask
// any lanes). The sums live in an L1 buffer [group][k_kt], one load/add/store
// per vector of p (per head_dim FMAs); loaded from acc and stored back once
// per block, so every query's p lands on acc in query order.
//
// Keys along the SIMD lanes (rather than head_dim) make the softmax and the
// sums over queries vertical arithmetic: no horizontal reduction per dot
// product, and W keys' results are one vector. From a few dozen rows per block
// on (SnapKV's 32-query window over a GQA group of 7 is 224) the transpose is
// a few percent and the tiles run near the FMA peak (24 FMAs per 4 loads and
// 6 broadcasts). A decode step (n_q = 1: the group's 7 heads are the rows)
// spends about half its time on the transpose and reading K.
//
// exp is simd::exp_neg (relative error ~3e-7; it is also exact enough for
// the slightly positive arguments f32 rounding can give when a key carries
// almost all of a query's probability).
#include "sieve/kernels/cpu/attention_score.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "sieve/core/aligned.h"
#include "sieve/core/fp16.h"
#include "sieve/core/status.h"
#include "sieve/kernels/cpu/kv_rows.h"
#include "sieve/kernels/cpu/simd.h"

namespace sieve::cpu {

namespace {

constexpr int64_t k_kt = 64;       // keys per block
constexpr int64_t k_max_d = 256;   // kt is [k_max_d][k_kt] floats on the stack

// ---------------------------------------------------------------------------
// Vectors of W floats. k_nv key vectors x k_nr rows of accumulators fill the
// register file (AVX-512: 24 accumulators + 4 K vectors of 32 registers;
// AVX2: 10 + 2 of 16); the broadcasts of q come straight from memory.

#if defined(__AVX512F__)
constexpr int W = 16, k_nv = 4, k_nr = 6;
using V = __m512;
inline V vzero() { return _mm512_setzero_ps(); }
inline V vload(const float *p) { return _mm512_load_ps(p); }
inline void vstore(float *p, V x) { _mm512_store_ps(p, x); }
inline V vset1(float x) { return _mm512_set1_ps(x); }
inline V vfma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline V vfmsub(V a, V b, V c) { return _mm512_fmsub_ps(a, b, c); }
inline V vexp(V x) { return simd::exp_neg(x); }
#elif defined(__AVX2__)
constexpr int W = 8, k_nv = 2, k_nr = 5;
using V = __m256;
inline V vzero() { return _mm256_setzero_ps(); }
inline V vload(const float *p) { return _mm256_load_ps(p); }
inline void vstore(float *p, V x) { _mm256_store_ps(p, x); }
inline V vset1(float x) { return _mm256_set1_ps(x); }
inline V vfma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V vfmsub(V a, V b, V c) { return _mm256_fmsub_ps(a, b, c); }
// exp_neg's AVX2 body builds 2^n in the exponent field: keep n in range.
inline V vexp(V x) { return simd::exp_neg(_mm256_min_ps(x, _mm256_set1_ps(88.0f))); }
#else
constexpr int W = 1, k_nv = 4, k_nr = 4;
using V = float;
inline V vzero() { return 0.0f; }
inline V vload(const float *p) { return *p; }
inline void vstore(float *p, V x) { *p = x; }
inline V vset1(float x) { return x; }
inline V vfma(V a, V b, V c) { return a * b + c; }
inline V vfmsub(V a, V b, V c) { return a * b - c; }
inline V vexp(V x) { return std::exp(x); }
#endif

constexpr int64_t k_kv = k_nv * W;  // keys per register tile
static_assert(k_kt % k_kv == 0, "a block is a whole number of register tiles");

// One row of a block: query head hh of the group at query i.
struct Row {
    const float *q;  // [head_dim]
    float lse;
    float *sum;      // the head's sums over the block's keys [k_kt]
    int64_t lim;     // last visible key relative to the block, in [0, k_kt - 1]
    uint64_t mask;   // bit jj: key jj of the block is visible
};

// s += p where key ko + lane of the block is visible to the row.
inline V add_visible(V s, V p, const Row &row, int64_t ko) {
#if defined(__AVX512F__)
    return _mm512_mask_add_ps(s, static_cast<__mmask16>(row.mask >> ko), s, p);
#elif defined(__AVX2__)
    const V lane = _mm256_add_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_ps(static_cast<float>(ko)));
    const V vis = _mm256_cmp_ps(lane, _mm256_set1_ps(static_cast<float>(row.lim)), _CMP_LE_OQ);
    return _mm256_add_ps(s, _mm256_and_ps(p, vis));
#else
    return ko <= row.lim ? s + p : s;
#endif
}

// The NR rows' probabilities for keys [ko, ko + k_kv) of the block, added to
// their heads' sums. kt: the transposed block [d][k_kt].
template <int NR>
inline void tile(const float *kt, int64_t ko, int64_t d, const Row *rows, float scale) {
    const float *q[NR];
    for (int r = 0; r < NR; ++r) q[r] = rows[r].q;
    V acc[NR][k_nv];
    for (int r = 0; r < NR; ++r)
        for (int v = 0; v < k_nv; ++v) acc[r][v] = vzero();
    const float *kc = kt + ko;
    for (int64_t c = 0; c < d; ++c, kc += k_kt) {
        V k[k_nv];
        for (int v = 0; v < k_nv; ++v) k[v] = vload(kc + v * W);
        for (int r = 0; r < NR; ++r) {
            const V b = vset1(q[r][c]);
            for (int v = 0; v < k_nv; ++v) acc[r][v] = vfma(b, k[v], acc[r][v]);
        }
    }
    const V vs = vset1(scale);
    for (int r = 0; r < NR; ++r) {
        const V lse = vset1(rows[r].lse);
        float *s = rows[r].sum + ko;
        for (int v = 0; v < k_nv; ++v) {
            const V p = vexp(vfmsub(acc[r][v], vs, lse));
            vstore(s + v * W, add_visible(vload(s + v * W), p, rows[r], ko + v * W));
        }
    }
}

using TileFn = void (*)(const float *, int64_t, int64_t, const Row *, float);

template <int... N>
constexpr TileFn tile_fn(int nr, std::integer_sequence<int, N...>) {
    constexpr TileFn fns[] = {tile<N + 1>...};
    return fns[nr - 1];
}

// ---------------------------------------------------------------------------
// kt[c][jj] = K[jj][c] as f32 for jj < nb, 0 for nb <= jj < k_kt; k: the
// block's first row, d elements per row.

inline float widen_one(RowType t, const void *rows, int64_t i) { return row_elem(t, rows, i); }

#if defined(__AVX512F__)
template <RowType T>
inline __m512 load16(const void *rows, int64_t i) {
    if constexpr (T == RowType::f32) {
        return _mm512_loadu_ps(static_cast<const float *>(rows) + i);
    } else {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(static_cast<const uint16_t *>(rows) + i));
        if constexpr (T == RowType::f16)
            return _mm512_cvtph_ps(h);
        else
            return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
}

// In-register transpose of 16 x 16 floats: r[i][l] -> r[l][i].
inline void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    // r[4b + k], 128-bit lane L: rows 4b .. 4b + 3 of column 4L + k
    for (int b = 0; b < 4; ++b) {
        r[4 * b + 0] = _mm512_shuffle_ps(t[4 * b], t[4 * b + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * b + 1] = _mm512_shuffle_ps(t[4 * b], t[4 * b + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[4 * b + 2] = _mm512_shuffle_ps(t[4 * b + 1], t[4 * b + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * b + 3] = _mm512_shuffle_ps(t[4 * b + 1], t[4 * b + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    // t[k] (k < 4): columns k, 8 + k of rows 0-3, 4-7; t[4 + k]: columns 4 + k,
    // 12 + k; t[8 ..]: the same for rows 8-15
    for (int h = 0; h < 2; ++h)
        for (int k = 0; k < 4; ++k) {
            t[8 * h + k] = _mm512_shuffle_f32x4(r[8 * h + k], r[8 * h + 4 + k], 0x88);
            t[8 * h + 4 + k] = _mm512_shuffle_f32x4(r[8 * h + k], r[8 * h + 4 + k], 0xdd);
        }
    for (int k = 0; k < 8; ++k) {
        r[k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0x88);
        r[8 + k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0xdd);
    }
}

template <RowType T>
void widen_transpose(const void *k, int64_t nb, int64_t d, float *kt) {
    const int64_t d16 = d / 16 * 16;
    for (int64_t j = 0; j < k_kt; j += 16) {
        if (j >= nb) {
            for (int64_t c = 0; c < d; ++c) _mm512_store_ps(kt + c * k_kt + j, _mm512_setzero_ps());
            continue;
        }
        const int64_t n = std::min<int64_t>(16, nb - j);
        for (int64_t c0 = 0; c0 < d16; c0 += 16) {
            __m512 r[16];
            for (int64_t i = 0; i < 16; ++i) r[i] = i < n ? load16<T>(k, (j + i) * d + c0) : _mm512_setzero_ps();
            transpose16(r);
            for (int i = 0; i < 16; ++i) _mm512_store_ps(kt + (c0 + i) * k_kt + j, r[i]);
        }
        for (int64_t c = d16; c < d; ++c)
            for (int64_t i = 0; i < 16; ++i) kt[c * k_kt + j + i] = i < n ? widen_one(T, k, (j + i) * d + c) : 0.0f;
    }
}
#else
template <RowType T>
void widen_transpose(const void *k, int64_t nb, int64_t d, float *kt) {
    alignas(64) float row[k_max_d];
    for (int64_t jj = 0; jj < k_kt; ++jj) {
        if (jj < nb) {
            for (int64_t c = 0; c < d; ++c) row[c] = widen_one(T, k, jj * d + c);
        } else {
            std::fill(row, row + d, 0.0f);
        }
        for (int64_t c = 0; c < d; ++c) kt[c * k_kt + jj] = row[c];
    }
}
#endif

void check_args(const AttnScoreArgs &a, const char *who) {
    SIEVE_CHECKF(a.n_q >= 1 && a.n_head >= 1 && a.n_head_kv >= 1 && a.n_head % a.n_head_kv == 0,
                 "%s: n_q = %lld, n_head = %lld, n_head_kv = %lld", who, static_cast<long long>(a.n_q),
                 static_cast<long long>(a.n_head), static_cast<long long>(a.n_head_kv));
    SIEVE_CHECKF(a.head_dim > 0 && a.head_dim % 4 == 0, "%s: head_dim = %lld", who,
                 static_cast<long long>(a.head_dim));
    SIEVE_CHECKF(row_type_fits(a.kv_type, a.head_dim), "%s: %s rows of head_dim %lld", who, row_type_name(a.kv_type),
                 static_cast<long long>(a.head_dim));
    SIEVE_CHECKF(a.q && a.lse && a.k && a.acc, "%s: null q/lse/k/acc pointer", who);
    SIEVE_CHECKF(a.lse_stride >= a.n_q, "%s: lse_stride %lld < n_q %lld", who, static_cast<long long>(a.lse_stride),
                 static_cast<long long>(a.n_q));
    for (int64_t g = 0; g < a.n_head_kv; ++g) {
        SIEVE_CHECKF(a.past(g) >= 0, "%s: n_past of kv head %lld = %lld", who, static_cast<long long>(g),
                     static_cast<long long>(a.past(g)));
        SIEVE_CHECKF(a.acc_stride >= a.past(g) + a.n_q, "%s: acc_stride %lld < %lld rows of kv head %lld", who,
                     static_cast<long long>(a.acc_stride), static_cast<long long>(a.past(g) + a.n_q),
                     static_cast<long long>(g));
    }
}

// Per-thread sums [group][k_kt]; thread_local because the pool's threads are
// persistent: the buffer only grows, steady-state calls do not allocate.
float *sums_scratch(int64_t n) {
    static thread_local AlignedBuffer<float> b;
    if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
    return b.data();
}

// Keys [j0, j0 + nb) of KV head g, nb <= k_kt.
template <RowType T>
void score_block(const AttnScoreArgs &a, int64_t g, int64_t j0, int64_t nb, float *kt, float *sums) {
    const int64_t d = a.head_dim, group = a.n_head / a.n_head_kv, past = a.past(g);
    if constexpr (row_type_quantized(T)) {
        // Quantized rows: dequantized once into f32 rows (exact), then the f32 transpose.
        alignas(64) float rows[k_max_d * k_kt];
        rows_to_f32(T, a.k[g], j0 * d, nb * d, rows);
        widen_transpose<RowType::f32>(rows, nb, d, kt);
    } else {
        widen_transpose<T>(row_elems_at(T, a.k[g], j0 * d), nb, d, kt);
    }
    // The sums start from acc and each row's p is added in row order (a
    // head's queries in increasing order), so acc receives one query after
    // another however the queries are split across calls: a prompt prefilled
    // in other chunks (continuous batching, a prefix-cache hit) scores the
    // same bits.
    for (int64_t hh = 0; hh < group; ++hh) {
        const float *in = a.acc + (g * group + hh) * a.acc_stride + j0;
        float *s = sums + hh * k_kt;
        std::copy(in, in + nb, s);
        std::fill(s + nb, s + k_kt, 0.0f);
    }
    // Rows (hh, i) for i in [i0, n_q), head-major, in balanced tiles of <= k_nr.
    const int64_t i0 = std::max<int64_t>(0, j0 - past), nq = a.n_q - i0, n_rows = group * nq;
    const int64_t n_tiles = (n_rows + k_nr - 1) / k_nr;
    Row rows[k_nr];
    for (int64_t t = 0; t < n_tiles; ++t) {
        const int64_t r0 = n_rows * t / n_tiles, r1 = n_rows * (t + 1) / n_tiles;
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t hh = r / nq, i = i0 + r % nq, h = g * group + hh;
            const int64_t lim = std::min(past + i - j0, k_kt - 1);  // >= 0: i >= i0
            Row &row = rows[r - r0];
            row.q = a.q + (i * a.n_head + h) * d;
            row.lse = a.lse[h * a.lse_stride + i];
            row.sum = sums + hh * k_kt;
            row.lim = lim;
            row.mask = lim >= k_kt - 1 ? ~uint64_t(0) : (uint64_t(1) << (lim + 1)) - 1;
        }
        const TileFn fn = tile_fn(static_cast<int>(r1 - r0), std::make_integer_sequence<int, k_nr>{});
        // Register tiles past every row's last visible key are skipped.
        int64_t lim_max = 0;
        for (int64_t r = 0; r < r1 - r0; ++r) lim_max = std::max(lim_max, rows[r].lim);
        for (int64_t ko = 0; ko <= lim_max; ko += k_kv) fn(kt, ko, d, rows, a.scale);
    }
    for (int64_t hh = 0; hh < group; ++hh) {
        float *out = a.acc + (g * group + hh) * a.acc_stride + j0;
        const float *s = sums + hh * k_kt;
        std::copy(s, s + nb, out);
    }
}

template <RowType T>
void scores_typed(const AttnScoreArgs &a, ThreadPool &pool) {
    const int64_t group = a.n_head / a.n_head_kv;
    int64_t max_rows = 0, n_blocks = 0;
    for (int64_t g = 0; g < a.n_head_kv; ++g) {
        max_rows = std::max(max_rows, a.past(g) + a.n_q);
        n_blocks += (a.past(g) + a.n_q + k_kt - 1) / k_kt;
    }
    // Chunks of up to 8 blocks, aiming at >= 64 tasks: enough for any pool to
    // balance the uneven ones (keys late in a lane are seen by fewer queries),
    // few enough that dispatch costs nothing. Shapes only, never the pool.
    const int64_t chunk = k_kt * std::clamp<int64_t>(n_blocks / 64, 1, 8);
    const int64_t n_chunks = (max_rows + chunk - 1) / chunk;
    pool.run(a.n_head_kv * n_chunks, [&](int64_t task, int) {
        const int64_t g = task / n_chunks, c0 = (task % n_chunks) * chunk;
        const int64_t c1 = std::min(c0 + chunk, a.past(g) + a.n_q);
        if (c0 >= c1) return;  // past this lane's end
        alignas(64) float kt[k_max_d * k_kt];
        float *sums = sums_scratch(group * k_kt);
        for (int64_t j0 = c0; j0 < c1; j0 += k_kt) score_block<T>(a, g, j0, std::min(k_kt, c1 - j0), kt, sums);
    });
}

}  // namespace

void attention_scores(const AttnScoreArgs &a, ThreadPool &pool) {
    check_args(a, "attention_scores");
    SIEVE_CHECKF(a.head_dim <= k_max_d, "attention_scores: head_dim %lld > %lld", static_cast<long long>(a.head_dim),
                 static_cast<long long>(k_max_d));
    switch (a.kv_type) {
    case RowType::f32: return scores_typed<RowType::f32>(a, pool);
    case RowType::f16: return scores_typed<RowType::f16>(a, pool);
    case RowType::bf16: return scores_typed<RowType::bf16>(a, pool);
    case RowType::q8_0: return scores_typed<RowType::q8_0>(a, pool);
    case RowType::q4_0: return scores_typed<RowType::q4_0>(a, pool);
    }
}

void attention_scores_ref(const AttnScoreArgs &a) {
    check_args(a, "attention_scores_ref");
    const int64_t d = a.head_dim, group = a.n_head / a.n_head_kv;
    std::vector<double> k(static_cast<size_t>(d));
    for (int64_t h = 0; h < a.n_head; ++h) {
        const int64_t g = h / group;
        for (int64_t j = 0; j < a.past(g) + a.n_q; ++j) {
            for (int64_t c = 0; c < d; ++c) k[static_cast<size_t>(c)] = widen_one(a.kv_type, a.k[g], j * d + c);
            double sum = 0.0;
            // the queries that see row j: past(g) + i >= j
            for (int64_t i = std::max<int64_t>(0, j - a.past(g)); i < a.n_q; ++i) {
                const float *q = a.q + (i * a.n_head + h) * d;
                double dot[4] = {0.0, 0.0, 0.0, 0.0};  // head_dim % 4 == 0; four chains for speed
                for (int64_t c = 0; c < d; c += 4)
                    for (int64_t e = 0; e < 4; ++e) dot[e] += static_cast<double>(q[c + e]) * k[static_cast<size_t>(c + e)];
                const double qk = (dot[0] + dot[1]) + (dot[2] + dot[3]);
                sum += std::exp(qk * a.scale - static_cast<double>(a.lse[h * a.lse_stride + i]));
            }
            a.acc[h * a.acc_stride + j] += static_cast<float>(sum);
        }
    }
}

}  // namespace sieve::cpu
