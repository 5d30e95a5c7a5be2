// Shared precondition check for the attention kernels (private to kernels/cpu).
#pragma once

#include "sieve/core/status.h"
#include "sieve/kernels/cpu/ops.h"

namespace sieve::cpu {

// Preconditions of every attention kernel (programmer errors, hence checks):
//   n_head a multiple of n_head_kv, head_dim % 4 == 0, n_kv >= q_pos0 + n_q.
inline void attn_check_args(const AttnArgs &a, const char *who) {
    SIEVE_CHECKF(a.n_q >= 1 && a.n_head >= 1 && a.n_head_kv >= 1 && a.n_head % a.n_head_kv == 0,
                 "%s: n_q = %lld, n_head = %lld, n_head_kv = %lld (need n_q >= 1 and n_head %% n_head_kv == 0)", who,
                 static_cast<long long>(a.n_q), static_cast<long long>(a.n_head), static_cast<long long>(a.n_head_kv));
    SIEVE_CHECKF(a.head_dim > 0 && a.head_dim % 4 == 0, "%s: head_dim = %lld, expected a positive multiple of 4", who,
                 static_cast<long long>(a.head_dim));
    SIEVE_CHECKF(a.q_pos0 >= 0 && a.n_kv >= a.q_pos0 + a.n_q, "%s: n_kv = %lld < q_pos0 + n_q = %lld", who,
                 static_cast<long long>(a.n_kv), static_cast<long long>(a.q_pos0 + a.n_q));
    SIEVE_CHECKF(a.q && a.k && a.v && a.o, "%s: null q/k/v/o pointer", who);
}

}  // namespace sieve::cpu
