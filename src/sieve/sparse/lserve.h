// LServe (Yang et al. 2025): static and dynamic sparsity in one policy.
// A head profile (sparse/head_profile.h, made by `sieve calibrate`) ranks
// the KV heads; the `static` fraction with the lowest scores become
// streaming heads (DuoAttention, Xiao et al. 2024): after prefill their
// lanes are compacted to the first `sink` rows and the last `recent`, and
// they slide while decoding, so their memory goes back to the pool. Every
// other head keeps its whole lane and reads it through Quest page selection
// (sparse/quest.h) within `budget` rows, reselected every `interval` steps.
// In prefill a streaming head's queries see only the sink and their own last
// `recent` rows (the Λ-shaped mask, cpu::AttnLambda), so a long prompt
// costs it O(n) instead of O(n^2); prefill=dense keeps its prefill dense.
//
//   --kv-policy lserve:static=0.5,budget=4096,interval=4,sink=64,recent=256,profile=FILE
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sieve/sparse/head_profile.h"
#include "sieve/sparse/policy.h"
#include "sieve/sparse/quest.h"

namespace sieve {

struct LServeParams {
    double static_frac = 0.5;   // fraction of KV heads made streaming heads
    int64_t sink = 64;          // streaming heads keep the first sink rows ...
    int64_t recent = 256;       // ... and the last recent rows
    QuestParams quest;          // the other heads: page selection (full_layers 0, sink = the same sink)
    bool lambda_prefill = true; // streaming heads prefill with the Λ mask (prefill=lambda|dense)
    std::string profile_path;
};

class LServePolicy final : public KvPolicy {
public:
    static constexpr int64_t k_slide = 32;  // streaming lanes grow this far past sink + recent before sliding

    LServePolicy(const LServeParams &p, HeadProfile profile, std::string label);
    std::string name() const override { return label_; }
    Status check_model(const KvShape &shape, int64_t n_head) const override;
    std::unique_ptr<KvPolicyState> make_state(const KvShape &shape, int64_t n_head, int64_t max_rows) const override;
    void begin_prefill(KvPolicyState *state, int64_t n_total) const override;
    Status after_prefill(const PolicyContext &ctx) const override;
    bool acts_after_decode() const override { return true; }
    Status after_decode(const PolicyContext &ctx) const override;
    int64_t kept_rows(int64_t n_prompt, int64_t layer, int64_t n_layer) const override;
    int64_t decode_rows(int64_t n_prompt, int64_t n_gen, int64_t layer, int64_t n_layer) const override;
    const PrefillMask *prefill_mask() const override { return p_.lambda_prefill ? &mask_ : nullptr; }
    uint64_t prefix_namespace() const override { return p_.lambda_prefill ? namespace_ : 0; }

    bool streaming(int64_t layer, int64_t kv_head) const {
        return streaming_[static_cast<size_t>(layer * profile_.n_head_kv + kv_head)] != 0;
    }
    int64_t n_streaming() const;
    const LServeParams &params() const { return p_; }

private:
    // Compacts every streaming lane of `layer` holding more than `limit` rows
    // to sink + recent.
    Status slide_layer(const PolicyContext &ctx, int64_t layer, int64_t limit) const;
    bool layer_all_streaming(int64_t layer) const;

    LServeParams p_;
    HeadProfile profile_;
    std::vector<uint8_t> streaming_;  // [n_layer * n_head_kv]
    PrefillMask mask_;                // over streaming_
    uint64_t namespace_ = 0;          // of the KV the mask makes: a hash of the mask
    std::string label_;
};

}  // namespace sieve
