// Shared precondition check for the attention kernels (private to kernels/cpu).
#pragma once

#include "sieve/core/status.h"
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
    for (int64_t g = 0; g < a.n_head_kv; ++g)
        SIEVE_CHECKF(a.past(g) >= 0, "%s: n_past of kv head %lld = %lld", who, static_cast<long long>(g),
                     static_cast<long long>(a.past(g)));
    SIEVE_CHECKF(a.q && a.k && a.v && a.o, "%s: null q/k/v/o pointer", who);
}

// The most rows any lane of the call holds (what a chunk plan is sized by,
// so the plan depends on shapes only).
inline int64_t attn_max_past(const AttnArgs &a) {
    int64_t m = 0;
    for (int64_t g = 0; g < a.n_head_kv; ++g) m = a.past(g) > m ? a.past(g) : m;
    return m;
}

}  // namespace sieve::cpu
