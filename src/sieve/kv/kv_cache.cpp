#include "sieve/kv/kv_cache.h"

#include <vector>

namespace sieve {

Status kv_check_keep_list(int seq, int64_t layer, int64_t kv_head, int64_t n_rows, const int32_t *keep_rows,
                          int64_t n_keep) {
    if (n_keep < 0 || n_keep > n_rows || (n_keep > 0 && !keep_rows)) {
        return Status::errorf("KV compact (slot %d, layer %lld, kv head %lld): keeping %lld of %lld rows; expected "
                              "0 ..= %lld",
                              seq, static_cast<long long>(layer), static_cast<long long>(kv_head),
                              static_cast<long long>(n_keep), static_cast<long long>(n_rows),
                              static_cast<long long>(n_rows));
    }
    for (int64_t i = 0; i < n_keep; ++i) {
        if (keep_rows[i] < 0 || keep_rows[i] >= n_rows || (i > 0 && keep_rows[i] <= keep_rows[i - 1])) {
            return Status::errorf("KV compact (slot %d, layer %lld, kv head %lld): keep_rows[%lld] = %d; expected "
                                  "strictly increasing rows in [0, %lld)",
                                  seq, static_cast<long long>(layer), static_cast<long long>(kv_head),
                                  static_cast<long long>(i), keep_rows[i], static_cast<long long>(n_rows));
        }
    }
    return Status();
}

Status KvCache::compact_layer(int seq, int64_t layer, const int32_t *const *keep_rows, const int64_t *n_keep) {
    const int64_t n_head_kv = shape().n_head_kv;
    for (int64_t h = 0; h < n_head_kv; ++h)
        SIEVE_TRY(kv_check_keep_list(seq, layer, h, n_rows(seq, layer, h), keep_rows[h], n_keep[h]));
    for (int64_t h = 0; h < n_head_kv; ++h) SIEVE_TRY(compact(seq, layer, h, keep_rows[h], n_keep[h]));
    return Status();
}

LaneSummary *KvCache::summary_of(int seq, int64_t layer, int64_t kv_head) {
    const KvShape &sh = shape();
    SIEVE_CHECKF(seq >= 0 && seq < sh.n_seq && layer >= 0 && layer < sh.n_layer && kv_head >= 0 &&
                     kv_head < sh.n_head_kv,
                 "KV summaries: lane (slot %d, layer %lld, kv head %lld) out of range", seq,
                 static_cast<long long>(layer), static_cast<long long>(kv_head));
    if (summaries_.empty()) {
        if (!summaries_wanted_) return nullptr;
        summaries_.resize(static_cast<size_t>(sh.n_seq * sh.n_layer * sh.n_head_kv));
    }
    return &summaries_[static_cast<size_t>((seq * sh.n_layer + layer) * sh.n_head_kv + kv_head)];
}

const uint16_t *KvCache::k_summaries(int seq, int64_t layer, int64_t kv_head) {
    summaries_wanted_ = true;
    return summary_of(seq, layer, kv_head)
        ->update(shape().type.k, k_data(seq, layer, kv_head), n_rows(seq, layer, kv_head), shape().head_dim);
}

int64_t KvCache::summary_bytes() const {
    int64_t n = 0;
    for (const LaneSummary &s : summaries_) n += s.bytes();
    return n;
}

void KvCache::summaries_invalidate(int seq, int64_t layer, int64_t kv_head, int64_t from_row) {
    if (LaneSummary *s = summary_of(seq, layer, kv_head)) s->invalidate(from_row);
}

void KvCache::summaries_roll_back(int seq) {
    if (summaries_.empty()) return;
    for (int64_t l = 0; l < shape().n_layer; ++l)
        for (int64_t h = 0; h < shape().n_head_kv; ++h) summary_of(seq, l, h)->invalidate(n_rows(seq, l, h));
}

void KvCache::summaries_reset(int seq) {
    if (summaries_.empty()) return;
    for (int64_t l = 0; l < shape().n_layer; ++l)
        for (int64_t h = 0; h < shape().n_head_kv; ++h) summary_of(seq, l, h)->reset();
}

}  // namespace sieve

namespace sieve {

Status row_type_error(const KvShape &s) {
    const cpu::RowType t = cpu::row_type_fits(s.type.k, s.head_dim) ? s.type.v : s.type.k;
    return Status::errorf(
        "KV rows of type %s need head_dim to be a multiple of %lld; this model's head_dim is %lld "
        "(use f16, bf16 or f32)",
        cpu::row_type_name(t), static_cast<long long>(cpu::row_type_block(t)),
        static_cast<long long>(s.head_dim));
}

}  // namespace sieve
