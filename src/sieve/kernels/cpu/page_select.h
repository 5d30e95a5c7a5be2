// Page scores for query-aware page selection (Quest, Tang et al. 2024):
// the upper bound of q . k over the keys of each logical page, from the
// page's per-channel min and max (kv/page_summary.h), combined over a GQA
// group's query heads:
//
//   bound_h(p) = sum_c max(q_hc * min_pc, q_hc * max_pc)     >= q_h . k  for every key k of page p
//   out[p]     = max_h bound_h(p)    (agg max: a page matters if any head of the group may need it)
//              | mean_h bound_h(p)   (agg mean)
//              | sum_h exp(scale bound_h(p) - lse_h)   (agg mass)
//              | max_h exp(scale bound_h(p) - lse_h)   (agg maxprob)
//
// with lse_h = log sum_p' exp(scale bound_h(p')) over the pages of the call.
// mass reads each head's bounds as the logits of a softmax over pages and adds
// the group's per-head page probabilities: an estimate of the attention mass
// the group puts on the page, where every head weighs the same. Raw bounds
// (max, mean) compare heads on the scale of their query norms: one head with a
// large |q| and flat preferences outranks a head that points at one page.
// maxprob keeps max's "any head" but on the same per-head probabilities.
// For a group of one head every mode ranks pages alike. quest and lserve use
// max unless told otherwise: on Qwen2.5-0.5B multi-key NIAH mass cut the KL
// about 3x but kept fewer 16k needles (docs/accuracy.md).
#pragma once

#include <cstdint>

#include "sieve/kernels/cpu/row_type.h"

namespace sieve::cpu {

enum class PageAgg { max, mean, mass, maxprob };

struct PageScoreArgs {
    const float *q = nullptr;          // [group, d]: the group's queries
    int64_t group = 1;
    int64_t d = 0;
    const uint16_t *summary = nullptr; // [n_pages][2][d] f16: min row, max row per page
    int64_t n_pages = 0;
    PageAgg agg = PageAgg::max;
    float scale = 0.0f;                // the attention's logit scale (mass, maxprob; > 0)
    float *out = nullptr;              // [n_pages]
};

void quest_page_scores(const PageScoreArgs &a);

// lo[c] = min, hi[c] = max over rows [0, n) of rows ([n, d] of type t) of
// channel c, exact in f32 (what page summaries are made of). d <= 1024.
void rows_minmax(RowType t, const void *rows, int64_t n, int64_t d, float *lo, float *hi);
// Scalar oracle, double accumulation.
void quest_page_scores_ref(const PageScoreArgs &a);

// Exact page scores: what the bound estimates, from the keys themselves (an
// oracle for the bound, score=exact in quest and lserve; it reads every key
// of the lane, so a selection costs what dense attention does). With
// l_h(k) = q_h . k over the keys of the call,
//
//   top_h(p)  = max_{k in p} l_h(k)                                  (max, mean: in place of bound_h)
//   prob_h(p) = sum_{k in p} exp(scale l_h(k) - lse_h),  lse_h over every key   (mass, maxprob)
//
// combined over the group as above: mass is then the attention the group's
// heads put on the page, exactly, and the top pages by it are the selection
// that loses the least attention for a budget.
struct PageExactArgs {
    const float *q = nullptr;  // [group, d]: the group's queries
    int64_t group = 1;
    int64_t d = 0;
    RowType type = RowType::f32;  // of the key rows
    const void *keys = nullptr;   // [n_rows, d] of type
    int64_t n_rows = 0;
    int64_t page_rows = 16;  // rows per page; the last page may be partial
    PageAgg agg = PageAgg::max;
    float scale = 0.0f;  // the attention's logit scale (mass, maxprob; > 0)
    // Optional: score only pages[0 .. n_list) (ascending, each below
    // ceil(n_rows / page_rows)); out[i] is then page pages[i]'s, and lse_h
    // runs over those pages' keys alone (refine= in quest: the bound's
    // candidates re-ranked by their keys).
    const int32_t *pages = nullptr;
    int64_t n_list = 0;
    float *out = nullptr;  // [n_list] with a list, else [ceil(n_rows / page_rows)]
};

void page_scores_exact(const PageExactArgs &a);
// Scalar oracle, double accumulation.
void page_scores_exact_ref(const PageExactArgs &a);

}  // namespace sieve::cpu
