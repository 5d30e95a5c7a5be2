// matmul_float: the f32 path of matmul (see matmul_float.h).
//
//   decode (1..k_stream_max_tokens): tasks of consecutive rows, 4 rows (one
//     from each quarter of the task) x up to 6 tokens of accumulators; each
//     row is streamed once, F16 / BF16 converted to f32 in registers (no
//     scratch), and each weight vector feeds every token of the group.
//   prefill: tasks of 16 rows x 192 tokens; a 4 x 6 register-blocked
//     micro-kernel (24 accumulators) runs over them. F16 / BF16 rows are
//     read in place (converted in registers) over the whole k; the other
//     types are cut along k into blocks of 512 whose weights are decoded to
//     an f32 slab in L1/L2.
//
// All three accumulate every output in the same lane order (see "Register-
// blocked micro-kernel" below), so results are bitwise independent of the
// thread count and of which path or batch computed them.
#include "sieve/kernels/cpu/matmul_float.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "sieve/kernels/cpu/intrin.h"
#include "sieve/kernels/cpu/simd.h"

#include "sieve/core/aligned.h"
#include "sieve/core/fp16.h"
#include "sieve/core/status.h"
#include "sieve/quant/dequant.h"

namespace sieve::cpu {

namespace {

// Per-thread decoded weight rows, kept across calls (the pool's threads are
// persistent); only grows.
AlignedBuffer<float> &tile_scratch() {
    static thread_local AlignedBuffer<float> s;
    return s;
}
template <class T>
T *grow(AlignedBuffer<T> &b, size_t n) {
    if (b.size() < n) b.resize(n);
    return b.data();
}

// Q6_K row -> f32 (layout in quant/blocks.h). Per half of 128 elements the
// 6-bit quants of sub-group s (32 elements) are nibble s / 2 of ql[32 (s % 2) ..]
// plus bits 2s..2s+1 of qh as bits 4..5; byte-parallel with AVX2, then one
// multiply per element by d * scale, the same f32 product the reference forms.
void decode_q6_k_f32(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t sb = 0; sb < n / 256; ++sb) {
        const uint8_t *blk = src + sb * 210;
        const uint8_t *ql = blk, *qh = blk + 128;
        const int8_t *sc = reinterpret_cast<const int8_t *>(blk + 192);
        uint16_t dh;
        std::memcpy(&dh, blk + 208, 2);
        const float d = fp16_to_fp32(dh);
        alignas(32) int8_t q[256];
        for (int h = 0; h < 2; ++h) {
            for (int sg = 0; sg < 4; ++sg) {
                int8_t *qo = q + 128 * h + 32 * sg;
                const uint8_t *l = ql + 64 * h + 32 * (sg % 2);
#if defined(__AVX2__)
                const __m256i lo = _mm256_and_si256(
                    _mm256_srli_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(l)), 4 * (sg / 2)),
                    _mm256_set1_epi8(0x0f));
                const __m256i hi = _mm256_and_si256(
                    _mm256_slli_epi16(
                        _mm256_srli_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(qh + 32 * h)), 2 * sg), 4),
                    _mm256_set1_epi8(0x30));
                _mm256_store_si256(reinterpret_cast<__m256i *>(qo),
                                   _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(32)));
#else
                for (int i = 0; i < 32; ++i)
                    qo[i] = static_cast<int8_t>((((l[i] >> (4 * (sg / 2))) & 0xF) | (((qh[32 * h + i] >> (2 * sg)) & 3) << 4)) - 32);
#endif
            }
        }
        float *y = dst + sb * 256;
        for (int g = 0; g < 16; ++g) {
            const float dl = d * static_cast<float>(sc[g]);
            for (int i = 16 * g; i < 16 * g + 16; ++i) y[i] = dl * static_cast<float>(q[i]);
        }
    }
}

}  // namespace

// Weight row -> f32; SIMD conversion for F16/BF16/Q6_K, the reference decoder for the rest.
void decode_row_f32(GgmlType type, const void *src, float *dst, int64_t n) {
    const uint16_t *h = static_cast<const uint16_t *>(src);
    if (type == GgmlType::F32) {
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    } else if (type == GgmlType::F16) {
        simd::f16_to_f32(h, dst, n);
    } else if (type == GgmlType::BF16) {
        simd::bf16_to_f32(h, dst, n);
    } else if (type == GgmlType::Q6_K) {
        decode_q6_k_f32(static_cast<const uint8_t *>(src), dst, n);
    } else {
        dequantize_row(type, src, dst, n);
    }
}

namespace {

// ---------------------------------------------------------------------------
// Register-blocked micro-kernel
//
// Every output y[t, r] is a dot product computed the same way wherever it is
// computed: lane l of a vector accumulator sums W[r, k] x[t, k] for
// k = l, l + width, ... in increasing k (one FMA each), the lanes are then
// added (V::sum), and the elements past the last full vector are added one by
// one. Tiling, the number of rows and tokens sharing the registers, the split
// of k into cache blocks (which keeps the accumulators as vectors) and the
// path (weights streamed and converted in registers, or decoded to f32
// scratch first) change none of that, so results do not depend on the thread
// count, on the batch a token arrives in, or on decode vs prefill.
// ---------------------------------------------------------------------------

#if defined(__AVX512F__)
struct V {
    using reg = __m512;
    static constexpr int64_t width = 16;
    // Accumulators: 4 rows x 6 tokens = 24 of the 32 registers, plus 4 weight
    // vectors and one activation vector.
    static constexpr int max_tokens = 6;
    static reg zero() { return _mm512_setzero_ps(); }
    static reg load(const float *p) { return _mm512_loadu_ps(p); }
    static void store(float *p, reg v) { _mm512_storeu_ps(p, v); }
    static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
    static float sum(reg v) { return _mm512_reduce_add_ps(v); }
    // Keeps a loaded vector in a register: without it GCC folds the load into
    // every FMA that uses it (k_rows loads of the same activation per step).
    static void pin(reg &v) { __asm__("" : "+v"(v)); }
    static reg from_f16(const uint16_t *p) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
    }
    static reg from_bf16(const uint16_t *p) {
        const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    }
};
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
struct V {
    using reg = __m256;
    static constexpr int64_t width = 8;
    // 4 x 2 accumulators + 4 weights + 1 activation of the 16 registers.
    static constexpr int max_tokens = 2;
    static reg zero() { return _mm256_setzero_ps(); }
    static reg load(const float *p) { return _mm256_loadu_ps(p); }
    static void store(float *p, reg v) { _mm256_storeu_ps(p, v); }
    static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
    static void pin(reg &v) { __asm__("" : "+x"(v)); }
    static float sum(reg v) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
    }
    static reg from_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))); }
    static reg from_bf16(const uint16_t *p) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    }
};
#else
// Plain C++: 8 lanes in an array (compilers vectorize the loops where they can).
struct V {
    static constexpr int64_t width = 8;
    static constexpr int max_tokens = 2;
    struct reg {
        float v[8];
    };
    static reg zero() { return reg{}; }
    static reg load(const float *p) {
        reg r;
        for (int i = 0; i < 8; ++i) r.v[i] = p[i];
        return r;
    }
    static void store(float *p, reg a) {
        for (int i = 0; i < 8; ++i) p[i] = a.v[i];
    }
    static void pin(reg &) {}
    static reg fma(reg a, reg b, reg c) {
        for (int i = 0; i < 8; ++i) c.v[i] = std::fma(a.v[i], b.v[i], c.v[i]);
        return c;
    }
    static float sum(reg a) {
        return ((a.v[0] + a.v[4]) + (a.v[2] + a.v[6])) + ((a.v[1] + a.v[5]) + (a.v[3] + a.v[7]));
    }
    static reg from_f16(const uint16_t *p) {
        reg r;
        for (int i = 0; i < 8; ++i) r.v[i] = fp16_to_fp32(p[i]);
        return r;
    }
    static reg from_bf16(const uint16_t *p) {
        reg r;
        for (int i = 0; i < 8; ++i) r.v[i] = bf16_to_fp32(p[i]);
        return r;
    }
};
#endif

// Weight loaders: one vector of a row starting at element k, and one element.
struct LoadF32 {
    static V::reg vec(const void *row, int64_t k) { return V::load(static_cast<const float *>(row) + k); }
    static float one(const void *row, int64_t k) { return static_cast<const float *>(row)[k]; }
};
struct LoadF16 {
    static V::reg vec(const void *row, int64_t k) { return V::from_f16(static_cast<const uint16_t *>(row) + k); }
    static float one(const void *row, int64_t k) { return fp16_to_fp32(static_cast<const uint16_t *>(row)[k]); }
};
struct LoadBF16 {
    static V::reg vec(const void *row, int64_t k) { return V::from_bf16(static_cast<const uint16_t *>(row) + k); }
    static float one(const void *row, int64_t k) { return bf16_to_fp32(static_cast<const uint16_t *>(row)[k]); }
};

constexpr int k_rows = 4;  // rows sharing the registers of one micro-kernel call

// acc[r][t] (vectors, stored at acc + (r * T + t) * width) += sum over
// k in [k0, k1) of w[r][k] x[t][k]; k1 - k0 a multiple of V::width. With
// first, the accumulators start at zero instead of being loaded.
template <class L, int R, int T>
void micro(const void *const *w, const float *const *x, int64_t k0, int64_t k1, float *acc, bool first) {
    V::reg a[R][T];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) a[r][t] = first ? V::zero() : V::load(acc + (r * T + t) * V::width);
    for (int64_t k = k0; k < k1; k += V::width) {
        V::reg wv[R];
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) wv[r] = L::vec(w[r], k);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
            V::reg xv = V::load(x[t] + k);
            V::pin(xv);
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) a[r][t] = V::fma(wv[r], xv, a[r][t]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) V::store(acc + (r * T + t) * V::width, a[r][t]);
}

using MicroFn = void (*)(const void *const *, const float *const *, int64_t, int64_t, float *, bool);

template <class L, int R = k_rows>
MicroFn micro_for(int n_tok) {
    static_assert(V::max_tokens <= 6);
    switch (n_tok) {
        case 1: return micro<L, R, 1>;
        case 2: return micro<L, R, 2>;
        default: break;
    }
    if constexpr (V::max_tokens >= 6) {
        switch (n_tok) {
            case 3: return micro<L, R, 3>;
            case 4: return micro<L, R, 4>;
            case 5: return micro<L, R, 5>;
            case 6: return micro<L, R, 6>;
            default: break;
        }
    }
    return nullptr;
}

template <int R>
MicroFn micro_for_type(GgmlType type, int n_tok) {
    switch (type) {
        case GgmlType::F16: return micro_for<LoadF16, R>(n_tok);
        case GgmlType::BF16: return micro_for<LoadBF16, R>(n_tok);
        default: return micro_for<LoadF32, R>(n_tok);
    }
}

// The tail elements [nv, n) of one output, for the types stored element by
// element (block types have n a multiple of their block, hence of the width).
float tail_dot(GgmlType type, const void *row, const float *x, int64_t nv, int64_t n) {
    float s = 0.0f;
    for (int64_t k = nv; k < n; ++k) {
        const float wk = type == GgmlType::F16    ? LoadF16::one(row, k)
                         : type == GgmlType::BF16 ? LoadBF16::one(row, k)
                                                  : LoadF32::one(row, k);
        s += wk * x[k];
    }
    return s;
}

// y[t, r] for rows [r0, r1) and tokens [t0, t1): the lanes of acc (laid out
// [row group][token group][k_rows][T]) summed, plus the tail.
struct Finish {
    const WeightView &w;
    const float *x;
    float *y;
    int64_t nv;
    void operator()(int64_t r, int64_t t, const float *lanes) const {
        float s = V::sum(V::load(lanes));
        if (nv < w.n_cols)
            s += tail_dot(w.type, static_cast<const uint8_t *>(w.data) + r * w.row_bytes, x + t * w.n_cols, nv,
                          w.n_cols);
        y[t * w.n_rows + r] = s;
    }
};

#if defined(__AVX512F__)
// Lane i = V::sum(v[i]) for 16 vectors at once, bit for bit: the same adds
// as _mm512_reduce_add_ps (256-bit halves, then 128-bit halves, then lanes
// {0,1} + {2,3}, then the last pair), done across vectors so 16 sums cost
// 15 vector adds instead of 16 horizontal reductions.
inline __m512 sum16(const __m512 *v) {
    __m512 u[8], w[4], z[2];
    for (int i = 0; i < 8; ++i)
        u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)));
    // u[i]: 8 lanes of v[2i], then 8 of v[2i + 1].
    for (int i = 0; i < 4; ++i)
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)),
                             _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)));
    // w[i]: 4 lanes each of v[4i .. 4i + 3].
    for (int i = 0; i < 2; ++i)
        z[i] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    // z[i], 128-bit chunk k: the two partial sums of v[8i + k], then of v[8i + 4 + k].
    const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(3, 1, 3, 1)));
    // r lane 4k + m = sum of v[4m + k].
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
}
#endif

inline void prefetch(const uint8_t *p, int64_t n_bytes) {
    for (int64_t o = 0; o < n_bytes; o += 64) __builtin_prefetch(p + o, 0, 3);
}

bool streams_in_registers(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

// ---- Decode and small batches -------------------------------------------
// Up to k_stream_max_tokens tokens: each task takes a contiguous range of
// rows and reads each weight vector once per group of V::max_tokens tokens,
// converting F16 / BF16 in registers (no scratch round trip), so the weights
// stream from memory once at close to the bandwidth limit.
constexpr int64_t k_stream_max_tokens = 12;
// Rows per task: about this many weight bytes (long sequential streams for
// the prefetcher, few claims on the pool's shared word, still hundreds of
// tasks for dynamic balance on the big matrices).
constexpr int64_t k_stream_task_bytes = 192 * 1024;

// One task of the stream path: rows [r0, r1) in groups of R = k_rows.
void stream_rows(const WeightView &w, const float *x, int64_t n_tokens, float *y, int64_t r0, int64_t r1) {
    constexpr int R = k_rows;
    const int64_t n = w.n_cols, nv = n / V::width * V::width;
    const uint8_t *base = static_cast<const uint8_t *>(w.data);
    const bool raw = streams_in_registers(w.type);
    const Finish fin{w, x, y, nv};
    float *dec = raw ? nullptr : grow(tile_scratch(), static_cast<size_t>(R * n));
    alignas(64) float acc[R * V::max_tokens * V::width];
    // Row i of group g is r0 + i * q + g: the R rows of a group come from R
    // quarters of the range, so the weights are read as R long sequential
    // streams (rows a page apart would be R short ones that the hardware
    // prefetcher keeps restarting).
    const int64_t q = (r1 - r0 + R - 1) / R;
    for (int64_t g = 0; g < q; ++g) {
        int64_t row_of[R] = {};
        int n_r = 0;
        for (int i = 0; i < R; ++i)
            if (r0 + i * q + g < r1) row_of[n_r++] = r0 + i * q + g;
        const void *rows[R];
        for (int i = 0; i < R; ++i) {
            // Missing rows of the last group repeat its first row; their results are dropped.
            const int64_t r = row_of[i < n_r ? i : 0];
            if (raw) {
                rows[i] = base + r * w.row_bytes;
            } else {
                if (i < n_r) decode_row_f32(w.type, base + r * w.row_bytes, dec + i * n, n);
                rows[i] = dec + (i < n_r ? i : 0) * n;
            }
        }
        for (int64_t tg = 0; tg < n_tokens; tg += V::max_tokens) {
            const int n_t = static_cast<int>(std::min<int64_t>(V::max_tokens, n_tokens - tg));
            const float *xs[V::max_tokens];
            for (int j = 0; j < n_t; ++j) xs[j] = x + (tg + j) * n;
            micro_for_type<k_rows>(raw ? w.type : GgmlType::F32, n_t)(rows, xs, 0, nv, acc, true);
            for (int i = 0; i < n_r; ++i)
                for (int j = 0; j < n_t; ++j) fin(row_of[i], tg + j, acc + (i * n_t + j) * V::width);
        }
    }
}

void matmul_stream(const WeightView &w, const float *x, int64_t n_tokens, float *y, ThreadPool &pool) {
    const int64_t chunk =
        std::max<int64_t>(k_rows, k_stream_task_bytes / std::max<int64_t>(w.row_bytes, 1) / k_rows * k_rows);
    const int64_t n_tasks = (w.n_rows + chunk - 1) / chunk;
    // 4 rows at a time, taken from the 4 quarters of the task's rows
    // (stream_rows): 4 independent FMA chains, and with more tokens each
    // activation load serves 4 rows. One token used to run one row at a time
    // (one stream per thread), which was as fast while the weights sat on
    // 4 KiB pages; on huge pages it is bound by the latency of its single FMA
    // chain (Llama-1B F16 tg64 ~12 -> ~13.5-19 tok/s with 4 rows, alternated).
    pool.run(n_tasks, [&](int64_t task, int) {
        const int64_t r0 = task * chunk, r1 = std::min(r0 + chunk, w.n_rows);
        stream_rows(w, x, n_tokens, y, r0, r1);
    });
}

// ---- Prefill ---------------------------------------------------------------
// Tasks of k_pf_rows rows x k_pf_tokens tokens. F16 and BF16 run each
// (4 rows x V::max_tokens tokens) micro-tile over the whole k straight from
// the weight rows: the accumulators never leave the registers and no slab is
// written (measured on
// the Llama-3.2-1B-shaped F16 file: pp512 ~88 -> ~104 tok/s against the
// k-blocked slab path, docs/benchmarks.md). The other types are cut along k
// into blocks of k_pf_cols columns: per block the task's weight rows are
// decoded to an f32 slab (k_pf_rows x k_pf_cols, L1/L2-resident, reused by
// every token group) and each micro-tile adds the block to its vector
// accumulators, which wait in per-thread scratch between blocks.
constexpr int64_t k_pf_rows = 16;
constexpr int64_t k_pf_tokens = 32 * V::max_tokens;
constexpr int64_t k_pf_cols = 512;

struct PfScratch {
    AlignedBuffer<float> slab;  // [k_pf_rows, k_pf_cols] decoded weights
    AlignedBuffer<float> acc;   // [k_pf_rows / k_rows, token groups, k_rows * max_tokens * width]
};
PfScratch &pf_scratch() {
    static thread_local PfScratch s;
    return s;
}

void matmul_prefill(const WeightView &w, const float *x, int64_t n_tokens, float *y, ThreadPool &pool) {
    static_assert(k_pf_rows % k_rows == 0 && k_pf_cols % 256 == 0);
    const int64_t n = w.n_cols, nv = n / V::width * V::width;
    const uint8_t *base = static_cast<const uint8_t *>(w.data);
    const int64_t n_rb = (w.n_rows + k_pf_rows - 1) / k_pf_rows, n_tb = (n_tokens + k_pf_tokens - 1) / k_pf_tokens;
    const int64_t tile_floats = k_rows * V::max_tokens * V::width;
    constexpr int64_t n_tg_max = k_pf_tokens / V::max_tokens;
    const TypeTraits *tr = type_traits(w.type);
    const Finish fin{w, x, y, nv};
    // F32 rows are twice the bytes per FMA and measured slower in place (the
    // f32 bench case: ~150 vs ~170 GFLOP/s), so they keep the slab.
    const bool in_place = w.type == GgmlType::F16 || w.type == GgmlType::BF16;
    // Token-block-major: consecutive tasks share activations (L2), the weights stream.
    pool.run(n_rb * n_tb, [&](int64_t task, int) {
        const int64_t rb = task % n_rb, tb = task / n_rb;
        const int64_t r0 = rb * k_pf_rows, r1 = std::min(r0 + k_pf_rows, w.n_rows);
        const int64_t t0 = tb * k_pf_tokens, t1 = std::min(t0 + k_pf_tokens, n_tokens);
        const int64_t n_r = r1 - r0;
        PfScratch &sc = pf_scratch();
        float *slab = in_place ? nullptr : grow(sc.slab, static_cast<size_t>(k_pf_rows * k_pf_cols));
        float *acc = grow(sc.acc, static_cast<size_t>(k_pf_rows / k_rows * n_tg_max * tile_floats));
        // k0 == 0 always runs, so rows shorter than one vector still start
        // their accumulators at zero.
        const int64_t k_block = in_place ? std::max<int64_t>(nv, 1) : k_pf_cols;
        for (int64_t k0 = 0; k0 == 0 || k0 < nv; k0 += k_block) {
            const int64_t k1 = std::min(k0 + k_block, nv);
            // Other types: each row's block [k0, k1) decoded to the slab, a
            // compact L1-resident panel. Block types: k0 and k1 - k0 are
            // multiples of the block size (k_pf_cols is a multiple of 256,
            // and nv = n for them).
            const void *rows[k_pf_rows];
            for (int64_t i = 0; i < k_pf_rows; ++i) {
                if (in_place) {
                    // Whole rows (k0 == 0); missing rows of the last group
                    // repeat the first, their results are dropped.
                    rows[i] = base + (r0 + (i < n_r ? i : 0)) * w.row_bytes;
                    continue;
                }
                if (i < n_r)
                    decode_row_f32(w.type, base + (r0 + i) * w.row_bytes + k0 / tr->block_size * tr->type_size,
                                   slab + i * k_pf_cols, k1 - k0);
                // Missing rows of the last group repeat the first; their results are dropped.
                rows[i] = slab + (i < n_r ? i : 0) * k_pf_cols;
            }
            // The next block's weights come from L3 or DRAM: ask for them now,
            // so they arrive while this block's micro-tiles run.
            if (k1 < nv) {
                const int64_t off = k1 / tr->block_size * tr->type_size;
                const int64_t len = std::min(k_pf_cols, nv - k1) / tr->block_size * tr->type_size;
                for (int64_t i = 0; i < n_r; ++i) prefetch(base + (r0 + i) * w.row_bytes + off, len);
            }
            for (int64_t tg = t0; tg < t1; tg += V::max_tokens) {
                const int nt = static_cast<int>(std::min<int64_t>(V::max_tokens, t1 - tg));
                const float *xs[V::max_tokens];
                for (int j = 0; j < nt; ++j) xs[j] = x + (tg + j) * n + k0;
                const MicroFn fn = micro_for_type<k_rows>(in_place ? w.type : GgmlType::F32, nt);
                for (int64_t rg = 0; rg < n_r; rg += k_rows) {
                    const void *rs[k_rows];
                    for (int i = 0; i < k_rows; ++i) rs[i] = rows[rg + i];
                    fn(rs, xs, 0, k1 - k0, acc + (rg / k_rows * n_tg_max + (tg - t0) / V::max_tokens) * tile_floats,
                       k0 == 0);
                }
            }
        }
        for (int64_t tg = t0; tg < t1; tg += V::max_tokens) {
            const int nt = static_cast<int>(std::min<int64_t>(V::max_tokens, t1 - tg));
#if defined(__AVX512F__)
            if (nv == w.n_cols) {
                // The task's 16 rows of one token reduced together (sum16),
                // stored as one contiguous run of y.
                static_assert(k_pf_rows == 16);
                const __mmask16 m = static_cast<__mmask16>(n_r == 16 ? 0xffffu : (1u << n_r) - 1u);
                for (int j = 0; j < nt; ++j) {
                    __m512 v[16];
                    for (int64_t i = 0; i < 16; ++i) {
                        const int64_t ri = i < n_r ? i : 0;
                        v[i] = V::load(acc + (ri / k_rows * n_tg_max + (tg - t0) / V::max_tokens) * tile_floats +
                                       ((ri % k_rows) * nt + j) * V::width);
                    }
                    _mm512_mask_storeu_ps(y + (tg + j) * w.n_rows + r0, m, sum16(v));
                }
                continue;
            }
#endif
            for (int64_t r = r0; r < r1; ++r) {
                const float *tile =
                    acc + ((r - r0) / k_rows * n_tg_max + (tg - t0) / V::max_tokens) * tile_floats;
                for (int j = 0; j < nt; ++j) fin(r, tg + j, tile + (((r - r0) % k_rows) * nt + j) * V::width);
            }
        }
    });
}

}  // namespace

void matmul_float(const WeightView &w, const float *x, int64_t n_tokens, float *y, ThreadPool &pool) {
    if (n_tokens <= k_stream_max_tokens)
        matmul_stream(w, x, n_tokens, y, pool);
    else
        matmul_prefill(w, x, n_tokens, y, pool);
}

void get_row(const WeightView &w, int64_t row, float *out) {
    SIEVE_CHECKF(row >= 0 && row < w.n_rows, "get_row: row %lld out of [0, %lld)", static_cast<long long>(row),
                 static_cast<long long>(w.n_rows));
    decode_row_f32(w.type, static_cast<const uint8_t *>(w.data) + row * w.row_bytes, out, w.n_cols);
}

}  // namespace sieve::cpu
