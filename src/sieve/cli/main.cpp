// sieve: one binary, one subcommand per job (see docs/architecture.md).
#include <cstdio>
#include <cstring>

#include "sieve/cli/commands.h"

namespace {

void print_usage(FILE *out) {
    std::fprintf(out,
                 "usage: sieve <command> [options]\n"
                 "\n"
                 "commands:\n"
                 "  run    generate text from a prompt, or chat with -i (like llama-cli)\n"
                 "  info   show a GGUF file's metadata, tensors and memory estimate\n"
                 "  serve  OpenAI-compatible HTTP server (like vllm serve, llama-server)\n"
                 "  bench  prompt and generation speed at context depths (like llama-bench)\n"
                 "  bench-serve  load an OpenAI-compatible server: TTFT, TPOT, ITL, throughput\n"
                 "  eval   accuracy of KV policies against dense on long-context tasks (like RULER)\n"
                 "  calibrate  a head profile (streaming vs retrieval heads) for --kv-policy lserve\n"
                 "\n"
                 "`sieve <command> --help` lists a command's options.\n");
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2) {
        print_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (std::strcmp(cmd, "run") == 0) return sieve::cli::cmd_run(argc - 1, argv + 1);
    if (std::strcmp(cmd, "info") == 0) return sieve::cli::cmd_info(argc - 1, argv + 1);
    if (std::strcmp(cmd, "serve") == 0) return sieve::cli::cmd_serve(argc - 1, argv + 1);
    if (std::strcmp(cmd, "bench") == 0) return sieve::cli::cmd_bench(argc - 1, argv + 1);
    if (std::strcmp(cmd, "bench-serve") == 0) return sieve::cli::cmd_bench_serve(argc - 1, argv + 1);
    if (std::strcmp(cmd, "eval") == 0) return sieve::cli::cmd_eval(argc - 1, argv + 1);
    if (std::strcmp(cmd, "calibrate") == 0) return sieve::cli::cmd_calibrate(argc - 1, argv + 1);
    if (std::strcmp(cmd, "--help") == 0 || std::strcmp(cmd, "-h") == 0 || std::strcmp(cmd, "help") == 0) {
        print_usage(stdout);
        return 0;
    }
    std::fprintf(stderr, "sieve: unknown command '%s'\n\n", cmd);
    print_usage(stderr);
    return 2;
}
