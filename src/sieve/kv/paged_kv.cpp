#include "sieve/kv/paged_kv.h"

#include <new>

namespace sieve {

Result<std::unique_ptr<PagedKv>> PagedKv::create(const PagedKvOptions &opt) {
    const KvShape &s = opt.shape;
    if (s.n_seq < 1 || s.n_layer < 1 || s.n_head_kv < 1 || s.head_dim < 1 || opt.max_ctx < 1) {
        return Status::error("paged KV: every shape field and max_ctx must be >= 1");
    }
    if (opt.block_size < 16 || opt.block_size > 256) {
        return Status::errorf("paged KV: block size %lld tokens, expected 16 .. 256",
                              static_cast<long long>(opt.block_size));
    }
    std::unique_ptr<PagedKv> kv(new PagedKv());
    kv->shape_ = s;
    kv->block_size_ = opt.block_size;
    kv->max_ctx_ = opt.max_ctx;
    const int64_t head_block = opt.block_size * s.head_dim;
    kv->block_bytes_ = s.n_layer * 2 * s.n_head_kv * head_block * static_cast<int64_t>(sizeof(float));
    kv->n_blocks_ = opt.budget_bytes / kv->block_bytes_;
    if (kv->n_blocks_ < 1 || kv->n_blocks_ > INT32_MAX) {
        return Status::errorf("paged KV: budget %lld bytes holds %lld blocks of %lld bytes; expected 1 .. 2^31",
                              static_cast<long long>(opt.budget_bytes), static_cast<long long>(kv->n_blocks_),
                              static_cast<long long>(kv->block_bytes_));
    }
    kv->layer_elems_ = kv->n_blocks_ * s.n_head_kv * head_block;
    try {
        kv->data_.resize(static_cast<size_t>(kv->layer_elems_ * 2 * s.n_layer));
    } catch (const std::bad_alloc &) {
        return Status::errorf("paged KV: cannot allocate %lld MiB", static_cast<long long>(opt.budget_bytes >> 20));
    }
    kv->free_.resize(static_cast<size_t>(kv->n_blocks_));
    for (int64_t b = 0; b < kv->n_blocks_; ++b)
        kv->free_[static_cast<size_t>(b)] = static_cast<int32_t>(kv->n_blocks_ - 1 - b);
    kv->tables_.resize(static_cast<size_t>(s.n_seq));
    kv->n_tokens_.assign(static_cast<size_t>(s.n_seq), 0);
    return kv;
}

void PagedKv::check_slot(int seq) const {
    SIEVE_CHECKF(seq >= 0 && seq < shape_.n_seq, "KV slot %d out of [0, %d)", seq, shape_.n_seq);
}

Status PagedKv::reserve(int seq, int64_t n_tokens) {
    check_slot(seq);
    if (n_tokens > max_ctx_) {
        return Status::errorf("paged KV: slot %d needs %lld tokens, at most %lld", seq,
                              static_cast<long long>(n_tokens), static_cast<long long>(max_ctx_));
    }
    std::vector<int32_t> &t = tables_[static_cast<size_t>(seq)];
    const int64_t need = (n_tokens + block_size_ - 1) / block_size_ - static_cast<int64_t>(t.size());
    if (need <= 0) return Status();
    if (need > n_free_blocks()) {
        return Status::errorf("paged KV exhausted: slot %d needs %lld more blocks, %lld of %lld free", seq,
                              static_cast<long long>(need), static_cast<long long>(n_free_blocks()),
                              static_cast<long long>(n_blocks_));
    }
    for (int64_t i = 0; i < need; ++i) {
        t.push_back(free_.back());
        free_.pop_back();
    }
    return Status();
}

int64_t PagedKv::capacity(int seq) const {
    check_slot(seq);
    return std::min(max_ctx_, static_cast<int64_t>(tables_[static_cast<size_t>(seq)].size()) * block_size_);
}

int64_t PagedKv::n_pos(int seq) const {
    check_slot(seq);
    return n_tokens_[static_cast<size_t>(seq)];
}

void PagedKv::set_n_pos(int seq, int64_t n) {
    SIEVE_CHECKF(n >= 0 && n <= capacity(seq), "set_n_pos(%d, %lld): capacity %lld", seq,
                 static_cast<long long>(n), static_cast<long long>(capacity(seq)));
    n_tokens_[static_cast<size_t>(seq)] = n;
}

void PagedKv::clear(int seq) {
    check_slot(seq);
    std::vector<int32_t> &t = tables_[static_cast<size_t>(seq)];
    free_.insert(free_.end(), t.rbegin(), t.rend());
    t.clear();
    n_tokens_[static_cast<size_t>(seq)] = 0;
}

const int32_t *PagedKv::block_table(int seq) const {
    check_slot(seq);
    return tables_[static_cast<size_t>(seq)].data();
}

float *PagedKv::k_blocks(int64_t layer) {
    SIEVE_CHECKF(layer >= 0 && layer < shape_.n_layer, "layer %lld", static_cast<long long>(layer));
    return data_.data() + (layer * 2) * layer_elems_;
}

float *PagedKv::v_blocks(int64_t layer) {
    SIEVE_CHECKF(layer >= 0 && layer < shape_.n_layer, "layer %lld", static_cast<long long>(layer));
    return data_.data() + (layer * 2 + 1) * layer_elems_;
}

float *PagedKv::row(int seq, int64_t layer, int64_t kv_head, int64_t t, int kv) {
    SIEVE_CHECKF(t >= 0 && t < capacity(seq) && kv_head >= 0 && kv_head < shape_.n_head_kv,
                 "paged KV row %lld of slot %d (capacity %lld), head %lld", static_cast<long long>(t), seq,
                 static_cast<long long>(capacity(seq)), static_cast<long long>(kv_head));
    const int64_t b = tables_[static_cast<size_t>(seq)][static_cast<size_t>(t / block_size_)];
    float *base = kv ? v_blocks(layer) : k_blocks(layer);
    return base + ((b * shape_.n_head_kv + kv_head) * block_size_ + t % block_size_) * shape_.head_dim;
}

float *PagedKv::k_row(int seq, int64_t layer, int64_t kv_head, int64_t t) { return row(seq, layer, kv_head, t, 0); }
float *PagedKv::v_row(int seq, int64_t layer, int64_t kv_head, int64_t t) { return row(seq, layer, kv_head, t, 1); }

}  // namespace sieve
