// The inner loop of decode attention, shared by the contiguous-lane kernel
// (attention_decode) and the paged one (attention_decode_paged) so the two
// designs are measured with the same arithmetic: they differ only in where
// the rows come from.
//
// A task owns one KV head's query group (group heads) and a chunk of keys.
// Its partial result per head g lives at part0 + g * hstride as (m, l,
// acc[d]): running max of the scaled scores, sum of exp(score - m), and the
// exp-weighted sum of V rows. decode_merge() combines the chunks of every
// head (flash-decoding).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "sieve/core/aligned.h"
#include "sieve/kernels/cpu/simd.h"

namespace sieve::cpu::decode {

// Rows per inner block: the group's scores of one block stay in L1.
constexpr int64_t k_blk = 64;

// Per-thread buffers shared by both decode kernels, so the lane and paged
// kernels also write their scores and partials at the same addresses (one
// less difference between the two in the comparison). thread_local because
// the pool's threads are persistent: buffers only grow, steady-state calls do
// not allocate.
struct Scratch {
    AlignedBuffer<float> scores;   // per thread: [group * k_blk]
    AlignedBuffer<float> partial;  // calling thread: partials of all tasks
};
inline Scratch &scratch() {
    static thread_local Scratch s;
    return s;
}
inline float *grow(AlignedBuffer<float> &b, int64_t n) {
    if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
    return b.data();
}

// How a decode call splits each KV head's keys into chunks (tasks). Both
// kernels use this one plan so the lane-vs-block comparison differs only in
// where rows live:
//   - one thread: one chunk per KV head (splitting would only add merges);
//   - otherwise about 8 tasks per thread in total, so the last tasks to be
//     handed out are short and both threads finish together, and no chunk
//     shorter than k_min_chunk keys;
//   - chunk lengths are multiples of `align` (k_blk for lanes, so every inner
//     block but the last is full; whole blocks for the paged store).
struct ChunkPlan {
    int64_t n_chunks = 1, chunk = 0;
};
constexpr int64_t k_min_chunk = 64;
inline ChunkPlan plan_chunks(int64_t n_kv, int64_t n_head_kv, int n_threads, int64_t align) {
    ChunkPlan p;
    const int64_t want = n_threads <= 1 ? 1 : std::max<int64_t>(1, (8 * n_threads + n_head_kv - 1) / n_head_kv);
    p.n_chunks = std::clamp<int64_t>((n_kv + k_min_chunk - 1) / k_min_chunk, 1, want);
    p.chunk = (n_kv + p.n_chunks - 1) / p.n_chunks;
    p.chunk = (p.chunk + align - 1) / align * align;
    p.n_chunks = (n_kv + p.chunk - 1) / p.chunk;
    return p;
}

inline void init_parts(float *part0, int64_t group, int64_t hstride, int64_t d) {
    for (int64_t g = 0; g < group; ++g) {
        part0[g * hstride] = -INFINITY;
        part0[g * hstride + 1] = 0.0f;
        std::fill(part0 + g * hstride + 2, part0 + g * hstride + 2 + d, 0.0f);
    }
}

// nb <= k_blk consecutive rows: k_rows / v_rows [nb, d]. q: the group's
// queries [group, d]. s: scratch [group * k_blk].
inline void block(const float *q, int64_t group, const float *k_rows, const float *v_rows, int64_t nb, int64_t d,
                  float scale, float *s, float *part0, int64_t hstride) {
    // 1. Each K row is read from memory once and dotted with every query head of the group.
    for (int64_t j = 0; j < nb; ++j) {
        const float *kr = k_rows + j * d;
        for (int64_t g = 0; g < group; ++g) s[g * k_blk + j] = scale * simd::dot(q + g * d, kr, d);
    }
    // 2. Online softmax per head over the block.
    for (int64_t g = 0; g < group; ++g) {
        float *part = part0 + g * hstride, *sg = s + g * k_blk;
        float bmax = -INFINITY;
        for (int64_t j = 0; j < nb; ++j) bmax = std::max(bmax, sg[j]);
        const float m_new = std::max(part[0], bmax);
        const float alpha = std::exp(part[0] - m_new);  // 0 on the first block (m = -inf)
        const float sum = simd::exp_sub_sum(sg, m_new, nb);
        if (alpha != 1.0f) simd::scale(part + 2, alpha, d);
        part[0] = m_new;
        part[1] = part[1] * alpha + sum;
    }
    // 3. Each V row read once, accumulated into every head of the group.
    for (int64_t j = 0; j < nb; ++j) {
        const float *vr = v_rows + j * d;
        for (int64_t g = 0; g < group; ++g) simd::scale_axpy(part0 + g * hstride + 2, 1.0f, s[g * k_blk + j], vr, d);
    }
}

// partial: [n_head][n_chunks] x (m, l, acc[d]) -> o [n_head, d], lse [n_head] (optional).
inline void merge(const float *partial, int64_t n_head, int64_t n_chunks, int64_t d, float *o, float *lse) {
    const int64_t part_len = d + 2;
    for (int64_t h = 0; h < n_head; ++h) {
        const float *ph = partial + h * n_chunks * part_len;
        float mx = -INFINITY;
        for (int64_t c = 0; c < n_chunks; ++c) mx = std::max(mx, ph[c * part_len]);
        float *out = o + h * d;
        std::fill(out, out + d, 0.0f);
        float l = 0.0f;
        for (int64_t c = 0; c < n_chunks; ++c) {
            const float w = std::exp(ph[c * part_len] - mx);
            l += ph[c * part_len + 1] * w;
            simd::scale_axpy(out, 1.0f, w, ph + c * part_len + 2, d);
        }
        simd::scale(out, 1.0f / l, d);
        if (lse) lse[h] = mx + std::log(l);
    }
}

}  // namespace sieve::cpu::decode
