// sieve bench-serve URL: drive an OpenAI-compatible server with streamed
// completion requests and report TTFT, TPOT, ITL and E2E latency and the
// throughputs, per concurrency (vLLM's `vllm bench serve`, random dataset).
//
// A run:
//   1. the workload (lengths, prompts) comes from --seed, the same for every run;
//   2. send times come from --request-rate (Poisson, or all at t = 0);
//   3. min(--max-concurrency, N) workers take requests in order, each waiting
//      for its send time, so request i starts at max(arrival_i, a free worker);
//   4. each request is timed on its own thread and connection (bench_serve_client.cpp);
//   5. the numbers are summarized and printed (bench_serve_report.cpp).
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <nlohmann/json.hpp>

#include "sieve/cli/args.h"
#include "sieve/cli/bench_serve.h"
#include "sieve/cli/commands.h"
#include "sieve/core/timer.h"

namespace sieve::cli {

namespace {

struct BenchServeOptions {
    std::string url;
    bool chat = false;
    std::string model;  // empty: the first model of GET /v1/models
    std::string api_key;
    int64_t input_len = 256;
    int64_t prefix_len = 0;
    int64_t output_len = 64;
    double range_ratio = 0;
    std::string prompt_kind = "auto";  // auto | ids | text
    int64_t vocab_size = 0;            // 0: from /v1/models meta.n_vocab
    int64_t num_prompts = 32;
    int64_t max_concurrency = 0;       // 0: unbounded
    double request_rate = INFINITY;
    std::vector<int64_t> sweep;
    int64_t seed = 0;
    int64_t warmup = 1;
    double timeout_s = 600;
    std::string json_path, csv_path;
    bool help = false;
};

void print_usage(FILE *out) {
    std::fprintf(out,
                 "usage: sieve bench-serve URL [options]\n"
                 "\n"
                 "Load generator for an OpenAI-compatible server (sieve serve, llama-server, vLLM):\n"
                 "sends streamed requests and reports time to first token (TTFT), time per output\n"
                 "token (TPOT), inter-token latency (ITL), end-to-end latency (E2E) and throughput.\n"
                 "URL is the server's base, e.g. http://127.0.0.1:8080 (a trailing /v1 is fine).\n"
                 "\n"
                 "workload (random, the same for every run of one --seed):\n"
                 "  --endpoint completions|chat  /v1/completions (default) or /v1/chat/completions\n"
                 "  --model NAME              model name to send (default: ask GET /v1/models)\n"
                 "  --api-key KEY             sent as 'Authorization: Bearer KEY'\n"
                 "  --input-len N             prompt tokens per request (default: 256)\n"
                 "  --random-prefix-len N     a prefix of N tokens shared by every request, before\n"
                 "                            its own --input-len (a system prompt; default: 0)\n"
                 "  --output-len N            tokens generated per request, with ignore_eos (default: 64)\n"
                 "  --random-range-ratio R    draw lengths uniformly in [len*(1-R), len*(1+R)],\n"
                 "                            R in [0, 1) (default: 0 = fixed)\n"
                 "  --prompt-kind auto|ids|text  random token ids (completions only; needs the\n"
                 "                            vocabulary size) or random words (about one token\n"
                 "                            each); auto = ids when possible (default)\n"
                 "  --vocab-size N            draw ids below N (default: meta.n_vocab of /v1/models)\n"
                 "  --num-prompts N           requests per run (default: 32)\n"
                 "  --seed N                  workload and arrival seed (default: 0)\n"
                 "\n"
                 "load:\n"
                 "  --max-concurrency C       at most C requests in flight (default: unbounded)\n"
                 "  --request-rate R          Poisson arrivals at R requests/s, or inf: all at\n"
                 "                            once (default: inf)\n"
                 "  --sweep C1,C2,...         one run per max concurrency, e.g. 1,2,4,8,16\n"
                 "  --warmup N                unmeasured requests before the first run; the first\n"
                 "                            must succeed (default: 1, 0 = none)\n"
                 "  --timeout S               give up on a request after about S seconds (default: 600)\n"
                 "\n"
                 "output (the table always goes to stdout):\n"
                 "  --json FILE               one object per run, with per-request samples\n"
                 "                            (eval/plot_bench_serve.py plots it)\n"
                 "  --csv FILE                one row per run\n"
                 "  -h, --help                this text\n");
}

// Whole-string double; "inf" accepted where allow_inf.
Result<double> parse_double(const std::string &flag, const std::string &text, double min, double max,
                            bool allow_inf = false) {
    if (allow_inf && (text == "inf" || text == "INF")) return double(INFINITY);
    char *end = nullptr;
    errno = 0;
    double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || errno != 0 || !std::isfinite(v) || v < min || v > max)
        return Status::errorf("%s: expected a number in [%g, %g]%s, got '%s'", flag.c_str(), min, max,
                              allow_inf ? " or inf" : "", text.c_str());
    return v;
}

Result<std::vector<int64_t>> parse_int_list(const std::string &flag, const std::string &text) {
    std::vector<int64_t> out;
    size_t pos = 0;
    while (pos <= text.size()) {
        size_t comma = text.find(',', pos);
        std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        Result<int64_t> n = parse_int(flag, item, 1, 1 << 16);
        if (!n.ok()) return Status::errorf("%s: expected a list like 1,2,4,8, got '%s'", flag.c_str(), text.c_str());
        out.push_back(*n);
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
    return out;
}

Status parse_options(int argc, char **argv, BenchServeOptions *o) {
    ArgCursor args(argc, argv);
    std::string f;
    auto str = [&](const char *form, std::string *out) -> Status {
        Result<std::string> v = args.value(form);
        if (!v.ok()) return v.status();
        *out = *v;
        return {};
    };
    auto integer = [&](int64_t min, int64_t max, int64_t *out) -> Status {
        std::string v;
        SIEVE_TRY(str("an integer", &v));
        Result<int64_t> n = parse_int(f, v, min, max);
        if (!n.ok()) return n.status();
        *out = *n;
        return {};
    };
    auto number = [&](double min, double max, bool allow_inf, double *out) -> Status {
        std::string v;
        SIEVE_TRY(str("a number", &v));
        Result<double> d = parse_double(f, v, min, max, allow_inf);
        if (!d.ok()) return d.status();
        *out = *d;
        return {};
    };
    std::string v;
    while (args.next(&f)) {
        if (f == "-h" || f == "--help") {
            o->help = true;
        } else if (f == "--endpoint") {
            SIEVE_TRY(str("completions or chat", &v));
            if (v != "completions" && v != "chat" && v != "/v1/completions" && v != "/v1/chat/completions")
                return Status::errorf("--endpoint: expected completions or chat, got '%s'", v.c_str());
            o->chat = v.find("chat") != std::string::npos;
        } else if (f == "--model") {
            SIEVE_TRY(str("a model name", &o->model));
        } else if (f == "--api-key") {
            SIEVE_TRY(str("a key", &o->api_key));
        } else if (f == "--input-len") {
            SIEVE_TRY(integer(1, 1 << 24, &o->input_len));
        } else if (f == "--random-prefix-len") {
            SIEVE_TRY(integer(0, 1 << 24, &o->prefix_len));
        } else if (f == "--output-len") {
            SIEVE_TRY(integer(1, 1 << 24, &o->output_len));
        } else if (f == "--random-range-ratio") {
            SIEVE_TRY(number(0, 0.999, false, &o->range_ratio));
        } else if (f == "--prompt-kind") {
            SIEVE_TRY(str("auto, ids or text", &o->prompt_kind));
            if (o->prompt_kind != "auto" && o->prompt_kind != "ids" && o->prompt_kind != "text")
                return Status::errorf("--prompt-kind: expected auto, ids or text, got '%s'", o->prompt_kind.c_str());
        } else if (f == "--vocab-size") {
            SIEVE_TRY(integer(1, INT32_MAX, &o->vocab_size));
        } else if (f == "--num-prompts") {
            SIEVE_TRY(integer(1, 1 << 20, &o->num_prompts));
        } else if (f == "--max-concurrency") {
            SIEVE_TRY(integer(1, 1 << 16, &o->max_concurrency));
        } else if (f == "--request-rate") {
            SIEVE_TRY(number(1e-6, 1e9, true, &o->request_rate));
        } else if (f == "--sweep") {
            SIEVE_TRY(str("a list of concurrencies", &v));
            Result<std::vector<int64_t>> l = parse_int_list(f, v);
            if (!l.ok()) return l.status();
            o->sweep = *l;
        } else if (f == "--seed") {
            SIEVE_TRY(integer(0, INT64_MAX, &o->seed));
        } else if (f == "--warmup") {
            SIEVE_TRY(integer(0, 1 << 16, &o->warmup));
        } else if (f == "--timeout") {
            SIEVE_TRY(number(0.001, 1e7, false, &o->timeout_s));
        } else if (f == "--json") {
            SIEVE_TRY(str("a file path", &o->json_path));
        } else if (f == "--csv") {
            SIEVE_TRY(str("a file path", &o->csv_path));
        } else if (f.size() > 1 && f[0] == '-') {
            return Status::errorf("unknown option '%s'", f.c_str());
        } else if (o->url.empty()) {
            o->url = f;
        } else {
            return Status::errorf("one URL at a time (got '%s' and '%s')", o->url.c_str(), f.c_str());
        }
    }
    if (o->help) return {};
    if (o->url.empty()) return Status::error("no server URL given (e.g. http://127.0.0.1:8080)");
    if (o->chat && o->prompt_kind == "ids")
        return Status::error("--prompt-kind ids needs --endpoint completions: chat messages are text");
    return {};
}

// Common English words of about one token each in BPE vocabularies; a text
// prompt of N words is then about N tokens (the usage reply gives the truth).
constexpr const char *k_words[] = {
    "the",   "of",    "and",   "to",    "in",    "is",    "was",   "that",  "for",   "on",    "with",  "as",
    "by",    "at",    "from",  "his",   "her",   "they",  "we",    "you",   "be",    "this",  "have",  "not",
    "are",   "but",   "had",   "one",   "all",   "were",  "when",  "there", "can",   "an",    "which", "their",
    "said",  "if",    "do",    "will",  "each",  "about", "how",   "up",    "out",   "them",  "then",  "she",
    "many",  "some",  "so",    "these", "would", "other", "into",  "has",   "more",  "two",   "like",  "him",
    "time",  "see",   "no",    "could", "make",  "than",  "first", "been",  "its",   "who",   "now",   "people",
    "my",    "over",  "down",  "only",  "way",   "find",  "use",   "may",   "water", "long",  "little", "very",
    "after", "words", "called", "just", "where", "most",  "know",  "get",   "through", "back", "much",  "good",
    "new",   "write", "our",   "used",  "me",    "man",   "day",   "too",   "any",   "same",  "right", "look",
};
constexpr int32_t k_n_words = int32_t(sizeof(k_words) / sizeof(k_words[0]));

std::string words_text(const std::vector<int32_t> &idx) {
    std::string s;
    for (size_t i = 0; i < idx.size(); ++i) {
        if (i > 0) s.push_back(' ');
        s += k_words[idx[i]];
    }
    return s;
}

std::string request_body(const BenchServeOptions &o, const std::string &model, bool ids, const RequestSpec &r) {
    nlohmann::json j = {{"model", model},
                        {"max_tokens", r.output_len},
                        {"ignore_eos", true},
                        {"temperature", 0.0},
                        {"stream", true},
                        {"stream_options", {{"include_usage", true}}}};
    if (o.chat) {
        j["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", words_text(r.token_ids)}}});
    } else if (ids) {
        j["prompt"] = r.token_ids;
    } else {
        j["prompt"] = words_text(r.token_ids);
    }
    return j.dump();
}

// Steps 2-4 of the file comment for one run.
RunResult run_once(const ServerAddress &addr, const std::string &path, bool chat, const std::vector<RequestSpec> &specs,
                   const std::vector<std::string> &bodies, int64_t max_concurrency, double rate, uint64_t seed) {
    RunResult run;
    run.endpoint = path;
    run.max_concurrency = max_concurrency;
    run.request_rate = rate;
    run.num_prompts = int64_t(specs.size());
    run.requests.resize(specs.size());
    std::vector<double> arrivals = arrival_times(seed, int64_t(specs.size()), rate);

    std::atomic<size_t> next{0};
    int64_t t0_us = time_us();
    auto worker = [&] {
        for (size_t i = next.fetch_add(1); i < specs.size(); i = next.fetch_add(1)) {
            int64_t wait_us = t0_us + int64_t(arrivals[i] * 1e6) - time_us();
            if (wait_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(wait_us));
            RequestResult r = send_streamed_request(addr, path, bodies[i], chat, t0_us);
            r.input_len = specs[i].input_len;
            if (r.ok && !r.usage_reported) r.prompt_tokens = r.input_len;
            run.requests[i] = std::move(r);
        }
    };
    size_t n_workers = max_concurrency > 0 ? std::min(size_t(max_concurrency), specs.size()) : specs.size();
    std::vector<std::thread> workers;
    workers.reserve(n_workers);
    for (size_t w = 0; w < n_workers; ++w) workers.emplace_back(worker);
    for (std::thread &t : workers) t.join();
    run.duration_s = double(time_us() - t0_us) * 1e-6;
    finish_run(&run);
    return run;
}

int fail(const std::string &msg) {
    std::fprintf(stderr, "sieve bench-serve: %s\n", msg.c_str());
    return k_exit_error;
}

}  // namespace

int cmd_bench_serve(int argc, char **argv) {
    BenchServeOptions o;
    Status st = parse_options(argc, argv, &o);
    if (!st.ok()) {
        std::fprintf(stderr, "sieve bench-serve: %s\n\n", st.message().c_str());
        print_usage(stderr);
        return k_exit_usage;
    }
    if (o.help) {
        print_usage(stdout);
        return 0;
    }
    Result<ServerAddress> addr = parse_server_url(o.url);
    if (!addr.ok()) {
        std::fprintf(stderr, "sieve bench-serve: %s\n", addr.status().message().c_str());
        return k_exit_usage;
    }
    addr->api_key = o.api_key;
    addr->timeout_s = o.timeout_s;

    // The model name and the vocabulary size, from the server unless given.
    bool need_vocab = !o.chat && o.prompt_kind != "text" && o.vocab_size == 0;
    std::string model = o.model;
    int64_t n_vocab = o.vocab_size;
    if (model.empty() || need_vocab) {
        Result<ServedModel> served = query_served_model(*addr);
        if (!served.ok()) return fail(served.status().message());
        if (model.empty()) model = served->id;
        if (n_vocab == 0) n_vocab = served->n_vocab;
    }
    bool ids = !o.chat && o.prompt_kind != "text" && n_vocab > 0;
    if (o.prompt_kind == "ids" && !ids)
        return fail("the server does not report its vocabulary size (meta.n_vocab in GET /v1/models): "
                    "pass --vocab-size N, or --prompt-kind text");
    const std::string path = o.chat ? "/v1/chat/completions" : "/v1/completions";

    std::vector<RequestSpec> specs = make_workload(uint64_t(o.seed), o.num_prompts, o.input_len, o.output_len,
                                                   o.range_ratio, ids ? int32_t(n_vocab) : k_n_words, o.prefix_len);
    std::vector<std::string> bodies;
    bodies.reserve(specs.size());
    for (const RequestSpec &r : specs) bodies.push_back(request_body(o, model, ids, r));
    std::fprintf(stderr, "sieve bench-serve: %s%s, model '%s', %lld prompts of %s, input %s%lld, output %lld%s\n",
                 addr->scheme_host_port.c_str(), (addr->prefix + path).c_str(), model.c_str(),
                 (long long)o.num_prompts, ids ? "random token ids" : "random words",
                 o.prefix_len > 0 ? strfmt("%lld shared + ", (long long)o.prefix_len).c_str() : "",
                 (long long)o.input_len, (long long)o.output_len,
                 o.range_ratio > 0 ? strfmt(" (range ratio %g)", o.range_ratio).c_str() : "");

    if (o.warmup > 0) {
        // The first warm-up request is also the check that the server answers
        // at all, so a wrong URL or model fails once, with its reason.
        std::vector<RequestSpec> w_specs(specs.begin(), specs.begin() + std::min<int64_t>(o.warmup, o.num_prompts));
        std::vector<std::string> w_bodies(bodies.begin(), bodies.begin() + int64_t(w_specs.size()));
        RunResult w = run_once(*addr, path, o.chat, w_specs, w_bodies, 0, INFINITY, uint64_t(o.seed));
        if (!w.requests[0].ok) return fail("warm-up request failed: " + w.requests[0].error);
        std::fprintf(stderr, "sieve bench-serve: warm-up done (%lld of %zu requests succeeded)\n",
                     (long long)w.completed, w_specs.size());
    }

    std::vector<int64_t> concurrencies = o.sweep.empty() ? std::vector<int64_t>{o.max_concurrency} : o.sweep;
    std::vector<RunResult> runs;
    for (int64_t c : concurrencies) {
        RunResult run = run_once(*addr, path, o.chat, specs, bodies, c, o.request_rate, uint64_t(o.seed));
        run.model = model;
        print_run_table(run);
        if (run.failed > 0)
            std::fprintf(stderr, "sieve bench-serve: %lld of %lld requests failed; first error: %s\n",
                         (long long)run.failed, (long long)run.num_prompts, run.first_error.c_str());
        runs.push_back(std::move(run));
        // Files are rewritten after every run, so a long sweep cut short keeps what it measured.
        if (!o.json_path.empty() && !(st = write_runs_json(o.json_path, runs)).ok()) return fail(st.message());
        if (!o.csv_path.empty() && !(st = write_runs_csv(o.csv_path, runs)).ok()) return fail(st.message());
    }
    for (const RunResult &run : runs)
        if (run.completed == 0) return fail("no request succeeded");
    return 0;
}

}  // namespace sieve::cli
