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
//
// attention_decode_multi runs the decode step of many sequences as one
// dispatch of (sequence, KV head, chunk) tasks, each sequence with the plan
// and merge it would get alone.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <vector>

#include "sieve/core/aligned.h"
#include "sieve/kernels/cpu/attention_args.h"
#include "sieve/kernels/cpu/attention_decode_core.h"
#include "sieve/kernels/cpu/ops.h"
#include "sieve/kernels/cpu/simd.h"

namespace sieve::cpu {

namespace {

// The plan every decode call of `a` uses (attention_decode and
// attention_decode_multi alike): one plan for every head, sized by the
// longest lane; chunks past a shorter lane's end leave an empty partial
// (m = -inf, l = 0), which the merge weighs 0. With equal lanes this is the
// dense plan exactly.
// With spans the plan is sized by the most rows a head reads, and chunk c
// covers rows [c * chunk, (c + 1) * chunk) of the head's spans laid end to
// end; one span over the whole lane is the dense plan.
decode::ChunkPlan decode_plan(const AttnArgs &a, int n_threads) {
    int64_t n = attn_max_past(a) + 1;
    if (a.spans) {
        n = 0;
        for (int64_t g = 0; g < a.n_head_kv; ++g) n = std::max(n, a.spans->n_rows(g));
    }
    return decode::plan_chunks(n, a.n_head_kv, n_threads, decode::k_blk);
}

// One task: KV head kvh's query group over chunk c of the plan, into
// partial[h][c] = (acc[d], m, l), part_len(d) floats. Not inlined (nor the
// merge below), so the single-sequence and multi-sequence kernels run the
// very same machine code per task and per merge: their results are equal
// bitwise whatever the compiler would have contracted or reordered in
// different inlining contexts.
// K rows of type RK, V rows of RV.
template <class RK, class RV>
[[gnu::noinline]] void decode_task(const AttnArgs &a, const decode::ChunkPlan &plan, float *partial,
                                   int64_t kvh, int64_t c) {
    const int64_t d = a.head_dim, group = a.n_head / a.n_head_kv;
    const int64_t n_chunks = plan.n_chunks, chunk = plan.chunk, part_len = decode::part_len(d);
    const int64_t n_vis = a.past(kvh) + 1;
    const int64_t j0 = c * chunk, j1 = std::min(j0 + chunk, n_vis);
    const int64_t h0 = kvh * group, hstride = n_chunks * part_len;
    float *s = decode::grow(decode::scratch().scores, group * decode::k_blk);
    float *part0 = partial + (h0 * n_chunks + c) * part_len;  // head h0 + g at part0 + g * hstride
    decode::init_parts(part0, group, hstride, d);
    const auto *k = static_cast<const typename RK::T *>(a.k[kvh]);
    const auto *v = static_cast<const typename RV::T *>(a.v[kvh]);
    // Quantized K: Q.K in integers, the group's queries rounded once here.
    const decode::QInt *qi = nullptr;
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    decode::QInt qint;
    if (attention_decode_rounds_query(a.kv_type.k, d, group)) {
        if constexpr (std::is_same_v<RK, decode::RowQ8_0> || std::is_same_v<RK, decode::RowQ4_0>) {
            qint = decode::quantize_query<RK>(
                a.q + h0 * d, group, d, decode::grow(decode::scratch().qint, decode::qint_floats(group, d)));
            qi = &qint;
        }
    }
#endif
    if (!a.spans) {
        for (int64_t jb = j0; jb < j1; jb += decode::k_blk) {
            // The next block's rows (the next chunk's first, past j1) are
            // prefetched while this one is computed: from DRAM, one head's
            // rows alone do not keep enough loads in flight.
            const int64_t nb = std::min(decode::k_blk, j1 - jb), jn = jb + decode::k_blk;
            decode::Ahead<RK, RV> ahead;
            if (jn < n_vis)
                ahead = {k + jn * RK::stride(d), v + jn * RV::stride(d), std::min(decode::k_blk, n_vis - jn)};
            decode::block<RK, RV>(a.q + h0 * d, group, k + jb * RK::stride(d), v + jb * RV::stride(d), nb, d,
                                  a.scale, s, part0, hstride, ahead, qi);
        }
        return;
    }
    // Selected rows: [j0, j1) counts rows of the spans laid end to end (x = 0
    // at the first span's begin), walked in blocks of k_blk of those rows from
    // j0 (a multiple of k_blk). A block gathers the pieces of every span it
    // covers, so 16-row pages cost one softmax update per 64 rows like dense
    // rows do; a single span [0, n) walks exactly the dense blocks.
    const RowSpans &sp = *a.spans;
    const int64_t n_sel = sp.n_rows(kvh), x1 = std::min(j0 + chunk, n_sel);
    const auto len = [&](int64_t i) { return sp.end(kvh, i) - sp.begin(kvh, i); };
    int64_t i = 0, x = 0;  // span i holds selected rows [x, x + len(i))
    decode::Piece<RK, RV> pieces[decode::k_blk];
    for (int64_t xb = j0; xb < x1; xb += decode::k_blk) {
        const int64_t xe = std::min(xb + decode::k_blk, x1);
        int np = 0;
        for (int64_t cur = xb; cur < xe;) {
            for (; x + len(i) <= cur; ++i) x += len(i);
            const int64_t r = sp.begin(kvh, i) + (cur - x), n = std::min(xe, x + len(i)) - cur;
            pieces[np++] = {k + r * RK::stride(d), v + r * RV::stride(d), n};
            cur += n;
        }
        decode::block_pieces<RK, RV>(a.q + h0 * d, group, pieces, np, xe - xb, d, a.scale, s, part0, hstride,
                                     {}, qi);
    }
}

// The decode task for the args' K and V types. f32 (the oracle) pairs with
// f32 only (check_decode_args); the half and quantized types pair freely.
using TaskFn = void (*)(const AttnArgs &, const decode::ChunkPlan &, float *, int64_t, int64_t);
template <class RK>
TaskFn task_for_v(RowType v) {
    switch (v) {
        case RowType::f16:
            return &decode_task<RK, decode::RowF16>;
        case RowType::bf16:
            return &decode_task<RK, decode::RowBF16>;
        case RowType::q8_0:
            return &decode_task<RK, decode::RowQ8_0>;
        case RowType::q4_0:
            return &decode_task<RK, decode::RowQ4_0>;
        case RowType::f32:
            break;
    }
    return nullptr;
}
TaskFn task_for(KvRowTypes t) {
    switch (t.k) {
        case RowType::f32:
            return t.v == RowType::f32 ? &decode_task<decode::RowF32, decode::RowF32> : nullptr;
        case RowType::f16:
            return task_for_v<decode::RowF16>(t.v);
        case RowType::bf16:
            return task_for_v<decode::RowBF16>(t.v);
        case RowType::q8_0:
            return task_for_v<decode::RowQ8_0>(t.v);
        case RowType::q4_0:
            return task_for_v<decode::RowQ4_0>(t.v);
    }
    return nullptr;
}

void decode_task_any(const AttnArgs &a, const decode::ChunkPlan &plan, float *partial, int64_t kvh,
                     int64_t c) {
    task_for(a.kv_type)(a, plan, partial, kvh, c);
}

[[gnu::noinline]] void decode_merge(const AttnArgs &a, const decode::ChunkPlan &plan, const float *partial) {
    decode::merge(partial, a.n_head, plan.n_chunks, a.head_dim, a.o, a.lse);
}

void decode_typed(const AttnArgs &a, ThreadPool &pool) {
    const decode::ChunkPlan plan = decode_plan(a, pool.n_threads());
    float *partial = decode::grow(decode::scratch().partial, a.n_head * plan.n_chunks * decode::part_len(a.head_dim));
    const TaskFn task_fn = task_for(a.kv_type);
    pool.run(a.n_head_kv * plan.n_chunks, [&](int64_t task, int) {
        task_fn(a, plan, partial, task / plan.n_chunks, task % plan.n_chunks);
    });
    decode_merge(a, plan, partial);
}

void check_decode_args(const AttnArgs &a, const char *who) {
    attn_check_args(a, who);
    SIEVE_CHECKF(a.n_q == 1, "%s: n_q = %lld, expected 1 (use attention_prefill)", who,
                 static_cast<long long>(a.n_q));
    SIEVE_CHECKF(task_for(a.kv_type), "%s: K rows %s with V rows %s; f32 rows (the oracle) go with f32 only",
                 who, row_type_name(a.kv_type.k), row_type_name(a.kv_type.v));
    SIEVE_CHECKF(!a.lambda, "%s: a lambda-shaped mask is for prefill (a streaming lane decodes over its compacted rows)", who);
#ifndef NDEBUG
    if (a.spans) {
        const std::string e = attn_spans_error(a);
        SIEVE_CHECKF(e.empty(), "%s: %s", who, e.c_str());
    }
#endif
    SIEVE_CHECKF(a.head_dim <= decode::k_max_row, "%s: head_dim %lld > %lld", who,
                 static_cast<long long>(a.head_dim), static_cast<long long>(decode::k_max_row));
}

// Where each sequence of a multi call sits in the task list and the scratch.
struct MultiSeq {
    int64_t task0 = 0;     // first task of the sequence
    int64_t part0 = 0;     // its partials start at partial + part0 (a multiple of 16 floats)
    int64_t per = 1;       // consecutive chunks of one KV head per task
    int64_t groups = 1;    // tasks per KV head: ceil(plan.n_chunks / per)
    decode::ChunkPlan plan;
};
// The calling thread's, grown only (steady-state calls do not allocate).
struct MultiScratch {
    std::vector<MultiSeq> seqs;
    std::unique_ptr<std::atomic<int64_t>[]> left;  // [n_seq] tasks of each sequence not yet finished
    int64_t cap = 0;
};
MultiScratch &multi_scratch() {
    static thread_local MultiScratch s;
    return s;
}

}  // namespace

bool attention_decode_rounds_query(RowType t, int64_t head_dim, int64_t group) {
    return decode::k_qk_int && (t == RowType::q8_0 || t == RowType::q4_0) && decode::qk_int_fits(head_dim) &&
           group >= 1 && group <= 64;
}

void attention_decode(const AttnArgs &a, ThreadPool &pool) {
    check_decode_args(a, "attention_decode");
    decode_typed(a, pool);
}

// Tasks (sequence, KV head, chunk) in sequence order, each sequence with the
// plan attention_decode would use for it alone with this pool, its partials
// in a region of their own. The thread that finishes a sequence's last task
// merges that sequence (acq_rel on its counter makes every other task's
// partials visible to it), so there is no second dispatch and merges overlap
// other sequences' tasks. Per sequence this is attention_decode's task
// function over the same plan and its merge over the same partials: the same
// bits.
void attention_decode_multi(const AttnArgs *args, int64_t n_seq, ThreadPool &pool) {
    SIEVE_CHECKF(n_seq >= 0 && (n_seq == 0 || args), "attention_decode_multi: n_seq = %lld, args %p",
                 static_cast<long long>(n_seq), static_cast<const void *>(args));
    if (n_seq == 0) return;
    MultiScratch &ms = multi_scratch();
    if (ms.seqs.size() < static_cast<size_t>(n_seq)) ms.seqs.resize(static_cast<size_t>(n_seq));
    if (ms.cap < n_seq) {
        ms.left.reset(new std::atomic<int64_t>[static_cast<size_t>(n_seq)]);
        ms.cap = n_seq;
    }
    // Chunks in all: with many sequences there are more (sequence, KV head)
    // pairs than the threads need to balance, so a task takes several
    // consecutive chunks of one head (each still its own partial, computed
    // as alone: the same bits), and the prefetch of a chunk's last block
    // runs into the next chunk on the same thread.
    int64_t n_units = 0;
    for (int64_t i = 0; i < n_seq; ++i) {
        check_decode_args(args[i], "attention_decode_multi");
        MultiSeq &m = ms.seqs[static_cast<size_t>(i)];
        m.plan = decode_plan(args[i], pool.n_threads());
        n_units += args[i].n_head_kv * m.plan.n_chunks;
    }
    const int64_t per = std::max<int64_t>(1, n_units / (8 * std::max(1, pool.n_threads())));
    int64_t n_tasks = 0, n_part = 0;
    for (int64_t i = 0; i < n_seq; ++i) {
        const AttnArgs &a = args[i];
        MultiSeq &m = ms.seqs[static_cast<size_t>(i)];
        m.per = std::min(per, m.plan.n_chunks);
        m.groups = (m.plan.n_chunks + m.per - 1) / m.per;
        m.task0 = n_tasks;
        m.part0 = n_part;
        const int64_t tasks = a.n_head_kv * m.groups;
        ms.left[i].store(tasks, std::memory_order_relaxed);
        n_tasks += tasks;
        n_part += a.n_head * m.plan.n_chunks * decode::part_len(a.head_dim);
    }
    float *partial = decode::grow(decode::scratch().partial, n_part);
    const MultiSeq *seqs = ms.seqs.data();
    std::atomic<int64_t> *left = ms.left.get();
    pool.run(n_tasks, [&](int64_t task, int) {
        // The sequence of the task: the last one starting at or before it.
        const MultiSeq *m =
            std::upper_bound(seqs, seqs + n_seq, task, [](int64_t t, const MultiSeq &s) { return t < s.task0; }) - 1;
        const int64_t i = m - seqs, local = task - m->task0;
        const AttnArgs &a = args[i];
        const int64_t kvh = local / m->groups, c0 = local % m->groups * m->per;
        for (int64_t c = c0; c < std::min(c0 + m->per, m->plan.n_chunks); ++c)
            decode_task_any(a, m->plan, partial + m->part0, kvh, c);
        if (left[i].fetch_sub(1, std::memory_order_acq_rel) == 1) decode_merge(a, m->plan, partial + m->part0);
    });
}

}  // namespace sieve::cpu
