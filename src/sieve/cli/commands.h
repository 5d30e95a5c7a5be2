// Subcommands of the `sieve` binary; each parses its own flags.
#pragma once

namespace sieve::cli {

int cmd_run(int argc, char **argv);   // sieve run: generate text (llama-cli's flags)
int cmd_info(int argc, char **argv);  // sieve info FILE: metadata, tensors, memory estimate
int cmd_serve(int argc, char **argv); // sieve serve: OpenAI-compatible HTTP server
int cmd_bench(int argc, char **argv); // sieve bench: pp/tg speed at depths (llama-bench's flags)
int cmd_bench_serve(int argc, char **argv);  // sieve bench-serve URL: load generator (vllm bench serve)
int cmd_eval(int argc, char **argv);  // sieve eval: KV policies' accuracy against dense (RULER-style tasks)
int cmd_calibrate(int argc, char **argv);  // sieve calibrate: a head profile for the lserve policy

}  // namespace sieve::cli
