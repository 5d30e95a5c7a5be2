// Decode attention over a paged KV layout (vLLM's PagedAttention, Kwon et al.
// 2023, §4.1): the baseline the virtual-contiguous lanes are measured against.
//
// A block holds block_size consecutive tokens of every KV head of one layer;
// a sequence's block table lists its blocks in token order:
//
//   k_blocks: [n_blocks, n_head_kv, block_size, head_dim]   (same for v_blocks)
//   token t of KV head g  =  k_blocks[block_table[t / block_size]][g][t % block_size]
//
// Same algorithm as cpu::attention_decode (flash-decoding: chunks of keys per
// task, merged by log-sum-exp), except that chunks are whole blocks and every
// block costs a table lookup and a jump.
#pragma once

#include <cstdint>

#include "sieve/core/thread_pool.h"

namespace sieve::cpu {

struct PagedAttnArgs {
    const float *q = nullptr;             // [n_head, head_dim]: one decode query
    const float *k_blocks = nullptr;      // [n_blocks, n_head_kv, block_size, head_dim]
    const float *v_blocks = nullptr;      // [n_blocks, n_head_kv, block_size, head_dim]
    const int32_t *block_table = nullptr; // [ceil(n_kv / block_size)] block ids
    float *o = nullptr;                   // [n_head, head_dim]
    float *lse = nullptr;                 // optional [n_head]
    int64_t n_kv = 0;                     // keys the query sees (all of them: decode)
    int64_t block_size = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;
    float scale = 0.0f;
};

void attention_decode_paged(const PagedAttnArgs &a, ThreadPool &pool);
// Scalar oracle, double accumulation.
void attention_decode_paged_ref(const PagedAttnArgs &a);

}  // namespace sieve::cpu
