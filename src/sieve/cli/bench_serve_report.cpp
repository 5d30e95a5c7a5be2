// Numbers of a bench-serve run: the derived totals, the vLLM-style table, and
// the --json / --csv files (eval/plot_bench_serve.py reads the JSON).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "sieve/cli/bench_serve.h"

namespace sieve::cli {

namespace {

// Per-request TPOT: time per output token after the first. Needs >= 2 tokens.
bool request_tpot_s(const RequestResult &r, double *tpot) {
    if (!r.ok || r.output_tokens < 2) return false;
    *tpot = (r.e2e_s - r.ttft_s) / double(r.output_tokens - 1);
    return true;
}

void print_summary(const char *title, const char *key, const LatencySummary &s) {
    std::printf("%s\n", title);
    std::printf("%-40s %12.2f\n", strfmt("Mean %s (ms):", key).c_str(), s.mean);
    std::printf("%-40s %12.2f\n", strfmt("Median %s (ms):", key).c_str(), s.median);
    std::printf("%-40s %12.2f\n", strfmt("P99 %s (ms):", key).c_str(), s.p99);
}

nlohmann::json summary_json(const LatencySummary &s) {
    return {{"n", s.n},       {"mean", s.mean}, {"std", s.std}, {"min", s.min},
            {"median", s.median}, {"p90", s.p90},   {"p99", s.p99}, {"max", s.max}};
}

// JSON has no infinity; an unbounded rate is written as the string "inf".
nlohmann::json rate_json(double rate) {
    if (std::isinf(rate)) return "inf";
    return rate;
}

}  // namespace

void finish_run(RunResult *run) {
    std::vector<double> ttft, tpot, itl, e2e;
    run->completed = run->failed = 0;
    run->total_input_tokens = run->total_output_tokens = run->total_cached_tokens = 0;
    run->first_error.clear();
    for (const RequestResult &r : run->requests) {
        if (!r.ok) {
            ++run->failed;
            if (run->first_error.empty()) run->first_error = r.error;
            continue;
        }
        ++run->completed;
        run->total_input_tokens += r.prompt_tokens;
        run->total_output_tokens += r.output_tokens;
        run->total_cached_tokens += r.cached_tokens;
        ttft.push_back(r.ttft_s * 1e3);
        e2e.push_back(r.e2e_s * 1e3);
        double t = 0;
        if (request_tpot_s(r, &t)) tpot.push_back(t * 1e3);
        for (double g : r.itl_s) itl.push_back(g * 1e3);
    }
    double d = run->duration_s > 0 ? run->duration_s : std::numeric_limits<double>::infinity();
    run->request_throughput = double(run->completed) / d;
    run->output_throughput = double(run->total_output_tokens) / d;
    run->total_token_throughput = double(run->total_input_tokens + run->total_output_tokens) / d;
    run->ttft_ms = summarize(std::move(ttft));
    run->tpot_ms = summarize(std::move(tpot));
    run->itl_ms = summarize(std::move(itl));
    run->e2e_ms = summarize(std::move(e2e));
}

void print_run_table(const RunResult &run) {
    std::printf("%s\n", "============ Serving Benchmark Result ============");
    std::printf("%-40s %12s\n", "Endpoint:", run.endpoint.c_str());
    std::printf("%-40s %12s\n", "Max concurrency:",
                run.max_concurrency > 0 ? std::to_string(run.max_concurrency).c_str() : "unbounded");
    std::printf("%-40s %12s\n", "Request rate (req/s):",
                std::isinf(run.request_rate) ? "inf" : strfmt("%.2f", run.request_rate).c_str());
    std::printf("%-40s %12lld\n", "Successful requests:", (long long)run.completed);
    std::printf("%-40s %12lld\n", "Failed requests:", (long long)run.failed);
    std::printf("%-40s %12.2f\n", "Benchmark duration (s):", run.duration_s);
    std::printf("%-40s %12lld\n", "Total input tokens:", (long long)run.total_input_tokens);
    std::printf("%-40s %12lld\n", "Total generated tokens:", (long long)run.total_output_tokens);
    // What the server says its prefix cache supplied (usage.prompt_tokens_details).
    std::printf("%-40s %12lld\n", "Cached input tokens:", (long long)run.total_cached_tokens);
    std::printf("%-40s %12.2f\n", "Request throughput (req/s):", run.request_throughput);
    std::printf("%-40s %12.2f\n", "Output token throughput (tok/s):", run.output_throughput);
    std::printf("%-40s %12.2f\n", "Total token throughput (tok/s):", run.total_token_throughput);
    print_summary("---------------Time to First Token----------------", "TTFT", run.ttft_ms);
    print_summary("-----Time per Output Token (excl. 1st token)------", "TPOT", run.tpot_ms);
    print_summary("---------------Inter-token Latency----------------", "ITL", run.itl_ms);
    print_summary("----------------End-to-end Latency----------------", "E2E", run.e2e_ms);
    std::printf("==================================================\n");
    std::fflush(stdout);
}

Status write_runs_json(const std::string &path, const std::vector<RunResult> &runs) {
    nlohmann::json out = nlohmann::json::array();
    for (const RunResult &run : runs) {
        nlohmann::json reqs = nlohmann::json::array();
        for (const RequestResult &r : run.requests) {
            nlohmann::json j = {{"ok", r.ok},
                                {"input_len", r.input_len},
                                {"prompt_tokens", r.prompt_tokens},
                                {"output_tokens", r.output_tokens},
                                {"cached_tokens", r.cached_tokens},
                                {"usage_reported", r.usage_reported},
                                {"start_s", r.start_s},
                                {"ttft_ms", r.ttft_s * 1e3},
                                {"e2e_ms", r.e2e_s * 1e3}};
            double tpot = 0;
            j["tpot_ms"] = request_tpot_s(r, &tpot) ? nlohmann::json(tpot * 1e3) : nlohmann::json(nullptr);
            nlohmann::json itl = nlohmann::json::array();
            for (double g : r.itl_s) itl.push_back(g * 1e3);
            j["itl_ms"] = std::move(itl);
            if (!r.ok) {
                j["error"] = r.error;
                j["http_status"] = r.http_status;
            }
            reqs.push_back(std::move(j));
        }
        out.push_back({{"endpoint", run.endpoint},
                       {"model", run.model},
                       {"max_concurrency", run.max_concurrency},
                       {"request_rate", rate_json(run.request_rate)},
                       {"num_prompts", run.num_prompts},
                       {"completed", run.completed},
                       {"failed", run.failed},
                       {"duration_s", run.duration_s},
                       {"total_input_tokens", run.total_input_tokens},
                       {"total_output_tokens", run.total_output_tokens},
                       {"total_cached_tokens", run.total_cached_tokens},
                       {"request_throughput", run.request_throughput},
                       {"output_throughput", run.output_throughput},
                       {"total_token_throughput", run.total_token_throughput},
                       {"ttft_ms", summary_json(run.ttft_ms)},
                       {"tpot_ms", summary_json(run.tpot_ms)},
                       {"itl_ms", summary_json(run.itl_ms)},
                       {"e2e_ms", summary_json(run.e2e_ms)},
                       {"first_error", run.first_error},
                       {"requests", std::move(reqs)}});
    }
    std::ofstream f(path);
    if (!f) return Status::errorf("--json '%s': cannot open for writing", path.c_str());
    f << out.dump(1) << "\n";
    if (!f) return Status::errorf("--json '%s': write failed", path.c_str());
    return {};
}

Status write_runs_csv(const std::string &path, const std::vector<RunResult> &runs) {
    std::FILE *f = std::fopen(path.c_str(), "w");
    if (f == nullptr) return Status::errorf("--csv '%s': cannot open for writing", path.c_str());
    std::fprintf(f,
                 "endpoint,model,max_concurrency,request_rate,num_prompts,completed,failed,duration_s,"
                 "total_input_tokens,total_output_tokens,request_throughput,output_throughput,"
                 "total_token_throughput");
    for (const char *m : {"ttft", "tpot", "itl", "e2e"})
        std::fprintf(f, ",%s_mean_ms,%s_median_ms,%s_p90_ms,%s_p99_ms", m, m, m, m);
    std::fprintf(f, "\n");
    for (const RunResult &run : runs) {
        // The model name is quoted; a '"' inside it is doubled as CSV requires.
        std::string model;
        for (char c : run.model) model += c == '"' ? std::string("\"\"") : std::string(1, c);
        std::fprintf(f, "%s,\"%s\",%lld,%s,%lld,%lld,%lld,%.4f,%lld,%lld,%.4f,%.4f,%.4f", run.endpoint.c_str(),
                     model.c_str(), (long long)run.max_concurrency,
                     std::isinf(run.request_rate) ? "inf" : strfmt("%g", run.request_rate).c_str(),
                     (long long)run.num_prompts, (long long)run.completed, (long long)run.failed, run.duration_s,
                     (long long)run.total_input_tokens, (long long)run.total_output_tokens, run.request_throughput,
                     run.output_throughput, run.total_token_throughput);
        for (const LatencySummary *s : {&run.ttft_ms, &run.tpot_ms, &run.itl_ms, &run.e2e_ms})
            std::fprintf(f, ",%.3f,%.3f,%.3f,%.3f", s->mean, s->median, s->p90, s->p99);
        std::fprintf(f, "\n");
    }
    bool ok = std::ferror(f) == 0;
    ok = std::fclose(f) == 0 && ok;
    if (!ok) return Status::errorf("--csv '%s': write failed", path.c_str());
    return {};
}

}  // namespace sieve::cli
