// sieve eval: how much a KV policy costs in accuracy, measured against dense
// on generated long-context tasks, through the serving engine (the runner's
// steps are in eval/eval_run.h; the metrics in docs/accuracy.md).
//
//   1. parse flags (bad ones exit 2 before the model loads);
//   2. load model, tokenizer and chat template; check every --ctx against
//      the model's training context and make each cell's first sample
//      (exit 2 when a length cannot be had);
//   3. run: samples per (task, length), the dense reference, each policy;
//      a progress line on stderr;
//   4. print md / json / jsonl on stdout.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "sieve/cli/args.h"
#include "sieve/cli/commands.h"
#include "sieve/core/timer.h"
#include "sieve/eval/eval_report.h"
#include "sieve/eval/eval_run.h"
#include "sieve/gguf/gguf.h"
#include "sieve/model/model.h"
#include "sieve/tokenizer/tokenizer.h"

namespace sieve::cli {

namespace {

struct EvalOptions {
    std::string model;
    std::string chat_template;  // --chat-template NAME; "" = the model's own
    EvalPlan plan;
    EvalFormat format = EvalFormat::md;
    std::string type_k, type_v, ref_type;  // -ctk / -ctv / --ref-cache-type
    std::string rotate_k;                  // --rotate-k ("" = auto)
    std::string dump_samples;              // --dump-samples FILE
    std::string dump_kept;                 // --dump-kept FILE
    bool mmap = false;
    bool help = false;
};

void eval_usage(FILE *out) {
    std::fprintf(
        out,
        "usage: sieve eval [options]\n"
        "\n"
        "Accuracy of KV policies against dense on generated long-context tasks\n"
        "(RULER-style), through the serving engine. For each task x length x sample the\n"
        "dense reference runs first; each policy then gets the reference's greedy\n"
        "continuation teacher-forced (KL, top-1 agreement, perplexity) and decodes freely\n"
        "(accuracy). See docs/accuracy.md.\n"
        "\n"
        "  -m, --model FILE          GGUF model (default: the cached SmolLM2-135M-Instruct)\n"
        "  --task T[,T]              tasks (default passkey,niah_multikey,vt): %s\n"
        "  --ctx N[,N]               prompt lengths in tokens (default 4096)\n"
        "  --samples N               samples per task and length (default 20)\n"
        "  --kv-policy P[,P]         policies under test, NAME[:key=value,...] or @FILE.json;\n"
        "                            repeatable (default dense). Known policies:\n"
        "%s"
        "  --depths F[,F]            needle depths in [0, 1], cycled over samples (default:\n"
        "                            spread evenly from 0 to 1)\n"
        "  --seed S                  sample i has seed S + i (default 0)\n"
        "  --max-tokens N            generated tokens (default: 32 for passkey, niah_multikey,\n"
        "                            code; 128 for vt, cwe; 64 for the rest)\n"
        "  --ppl-tokens N            ppl: tokens at the end of the text scored (default 256)\n"
        "  -o, --output md|json|jsonl   md: tables; json: everything; jsonl: one line per sample\n"
        "  --dump-samples FILE       write every generated sample (prompt, ids, answers) as JSONL\n"
        "  --dump-kept FILE          write the prompt positions each policy kept per layer and KV\n"
        "                            head, one JSON line per (policy, sample)\n"
        "  --exact                   f32 activations through dequantized weights (the exact model,\n"
        "                            as a float reference computes it; slower) instead of 8-bit\n"
        "  --no-prefix-cache         every run computes its whole prompt (by default the rows of a\n"
        "                            KV type share an engine and map the prompt KV an earlier row\n"
        "                            computed; a policy computes only the queries it scores)\n"
        "  -np, --parallel N         samples decoded together (default 8)\n"
        "  -t, --threads N           compute threads (default: every core)\n"
        "  -ctk, --cache-type-k T    KV row type of the policy runs: f16 (default), bf16, f32, q8_0, q4_0\n"
        "  -ctv, --cache-type-v T    V row type (default: as -ctk, which alone sets both;\n"
        "                            K and V may differ, e.g. -ctk q8_0 -ctv q4_0)\n"
        "  --rotate-k auto|on|off    keys rotated by a fixed Hadamard transform (auto: q4_0 keys);\n"
        "                            applies to the reference's type too\n"
        "  --ref-cache-type T        KV row type of the dense reference (default: as -ctk);\n"
        "                            f32 makes it the exact oracle\n"
        "  --kv-memory BYTES         KV pool per run (default: -np full contexts)\n"
        "  --chat-template NAME      override the model's chat template: %s\n"
        "  --ppl-dir DIR             ppl: folder of .py files (default: python3's stdlib)\n"
        "  --mmap                    leave the weights in the file mapping\n"
        "  -h, --help                this text\n",
        join_names(eval_task_names()).c_str(), kv_policy_help().c_str(), chat_format_names().c_str());
}

Status parse_fraction_list(const std::string &flag, const std::string &text, std::vector<double> *out) {
    for (const std::string &part : split_commas(text)) {
        Result<double> v = parse_double(flag, part);
        if (!v.ok()) return v.status();
        if (*v < 0 || *v > 1)
            return Status::errorf("%s: expected fractions in [0, 1], got '%s'", flag.c_str(), part.c_str());
        out->push_back(*v);
    }
    return Status();
}

Status parse_tasks(const std::string &text, std::vector<std::string> *out) {
    const std::vector<std::string> known = eval_task_names();
    for (const std::string &t : split_commas(text)) {
        if (std::find(known.begin(), known.end(), t) == known.end())
            return Status::errorf("--task: unknown task '%s'; expected one of %s", t.c_str(),
                                  join_names(known).c_str());
        out->push_back(t);
    }
    return Status();
}

// One flag that takes a value; false when `f` is not one of these.
bool parse_value_flag(ArgCursor &args, const std::string &f, EvalOptions *o, Status *st) {
    EvalPlan &p = o->plan;
    std::string text;
    int64_t v = 0;
    if (f == "-m" || f == "--model")
        *st = take_string(args, "a file path", &o->model);
    else if (f == "--chat-template")
        *st = take_string(args, "a template name", &o->chat_template);
    else if (f == "--dump-samples")
        *st = take_string(args, "a file path", &o->dump_samples);
    else if (f == "--dump-kept")
        *st = take_string(args, "a file path", &o->dump_kept);
    else if (f == "--ppl-dir")
        *st = take_string(args, "a folder", &p.task.ppl_dir);
    else if (f == "-ctk" || f == "--cache-type-k")
        *st = take_string(args, "f16, bf16, f32, q8_0 or q4_0", &o->type_k);
    else if (f == "-ctv" || f == "--cache-type-v")
        *st = take_string(args, "f16, bf16, f32, q8_0 or q4_0", &o->type_v);
    else if (f == "--rotate-k")
        *st = take_string(args, "auto, on or off", &o->rotate_k);
    else if (f == "--ref-cache-type")
        *st = take_string(args, "f16, bf16, f32, q8_0 or q4_0", &o->ref_type);
    else if (f == "--samples")
        *st = take_int(args, f, 1, 100000, &p.n_samples);
    else if (f == "--max-tokens")
        *st = take_int(args, f, 1, 65536, &p.max_tokens);
    else if (f == "--ppl-tokens")
        *st = take_int(args, f, 1, 65536, &p.ppl_tokens);
    else if (f == "--kv-memory")
        *st = take_bytes(args, f, &p.engine.kv_memory_bytes);
    else if (f == "--seed") {
        *st = take_int(args, f, 0, INT64_MAX, &v);
        p.seed = static_cast<uint64_t>(v);
    } else if (f == "-np" || f == "--parallel") {
        *st = take_int(args, f, 1, 1024, &v);
        p.engine.max_seqs = static_cast<int>(v);
    } else if (f == "-t" || f == "--threads") {
        *st = take_int(args, f, 1, 4096, &v);
        p.engine.n_threads = static_cast<int>(v);
    } else if (f == "-o" || f == "--output") {
        *st = take_string(args, "md, json or jsonl", &text);
        if (text == "md")
            o->format = EvalFormat::md;
        else if (text == "json")
            o->format = EvalFormat::json;
        else if (text == "jsonl")
            o->format = EvalFormat::jsonl;
        else if (st->ok())
            *st = Status::errorf("%s: expected md, json or jsonl, got '%s'", f.c_str(), text.c_str());
    } else {
        return false;
    }
    return true;
}

// List flags: given once they replace the default; repeats append.
Status parse_options(int argc, char **argv, EvalOptions *o) {
    ArgCursor args(argc, argv);
    std::string f, text;
    std::set<std::string> seen;
    EvalPlan &p = o->plan;
    while (args.next(&f)) {
        Status st;
        if (parse_value_flag(args, f, o, &st)) {
            SIEVE_TRY(st);
            continue;
        }
        if (f == "-h" || f == "--help") {
            o->help = true;
            continue;
        }
        if (f == "--mmap") {
            o->mmap = true;
            continue;
        }
        if (f == "--exact") {
            p.engine.act_precision = cpu::ActPrecision::f32;
            continue;
        }
        if (f == "--no-prefix-cache") {
            p.share_prefill = false;
            continue;
        }
        const bool is_list = f == "--task" || f == "--ctx" || f == "--kv-policy" || f == "--depths";
        if (!is_list) return Status::errorf("unknown option '%s'", f.c_str());
        SIEVE_TRY(take_string(args, "a comma-separated list", &text));
        if (seen.insert(f).second) {
            if (f == "--task") p.tasks.clear();
            if (f == "--ctx") p.ctx.clear();
            if (f == "--kv-policy") p.policies.clear();
        }
        if (f == "--task")
            SIEVE_TRY(parse_tasks(text, &p.tasks));
        else if (f == "--ctx")
            SIEVE_TRY(parse_int_list(f, text, 16, int64_t{1} << 21, &p.ctx));
        else if (f == "--depths")
            SIEVE_TRY(parse_fraction_list(f, text, &p.depths));
        else {
            Result<std::vector<KvPolicySpec>> specs = kv_policy_spec_parse_list(text);
            if (!specs.ok()) return specs.status().with_context(f);
            p.policies.insert(p.policies.end(), specs->begin(), specs->end());
        }
    }
    SIEVE_TRY(parse_cache_types(o->type_k, o->type_v, &p.engine.kv_type, o->rotate_k));
    p.ref_kv_type = p.engine.kv_type;
    if (!o->ref_type.empty()) {  // one type for the reference's K and V, rotated as --rotate-k says
        cpu::RowType t = cpu::RowType::f16;
        if (!cpu::row_type_parse(o->ref_type, &t))
            return Status::errorf("--ref-cache-type: expected %s, got '%s'", cpu::row_type_names(),
                                  o->ref_type.c_str());
        SIEVE_TRY(parse_cache_types(o->ref_type, "", &p.ref_kv_type, o->rotate_k));
    }
    return Status();
}

void set_defaults(EvalOptions *o) {
    o->plan.tasks = {"passkey", "niah_multikey", "vt"};
    o->plan.ctx = {4096};
    o->plan.n_samples = 20;
    o->plan.policies = {KvPolicySpec{"dense", {}}};
    o->plan.engine.max_seqs = 8;
}

// The progress line: "\r"-rewritten on a terminal; on a pipe one line per
// tenth of the work, so CI logs stay short.
class Progress {
  public:
    Progress() : tty_(isatty(2) != 0), t0_us_(time_us()) {}
    // The ETA extrapolates the time per unit of estimated work (tokens
    // computed), not per request: a row that maps its prompt from the prefix
    // cache costs a small fraction of the reference run before it.
    void update(const EvalProgress &p, const std::string &what) {
        const int64_t done = p.requests_done, total = p.requests_total;
        const int64_t tenth = total > 0 ? done * 10 / total : 10;
        if (!tty_ && tenth == last_tenth_ && done != total) return;
        last_tenth_ = tenth;
        const double el = static_cast<double>(time_us() - t0_us_) / 1e6;
        // Before the first request finishes there is nothing to extrapolate
        // from (a 32k reference prompt takes minutes): say so.
        char eta[64] = "ETA after the first request";
        if (done >= total || p.work_done > 0)
            std::snprintf(eta, sizeof eta, "ETA %.0f s",
                          done >= total ? 0.0 : el / p.work_done * std::max(0.0, p.work_total - p.work_done));
        std::fprintf(stderr, "%ssieve eval: %lld/%lld requests, %s, %.0f s elapsed, %s%s",
                     tty_ ? "\r\033[K" : "", static_cast<long long>(done), static_cast<long long>(total),
                     what.c_str(), el, eta, tty_ && done != total ? "" : "\n");
        std::fflush(stderr);
    }

  private:
    bool tty_;
    int64_t t0_us_;
    int64_t last_tenth_ = -1;
};

int usage_error(const Status &st) {
    std::fprintf(stderr, "sieve eval: %s\nsee `sieve eval --help` for the options\n", st.message().c_str());
    return k_exit_usage;
}

int run_error(const Status &st) {
    std::fprintf(stderr, "sieve eval: %s\n", st.message().c_str());
    return k_exit_error;
}

// Every length must fit the model with its task's answer (exit 2: the
// command line asks for it). A sample is --ctx prompt tokens and the answer
// is generated after it, so an answer task needs ctx + max_tokens positions
// (RULER counts the answer budget inside the length; sieve's --ctx is the
// prompt alone, so a model's last cell is its context less the answer);
// ppl's scored tail is part of the ctx tokens.
Status check_lengths(const EvalPlan &plan, const ModelConfig &cfg) {
    if (cfg.n_ctx_train <= 0) return Status();
    const long long train = cfg.n_ctx_train;
    for (int64_t ctx : plan.ctx) {
        if (ctx > train)
            return Status::errorf(
                "--ctx %lld exceeds the model's training context (%lld tokens); give lengths up to %lld",
                static_cast<long long>(ctx), train, train);
        for (const std::string &task : plan.tasks) {
            if (task == "ppl") continue;
            const long long mt = plan.max_tokens > 0 ? plan.max_tokens : eval_task_max_tokens(task);
            if (ctx + mt > train)
                return Status::errorf(
                    "--ctx %lld: a %s prompt of %lld tokens and its %lld answer tokens need %lld positions, "
                    "beyond the model's training context (%lld tokens); give %s lengths up to %lld, or "
                    "fewer --max-tokens",
                    static_cast<long long>(ctx), task.c_str(), static_cast<long long>(ctx), mt, ctx + mt,
                    train, task.c_str(), train - mt);
        }
    }
    return Status();
}

}  // namespace

int cmd_eval(int argc, char **argv) {
    EvalOptions o;
    set_defaults(&o);
    if (Status st = parse_options(argc, argv, &o); !st.ok()) return usage_error(st);
    if (o.help) {
        eval_usage(stdout);
        return 0;
    }
    if (o.model.empty()) o.model = default_model_path();
    if (o.plan.engine.n_threads == 0)
        o.plan.engine.n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

    Result<std::unique_ptr<GgufFile>> file = GgufFile::open(o.model);
    if (!file.ok()) return run_error(file.status().with_context("model '" + o.model + "'"));
    Result<std::unique_ptr<Model>> model = Model::load(**file, ModelLoadOptions{o.mmap});
    if (!model.ok()) return run_error(model.status().with_context("model '" + o.model + "'"));
    Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(**file);
    if (!tok.ok()) return run_error(tok.status().with_context("tokenizer of '" + o.model + "'"));
    if (Status st = check_lengths(o.plan, (*model)->config()); !st.ok()) return usage_error(st);
    ChatTemplate tmpl;
    bool has_template = false;
    if (Status st = choose_chat_template(o.chat_template, **file, **tok, &tmpl, &has_template); !st.ok())
        return usage_error(st);

    const ChatTemplate *tmpl_ptr = has_template ? &tmpl : nullptr;
    if (Status st = eval_plan_check(o.plan, **tok, tmpl_ptr); !st.ok()) return usage_error(st);

    std::ofstream dump;
    if (!o.dump_samples.empty()) {
        dump.open(o.dump_samples);
        if (!dump)
            return run_error(Status::errorf("--dump-samples: cannot write '%s'", o.dump_samples.c_str()));
    }
    std::ofstream dump_kept;
    if (!o.dump_kept.empty()) {
        dump_kept.open(o.dump_kept);
        if (!dump_kept)
            return run_error(Status::errorf("--dump-kept: cannot write '%s'", o.dump_kept.c_str()));
        o.plan.engine.kv_positions = true;
    }
    Progress progress;
    EvalHooks hooks;
    hooks.progress = [&](const EvalProgress &p, const std::string &what) { progress.update(p, what); };
    if (dump.is_open())
        hooks.on_sample = [&](const EvalSample &s, int64_t n_forced) {
            dump << eval_sample_jsonl(s, n_forced);
        };

    Result<EvalResult> r = eval_run(**model, **tok, tmpl_ptr, o.plan, hooks);
    if (!r.ok()) return run_error(r.status());
    if (dump_kept.is_open()) {
        dump_kept << eval_kept_jsonl(*r);
        if (!dump_kept.flush())
            return run_error(Status::errorf("--dump-kept: writing '%s' failed", o.dump_kept.c_str()));
    }
    const EvalReportInfo info{o.model, o.plan.engine.n_threads, o.plan.engine.max_seqs};
    const std::string out = o.format == EvalFormat::md     ? eval_report_md(*r, o.plan, info)
                            : o.format == EvalFormat::json ? eval_report_json(*r, o.plan, info)
                                                           : eval_report_jsonl(*r);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
}

}  // namespace sieve::cli
