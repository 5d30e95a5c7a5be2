// Causal GQA decode attention over contiguous per-KV-head lanes (prefill is
// in attention_prefill.cpp).
//
// Decode (flash-decoding): the single query's visible keys are split into
// chunks; a task is (KV head, chunk) and serves every query head of that KV
// head's group, so each K/V row is read once per group. Each task leaves a
// partial (m, l, acc) per head; a merge combines the chunks:
//   M = max_c m_c,  L = sum_c l_c e^(m_c - M),  O = sum_c acc_c e^(m_c - M) / L.
// lse = m + log l is the log of sum exp(scale * q.k) over visible keys.
// Lanes may hold different row counts (AttnArgs::past): the query sees all
// n_past(g) + 1 rows of KV head g's lane.
#include <algorithm>
#include <cmath>

#include "sieve/core/aligned.h"
#include "sieve/kernels/cpu/attention_args.h"
#include "sieve/kernels/cpu/attention_decode_core.h"
#include "sieve/kernels/cpu/ops.h"
#include "sieve/kernels/cpu/simd.h"

namespace sieve::cpu {

namespace {

template <class R>
void decode_typed(const AttnArgs &a, ThreadPool &pool) {
    const int64_t d = a.head_dim, group = a.n_head / a.n_head_kv;
    // One plan for every head, sized by the longest lane; chunks past a
    // shorter lane's end leave an empty partial (m = -inf, l = 0), which the
    // merge weighs 0. With equal lanes this is the dense plan exactly.
    const decode::ChunkPlan plan =
        decode::plan_chunks(attn_max_past(a) + 1, a.n_head_kv, pool.n_threads(), decode::k_blk);
    const int64_t n_chunks = plan.n_chunks, chunk = plan.chunk;
    // partial[h][c] = (acc[d], m, l), part_len(d) floats
    const int64_t part_len = decode::part_len(d);
    float *partial = decode::grow(decode::scratch().partial, a.n_head * n_chunks * part_len);
    pool.run(a.n_head_kv * n_chunks, [&](int64_t task, int) {
        const int64_t kvh = task / n_chunks, c = task % n_chunks;
        const int64_t n_vis = a.past(kvh) + 1;
        const int64_t j0 = c * chunk, j1 = std::min(j0 + chunk, n_vis);
        const int64_t h0 = kvh * group, hstride = n_chunks * part_len;
        float *s = decode::grow(decode::scratch().scores, group * decode::k_blk);
        float *part0 = partial + (h0 * n_chunks + c) * part_len;  // head h0 + g at part0 + g * hstride
        decode::init_parts(part0, group, hstride, d);
        const auto *k = static_cast<const typename R::T *>(a.k[kvh]);
        const auto *v = static_cast<const typename R::T *>(a.v[kvh]);
        for (int64_t jb = j0; jb < j1; jb += decode::k_blk) {
            const int64_t nb = std::min(decode::k_blk, j1 - jb);
            decode::block<R>(a.q + h0 * d, group, k + jb * d, v + jb * d, nb, d, a.scale, s, part0, hstride);
        }
    });
    decode::merge(partial, a.n_head, n_chunks, d, a.o, a.lse);
}

}  // namespace

void attention_decode(const AttnArgs &a, ThreadPool &pool) {
    attn_check_args(a, "attention_decode");
    SIEVE_CHECKF(a.n_q == 1, "attention_decode: n_q = %lld, expected 1 (use attention_prefill)",
                 static_cast<long long>(a.n_q));
    SIEVE_CHECKF(a.head_dim <= decode::k_max_row, "attention_decode: head_dim %lld > %lld",
                 static_cast<long long>(a.head_dim), static_cast<long long>(decode::k_max_row));
    switch (a.kv_type) {
    case RowType::f32: return decode_typed<decode::RowF32>(a, pool);
    case RowType::f16: return decode_typed<decode::RowF16>(a, pool);
    case RowType::bf16: return decode_typed<decode::RowBF16>(a, pool);
    }
}

}  // namespace sieve::cpu
