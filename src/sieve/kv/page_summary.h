// Page summaries for query-aware page selection (Quest, Tang et al. 2024):
// per logical page of k_summary_rows keys of a K lane, per channel, the
// smallest and the largest value. For any query q the Quest bound
//   sum_c max(q_c * min_c, q_c * max_c)  >=  q . k   for every key k of the page,
// so the pages with the highest bounds hold the keys a query can attend to
// most (sparse/quest.h).
//
// Stored as f16, rounded outward (min towards -inf, max towards +inf) so the
// bound still holds for f32 and bf16 rows; f16 rows are exact. Rounding
// outward is monotone, so a summary extended row by row equals one computed
// from scratch, bit for bit.
//
//   lane rows:   [ 0 .. 15 | 16 .. 31 | 32 .. 40 ]            41 rows
//   summaries:   [ min[d] max[d] | min[d] max[d] | min[d] max[d] ]  3 pages (the last one partial)
#pragma once

#include <cstdint>
#include <vector>

#include "sieve/kernels/cpu/row_type.h"

namespace sieve {

constexpr int64_t k_summary_rows = 16;

inline int64_t summary_pages(int64_t n_rows) { return (n_rows + k_summary_rows - 1) / k_summary_rows; }

// f16 of x rounded towards -inf (down) or +inf (up).
uint16_t fp16_round_down(float x);
uint16_t fp16_round_up(float x);

// Scalar oracle: the summaries of rows [0, n_rows) of a lane of `type`
// ([n_rows, d]) into out [summary_pages(n_rows)][2][d].
void summarize_lane_ref(cpu::RowType type, const void *lane, int64_t n_rows, int64_t d, uint16_t *out);

// One lane's summaries, kept up to date lazily: update() summarizes the rows
// appended since the last call, and invalidate(row) makes the next update()
// recompute the pages from the one holding `row` (rows there were replaced:
// a compaction, a rollback).
class LaneSummary {
public:
    // Summaries of rows [0, n_rows) of the lane: [summary_pages(n_rows)][2][d].
    const uint16_t *update(cpu::RowType type, const void *lane, int64_t n_rows, int64_t d);
    void invalidate(int64_t row) {
        if (row < rows_) rows_ = row / k_summary_rows * k_summary_rows;
    }
    // Forgets everything and returns the memory.
    void reset() {
        rows_ = 0;
        std::vector<uint16_t>().swap(data_);
    }
    int64_t rows() const { return rows_; }
    int64_t bytes() const { return static_cast<int64_t>(data_.capacity() * sizeof(uint16_t)); }

private:
    std::vector<uint16_t> data_;
    int64_t rows_ = 0;  // rows summarized: [0, rows_) are in data_
};

}  // namespace sieve
