// PagedKv: the vLLM-style baseline (Kwon et al. 2023, PagedAttention). KV lives
// in fixed blocks of block_size tokens; a sequence owns a block table listing
// its blocks in token order, the same block ids for every layer. Kernels must
// read through the table (cpu::attention_decode_paged), which is exactly what
// the lane store avoids; this class exists so the two can be measured.
//
//   storage, per layer and K|V:  [n_blocks, n_head_kv, block_size, head_dim] f32
//   token t of (seq, layer, head) = blocks[table(seq)[t / block_size]][head][t % block_size]
//
// It follows the KvCache step contract (reserve, write, set_n_pos, clear)
// but cannot hand out lane pointers, so it does not derive from KvCache.
// clear() frees the slot's blocks at once.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "sieve/core/aligned.h"
#include "sieve/kv/kv_cache.h"

namespace sieve {

struct PagedKvOptions {
    KvShape shape;
    int64_t block_size = 16;                      // tokens per block, 16 .. 256
    int64_t budget_bytes = int64_t{512} << 20;    // rounded down to whole blocks
    int64_t max_ctx = 0;                          // tokens a sequence may hold
};

class PagedKv {
public:
    static Result<std::unique_ptr<PagedKv>> create(const PagedKvOptions &opt);

    const KvShape &shape() const { return shape_; }
    int64_t block_size() const { return block_size_; }
    // Allocates blocks so slot seq can hold n_tokens tokens; an error (nothing
    // allocated) when the pool or max_ctx is too small.
    Status reserve(int seq, int64_t n_tokens);
    int64_t capacity(int seq) const;
    int64_t n_pos(int seq) const;
    void set_n_pos(int seq, int64_t n);  // precondition: n <= capacity(seq)
    void clear(int seq);                    // frees the slot's blocks

    const int32_t *block_table(int seq) const;
    // [n_blocks, n_head_kv, block_size, head_dim] for one layer.
    float *k_blocks(int64_t layer);
    float *v_blocks(int64_t layer);
    // Row `t` of (seq, layer, head) in K or V, for writing a token's KV.
    float *k_row(int seq, int64_t layer, int64_t kv_head, int64_t t);
    float *v_row(int seq, int64_t layer, int64_t kv_head, int64_t t);

    int64_t n_blocks() const { return n_blocks_; }
    int64_t n_free_blocks() const { return static_cast<int64_t>(free_.size()); }
    // Bytes one block id holds across all layers, K and V.
    int64_t block_bytes() const { return block_bytes_; }

private:
    PagedKv() = default;
    void check_slot(int seq) const;
    float *row(int seq, int64_t layer, int64_t kv_head, int64_t t, int kv);

    KvShape shape_;
    int64_t block_size_ = 0;
    int64_t max_ctx_ = 0;
    int64_t n_blocks_ = 0;
    int64_t block_bytes_ = 0;
    int64_t layer_elems_ = 0;  // n_blocks * n_head_kv * block_size * head_dim
    AlignedBuffer<float> data_;  // [layer][K|V][layer_elems]
    std::vector<int32_t> free_;
    std::vector<std::vector<int32_t>> tables_;
    std::vector<int64_t> n_tokens_;
};

}  // namespace sieve
