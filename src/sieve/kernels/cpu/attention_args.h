// Shared precondition check for the attention kernels (private to kernels/cpu).
#pragma once

#include "sieve/core/status.h"
#include "sieve/kernels/cpu/kv_rows.h"
#include "sieve/kernels/cpu/simd.h"
#include "sieve/kernels/cpu/ops.h"

namespace sieve::cpu {

// Preconditions of every attention kernel (programmer errors, hence checks):
//   n_head a multiple of n_head_kv, head_dim % 4 == 0, every n_past(g) >= 0.
inline void attn_check_args(const AttnArgs &a, const char *who) {
    SIEVE_CHECKF(a.n_q >= 1 && a.n_head >= 1 && a.n_head_kv >= 1 && a.n_head % a.n_head_kv == 0,
                 "%s: n_q = %lld, n_head = %lld, n_head_kv = %lld (need n_q >= 1 and n_head %% n_head_kv == 0)", who,
                 static_cast<long long>(a.n_q), static_cast<long long>(a.n_head), static_cast<long long>(a.n_head_kv));
    SIEVE_CHECKF(a.head_dim > 0 && a.head_dim % 4 == 0, "%s: head_dim = %lld, expected a positive multiple of 4", who,
                 static_cast<long long>(a.head_dim));
    for (RowType t : {a.kv_type.k, a.kv_type.v})
        SIEVE_CHECKF(row_type_fits(t, a.head_dim), "%s: %s rows of head_dim %lld (need whole blocks of %lld)",
                     who, row_type_name(t), static_cast<long long>(a.head_dim),
                     static_cast<long long>(row_type_block(t)));
    for (int64_t g = 0; g < a.n_head_kv; ++g)
        SIEVE_CHECKF(a.past(g) >= 0, "%s: n_past of kv head %lld = %lld", who, static_cast<long long>(g),
                     static_cast<long long>(a.past(g)));
    SIEVE_CHECKF(a.q && a.k && a.v && a.o, "%s: null q/k/v/o pointer", who);
    SIEVE_CHECKF(!a.spans || (a.n_q == 1 && a.spans->rows && a.spans->first),
                 "%s: row spans need a single query (decode) and both arrays", who);
    SIEVE_CHECKF(!a.lambda || (a.lambda->heads && a.lambda->sink >= 0 && a.lambda->recent >= 1),
                 "%s: a lambda-shaped mask needs its heads and sink >= 0, recent >= 1", who);
}

// The most rows any lane of the call holds (what a chunk plan is sized by,
// so the plan depends on shapes only).
inline int64_t attn_max_past(const AttnArgs &a) {
    int64_t m = 0;
    for (int64_t g = 0; g < a.n_head_kv; ++g) m = a.past(g) > m ? a.past(g) : m;
    return m;
}

// Rows [r0, r0 + n) of a lane as f32: the lane itself for f32 rows, else the
// rows widened into buf ([n, d] floats, 64-byte aligned when the caller's is):
// f16/bf16 rows are read from memory at half the bytes, q8_0 / q4_0 at about
// a half / a quarter, and converted in L1.
inline const float *attn_rows_f32(RowType t, const void *lane, int64_t r0, int64_t n, int64_t d, float *buf) {
    if (t == RowType::f32) return static_cast<const float *>(lane) + r0 * d;
    rows_to_f32(t, lane, r0 * d, n * d, buf);
    return buf;
}

}  // namespace sieve::cpu
