// Causal GQA attention over contiguous per-KV-head lanes.
//
// Prefill (FlashAttention-2, Dao 2023, §3.1: queries outer, keys inner, online
// softmax): a task is (query head, tile of k_q_tile queries). It walks key
// tiles up to the last key its last query can see; each query row keeps a
// running max m, a running sum l of exp(s - m) and an unnormalized output
// accumulator, rescaled by exp(m_old - m_new) whenever the max grows. The
// tile's keys and values stay in cache while every query row of the tile
// uses them.
//
//   keys  0 ........................ q_pos0+i0 ......... q_pos0+i1-1
//   query i0      sees [0, q_pos0+i0]
//   query i1-1    sees [0, q_pos0+i1-1]          (key tiles past that: skipped)
//
// Decode (flash-decoding): the single query's visible keys are split into
// chunks; a task is (KV head, chunk) and serves every query head of that KV
// head's group, so each K/V row is read once per group. Each task leaves a
// partial (m, l, acc) per head; a merge combines the chunks:
//   M = max_c m_c,  L = sum_c l_c e^(m_c - M),  O = sum_c acc_c e^(m_c - M) / L.
// lse = m + log l is the log of sum exp(scale * q.k) over visible keys.
#include <algorithm>
#include <cmath>

#include "sieve/core/aligned.h"
#include "sieve/kernels/cpu/attention_args.h"
#include "sieve/kernels/cpu/attention_decode_core.h"
#include "sieve/kernels/cpu/ops.h"
#include "sieve/kernels/cpu/simd.h"

namespace sieve::cpu {

namespace {

constexpr int64_t k_q_tile = 32;
constexpr int64_t k_kv_tile = 64;
constexpr int64_t k_min_decode_chunk = 64;

// thread_local for the same reason as in matmul.cpp: persistent pool threads
// keep their buffers, which only grow, so steady-state calls do not allocate.
struct AttnScratch {
    AlignedBuffer<float> rows;     // per thread: accumulators, maxes, sums, scores
    AlignedBuffer<float> partial;  // calling thread only: decode partials of all tasks
};
AttnScratch &attn_scratch() {
    static thread_local AttnScratch s;
    return s;
}
float *grow(AlignedBuffer<float> &b, int64_t n) {
    if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
    return b.data();
}

}  // namespace

void attention_prefill(const AttnArgs &a, ThreadPool &pool) {
    attn_check_args(a, "attention_prefill");
    const int64_t d = a.head_dim, group = a.n_head / a.n_head_kv;
    const int64_t n_q_tiles = (a.n_q + k_q_tile - 1) / k_q_tile;
    pool.run(a.n_head * n_q_tiles, [&](int64_t task, int) {
        const int64_t h = task / n_q_tiles;
        const int64_t i0 = task % n_q_tiles * k_q_tile, i1 = std::min(i0 + k_q_tile, a.n_q);
        const int64_t nt = i1 - i0;
        const float *k = a.k[h / group], *v = a.v[h / group];
        float *acc = grow(attn_scratch().rows, k_q_tile * d + 2 * k_q_tile + k_kv_tile);
        float *m = acc + k_q_tile * d, *l = m + k_q_tile, *s = l + k_q_tile;
        std::fill(acc, acc + nt * d, 0.0f);
        std::fill(m, m + nt, -INFINITY);
        std::fill(l, l + nt, 0.0f);
        const int64_t k_end = a.q_pos0 + i1;  // exclusive; <= n_kv by precondition
        for (int64_t k0 = 0; k0 < k_end; k0 += k_kv_tile) {
            const int64_t k1 = std::min(k0 + k_kv_tile, k_end);
            for (int64_t i = i0; i < i1; ++i) {
                const int64_t kk1 = std::min(k1, a.q_pos0 + i + 1);  // causal limit of row i
                if (kk1 <= k0) continue;
                const float *q = a.q + (i * a.n_head + h) * d;
                float mx = -INFINITY;
                for (int64_t j = k0; j < kk1; ++j) {
                    s[j - k0] = a.scale * simd::dot(q, k + j * d, d);
                    mx = std::max(mx, s[j - k0]);
                }
                const int64_t r = i - i0;
                const float m_new = std::max(m[r], mx);
                const float alpha = std::exp(m[r] - m_new);  // 0 on the first tile (m = -inf)
                float *acc_r = acc + r * d;
                const float sum = simd::exp_sub_sum(s, m_new, kk1 - k0);
                simd::scale_axpy(acc_r, alpha, s[0], v + k0 * d, d);
                for (int64_t j = k0 + 1; j < kk1; ++j) simd::scale_axpy(acc_r, 1.0f, s[j - k0], v + j * d, d);
                m[r] = m_new;
                l[r] = l[r] * alpha + sum;
            }
        }
        for (int64_t r = 0; r < nt; ++r) {
            float *out = a.o + ((i0 + r) * a.n_head + h) * d;
            const float inv = 1.0f / l[r];
            for (int64_t c = 0; c < d; ++c) out[c] = acc[r * d + c] * inv;
            if (a.lse) a.lse[h * a.n_q + i0 + r] = m[r] + std::log(l[r]);
        }
    });
}

void attention_decode(const AttnArgs &a, ThreadPool &pool) {
    attn_check_args(a, "attention_decode");
    SIEVE_CHECKF(a.n_q == 1, "attention_decode: n_q = %lld, expected 1 (use attention_prefill)",
                 static_cast<long long>(a.n_q));
    const int64_t d = a.head_dim, group = a.n_head / a.n_head_kv;
    const int64_t n_vis = a.q_pos0 + 1;
    // Enough chunks for ~8 tasks per thread (a 2-thread split of 3 KV heads x 3
    // chunks leaves one thread 5 tasks to the other's 4), none shorter than
    // k_min_decode_chunk keys.
    const int64_t want = std::max<int64_t>(1, (8 * pool.n_threads() + a.n_head_kv - 1) / a.n_head_kv);
    int64_t n_chunks = std::clamp<int64_t>((n_vis + k_min_decode_chunk - 1) / k_min_decode_chunk, 1, want);
    const int64_t chunk = (n_vis + n_chunks - 1) / n_chunks;
    n_chunks = (n_vis + chunk - 1) / chunk;
    // partial[h][c] = (m, l, acc[d])
    const int64_t part_len = d + 2;
    float *partial = grow(attn_scratch().partial, a.n_head * n_chunks * part_len);
    pool.run(a.n_head_kv * n_chunks, [&](int64_t task, int) {
        const int64_t kvh = task / n_chunks, c = task % n_chunks;
        const int64_t j0 = c * chunk, j1 = std::min(j0 + chunk, n_vis);
        const int64_t h0 = kvh * group, hstride = n_chunks * part_len;
        float *s = grow(attn_scratch().rows, group * decode::k_blk);
        float *part0 = partial + (h0 * n_chunks + c) * part_len;  // head h0 + g at part0 + g * hstride
        decode::init_parts(part0, group, hstride, d);
        for (int64_t jb = j0; jb < j1; jb += decode::k_blk) {
            const int64_t nb = std::min(decode::k_blk, j1 - jb);
            decode::block(a.q + h0 * d, group, a.k[kvh] + jb * d, a.v[kvh] + jb * d, nb, d, a.scale, s, part0,
                          hstride);
        }
    });
    decode::merge(partial, a.n_head, n_chunks, d, a.o, a.lse);
}

}  // namespace sieve::cpu
