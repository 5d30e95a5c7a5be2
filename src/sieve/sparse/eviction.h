// Score- and position-based KV eviction (docs/sparsity.md says when to use
// which). One class covers the families; each is made from a spec by
// policy_spec.cpp's registry:
//
//   streaming   StreamingLLM (Xiao et al. 2023): attention sinks + a recent
//               window, sliding as decoding goes.
//   snapkv      SnapKV (Li et al. 2024): the last `window` prompt queries'
//               attention per key, max-pooled over `pool` neighbours, the
//               top rows per KV head + the window.
//   pyramidkv   PyramidKV (Cai et al. 2024): SnapKV's scores with a budget
//               falling with depth (beta), the same total.
//   layerwise   layer-wise sparsity in a serving engine: the first
//               `full_layers` layers keep every row, the rest a SnapKV budget.
//   h2o         H2O (Zhang et al. 2023): heavy hitters by attention
//               accumulated over every prefill and decode query + a recent
//               window, evicting as decoding goes.
//
// Budgets are rows per lane: budget=N, or keep=R of the prompt's rows. A
// lane whose budget covers it keeps every row (so a budget >= the prompt is
// the dense model, bit for bit). The sliding families (streaming, h2o) let a
// lane grow k_slide rows past its budget before they evict back to it, so
// eviction is one compaction per k_slide decode steps, not one per step.
#pragma once

#include <cstdint>
#include <string>

#include "sieve/sparse/policy.h"
#include "sieve/sparse/select.h"

namespace sieve {

enum class EvictionKind { streaming, snapkv, pyramidkv, layerwise, h2o };

struct EvictionParams {
    double keep = 0.25;        // fraction of the prompt's rows a lane keeps (when budget < 0)
    int64_t budget = -1;       // rows per lane; -1: keep * rows
    int64_t window = 32;       // observation window (snapkv family)
    int64_t pool = 7;          // pooling kernel over keys (snapkv family)
    sparse::Pooling pooling = sparse::Pooling::max;  // max (SnapKV's clustering) or avg (kvpress's)
    sparse::GroupAgg agg = sparse::GroupAgg::mean;  // a GQA group's query heads -> one KV-head score
    int64_t sink = 4;          // streaming: first rows always kept
    int64_t recent = -1;       // streaming / h2o: newest rows always kept; -1: budget - sink / budget / 2
    int64_t full_layers = 0;   // the first layers keep every row
    double beta = 20.0;        // pyramidkv
};

class EvictionPolicy final : public KvPolicy {
public:
    static constexpr int64_t k_slide = 32;

    EvictionPolicy(EvictionKind kind, const EvictionParams &p, std::string label);

    std::string name() const override { return label_; }
    std::unique_ptr<KvPolicyState> make_state(const KvShape &shape, int64_t n_head, int64_t max_rows) const override;
    void begin_prefill(KvPolicyState *state, int64_t n_total) const override;
    Status after_prefill(const PolicyContext &ctx) const override;
    bool acts_after_decode() const override;
    Status after_decode(const PolicyContext &ctx) const override;
    int64_t kept_rows(int64_t n_prompt, int64_t layer, int64_t n_layer) const override;
    int64_t decode_rows(int64_t n_prompt, int64_t n_gen, int64_t layer, int64_t n_layer) const override;

    // Rows every lane of `layer` keeps of a prompt of n rows (n when dense).
    int64_t layer_budget(int64_t n, int64_t layer, int64_t n_layer) const;
    EvictionKind kind() const { return kind_; }
    const EvictionParams &params() const { return p_; }

private:
    bool uses_scores() const { return kind_ != EvictionKind::streaming; }
    int64_t reusable_prefix(int64_t n_total) const override;
    // Evicts every lane of (slot, layer) holding more than `budget` rows down to it.
    Status evict_layer(const PolicyContext &ctx, int64_t layer, int64_t budget) const;

    EvictionKind kind_;
    EvictionParams p_;
    std::string label_;
};

}  // namespace sieve
