#include "sieve/cli/run_options.h"

#include <climits>

#include "sieve/cli/args.h"
#include "sieve/kv/page_pool.h"
#include "sieve/tokenizer/chat_template.h"

namespace sieve::cli {

void run_options_usage(FILE *out) {
    std::fprintf(
        out,
        "usage: sieve run [options]\n"
        "\n"
        "Generates text from a prompt, or chats with -i. Text goes to stdout as it is\n"
        "generated; logs and the closing speed line go to stderr.\n"
        "\n"
        "model and prompt:\n"
        "  -m, --model FILE          GGUF model (default: the cached SmolLM2-135M-Instruct,\n"
        "                            fetched by scripts/fetch_model.sh)\n"
        "  -p, --prompt TEXT         prompt\n"
        "  -f, --file FILE           read the prompt from FILE\n"
        "  -i, --interactive         chat: read a line from stdin per turn, keeping the\n"
        "                            conversation and its KV between turns\n"
        "  -cnv, --conversation      apply the chat template to the prompt (default: on when\n"
        "                            the model has a chat template)\n"
        "  -no-cnv, --no-conversation  use the prompt as raw text\n"
        "  --chat-template NAME      override the model's template: %s\n"
        "  -sys, --system-prompt TEXT  system message for the chat\n"
        "  --no-display-prompt       do not echo a raw prompt before its continuation\n"
        "\n"
        "generation:\n"
        "  -n, --n-predict N         tokens to generate (default: -1 = until end of\n"
        "                            generation or a full context)\n"
        "  -c, --ctx-size N          context size (default: 0 = min(training context, 4096))\n"
        "  -b, --batch-size N        prompt tokens per forward pass (default: 512)\n"
        "  -t, --threads N           threads (default: every core)\n"
        "  --kv-memory SIZE          KV page pool, e.g. 512MiB, 4GiB (default: enough for -c)\n"
        "  --kv-page-size SIZE       KV page size, 4KiB .. 2MiB, a multiple of 4KiB (default: 64KiB)\n"
        "  -ctk, --cache-type-k T    KV row type: f16 (default), bf16, f32 (exact), q8_0, q4_0\n"
        "  -ctv, --cache-type-v T    V row type (default: as -ctk, which alone sets both;\n"
        "                            K and V may differ, e.g. -ctk q8_0 -ctv q4_0)\n"
        "  --rotate-k auto|on|off    keys rotated by a fixed Hadamard transform (auto: q4_0 keys)\n"
        "  --kv-policy P             KV policy, NAME[:key=value,...] or @FILE.json (default dense;\n"
        "                            docs/sparsity.md): applied after each prompt, and while decoding\n"
        "                            for the sliding ones\n"
        "  --mmap                    leave the weights in the file mapping (quicker start,\n"
        "                            slower decode; default: copied into huge pages)\n"
        "\n"
        "sampling (applied in this order; see src/sieve/engine/sampler.h):\n"
        "  --repeat-penalty F        divide/multiply logits of recent tokens (default: 1.0 = off)\n"
        "  --repeat-last-n N         tokens the penalties look back at (default: 64,\n"
        "                            0 = off, -1 = the whole context)\n"
        "  --presence-penalty F      subtract F from every recent token's logit (default: 0)\n"
        "  --frequency-penalty F     subtract F per occurrence (default: 0)\n"
        "  --top-k N                 keep the N most likely tokens (default: 40, 0 = off)\n"
        "  --top-p F                 keep the smallest set with mass F (default: 0.95, 1 = off)\n"
        "  --min-p F                 keep tokens with p >= F * p_max (default: 0.05, 0 = off)\n"
        "  --temp F                  temperature (default: 0.8; 0 = greedy)\n"
        "  -s, --seed N              random seed (default: -1 = random, printed)\n"
        "\n"
        "  --verbose                 debug logs\n"
        "  -h, --help                this text\n",
        chat_format_names().c_str());
}

namespace {

// Shorthands that keep the flag table below one line per flag.
// lo_open: the lower bound itself is not allowed.
Status set_float(ArgCursor &args, const std::string &flag, float *out, float lo = -1e30f, float hi = 1e30f,
                 bool lo_open = false) {
    Result<std::string> v = args.value("a number");
    if (!v.ok()) return v.status();
    Result<float> f = parse_float(flag, *v);
    if (!f.ok()) return f.status();
    if (*f < lo || *f > hi || (lo_open && *f == lo))
        return Status::errorf("%s: expected a number in %c%g, %g], got %s", flag.c_str(), lo_open ? '(' : '[',
                              static_cast<double>(lo), static_cast<double>(hi), v->c_str());
    *out = *f;
    return Status();
}

bool is(const std::string &flag, const char *a, const char *b = nullptr) { return flag == a || (b && flag == b); }

}  // namespace

Status run_options_parse(int argc, char **argv, RunOptions *o) {
    ArgCursor args(argc, argv);
    std::string f;
    int64_t n = 0;
    while (args.next(&f)) {
        if (is(f, "-h", "--help")) {
            o->help = true;
        } else if (is(f, "-m", "--model")) {
            SIEVE_TRY(take_string(args, "a GGUF file path", &o->model));
        } else if (is(f, "-p", "--prompt")) {
            SIEVE_TRY(take_string(args, "the prompt text", &o->prompt));
            o->has_prompt = true;
        } else if (is(f, "-f", "--file")) {
            SIEVE_TRY(take_string(args, "a file path", &o->prompt_file));
        } else if (is(f, "-n", "--n-predict")) {
            SIEVE_TRY(take_int(args, f, -1, INT32_MAX, &o->n_predict));
        } else if (is(f, "-c", "--ctx-size")) {
            SIEVE_TRY(take_int(args, f, 0, 1 << 24, &o->n_ctx));
        } else if (is(f, "-b", "--batch-size")) {
            SIEVE_TRY(take_int(args, f, 1, 1 << 16, &o->n_batch));
        } else if (is(f, "--kv-memory") || is(f, "--kv-page-size")) {
            std::string text;
            SIEVE_TRY(take_string(args, "a byte size such as 512MiB or 4GiB", &text));
            SIEVE_TRY(parse_bytes(text, is(f, "--kv-memory") ? &o->kv_memory : &o->kv_page).with_context(f));
        } else if (is(f, "--kv-policy")) {
            SIEVE_TRY(take_string(args, "NAME[:key=value,...] or @FILE.json", &o->kv_policy));
        } else if (is(f, "--rotate-k")) {
            SIEVE_TRY(take_string(args, "auto, on or off", &o->rotate_k));
        } else if (is(f, "-ctk", "--cache-type-k") || is(f, "-ctv", "--cache-type-v")) {
            SIEVE_TRY(take_string(args, "a KV row type: f16, bf16, f32, q8_0 or q4_0",
                                 is(f, "-ctk", "--cache-type-k") ? &o->cache_type_k : &o->cache_type_v));
        } else if (is(f, "-t", "--threads")) {
            SIEVE_TRY(take_int(args, f, 1, 1024, &n));
            o->n_threads = static_cast<int>(n);
        } else if (is(f, "--temp")) {
            SIEVE_TRY(set_float(args, f, &o->sampler.temperature));
        } else if (is(f, "--top-k")) {
            SIEVE_TRY(take_int(args, f, 0, INT32_MAX, &n));
            o->sampler.top_k = static_cast<int32_t>(n);
        } else if (is(f, "--top-p")) {
            SIEVE_TRY(set_float(args, f, &o->sampler.top_p, 0.0f, 1.0f));
        } else if (is(f, "--min-p")) {
            SIEVE_TRY(set_float(args, f, &o->sampler.min_p, 0.0f, 1.0f));
        } else if (is(f, "--repeat-penalty")) {
            SIEVE_TRY(set_float(args, f, &o->sampler.repeat_penalty, 0.0f, 1e30f, /*lo_open=*/true));
        } else if (is(f, "--repeat-last-n")) {
            SIEVE_TRY(take_int(args, f, -1, INT32_MAX, &o->repeat_last_n));
        } else if (is(f, "--presence-penalty")) {
            SIEVE_TRY(set_float(args, f, &o->sampler.presence_penalty));
        } else if (is(f, "--frequency-penalty")) {
            SIEVE_TRY(set_float(args, f, &o->sampler.frequency_penalty));
        } else if (is(f, "-s", "--seed")) {
            SIEVE_TRY(take_int(args, f, -1, INT64_MAX, &o->seed));
        } else if (is(f, "-i", "--interactive")) {
            o->interactive = true;
        } else if (is(f, "-cnv", "--conversation")) {
            o->conversation = 1;
        } else if (is(f, "-no-cnv", "--no-conversation")) {
            o->conversation = 0;
        } else if (is(f, "--chat-template")) {
            SIEVE_TRY(take_string(args, "a template name (" + chat_format_names() + ")", &o->chat_template));
            Result<ChatFormat> fmt = chat_format_from_name(o->chat_template);
            if (!fmt.ok()) return fmt.status().with_context("--chat-template");
        } else if (is(f, "-sys", "--system-prompt")) {
            SIEVE_TRY(take_string(args, "the system message", &o->system_prompt));
        } else if (is(f, "--no-display-prompt")) {
            o->display_prompt = false;
        } else if (is(f, "--mmap")) {
            o->mmap = true;
        } else if (is(f, "--verbose", "-v")) {
            o->verbose = true;
        } else {
            return Status::errorf("unknown option '%s'", f.c_str());
        }
        if (args.has_inline_value()) return Status::errorf("%s takes no value", f.c_str());
    }
    if (o->has_prompt && !o->prompt_file.empty()) return Status::error("-p and -f both give a prompt; pass one");
    return Status();
}

}  // namespace sieve::cli
