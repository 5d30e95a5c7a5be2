#include "sieve/kv/page_summary.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>
#include <vector>

#include "sieve/core/fp16.h"
#include "sieve/core/status.h"
#include "sieve/kernels/cpu/kv_rows.h"
#include "sieve/kernels/cpu/page_select.h"

namespace sieve {

namespace {

// The f16 next to h towards -inf (h finite or +inf, not -inf).
uint16_t fp16_step_down(uint16_t h) {
    if (h == 0x0000) return 0x8001;          // +0 -> the smallest negative subnormal
    return (h & 0x8000) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h - 1);
}

float widen(cpu::RowType t, const void *lane, int64_t i) { return cpu::row_elem(t, lane, i); }

// Every non-NaN f16 value with its bits, ascending by value.
const std::vector<std::pair<double, uint16_t>> &f16_values_sorted() {
    static const std::vector<std::pair<double, uint16_t>> all = [] {
        std::vector<std::pair<double, uint16_t>> v;
        for (uint32_t h = 0; h < 0x10000; ++h) {
            const double x = fp16_to_fp32(static_cast<uint16_t>(h));
            if (!std::isnan(x)) v.emplace_back(x, static_cast<uint16_t>(h));
        }
        std::sort(v.begin(), v.end());
        return v;
    }();
    return all;
}

}  // namespace

uint16_t fp16_round_down(float x) {
    if (std::isnan(x)) return 0x7e00;
    const uint16_t h = fp32_to_fp16(x);
    return fp16_to_fp32(h) > x ? fp16_step_down(h) : h;
}

uint16_t fp16_round_up(float x) {
    // up(x) = -down(-x)
    return static_cast<uint16_t>(fp16_round_down(-x) ^ 0x8000);
}

void summarize_lane_ref(cpu::RowType type, const void *lane, int64_t n_rows, int64_t d, uint16_t *out) {
    for (int64_t p = 0; p < summary_pages(n_rows); ++p) {
        for (int64_t c = 0; c < d; ++c) {
            double lo = INFINITY, hi = -INFINITY;
            for (int64_t r = p * k_summary_rows; r < std::min(n_rows, (p + 1) * k_summary_rows); ++r) {
                const double x = widen(type, lane, r * d + c);
                lo = std::min(lo, x);
                hi = std::max(hi, x);
            }
            // The f16 values bracketing [lo, hi], by binary search over every
            // f16 value in order (independent of the rounding helpers above).
            const std::vector<std::pair<double, uint16_t>> &all = f16_values_sorted();
            auto it = std::upper_bound(all.begin(), all.end(), std::make_pair(lo, uint16_t{0xffff}));
            const uint16_t down = it == all.begin() ? uint16_t{0xfc00} : std::prev(it)->second;
            auto jt = std::lower_bound(all.begin(), all.end(), std::make_pair(hi, uint16_t{0}));
            const uint16_t up = jt == all.end() ? uint16_t{0x7c00} : jt->second;
            out[(2 * p) * d + c] = down;
            out[(2 * p + 1) * d + c] = up;
        }
    }
}

const uint16_t *LaneSummary::update(cpu::RowType type, const void *lane, int64_t n_rows, int64_t d) {
    SIEVE_CHECKF(n_rows >= 0 && d > 0, "LaneSummary::update: %lld rows of %lld", static_cast<long long>(n_rows),
                 static_cast<long long>(d));
    invalidate(n_rows);  // rows past the lane's end are gone
    const size_t need = static_cast<size_t>(summary_pages(n_rows) * 2 * d);
    if (data_.size() < need) data_.resize(std::max(need, data_.size() * 3 / 2));
    std::vector<float> lo(static_cast<size_t>(d)), hi(static_cast<size_t>(d));
    while (rows_ < n_rows) {
        const int64_t p = rows_ / k_summary_rows, end = std::min(n_rows, (p + 1) * k_summary_rows);
        uint16_t *mn = data_.data() + 2 * p * d, *mx = mn + d;
        cpu::rows_minmax(type, cpu::row_elems_at(type, lane, rows_ * d), end - rows_, d,
                         lo.data(), hi.data());
        const bool fresh = rows_ % k_summary_rows == 0;
        for (int64_t c = 0; c < d; ++c) {
            const uint16_t a = fp16_round_down(lo[static_cast<size_t>(c)]);
            const uint16_t b = fp16_round_up(hi[static_cast<size_t>(c)]);
            mn[c] = fresh || fp16_to_fp32(a) < fp16_to_fp32(mn[c]) ? a : mn[c];
            mx[c] = fresh || fp16_to_fp32(b) > fp16_to_fp32(mx[c]) ? b : mx[c];
        }
        rows_ = end;
    }
    return data_.data();
}

}  // namespace sieve
