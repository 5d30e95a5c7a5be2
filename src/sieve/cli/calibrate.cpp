// sieve calibrate: a head profile for the lserve policy (eval/calibrate.h
// says how a KV head's score is measured; docs/sparsity.md the file format).
//
//   sieve calibrate -m MODEL [--ctx 4096] [--samples 8] [-o profile.json]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "sieve/cli/args.h"
#include "sieve/cli/commands.h"
#include "sieve/core/timer.h"
#include "sieve/eval/calibrate.h"
#include "sieve/gguf/gguf.h"
#include "sieve/model/model.h"
#include "sieve/tokenizer/tokenizer.h"

namespace sieve::cli {

namespace {

struct CalOptions {
    std::string model, output, chat_template, type;
    CalibrateOptions cal;
    int64_t n_threads = 0;
    bool help = false;
};

void calibrate_usage(FILE *out) {
    std::fprintf(out,
                 "usage: sieve calibrate [options]\n"
                 "\n"
                 "Scores every KV head by how much of its attention output it loses when it sees only\n"
                 "the first --sink and the last --recent rows, at the answer positions of synthetic\n"
                 "retrieval samples (gradient-free DuoAttention; --method answer_kl scores instead how\n"
                 "far the model's answer moves). The lowest-scoring heads are the\n"
                 "ones `--kv-policy lserve:static=F,profile=FILE` makes streaming heads. Writes the\n"
                 "head profile as JSON (docs/sparsity.md).\n"
                 "\n"
                 "  -m, --model FILE       GGUF model (default: the cached SmolLM2-135M-Instruct)\n"
                 "  -o, --output FILE      where the profile goes (default: stdout)\n"
                 "  --method M             attn_output (default): the head's own attention output;\n"
                 "                         answer_kl: the model's next-token KL at the answer, each head\n"
                 "                         alone restricted (one run of the prompt's tail per KV head)\n"
                 "  --tail N               answer_kl: prompt tokens before the answer rerun restricted\n"
                 "                         too (default 64)\n"
                 "  --rounds R             answer_kl: choose the streaming heads greedily in R rounds, each\n"
                 "                         scoring the rest with the heads chosen so far restricted too\n"
                 "                         (default 1: every head scored alone)\n"
                 "  --greedy-static F      with --rounds > 1: the fraction of KV heads the rounds choose\n"
                 "                         (default 0.5; lserve's static=F up to it follows their order)\n"
                 "  --task T               retrieval task of the samples (default niah_multikey): %s\n"
                 "  --ctx N[,N]            prompt lengths in tokens (default 4096)\n"
                 "  --samples N            samples per length (default 8); needle depths spread 0..1\n"
                 "  --needles N            key->value needles per sample (default 4)\n"
                 "  --seed S               sample i has seed S + i (default 0)\n"
                 "  --sink N               rows at the start a streaming head keeps (default 64)\n"
                 "  --recent N             rows at the end a streaming head keeps (default 256)\n"
                 "  -ctk, --cache-type-k T KV row type: f16 (default), bf16, f32, q8_0, q4_0\n"
                 "  --chat-template NAME   override the model's chat template: %s\n"
                 "  -t, --threads N        compute threads (default: every core)\n"
                 "  -h, --help             this text\n",
                 join_names(eval_task_names()).c_str(), chat_format_names().c_str());
}

Status parse_options(int argc, char **argv, CalOptions *o) {
    ArgCursor args(argc, argv);
    std::string f, text;
    bool ctx_given = false;
    while (args.next(&f)) {
        int64_t v = 0;
        if (f == "-h" || f == "--help") {
            o->help = true;
        } else if (f == "-m" || f == "--model") {
            SIEVE_TRY(take_string(args, "a file path", &o->model));
        } else if (f == "-o" || f == "--output") {
            SIEVE_TRY(take_string(args, "a file path", &o->output));
        } else if (f == "--chat-template") {
            SIEVE_TRY(take_string(args, "a template name", &o->chat_template));
        } else if (f == "-ctk" || f == "--cache-type-k") {
            SIEVE_TRY(take_string(args, "f16, bf16, f32, q8_0 or q4_0", &o->type));
        } else if (f == "--task") {
            SIEVE_TRY(take_string(args, "a task name", &o->cal.task));
            const std::vector<std::string> known = eval_task_names();
            if (std::find(known.begin(), known.end(), o->cal.task) == known.end() || o->cal.task == "ppl")
                return Status::errorf("--task: '%s' is not a retrieval task; expected one of %s (not ppl)",
                                      o->cal.task.c_str(), join_names(known).c_str());
        } else if (f == "--ctx") {
            SIEVE_TRY(take_string(args, "a comma-separated list", &text));
            if (!ctx_given) o->cal.ctx.clear();
            ctx_given = true;
            SIEVE_TRY(parse_int_list(f, text, 64, int64_t{1} << 21, &o->cal.ctx));
        } else if (f == "--method") {
            std::string m;
            SIEVE_TRY(take_string(args, "attn_output or answer_kl", &m));
            if (m == "attn_output") o->cal.method = CalibrateMethod::attn_output;
            else if (m == "answer_kl") o->cal.method = CalibrateMethod::answer_kl;
            else return Status::errorf("--method: '%s'; expected attn_output or answer_kl", m.c_str());
        } else if (f == "--tail") {
            SIEVE_TRY(take_int(args, f, 0, int64_t{1} << 30, &o->cal.tail));
        } else if (f == "--rounds") {
            SIEVE_TRY(take_int(args, f, 1, 1024, &o->cal.rounds));
        } else if (f == "--greedy-static") {
            SIEVE_TRY(take_string(args, "a fraction in [0, 1]", &text));
            char *end = nullptr;
            const double g = std::strtod(text.c_str(), &end);
            if (text.empty() || *end != '\0' || !(g >= 0.0 && g <= 1.0))
                return Status::errorf("--greedy-static: '%s'; expected a fraction in [0, 1]", text.c_str());
            o->cal.greedy_static = g;
        } else if (f == "--samples") {
            SIEVE_TRY(take_int(args, f, 1, 100000, &o->cal.n_samples));
        } else if (f == "--needles") {
            SIEVE_TRY(take_int(args, f, 1, 64, &v));
            o->cal.task_opt.n_needles = static_cast<int>(v);
        } else if (f == "--seed") {
            SIEVE_TRY(take_int(args, f, 0, INT64_MAX, &v));
            o->cal.seed = static_cast<uint64_t>(v);
        } else if (f == "--sink") {
            SIEVE_TRY(take_int(args, f, 0, int64_t{1} << 30, &o->cal.sink));
        } else if (f == "--recent") {
            SIEVE_TRY(take_int(args, f, 1, int64_t{1} << 30, &o->cal.recent));
        } else if (f == "-t" || f == "--threads") {
            SIEVE_TRY(take_int(args, f, 1, 4096, &o->n_threads));
        } else {
            return Status::errorf("unknown option '%s'", f.c_str());
        }
    }
    if (o->cal.rounds > 1 && o->cal.method != CalibrateMethod::answer_kl)
        return Status::errorf("--rounds %lld: greedy rounds need --method answer_kl",
                              static_cast<long long>(o->cal.rounds));
    return parse_cache_types(o->type, "", &o->cal.kv_type);
}

int fail(const Status &st, int code) {
    std::fprintf(stderr, "sieve calibrate: %s\n%s", st.message().c_str(),
                 code == k_exit_usage ? "see `sieve calibrate --help` for the options\n" : "");
    return code;
}

}  // namespace

int cmd_calibrate(int argc, char **argv) {
    CalOptions o;
    if (Status st = parse_options(argc, argv, &o); !st.ok()) return fail(st, k_exit_usage);
    if (o.help) {
        calibrate_usage(stdout);
        return 0;
    }
    if (o.model.empty()) o.model = default_model_path();
    if (o.n_threads == 0) o.n_threads = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
    Result<std::unique_ptr<GgufFile>> file = GgufFile::open(o.model);
    if (!file.ok()) return fail(file.status().with_context("model '" + o.model + "'"), k_exit_error);
    Result<std::unique_ptr<Model>> model = Model::load(**file);
    if (!model.ok()) return fail(model.status().with_context("model '" + o.model + "'"), k_exit_error);
    Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(**file);
    if (!tok.ok()) return fail(tok.status().with_context("tokenizer of '" + o.model + "'"), k_exit_error);
    const ModelConfig &cfg = (*model)->config();
    for (int64_t ctx : o.cal.ctx)
        if (cfg.n_ctx_train > 0 && ctx > cfg.n_ctx_train)
            return fail(Status::errorf("--ctx %lld exceeds the model's training context (%lld tokens)",
                                       static_cast<long long>(ctx), static_cast<long long>(cfg.n_ctx_train)),
                        k_exit_usage);
    ChatTemplate tmpl;
    bool has_template = false;
    if (Status st = choose_chat_template(o.chat_template, **file, **tok, &tmpl, &has_template); !st.ok())
        return fail(st, k_exit_usage);
    std::ofstream out;
    if (!o.output.empty()) {
        out.open(o.output);
        if (!out) return fail(Status::errorf("-o: cannot write '%s'", o.output.c_str()), k_exit_error);
    }
    ThreadPool pool(static_cast<int>(o.n_threads));
    const int64_t t0 = time_us();
    Result<HeadProfile> p = calibrate_heads(**model, **tok, has_template ? &tmpl : nullptr, o.cal, pool,
                                            [&](int64_t done, int64_t total) {
                                                std::fprintf(stderr, "sieve calibrate: %lld/%lld samples, %.0f s\n",
                                                             static_cast<long long>(done),
                                                             static_cast<long long>(total),
                                                             static_cast<double>(time_us() - t0) / 1e6);
                                            });
    if (!p.ok()) return fail(p.status(), k_exit_error);
    const size_t slash = o.model.find_last_of('/');
    p->model = slash == std::string::npos ? o.model : o.model.substr(slash + 1);
    const std::string json = head_profile_json(*p);
    if (out.is_open()) {
        out << json;
        if (!out.flush()) return fail(Status::errorf("-o: writing '%s' failed", o.output.c_str()), k_exit_error);
    } else {
        std::fwrite(json.data(), 1, json.size(), stdout);
    }
    return 0;
}

}  // namespace sieve::cli
