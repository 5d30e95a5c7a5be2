#include "sieve/kv/contiguous_kv.h"

#include <new>

namespace sieve {

Result<std::unique_ptr<ContiguousKv>> ContiguousKv::create(const KvShape &shape, int64_t n_ctx) {
    if (shape.n_seq < 1 || shape.n_layer < 1 || shape.n_head_kv < 1 || shape.head_dim < 1 || n_ctx < 1) {
        return Status::errorf("KV cache: n_seq = %d, n_layer = %lld, n_head_kv = %lld, head_dim = %lld, "
                              "n_ctx = %lld; all must be >= 1",
                              shape.n_seq, static_cast<long long>(shape.n_layer),
                              static_cast<long long>(shape.n_head_kv), static_cast<long long>(shape.head_dim),
                              static_cast<long long>(n_ctx));
    }
    // Total elements: n_seq * n_layer * n_head_kv * 2 * n_ctx * head_dim, checked step by step.
    int64_t total = 2;
    for (int64_t f : {static_cast<int64_t>(shape.n_seq), shape.n_layer, shape.n_head_kv, n_ctx, shape.head_dim}) {
        if (__builtin_mul_overflow(total, f, &total) || total > (INT64_MAX / 8)) {
            return Status::errorf("KV cache: %d slots x %lld tokens overflows the address space; lower -c",
                                  shape.n_seq, static_cast<long long>(n_ctx));
        }
    }
    std::unique_ptr<ContiguousKv> kv(new ContiguousKv());
    kv->shape_ = shape;
    kv->n_ctx_ = n_ctx;
    kv->lane_elems_ = n_ctx * shape.head_dim;
    try {
        kv->data_.resize(static_cast<size_t>(total));
    } catch (const std::bad_alloc &) {
        return Status::errorf("KV cache: cannot allocate %.1f MiB for %d slots x %lld tokens; lower -c",
                              static_cast<double>(total) * 4.0 / (1 << 20), shape.n_seq,
                              static_cast<long long>(n_ctx));
    }
    kv->n_tokens_.assign(static_cast<size_t>(shape.n_seq), 0);
    return kv;
}

void ContiguousKv::check_slot(int seq) const {
    SIEVE_CHECKF(seq >= 0 && seq < shape_.n_seq, "KV slot %d out of [0, %d)", seq, shape_.n_seq);
}

Status ContiguousKv::reserve(int seq, int64_t n_tokens) {
    check_slot(seq);
    if (n_tokens > n_ctx_) {
        return Status::errorf("KV cache: sequence slot %d needs %lld tokens, capacity is %lld (-c); "
                              "shorten the prompt or raise the context size",
                              seq, static_cast<long long>(n_tokens), static_cast<long long>(n_ctx_));
    }
    return Status();
}

int64_t ContiguousKv::capacity(int seq) const {
    check_slot(seq);
    return n_ctx_;
}

float *ContiguousKv::lane(int seq, int64_t layer, int64_t kv_head, int kv) {
    check_slot(seq);
    SIEVE_CHECKF(layer >= 0 && layer < shape_.n_layer && kv_head >= 0 && kv_head < shape_.n_head_kv,
                 "KV lane (layer %lld, kv head %lld) out of [%lld, %lld)", static_cast<long long>(layer),
                 static_cast<long long>(kv_head), static_cast<long long>(shape_.n_layer),
                 static_cast<long long>(shape_.n_head_kv));
    int64_t idx = ((static_cast<int64_t>(seq) * shape_.n_layer + layer) * shape_.n_head_kv + kv_head) * 2 + kv;
    return data_.data() + idx * lane_elems_;
}

float *ContiguousKv::k_lane(int seq, int64_t layer, int64_t kv_head) { return lane(seq, layer, kv_head, 0); }
float *ContiguousKv::v_lane(int seq, int64_t layer, int64_t kv_head) { return lane(seq, layer, kv_head, 1); }

int64_t ContiguousKv::n_tokens(int seq) const {
    check_slot(seq);
    return n_tokens_[static_cast<size_t>(seq)];
}

void ContiguousKv::set_n_tokens(int seq, int64_t n) {
    check_slot(seq);
    SIEVE_CHECKF(n >= 0 && n <= n_ctx_, "set_n_tokens(%d, %lld): capacity %lld", seq, static_cast<long long>(n),
                 static_cast<long long>(n_ctx_));
    n_tokens_[static_cast<size_t>(seq)] = n;
}

void ContiguousKv::clear(int seq) { set_n_tokens(seq, 0); }

}  // namespace sieve
