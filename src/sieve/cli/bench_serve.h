// `sieve bench-serve URL`: a load generator for OpenAI-compatible servers,
// after vLLM's `vllm bench serve`. Shared types of its three files:
//   bench_serve.cpp         options, workload, the dispatcher of one run, sweeps
//   bench_serve_client.cpp  one streamed HTTP request, timed; GET /v1/models
//   bench_serve_report.cpp  the table on stdout, --json and --csv
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sieve/cli/bench_serve_stats.h"
#include "sieve/core/status.h"

namespace sieve::cli {

// Where requests go: "http://host:port" plus an optional path prefix ("/api").
struct ServerAddress {
    std::string scheme_host_port;  // what the HTTP client connects to
    std::string prefix;            // prepended to "/v1/..."; no trailing '/'
    std::string api_key;           // sent as "Authorization: Bearer ..." when set
    double timeout_s = 0;          // bound on one request, connect to last byte
};

// Splits "http://host:port[/prefix][/v1]" (a trailing "/v1" or "/" is dropped,
// so the base URL of an OpenAI client works as well).
Result<ServerAddress> parse_server_url(const std::string &url);

// The measurements of one request. Times are seconds since the run started.
struct RequestResult {
    bool ok = false;
    std::string error;              // why it failed (first line of the body for HTTP errors)
    int http_status = 0;            // 0 when no response came
    int64_t input_len = 0;          // as requested
    int64_t prompt_tokens = 0;      // from usage, else input_len
    int64_t output_tokens = 0;      // from usage, else the number of content chunks
    int64_t cached_tokens = 0;      // prompt tokens the server's prefix cache supplied (usage), if it says
    bool usage_reported = false;
    double start_s = 0;             // request sent
    double ttft_s = 0;              // first content chunk - start
    double e2e_s = 0;               // last byte - start
    std::vector<double> itl_s;      // gaps between consecutive content chunks
};

// Sends one streamed completion request and times it. Never throws; failures
// (refused connection, HTTP status, timeout, broken stream) land in .error.
// `t0_us` is the run's start (sieve::time_us()).
RequestResult send_streamed_request(const ServerAddress &addr, const std::string &path, const std::string &body,
                                    bool chat, int64_t t0_us);

// What GET /v1/models says: the first model's id, and its vocabulary size
// where the server tells it (llama-server's and sieve's "meta.n_vocab"); 0 if not.
struct ServedModel {
    std::string id;
    int64_t n_vocab = 0;
};
Result<ServedModel> query_served_model(const ServerAddress &addr);

// One benchmark run (one concurrency of a sweep) and its numbers.
struct RunResult {
    std::string endpoint;           // "/v1/completions" or "/v1/chat/completions"
    std::string model;
    int64_t max_concurrency = 0;    // 0: unbounded
    double request_rate = 0;        // requests/s; inf: all at once
    int64_t num_prompts = 0;
    double duration_s = 0;
    std::vector<RequestResult> requests;
    // Derived by finish_run().
    int64_t completed = 0, failed = 0;
    int64_t total_input_tokens = 0, total_output_tokens = 0, total_cached_tokens = 0;
    double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;
    LatencySummary ttft_ms, tpot_ms, itl_ms, e2e_ms;
    std::string first_error;
};

// Fills the derived fields of `run` from its requests.
void finish_run(RunResult *run);

// Output. The table goes to stdout; files are rewritten whole.
void print_run_table(const RunResult &run);
Status write_runs_json(const std::string &path, const std::vector<RunResult> &runs);
Status write_runs_csv(const std::string &path, const std::vector<RunResult> &runs);

}  // namespace sieve::cli
