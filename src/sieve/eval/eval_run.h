// `sieve eval`'s runner: generated long-context samples through the serving
// engine, dense as the reference and each KV policy against it.
//
// For each cell (task x context length), in this order:
//   1. make n_samples samples (seed + i; the needle depth of sample i is
//      depths[i % n] or, by default, i / (n - 1) spread over [0, 1]);
//   then per group of -np samples (the engine's slots):
//   2. reference: dense KV of ref_kv_type; the group's samples are
//      submitted at once (they batch as in serving) and decoded greedily
//      for the task's max_tokens; every step's log-softmax is kept
//      ([n_steps, n_vocab] floats per sample: the only copy KL needs);
//   3. per policy, with the run's kv_type and that policy (per request):
//        forced: the reference continuation teacher-forced (forced_tokens),
//                so step i of both runs sees the same prefix; each step's
//                logits give KL(ref || policy), top-1 agreement and both NLLs
//                of the forced token (StepAccumulator, nothing kept per step);
//        free:   greedy decoding under the policy, scored by exact match —
//                the policy's own accuracy; only for the samples whose forced
//                run left the reference's path (otherwise it would decode
//                the reference's tokens), never for dense at the reference's
//                KV type.
// share_prefill (default): the runs of a KV type share one engine with the
// prefix cache on, so a row maps the prompt KV an earlier row of that type
// computed and computes only what its policy must (SnapKV's window, H2O's
// every query, LServe's Λ-masked prefill: KvPolicy::reusable_prefix and
// prefix_namespace). The bits are those of a full prefill (attention does
// not depend on how a prompt is cut, a token's matmuls not on its batch),
// so dense still gives KL exactly 0; a row's prefill time then covers only
// what it computed (cached_tokens says how much came from the cache).
// Off: a fresh engine per run, each computing its whole prompt.
// ppl has no answers: the sample's last ppl_tokens tokens are forced in both
// runs (the prompt is the rest), and perplexity over them is the measure.
//
// Per sample the policy run also reports the rows kept per (layer, KV head)
// after the policy acted (the real compression: dense rows / kept rows), and
// wall times (submit -> first token = prefill, including time spent queued
// behind the other samples; first -> last token = decode). Peak KV memory is
// sampled from EngineStats every few milliseconds per (policy, cell); with
// shared prefill it counts the cached prompt pages the running sequences map.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sieve/core/status.h"
#include "sieve/engine/engine.h"
#include "sieve/eval/eval_metrics.h"
#include "sieve/eval/tasks.h"
#include "sieve/sparse/policy_spec.h"

namespace sieve {

class Model;

struct EvalPlan {
    std::vector<std::string> tasks;
    std::vector<int64_t> ctx;            // prompt lengths in tokens
    int64_t n_samples = 5;               // per cell
    uint64_t seed = 0;                   // sample i of every cell has seed + i
    std::vector<double> depths;          // needle depths cycled over samples; empty = spread over [0, 1]
    std::vector<KvPolicySpec> policies;  // under test; the dense reference always runs too
    EngineOptions engine;                // every run's options (kv_type, threads, slots, pool)
    cpu::KvRowTypes ref_kv_type = cpu::RowType::f16;  // the reference's KV rows (--ref-cache-type)
    int64_t max_tokens = 0;                        // generated tokens; 0 = the task's (eval_task_max_tokens)
    int64_t ppl_tokens = 256;                      // ppl: forced tail scored for perplexity
    TaskOptions task;                              // n_needles, vt_* and ppl_dir; the rest is set per sample
    bool share_prefill = true;                     // rows map the prompt KV an earlier row computed (above)
};

// Enough for the task's expected answer and some preamble: 32 for one
// number (passkey, niah_multikey, code), 64 for several numbers (niah_
// multivalue, niah_multiquery, fwe, ppl's unused free run), 128 for lists
// of names or words (vt, cwe).
int64_t eval_task_max_tokens(const std::string &task);

// One (row, sample): row 0 is the reference, row 1 + j is policies[j].
struct EvalSampleResult {
    int row = 0;
    std::string task;
    int64_t ctx = 0;  // the cell's target length
    uint64_t seed = 0;
    double depth = 0;      // asked needle depth (or -1 when the task has none)
    int64_t n_prompt = 0;  // prompt tokens fed (ppl: without the forced tail)
    bool scored = false, correct = false;
    double ruler = 0;                // RULER's string_match_all of the output, in [0, 1]
    std::vector<std::string> answers;  // the expected strings
    std::string output;              // the free (greedy) run's text
    int64_t n_gen = 0;               // its tokens
    StepMetrics steps;               // forced run vs the reference (the reference row: only NLL)
    std::vector<int64_t> rows_kept;  // [n_layer * n_head_kv] after the policy acted
    // [n_layer * n_head_kv]: the prompt positions those rows hold, only when
    // the engine keeps positions (EngineOptions::kv_positions; --dump-kept).
    std::vector<std::vector<int32_t>> kept_positions;
    int64_t rows_dense = 0;     // per lane: the prompt's rows
    int64_t cached_tokens = 0;  // prompt tokens of the forced run mapped from the prefix cache
    double prefill_ms = 0, decode_ms = 0;
    std::string error;  // a request the engine failed (the sample counts as wrong)
};

// One engine run over a cell's samples.
struct EvalCellRun {
    int row = 0;
    std::string task;
    int64_t ctx = 0;
    int64_t peak_kv_bytes = 0;  // max of kv_pages_used * kv_page_bytes while it ran
    double wall_ms = 0;
};

struct EvalRow {
    std::string policy;  // spec label; "dense (reference)" for row 0
    cpu::KvRowTypes kv_type = cpu::RowType::f16;
    bool reference = false;
};

struct EvalResult {
    std::vector<EvalRow> rows;
    std::vector<EvalSampleResult> samples;  // cell by cell, rows in order within a cell
    std::vector<EvalCellRun> runs;
    int64_t n_layer = 0, n_head_kv = 0, n_vocab = 0;
    double wall_s = 0;
};

// Cell of samples[] in row order: the outcomes that eval_summarise() takes.
std::vector<SampleOutcome> eval_outcomes(const EvalResult &r, int row, const std::string &task, int64_t ctx);

struct EvalProgress {
    int64_t requests_done = 0, requests_total = 0;
    double work_done = 0, work_total = 0;
};

struct EvalHooks {
    // Main thread, after each finished request: requests done / total, and
    // the work done / total in estimated tokens computed (a reference run
    // computes its whole prompt, a row that maps it from the prefix cache
    // little of it), which is what an ETA should be proportional to.
    std::function<void(const EvalProgress &p, const std::string &what)> progress;
    // Each generated sample, with the number of trailing prompt tokens that are
    // forced instead of fed as the prompt (ppl; 0 otherwise): --dump-samples.
    std::function<void(const EvalSample &s, int64_t n_forced)> on_sample;
};

// Fails fast on what would fail later: makes every policy and the first
// sample of every cell (a length a task cannot reach, a missing ppl text).
// Costs one sample's generation per cell; call it before eval_run.
Status eval_plan_check(const EvalPlan &plan, const Tokenizer &tok, const ChatTemplate *tmpl);

// Runs the plan. tmpl == nullptr: the model has no chat template (raw
// prompts). Errors: a sample that cannot be made, an engine that cannot be
// created (KV memory), a request the engine refuses.
Result<EvalResult> eval_run(const Model &model, const Tokenizer &tok, const ChatTemplate *tmpl,
                            const EvalPlan &plan, const EvalHooks &hooks);

}  // namespace sieve
