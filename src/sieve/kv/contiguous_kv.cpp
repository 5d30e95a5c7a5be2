#include "sieve/kv/contiguous_kv.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

namespace sieve {

Result<std::unique_ptr<ContiguousKv>> ContiguousKv::create(const KvShape &shape, int64_t n_ctx, bool with_positions) {
    if (shape.n_seq < 1 || shape.n_layer < 1 || shape.n_head_kv < 1 || shape.head_dim < 1 || n_ctx < 1) {
        return Status::errorf("KV cache: n_seq = %d, n_layer = %lld, n_head_kv = %lld, head_dim = %lld, "
                              "n_ctx = %lld; all must be >= 1",
                              shape.n_seq, static_cast<long long>(shape.n_layer),
                              static_cast<long long>(shape.n_head_kv), static_cast<long long>(shape.head_dim),
                              static_cast<long long>(n_ctx));
    }
    if (!cpu::row_type_fits(shape.type, shape.head_dim)) return row_type_error(shape);
    // Total bytes: n_seq * n_layer * n_head_kv * 2 * lane bytes, checked step by step.
    int64_t lane_bytes = 0;
    // K and V lanes alike sized by the wider row (the types may differ).
    if (__builtin_mul_overflow(n_ctx, std::max(shape.k_row_bytes(), shape.v_row_bytes()), &lane_bytes) ||
        lane_bytes > (INT64_MAX / 8)) {
        return Status::errorf("KV cache: %lld tokens overflow the address space; lower -c",
                              static_cast<long long>(n_ctx));
    }
    lane_bytes = (lane_bytes + 63) / 64 * 64;
    int64_t total = 2;
    for (int64_t f : {static_cast<int64_t>(shape.n_seq), shape.n_layer, shape.n_head_kv, lane_bytes}) {
        if (__builtin_mul_overflow(total, f, &total) || total > (INT64_MAX / 8)) {
            return Status::errorf("KV cache: %d slots x %lld tokens overflows the address space; lower -c",
                                  shape.n_seq, static_cast<long long>(n_ctx));
        }
    }
    std::unique_ptr<ContiguousKv> kv(new ContiguousKv());
    kv->shape_ = shape;
    kv->n_ctx_ = n_ctx;
    kv->lane_bytes_ = lane_bytes;
    const size_t n_lanes = static_cast<size_t>(shape.n_seq * shape.n_layer * shape.n_head_kv);
    try {
        kv->data_.resize(static_cast<size_t>(total));
        if (with_positions) kv->positions_.assign(n_lanes * static_cast<size_t>(n_ctx), 0);
    } catch (const std::bad_alloc &) {
        return Status::errorf("KV cache: cannot allocate %.1f MiB for %d slots x %lld tokens; lower -c",
                              static_cast<double>(total) / (1 << 20), shape.n_seq,
                              static_cast<long long>(n_ctx));
    }
    kv->n_pos_.assign(static_cast<size_t>(shape.n_seq), 0);
    kv->rows_.assign(n_lanes, 0);
    return kv;
}

void ContiguousKv::check_slot(int seq) const {
    SIEVE_CHECKF(seq >= 0 && seq < shape_.n_seq, "KV slot %d out of [0, %d)", seq, shape_.n_seq);
}

size_t ContiguousKv::lane_index(int seq, int64_t layer, int64_t kv_head) const {
    check_slot(seq);
    SIEVE_CHECKF(layer >= 0 && layer < shape_.n_layer && kv_head >= 0 && kv_head < shape_.n_head_kv,
                 "KV lane (layer %lld, kv head %lld) out of [%lld, %lld)", static_cast<long long>(layer),
                 static_cast<long long>(kv_head), static_cast<long long>(shape_.n_layer),
                 static_cast<long long>(shape_.n_head_kv));
    return static_cast<size_t>((static_cast<int64_t>(seq) * shape_.n_layer + layer) * shape_.n_head_kv + kv_head);
}

Status ContiguousKv::reserve(int seq, int64_t n_pos) {
    check_slot(seq);
    const int64_t delta = n_pos - n_pos_[static_cast<size_t>(seq)];
    if (delta <= 0) return Status();
    const size_t l0 = lane_index(seq, 0, 0), n = static_cast<size_t>(shape_.n_layer * shape_.n_head_kv);
    const int64_t most = *std::max_element(rows_.begin() + static_cast<std::ptrdiff_t>(l0),
                                           rows_.begin() + static_cast<std::ptrdiff_t>(l0 + n));
    if (most + delta > n_ctx_) {
        return Status::errorf("KV cache: sequence slot %d needs %lld rows per lane (position %lld), capacity is "
                              "%lld (-c); shorten the prompt or raise the context size",
                              seq, static_cast<long long>(most + delta), static_cast<long long>(n_pos),
                              static_cast<long long>(n_ctx_));
    }
    return Status();
}

int64_t ContiguousKv::capacity(int seq) const {
    check_slot(seq);
    const size_t l0 = lane_index(seq, 0, 0), n = static_cast<size_t>(shape_.n_layer * shape_.n_head_kv);
    const int64_t most = *std::max_element(rows_.begin() + static_cast<std::ptrdiff_t>(l0),
                                           rows_.begin() + static_cast<std::ptrdiff_t>(l0 + n));
    return n_pos_[static_cast<size_t>(seq)] + (n_ctx_ - most);
}

uint8_t *ContiguousKv::lane(int seq, int64_t layer, int64_t kv_head, int kv) {
    const int64_t idx = static_cast<int64_t>(lane_index(seq, layer, kv_head)) * 2 + kv;
    return data_.data() + idx * lane_bytes_;
}

void *ContiguousKv::k_data(int seq, int64_t layer, int64_t kv_head) { return lane(seq, layer, kv_head, 0); }
void *ContiguousKv::v_data(int seq, int64_t layer, int64_t kv_head) { return lane(seq, layer, kv_head, 1); }

int32_t *ContiguousKv::positions(int seq, int64_t layer, int64_t kv_head) {
    return const_cast<int32_t *>(std::as_const(*this).positions(seq, layer, kv_head));
}
const int32_t *ContiguousKv::positions(int seq, int64_t layer, int64_t kv_head) const {
    const size_t l = lane_index(seq, layer, kv_head);
    return positions_.empty() ? nullptr : positions_.data() + l * static_cast<size_t>(n_ctx_);
}

int64_t ContiguousKv::n_pos(int seq) const {
    check_slot(seq);
    return n_pos_[static_cast<size_t>(seq)];
}

int64_t ContiguousKv::n_rows(int seq, int64_t layer, int64_t kv_head) const {
    return rows_[lane_index(seq, layer, kv_head)];
}

void ContiguousKv::set_n_pos(int seq, int64_t n) {
    SIEVE_CHECKF(n >= 0 && n <= capacity(seq), "set_n_pos(%d, %lld): capacity %lld", seq, static_cast<long long>(n),
                 static_cast<long long>(capacity(seq)));
    const int64_t delta = n - n_pos_[static_cast<size_t>(seq)];
    const size_t l0 = lane_index(seq, 0, 0), n_lanes = static_cast<size_t>(shape_.n_layer * shape_.n_head_kv);
    for (size_t l = l0; l < l0 + n_lanes; ++l) rows_[l] = std::max<int64_t>(0, rows_[l] + delta);
    n_pos_[static_cast<size_t>(seq)] = n;
    if (delta < 0) summaries_roll_back(seq);
}

void ContiguousKv::clear(int seq) {
    check_slot(seq);
    n_pos_[static_cast<size_t>(seq)] = 0;
    const size_t l0 = lane_index(seq, 0, 0), n_lanes = static_cast<size_t>(shape_.n_layer * shape_.n_head_kv);
    std::fill(rows_.begin() + static_cast<std::ptrdiff_t>(l0), rows_.begin() + static_cast<std::ptrdiff_t>(l0 + n_lanes),
              0);
    summaries_reset(seq);
}

Status ContiguousKv::compact(int seq, int64_t layer, int64_t kv_head, const int32_t *keep_rows, int64_t n_keep) {
    const size_t l = lane_index(seq, layer, kv_head);
    SIEVE_TRY(kv_check_keep_list(seq, layer, kv_head, rows_[l], keep_rows, n_keep));
    const int64_t kb = shape_.k_row_bytes(), vb = shape_.v_row_bytes();
    uint8_t *k = lane(seq, layer, kv_head, 0), *v = lane(seq, layer, kv_head, 1);
    int32_t *pos = positions(seq, layer, kv_head);
    int64_t i0 = 0;  // rows before i0 stay where they are
    while (i0 < n_keep && keep_rows[i0] == i0) ++i0;
    summaries_invalidate(seq, layer, kv_head, i0);
    // keep_rows[i] >= i, so each source row is read before a later destination overwrites it.
    for (int64_t i = i0; i < n_keep; ++i) {
        const int64_t r = keep_rows[i];
        if (r == i) continue;
        std::memmove(k + i * kb, k + r * kb, static_cast<size_t>(kb));
        std::memmove(v + i * vb, v + r * vb, static_cast<size_t>(vb));
        if (pos) pos[i] = pos[r];
    }
    rows_[l] = n_keep;
    return Status();
}

}  // namespace sieve
