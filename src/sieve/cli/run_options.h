// Options of `sieve run`, named as llama-cli names them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "sieve/core/status.h"
#include "sieve/engine/sampler.h"

namespace sieve::cli {

struct RunOptions {
    std::string model;          // -m; empty = the cached default model
    std::string prompt;         // -p
    bool has_prompt = false;
    std::string prompt_file;    // -f
    int64_t n_predict = -1;     // -n; -1 = until end of generation or a full context
    int64_t n_ctx = 0;          // -c; 0 = min(training context, 4096)
    int64_t n_batch = 512;      // -b: prompt tokens per forward pass
    int n_threads = 0;          // -t; 0 = every core
    int64_t kv_memory = 0;      // --kv-memory bytes; 0 = enough for the whole context
    int64_t kv_page = 64 << 10; // --kv-page-size bytes
    std::string cache_type_k;   // -ctk f16|bf16|f32 ("" = f16)
    std::string cache_type_v;   // -ctv
    std::string rotate_k;       // --rotate-k auto|on|off ("" = auto)
    std::string kv_policy;      // --kv-policy ("" = dense)
    bool mmap = false;          // --mmap: weights stay in the file mapping
    SamplerParams sampler;      // --temp, --top-k, ... (repeat_last_n and seed below)
    int64_t repeat_last_n = 64; // -1 = the whole context
    int64_t seed = -1;          // -s; -1 = random (logged, so a run can be repeated)
    bool interactive = false;   // -i
    int conversation = -1;      // -cnv = 1, -no-cnv = 0, -1 = on when the model has a chat template
    std::string chat_template;  // --chat-template NAME
    std::string system_prompt;  // -sys
    bool display_prompt = true; // --no-display-prompt clears it (raw mode echoes the prompt)
    bool verbose = false;
    bool help = false;
};

// Parses argv[1 ..] (argv[0] is "run"). The error names the flag and the
// expected form; the caller exits with status 2.
Status run_options_parse(int argc, char **argv, RunOptions *o);
void run_options_usage(FILE *out);

}  // namespace sieve::cli
