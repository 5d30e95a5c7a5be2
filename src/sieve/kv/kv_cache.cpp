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

}  // namespace sieve
