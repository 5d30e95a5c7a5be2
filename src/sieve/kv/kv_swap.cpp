#include "sieve/kv/kv_swap.h"

#include <cstring>
#include <new>
#include <string>

#include "sieve/kv/vattention_kv.h"

namespace sieve {

namespace {

int64_t lane_bytes(const VAttentionKv &kv, int64_t rows, bool with_positions) {
    return rows * (kv.shape().k_row_bytes() + kv.shape().v_row_bytes() +
                   (with_positions ? static_cast<int64_t>(sizeof(int32_t)) : 0));
}

}  // namespace

int64_t kv_swap_bytes(const VAttentionKv &kv, int seq) {
    const KvShape &sh = kv.shape();
    const bool with_pos = kv.has_positions();
    int64_t n = 0;
    for (int64_t il = 0; il < sh.n_layer; ++il)
        for (int64_t h = 0; h < sh.n_head_kv; ++h) n += lane_bytes(kv, kv.n_rows(seq, il, h), with_pos);
    return n;
}

Status kv_swap_out(VAttentionKv &kv, int seq, KvSwapImage *out) {
    const KvShape &sh = kv.shape();
    const int64_t kb = kv.shape().k_row_bytes(), vb = kv.shape().v_row_bytes();
    out->n_pos = kv.n_pos(seq);
    out->with_positions = kv.has_positions();
    out->rows.clear();
    try {
        out->bytes.resize(static_cast<size_t>(kv_swap_bytes(kv, seq)));
    } catch (const std::bad_alloc &) {
        return Status::errorf("KV swap: cannot allocate %.1f MiB of host memory for slot %d",
                              static_cast<double>(kv_swap_bytes(kv, seq)) / (1 << 20), seq);
    }
    uint8_t *p = out->bytes.data();
    for (int64_t il = 0; il < sh.n_layer; ++il)
        for (int64_t h = 0; h < sh.n_head_kv; ++h) {
            const int64_t rows = kv.n_rows(seq, il, h);
            out->rows.push_back(rows);
            if (rows == 0) continue;  // an empty lane: nothing to copy (and no buffer to copy to)
            std::memcpy(p, kv.k_data(seq, il, h), static_cast<size_t>(rows * kb));
            p += rows * kb;
            std::memcpy(p, kv.v_data(seq, il, h), static_cast<size_t>(rows * vb));
            p += rows * vb;
            if (out->with_positions) {
                std::memcpy(p, kv.positions(seq, il, h), sizeof(int32_t) * static_cast<size_t>(rows));
                p += sizeof(int32_t) * static_cast<size_t>(rows);
            }
        }
    return Status();
}

int64_t kv_swap_pages(const VAttentionKv &kv, const KvSwapImage &img) {
    int64_t n = 0;
    for (int64_t rows : img.rows) n += kv.lane_pair_pages(rows);
    return n;
}

Status kv_swap_in(VAttentionKv &kv, int seq, const KvSwapImage &img) {
    const KvShape &sh = kv.shape();
    SIEVE_CHECKF(static_cast<int64_t>(img.rows.size()) == sh.n_layer * sh.n_head_kv && kv.n_pos(seq) == 0,
                 "kv_swap_in: image of %zu lanes into slot %d (n_pos %lld)", img.rows.size(), seq,
                 static_cast<long long>(kv.n_pos(seq)));
    const int64_t kb = kv.shape().k_row_bytes(), vb = kv.shape().v_row_bytes();
    const uint8_t *p = img.bytes.data();
    size_t i = 0;
    for (int64_t il = 0; il < sh.n_layer; ++il)
        for (int64_t h = 0; h < sh.n_head_kv; ++h, ++i) {
            const int64_t rows = img.rows[i];
            Status st = kv.reserve_lane(seq, il, h, rows, /*headroom=*/false);
            if (!st.ok()) {
                kv.release(seq);
                return st.with_context("KV swap-in of slot " + std::to_string(seq));
            }
            if (rows == 0) {
                kv.set_lane_rows(seq, il, h, 0);
                continue;
            }
            std::memcpy(kv.k_data(seq, il, h), p, static_cast<size_t>(rows * kb));
            p += rows * kb;
            std::memcpy(kv.v_data(seq, il, h), p, static_cast<size_t>(rows * vb));
            p += rows * vb;
            if (img.with_positions) {
                if (int32_t *pos = kv.positions(seq, il, h))
                    std::memcpy(pos, p, sizeof(int32_t) * static_cast<size_t>(rows));
                p += sizeof(int32_t) * static_cast<size_t>(rows);
            }
            kv.set_lane_rows(seq, il, h, rows);
        }
    kv.set_slot_n_pos(seq, img.n_pos);
    return Status();
}

}  // namespace sieve
