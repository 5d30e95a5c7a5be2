// Causal GQA prefill attention over contiguous per-KV-head lanes.
//
// FlashAttention-2 (Dao 2023, §3.1: queries outer, keys inner, online
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
// lse = m + log l is the log of sum exp(scale * q.k) over visible keys.
#include <algorithm>
#include <cmath>

#include "sieve/core/aligned.h"
#include "sieve/kernels/cpu/attention_args.h"
#include "sieve/kernels/cpu/ops.h"
#include "sieve/kernels/cpu/simd.h"

namespace sieve::cpu {

namespace {

constexpr int64_t k_q_tile = 32;
constexpr int64_t k_kv_tile = 64;

// thread_local for the same reason as in matmul.cpp: persistent pool threads
// keep their buffers, which only grow, so steady-state calls do not allocate.
float *prefill_scratch(int64_t n) {
    static thread_local AlignedBuffer<float> b;
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
        float *acc = prefill_scratch(k_q_tile * d + 2 * k_q_tile + k_kv_tile);
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

}  // namespace sieve::cpu
