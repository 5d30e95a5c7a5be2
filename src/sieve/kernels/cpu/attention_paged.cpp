#include "sieve/kernels/cpu/attention_paged.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "sieve/core/aligned.h"
#include "sieve/core/status.h"
#include "sieve/kernels/cpu/attention_decode_core.h"

namespace sieve::cpu {

namespace {

void check_args(const PagedAttnArgs &a, const char *who) {
    SIEVE_CHECKF(a.n_kv >= 1 && a.block_size >= 1 && a.n_head >= 1 && a.n_head_kv >= 1 &&
                     a.n_head % a.n_head_kv == 0 && a.head_dim >= 1,
                 "%s: n_kv = %lld, block_size = %lld, n_head = %lld, n_head_kv = %lld, head_dim = %lld", who,
                 static_cast<long long>(a.n_kv), static_cast<long long>(a.block_size),
                 static_cast<long long>(a.n_head), static_cast<long long>(a.n_head_kv),
                 static_cast<long long>(a.head_dim));
    SIEVE_CHECKF(a.q && a.k_blocks && a.v_blocks && a.block_table && a.o, "%s: null pointer", who);
}

}  // namespace

void attention_decode_paged(const PagedAttnArgs &a, ThreadPool &pool) {
    check_args(a, "attention_decode_paged");
    const int64_t d = a.head_dim, group = a.n_head / a.n_head_kv, bs = a.block_size;
    const int64_t head_stride = bs * d, block_stride = a.n_head_kv * head_stride;
    // The same plan as attention_decode, with chunks of whole blocks (and
    // whole inner blocks of k_blk rows where blocks are smaller).
    const int64_t align = bs >= decode::k_blk ? bs : bs * ((decode::k_blk + bs - 1) / bs);
    const decode::ChunkPlan plan = decode::plan_chunks(a.n_kv, a.n_head_kv, pool.n_threads(), align);
    const int64_t n_chunks = plan.n_chunks, chunk = plan.chunk;
    const int64_t part_len = decode::part_len(d);
    float *partial = decode::grow(decode::scratch().partial, a.n_head * n_chunks * part_len);
    pool.run(a.n_head_kv * n_chunks, [&](int64_t task, int) {
        const int64_t kvh = task / n_chunks, c = task % n_chunks;
        const int64_t j0 = c * chunk, j1 = std::min(j0 + chunk, a.n_kv);
        const int64_t h0 = kvh * group, hstride = n_chunks * part_len;
        float *s = decode::grow(decode::scratch().scores, group * decode::k_blk);
        float *part0 = partial + (h0 * n_chunks + c) * part_len;
        decode::init_parts(part0, group, hstride, d);
        // Chunks start on block boundaries; within a block a head's rows are
        // contiguous, so the shared inner loop runs on runs of one block.
        for (int64_t b0 = j0; b0 < j1; b0 += bs) {
            const int64_t off = a.block_table[b0 / bs] * block_stride + kvh * head_stride;
            const int64_t n = std::min(bs, j1 - b0);
            for (int64_t r = 0; r < n; r += decode::k_blk) {
                const int64_t nb = std::min(decode::k_blk, n - r);
                decode::block<decode::RowF32>(a.q + h0 * d, group, a.k_blocks + off + r * d, a.v_blocks + off + r * d, nb, d, a.scale,
                              s, part0, hstride);
            }
        }
    });
    decode::merge(partial, a.n_head, n_chunks, d, a.o, a.lse);
}

void attention_decode_paged_ref(const PagedAttnArgs &a) {
    check_args(a, "attention_decode_paged_ref");
    const int64_t d = a.head_dim, group = a.n_head / a.n_head_kv, bs = a.block_size;
    std::vector<double> s(static_cast<size_t>(a.n_kv)), acc(static_cast<size_t>(d));
    for (int64_t h = 0; h < a.n_head; ++h) {
        const int64_t g = h / group;
        const float *q = a.q + h * d;
        auto row = [&](const float *blocks, int64_t t) {
            return blocks + ((static_cast<int64_t>(a.block_table[t / bs]) * a.n_head_kv + g) * bs + t % bs) * d;
        };
        double mx = -INFINITY;
        for (int64_t t = 0; t < a.n_kv; ++t) {
            const float *k = row(a.k_blocks, t);
            double dot = 0.0;
            for (int64_t c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * k[c];
            s[static_cast<size_t>(t)] = dot * a.scale;
            mx = std::max(mx, s[static_cast<size_t>(t)]);
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        double l = 0.0;
        for (int64_t t = 0; t < a.n_kv; ++t) {
            const double p = std::exp(s[static_cast<size_t>(t)] - mx);
            const float *v = row(a.v_blocks, t);
            for (int64_t c = 0; c < d; ++c) acc[static_cast<size_t>(c)] += p * v[c];
            l += p;
        }
        for (int64_t c = 0; c < d; ++c) a.o[h * d + c] = static_cast<float>(acc[static_cast<size_t>(c)] / l);
        if (a.lse) a.lse[h] = static_cast<float>(mx + std::log(l));
    }
}

}  // namespace sieve::cpu
