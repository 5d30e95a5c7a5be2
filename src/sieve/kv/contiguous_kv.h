// ContiguousKv: the simplest KvCache. n_seq slots, each with a fixed
// capacity of n_ctx rows per lane, all in one allocation made up front.
// No paging, no sharing; reserve() only checks the capacity; compact() is a
// memmove inside the lane. It is the store for `sieve run` and the dense
// oracle the lane stores are tested against.
//
// Layout (lane = [n_ctx, head_dim]):
//   data      = [seq][layer][kv_head][K | V][n_ctx][head_dim] of shape.type.k | .v (lanes 64-byte aligned,
//   sized by the wider row) positions = [seq][layer][kv_head][n_ctx]        (only with_positions)
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "sieve/core/aligned.h"
#include "sieve/kv/kv_cache.h"

namespace sieve {

class ContiguousKv final : public KvCache {
public:
    // Fails (does not throw) when the sizes overflow or the allocation fails.
    static Result<std::unique_ptr<ContiguousKv>> create(const KvShape &shape, int64_t n_ctx,
                                                        bool with_positions = false);

    const KvShape &shape() const override { return shape_; }
    Status reserve(int seq, int64_t n_pos) override;
    int64_t capacity(int seq) const override;
    void *k_data(int seq, int64_t layer, int64_t kv_head) override;
    void *v_data(int seq, int64_t layer, int64_t kv_head) override;
    int32_t *positions(int seq, int64_t layer, int64_t kv_head) override;
    const int32_t *positions(int seq, int64_t layer, int64_t kv_head) const override;
    int64_t n_pos(int seq) const override;
    int64_t n_rows(int seq, int64_t layer, int64_t kv_head) const override;
    void set_n_pos(int seq, int64_t n) override;
    void clear(int seq) override;
    Status compact(int seq, int64_t layer, int64_t kv_head, const int32_t *keep_rows, int64_t n_keep) override;

    int64_t n_ctx() const { return n_ctx_; }
    int64_t n_bytes() const { return static_cast<int64_t>(data_.size()); }

private:
    ContiguousKv() = default;
    uint8_t *lane(int seq, int64_t layer, int64_t kv_head, int kv);
    size_t lane_index(int seq, int64_t layer, int64_t kv_head) const;  // (seq, layer, head), K and V together
    void check_slot(int seq) const;

    KvShape shape_;
    int64_t n_ctx_ = 0;
    int64_t lane_bytes_ = 0;  // n_ctx * row bytes, rounded up to 64
    AlignedBuffer<uint8_t> data_;
    std::vector<int32_t> positions_;  // empty unless with_positions
    std::vector<int64_t> n_pos_;      // per slot
    std::vector<int64_t> rows_;       // per (seq, layer, kv head)
};

}  // namespace sieve
