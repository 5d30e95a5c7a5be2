// `sieve eval`'s outputs from one EvalResult:
//   md     two tables: the summary (rows policy x KV type, columns task @
//          length: accuracy % [95% Wilson interval] · mean KL · compression)
//          and the details (one row per policy and cell: every metric);
//   json   the whole result: run settings, one object per (policy, cell)
//          under "cells" (what eval/plot_eval.py reads), every sample under
//          "samples";
//   jsonl  one object per (policy, sample), the same fields as "samples".
// Field meanings are in docs/accuracy.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sieve/eval/eval_run.h"

namespace sieve {

enum class EvalFormat { md, json, jsonl };

// What the report says about the run besides the result.
struct EvalReportInfo {
    std::string model;  // the GGUF path given
    int64_t n_threads = 0;
    int n_parallel = 0;  // -np
};

std::string eval_report_md(const EvalResult &r, const EvalPlan &plan, const EvalReportInfo &info);
std::string eval_report_json(const EvalResult &r, const EvalPlan &plan, const EvalReportInfo &info);
std::string eval_report_jsonl(const EvalResult &r);

// One line of --dump-samples: the sample as generated (prompt text and ids,
// answers, needles) and how many trailing ids are forced rather than prompt
// (ppl). eval/kvpress_check.py reads these.
std::string eval_sample_jsonl(const EvalSample &s, int64_t n_forced);

// --dump-kept: one line per (policy, sample) that recorded kept positions:
// policy, task, ctx, seed, n_prompt, n_layer, n_head_kv and "kept", the
// prompt positions each lane (layer-major, then KV head) holds after the
// after-prefill point, ascending. eval/kvpress_check.py --overlap reads it.
std::string eval_kept_jsonl(const EvalResult &r);

}  // namespace sieve
