// Query-aware page selection: Quest (Tang et al. 2024) with LServe's
// hierarchical paging and reusable selector (Yang et al. 2025). Nothing is
// evicted: every row stays in its lane, and each decode query reads only the
// pages whose keys it can attend to most.
//
// Per decode token, per layer >= full_layers, per KV head (of n rows, the
// token's own included):
//   1. each logical page of 16 keys gets the Quest bound of the group's
//      queries over its min/max summary (kernels/cpu/page_select.h), the
//      group's heads combined by max (a page is read for the whole group, so
//      it counts if any head may need it), mean, or mass (each head's bounds
//      as softmax logits over the pages, the group's probabilities summed)
//      (agg=); or, with score=exact, the same from the keys themselves;
//      with refine=R, the bound's best R x budget re-ranked by their keys;
//   2. a selection unit ("physical page") of `page` rows scores the max of
//      its logical pages (LServe: small logical pages for accuracy, larger
//      units for cheap reading);
//   3. the units covering rows [0, sink), the last `recent` rows and the
//      newest (partial) unit are always read; the best other units fill the
//      budget of `budget` rows (ties: the earlier unit);
//   4. the selection is reused for `interval` decode steps; rows appended
//      meanwhile belong to the newest unit, which is always read.
// A lane of at most `budget` rows is read whole (dense bits).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sieve/kernels/cpu/page_select.h"
#include "sieve/sparse/policy.h"

namespace sieve {

struct QuestParams {
    int64_t budget = 2048;     // rows a KV head reads per decode step
    // Rows per selection unit (a multiple of k_summary_rows). 16 = one logical
    // page, Quest's page size: LServe's 64-row units lost multi-key NIAH
    // samples at 8k and 16k that 16-row units keep, and with the decode
    // gathering short spans into 64-row blocks they cost under 1% of speed
    // (docs/accuracy.md, docs/benchmarks.md).
    int64_t page = 16;
    int64_t interval = 4;      // decode steps a selection is reused for
    int64_t sink = 16;         // first rows always read
    int64_t recent = 0;        // last rows always read (besides the newest unit)
    int64_t full_layers = 2;   // the first layers read every row
    cpu::PageAgg agg = cpu::PageAgg::max;  // how a group's heads combine (kernels/cpu/page_select.h)
    // score=exact: logical pages scored from their keys (cpu::page_scores_exact),
    // not the min/max bound. An oracle for measuring what the bound loses: a
    // selection reads the whole lane, as dense attention does.
    bool exact = false;
    // refine=R (0: off): the bound's best R x (units the budget chooses)
    // are candidates, re-ranked by their keys' exact scores (same agg; the
    // softmax of mass over the candidates' keys). Each selection then reads
    // the K rows of R x budget, besides the decode's reads.
    double refine = 0.0;
};

// Selection counters of one sequence (or summed over many).
struct QuestStats {
    int64_t n_steps = 0;       // decode tokens seen (calls for layer 0)
    int64_t n_selects = 0;     // (layer, KV head) selections made
    int64_t n_reuses = 0;      // ... reused from an earlier step
    int64_t rows_read = 0;     // rows the decode attention read, over every call and lane (full layers too)
    int64_t rows_seen = 0;     // rows the lanes held, over every call and lane
    int64_t select_ns = 0;     // time in select(): summaries, scores, top units
};

class QuestSelector final : public AttnRowSelector {
public:
    QuestSelector(const QuestParams &p, const KvShape &shape, int64_t n_head);
    const cpu::RowSpans *select(int64_t layer, const float *q, KvCache &kv, int seq, const int64_t *n_vis,
                                ThreadPool *pool) override;
    std::unique_ptr<AttnRowSelector> clone() const override { return std::make_unique<QuestSelector>(*this); }
    // Forgets every selection (a new prefill of the sequence).
    void reset();
    const QuestStats &stats() const { return stats_; }
    void reset_stats() { stats_ = QuestStats(); }

private:
    struct Choice {
        std::vector<int32_t> units;  // selected units before the newest one, ascending
        int64_t tail_row = -1;       // first row of the newest unit when chosen (-1: none yet)
        int64_t step = 0;            // decode step it was chosen at
    };
    // A choice's buffers, one set per KV head so the heads choose in parallel.
    struct Scratch {
        std::vector<float> logical, unit_score, cand_score;
        std::vector<int32_t> order, cand_pages;
        std::vector<char> take;
        const uint16_t *summary = nullptr;  // the lane's page summaries, brought up to date by select()
    };
    // Chooses units for lane (layer, g) of n rows and records them in c.
    void choose(int64_t layer, int64_t g, const float *q, KvCache &kv, int seq, int64_t n, Choice &c,
                Scratch &w) const;

    QuestParams p_;
    int64_t n_layer_, n_head_kv_, n_head_, d_;
    int64_t step_ = 0;
    std::vector<Choice> choices_;  // [n_layer][n_head_kv]
    std::vector<Scratch> scratch_;   // [n_head_kv]
    std::vector<int64_t> todo_;      // KV heads that choose in the current call
    std::vector<int32_t> rows_;      // spans of the current call
    std::vector<int64_t> first_;
    cpu::RowSpans spans_;
    QuestStats stats_;
};

class QuestPolicy final : public KvPolicy {
public:
    QuestPolicy(const QuestParams &p, std::string label) : p_(p), label_(std::move(label)) {}
    std::string name() const override { return label_; }
    std::unique_ptr<KvPolicyState> make_state(const KvShape &shape, int64_t n_head, int64_t max_rows) const override;
    void begin_prefill(KvPolicyState *state, int64_t n_total) const override;
    Status after_prefill(const PolicyContext &ctx) const override { return Status(); }
    const QuestParams &params() const { return p_; }

private:
    QuestParams p_;
    std::string label_;
};

}  // namespace sieve
