// A head profile: how much each KV head of a model relies on keys outside
// its attention sinks and a local window (DuoAttention, Xiao et al. 2024;
// LServe, Yang et al. 2025). `sieve calibrate` writes one (eval/calibrate.h
// says how the scores are measured); the `lserve` policy reads it and makes
// the lowest-scoring heads streaming heads.
//
// File format (JSON, docs/sparsity.md):
//   {
//     "format": "sieve-head-profile", "version": 1,
//     "model": "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
//     "n_layer": 24, "n_head_kv": 2,
//     "method": "...",                 one line: what a score is
//     "sink": 64, "recent": 256,        the streaming pattern the scores measured
//     "data": {...},                    what it was measured on (task, lengths, samples, seed)
//     "scores": [[s(0,0), s(0,1)], ...] per layer, per KV head; higher = needs the whole context more
//   }
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sieve/core/status.h"

namespace sieve {

struct HeadProfile {
    std::string model;
    std::string method;
    std::string data_json = "{}";  // the "data" object, as JSON text
    int64_t n_layer = 0;
    int64_t n_head_kv = 0;
    int64_t sink = 0;
    int64_t recent = 0;
    std::vector<double> scores;  // [n_layer * n_head_kv]

    double score(int64_t layer, int64_t kv_head) const { return scores[static_cast<size_t>(layer * n_head_kv + kv_head)]; }
};

// Reads a profile; errors name the file and what is wrong or missing.
Result<HeadProfile> head_profile_load(const std::string &path);
std::string head_profile_json(const HeadProfile &p);

// The `fraction` of all KV heads with the lowest scores (ties: the later
// layer, then the higher head), as a [n_layer * n_head_kv] mask.
std::vector<char> head_profile_streaming(const HeadProfile &p, double fraction);

}  // namespace sieve
