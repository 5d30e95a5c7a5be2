// The KV store as the forward pass sees it: per (sequence slot, layer, KV
// head) a K lane and a V lane, each a plain contiguous [rows, head_dim] f32
// array. Kernels get a pointer and a row count, never pages.
//
//   seq slot s ─┬─ layer 0 ─┬─ kv head 0:  K lane [rows, head_dim]   V lane [rows, head_dim]
//               │           └─ kv head 1:  K lane ...                V lane ...
//               └─ layer 1 ...
//
// Rows are not positions. A slot has a next position, n_pos(seq); each lane
// has its own row count, n_rows(seq, layer, kv_head). Dense lanes hold one row
// per position (n_rows == n_pos); a sparse policy compacts a lane (keeps a
// sorted subset of its rows, packed to the front), after which the lane holds
// fewer rows than the slot has positions. New rows are always appended at
// each lane's own row count; keys are stored after RoPE at their true
// position, so a kept row means the same thing wherever it ends up.
//
//   positions 0 1 2 3 4 5 6 7 8 9          n_pos = 10
//   lane A    0 1 2 3 4 5 6 7 8 9          n_rows = 10 (dense)
//   lane B    0 1 4 8 9                    n_rows = 5  (compacted: rows hold positions 0 1 4 8 9)
//   next chunk of 2 tokens (positions 10, 11) goes to rows 10, 11 of A and rows 5, 6 of B;
//   query i of the chunk sees the first n_past + i + 1 rows of each lane (n_past = 10 | 5).
//
// Contract for the forward pass of one step over slot seq:
//   1. reserve(seq, n) before a chunk ending at position n (n > n_pos): every
//      lane can take n - n_pos(seq) more rows; it may map pages, so lane
//      pointers are fetched after it;
//   2. each lane's rows [n_rows, n_rows + n - n_pos) are written; attention
//      of query i reads rows [0, n_rows + i + 1);
//   3. set_n_pos(seq, n) once the step's rows are written: every lane's row
//      count moves by n - n_pos (a negative delta rolls the newest rows back).
// Lane pointers stay valid until the next reserve(), compact() or clear() of
// that slot.
#pragma once

#include <cstdint>
#include <vector>

#include "sieve/core/status.h"
#include "sieve/kernels/cpu/row_type.h"
#include "sieve/kv/page_summary.h"

namespace sieve {

// Shape every lane of a store shares.
struct KvShape {
    int n_seq = 0;        // sequence slots
    int64_t n_layer = 0;
    int64_t n_head_kv = 0;
    int64_t head_dim = 0;
    cpu::KvRowTypes type = cpu::RowType::f32;  // element types of K rows (type.k) and V rows (type.v)

    int64_t k_row_bytes() const { return cpu::row_bytes(type.k, head_dim); }
    int64_t v_row_bytes() const { return cpu::row_bytes(type.v, head_dim); }
    int64_t row_bytes(int kv) const { return kv ? v_row_bytes() : k_row_bytes(); }  // kv: 0 = K, 1 = V
};

// The error for a row type the head size cannot take (the quantized types
// need whole blocks of 32 elements per row).
Status row_type_error(const KvShape &s);

class KvCache {
public:
    virtual ~KvCache() = default;

    virtual const KvShape &shape() const = 0;

    // Makes room in every lane of slot seq for n_pos - n_pos(seq) more rows
    // (nothing when n_pos <= n_pos(seq)). Keeps the rows already there.
    // Returns an error (never crashes) when the store has no room: the caller
    // (the scheduler) decides whom to preempt.
    virtual Status reserve(int seq, int64_t n_pos) = 0;
    // The position up to which slot seq can grow without another reserve():
    // n_pos(seq) + the smallest room left in any of its lanes.
    virtual int64_t capacity(int seq) const = 0;

    // Lanes of (seq, layer, kv head): [n_rows + room, head_dim] of
    // shape().type.k (K) or .v (V), row-major (row r at byte r *
    // shape().k_row_bytes() or v_row_bytes()).
    virtual void *k_data(int seq, int64_t layer, int64_t kv_head) = 0;
    virtual void *v_data(int seq, int64_t layer, int64_t kv_head) = 0;
    // The same lanes as f32 arrays; precondition: both types are f32.
    float *k_lane(int seq, int64_t layer, int64_t kv_head) { return as_f32(k_data(seq, layer, kv_head)); }
    float *v_lane(int seq, int64_t layer, int64_t kv_head) { return as_f32(v_data(seq, layer, kv_head)); }
    // Optional companion: the position of each row, [n_rows + room] int32,
    // moved with its row by compact(). nullptr when the store was created
    // without positions (the forward pass then does not write them).
    virtual int32_t *positions(int seq, int64_t layer, int64_t kv_head) = 0;
    virtual const int32_t *positions(int seq, int64_t layer, int64_t kv_head) const = 0;

    // The slot's next position (tokens the sequence has seen).
    virtual int64_t n_pos(int seq) const = 0;
    // Rows the lane (seq, layer, kv head) holds (K and V alike).
    virtual int64_t n_rows(int seq, int64_t layer, int64_t kv_head) const = 0;
    // Precondition: n <= capacity(seq). Moves n_pos and every lane's row count
    // by n - n_pos(seq); a lane never goes below 0 rows.
    virtual void set_n_pos(int seq, int64_t n) = 0;
    // Forgets slot seq (n_pos = 0, every lane empty) and may return its memory.
    virtual void clear(int seq) = 0;

    // Keeps rows keep_rows[0 .. n_keep) (strictly increasing, < n_rows) of the
    // K and V lanes of (seq, layer, kv head), packed to rows [0, n_keep) in
    // order, with every per-row companion; memory past the last kept row may
    // be returned at once. n_pos does not change. On a bad list (or, for a
    // store with shared pages, no page to copy one into) nothing changes and
    // an error says why.
    virtual Status compact(int seq, int64_t layer, int64_t kv_head, const int32_t *keep_rows, int64_t n_keep) = 0;
    // compact() for every KV head of (seq, layer) in one call: head h keeps
    // keep_rows[h][0 .. n_keep[h]). All lists are checked before any lane
    // moves, so a bad list changes nothing.
    Status compact_layer(int seq, int64_t layer, const int32_t *const *keep_rows, const int64_t *n_keep);

    // ---- page summaries (kv/page_summary.h), for page selection (sparse/quest.h) ----
    // The K lane of (seq, layer, kv head) summarized per logical page of
    // k_summary_rows rows: [summary_pages(n_rows)][2][head_dim] f16, each
    // page's per-channel min then max, up to date with the lane's n_rows rows
    // at this call. Kept only for lanes that were asked for: the first call
    // summarizes the lane, later ones only the rows appended since (pages a
    // compaction or a rollback touched are recomputed). Valid until the next
    // call for the lane or change of the slot. Host memory beside the lanes,
    // summary_bytes() in all; clear() returns a slot's.
    const uint16_t *k_summaries(int seq, int64_t layer, int64_t kv_head);
    int64_t summary_bytes() const;

protected:
    // What the stores call when rows change other than by appending.
    void summaries_invalidate(int seq, int64_t layer, int64_t kv_head, int64_t from_row);
    void summaries_roll_back(int seq);  // after every lane of seq lost rows from its end
    void summaries_reset(int seq);

private:
    float *as_f32(void *p) const {
        SIEVE_CHECKF(shape().type == cpu::KvRowTypes(cpu::RowType::f32),
                     "KV lanes hold %s rows, not f32: use k_data()/v_data()",
                     cpu::row_type_name(shape().type));
        return static_cast<float *>(p);
    }
    LaneSummary *summary_of(int seq, int64_t layer, int64_t kv_head);

    std::vector<LaneSummary> summaries_;  // per (seq, layer, kv head), sized at the first use
    bool summaries_wanted_ = false;       // k_summaries() was called once
};

// Checks a keep list against a lane of n_rows rows: strictly increasing, in
// [0, n_rows), 0 <= n_keep <= n_rows. The error names the lane.
Status kv_check_keep_list(int seq, int64_t layer, int64_t kv_head, int64_t n_rows, const int32_t *keep_rows,
                          int64_t n_keep);

}  // namespace sieve
