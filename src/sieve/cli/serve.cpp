// sieve serve: the OpenAI-compatible HTTP server (flags after vllm serve /
// llama-server; see docs/serving.md).
//
// Start-up order: bind the port first (a busy port fails at once and /health
// answers 503 while the model loads), then load model and tokenizer, start the
// engine, and only then report ready. SIGINT / SIGTERM are taken by sigwait()
// on the main thread (blocked everywhere else), so shutdown runs as ordinary
// code: refuse new work, let requests in flight finish for --drain-timeout
// seconds, cancel the rest, close the listener.
#include <malloc.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <sys/stat.h>
#include <thread>

#include "sieve/cli/args.h"
#include "sieve/sparse/policy_spec.h"
#include "sieve/cli/commands.h"
#include "sieve/core/log.h"
#include "sieve/engine/engine.h"
#include "sieve/gguf/gguf.h"
#include "sieve/kv/page_pool.h"
#include "sieve/model/model.h"
#include "sieve/server/http_server.h"
#include "sieve/tokenizer/chat_template.h"
#include "sieve/tokenizer/tokenizer.h"

namespace sieve::cli {

namespace {

struct ServeOptions {
    std::string model;
    std::string served_name;
    std::string chat_template;
    ServerOptions http;
    EngineOptions engine;
    int64_t n_ctx = 0;  // 0 = min(training context, 4096)
    double drain_timeout_s = 5.0;
    bool mmap = false;
    std::string cache_type_k, cache_type_v;  // -ctk / -ctv ("" = f16)
    std::string rotate_k;                    // --rotate-k ("" = auto)
    std::string kv_policy;                   // --kv-policy ("" = dense)
    bool verbose = false;
    bool help = false;
};

void serve_usage(FILE *out) {
    std::fprintf(
        out,
        "usage: sieve serve [options]\n"
        "\n"
        "OpenAI-compatible HTTP server over the continuous-batching engine:\n"
        "POST /v1/completions, /v1/chat/completions, /tokenize, /detokenize;\n"
        "GET /v1/models, /health, /metrics (Prometheus). See docs/serving.md.\n"
        "\n"
        "  -m, --model FILE          GGUF model (default: the cached SmolLM2-135M-Instruct)\n"
        "  --served-model-name NAME  model id in the API (default: the file's base name)\n"
        "  --chat-template NAME      override the model's chat template: %s\n"
        "  --host ADDR               address to bind (default: 127.0.0.1)\n"
        "  --port N                  port (default: 8080; 0 = any free port, printed)\n"
        "  --api-key KEY             require \"Authorization: Bearer KEY\" on the API\n"
        "  -np, --parallel N         sequences decoded together (default: 16)\n"
        "  -c, --ctx-size N          tokens per sequence, prompt + output (default: 0 =\n"
        "                            min(training context, 4096))\n"
        "  --max-batch-tokens N      tokens per forward step (default: 512)\n"
        "  --kv-memory BYTES         KV pool size, e.g. 512MiB (default: enough for\n"
        "                            --parallel full contexts)\n"
        "  --kv-page-size BYTES      KV page, a multiple of 4KiB from 4KiB to 2MiB (default: 64KiB, or the\n"
        "                            nearest size above that holds whole rows: 68KiB for q8_0 KV)\n"
        "  --swap-space BYTES        host memory for preempted sequences' KV (default: 4GiB;\n"
        "                            past it a preempted sequence is recomputed)\n"
        "  --no-prefix-cache         compute every prompt in full (default: blocks of %lld\n"
        "                            prompt tokens stay cached and later requests that\n"
        "                            start with the same tokens reuse them)\n"
        "  -ctk, --cache-type-k T    KV row type: f16 (default), bf16, f32 (exact), q8_0, q4_0\n"
        "  -ctv, --cache-type-v T    V row type (default: as -ctk, which alone sets both;\n"
        "                            K and V may differ, e.g. -ctk q8_0 -ctv q4_0)\n"
        "  --rotate-k auto|on|off    keys rotated by a fixed Hadamard transform (auto: q4_0 keys)\n"
        "  --kv-policy P             default KV policy, NAME[:key=value,...] or @FILE.json\n"
        "                            (default: dense); a request's \"kv_policy\" overrides it.\n"
        "                            See docs/sparsity.md. Policies:\n%s"
        "  --mmap                    leave the weights in the file mapping (quicker start,\n"
        "                            slower decode; default: copied into huge pages)\n"
        "  --max-queue N             waiting requests before 429 (default: 256)\n"
        "  -t, --threads N           compute threads (default: every core)\n"
        "  --http-threads N          connections served at once (default: 64)\n"
        "  --max-body BYTES          request body limit (default: 8MiB)\n"
        "  --timeout S               time a request head has from its first byte, then its\n"
        "                            body (408 past either), and each write (default: 30)\n"
        "  --drain-timeout S         on SIGTERM, seconds to let requests finish (default: 5)\n"
        "  --verbose                 debug logs\n"
        "  -h, --help                this text\n",
        chat_format_names().c_str(), static_cast<long long>(EngineOptions().prefix_block),
        kv_policy_help().c_str());
}

Status parse_serve_options(int argc, char **argv, ServeOptions *o) {
    ArgCursor args(argc, argv);
    std::string f;
    int64_t v = 0;
    while (args.next(&f)) {
        if (f == "-m" || f == "--model") SIEVE_TRY(take_string(args, "a file path", &o->model));
        else if (f == "--served-model-name") SIEVE_TRY(take_string(args, "a name", &o->served_name));
        else if (f == "--chat-template") SIEVE_TRY(take_string(args, "a template name", &o->chat_template));
        else if (f == "--host") SIEVE_TRY(take_string(args, "an address", &o->http.host));
        else if (f == "--api-key") SIEVE_TRY(take_string(args, "a key", &o->http.api_key));
        else if (f == "--port") { SIEVE_TRY(take_int(args, f, 0, 65535, &v)); o->http.port = static_cast<int>(v); }
        else if (f == "-np" || f == "--parallel") { SIEVE_TRY(take_int(args, f, 1, 1024, &v)); o->engine.max_seqs = static_cast<int>(v); }
        else if (f == "-c" || f == "--ctx-size") SIEVE_TRY(take_int(args, f, 0, int64_t{1} << 24, &o->n_ctx));
        else if (f == "--max-batch-tokens") SIEVE_TRY(take_int(args, f, 1, int64_t{1} << 20, &o->engine.max_batch_tokens));
        else if (f == "--kv-memory") SIEVE_TRY(take_bytes(args, f, &o->engine.kv_memory_bytes));
        else if (f == "--kv-page-size") SIEVE_TRY(take_bytes(args, f, &o->engine.kv_page_bytes));
        else if (f == "--swap-space") SIEVE_TRY(take_bytes(args, f, &o->engine.swap_bytes));
        else if (f == "-ctk" || f == "--cache-type-k") SIEVE_TRY(take_string(args, "f16, bf16, f32, q8_0 or q4_0", &o->cache_type_k));
        else if (f == "--rotate-k")
            SIEVE_TRY(take_string(args, "auto, on or off", &o->rotate_k));
        else if (f == "-ctv" || f == "--cache-type-v") SIEVE_TRY(take_string(args, "f16, bf16, f32, q8_0 or q4_0", &o->cache_type_v));
        else if (f == "--kv-policy") SIEVE_TRY(take_string(args, "NAME[:key=value,...] or @FILE.json", &o->kv_policy));
        else if (f == "--max-queue") { SIEVE_TRY(take_int(args, f, 0, 1 << 20, &v)); o->engine.max_waiting = static_cast<int>(v); }
        else if (f == "-t" || f == "--threads") { SIEVE_TRY(take_int(args, f, 1, 4096, &v)); o->engine.n_threads = static_cast<int>(v); }
        else if (f == "--http-threads") { SIEVE_TRY(take_int(args, f, 1, 4096, &v)); o->http.n_http_threads = static_cast<int>(v); }
        else if (f == "--max-body") SIEVE_TRY(take_bytes(args, f, &o->http.max_body_bytes));
        else if (f == "--timeout") {
            SIEVE_TRY(take_int(args, f, 1, 3600, &v));
            o->http.read_timeout_s = o->http.write_timeout_s = static_cast<int>(v);
        } else if (f == "--drain-timeout") { SIEVE_TRY(take_int(args, f, 0, 3600, &v)); o->drain_timeout_s = static_cast<double>(v); }
        else if (f == "--mmap") o->mmap = true;
        else if (f == "--no-prefix-cache") o->engine.prefix_cache = false;
        else if (f == "--verbose") o->verbose = true;
        else if (f == "-h" || f == "--help") o->help = true;
        else return Status::errorf("unknown option '%s'", f.c_str());
    }
    return Status();
}

int fail(const Status &st) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    return k_exit_error;
}

std::string base_name(const std::string &path) {
    const size_t slash = path.find_last_of('/');
    std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".gguf") == 0) name.resize(name.size() - 5);
    return name;
}

// The chat template: --chat-template NAME, else the model's own, else none
// (then /v1/chat/completions answers 400 and says so).
Status load_template(const ServeOptions &o, const GgufFile &file, const Tokenizer &tok, ServingModel *m) {
    const std::string bos = tok.bos_id() >= 0 ? tok.token_to_piece(tok.bos_id()) : "";
    const std::string eos = tok.eos_id() >= 0 ? tok.token_to_piece(tok.eos_id()) : "";
    std::string src;
    if (file.has("tokenizer.chat_template")) SIEVE_TRY(file.get_string("tokenizer.chat_template", &src));
    Result<ChatTemplate> from_model = src.empty() ? Result<ChatTemplate>(Status::error("none"))
                                                  : chat_template_from_jinja(src, bos, eos);
    if (!o.chat_template.empty()) {
        Result<ChatFormat> fmt = chat_format_from_name(o.chat_template);
        if (!fmt.ok()) return fmt.status().with_context("--chat-template");
        m->tmpl = from_model.ok() && from_model->format == *fmt ? *from_model : ChatTemplate{*fmt, "", bos, eos};
        m->has_template = true;
        return Status();
    }
    if (src.empty()) return Status();
    if (!from_model.ok()) {
        SIEVE_LOG_WARN("the model's chat template is not recognised (%s); chat requests will be refused",
                       from_model.status().message().c_str());
        return Status();
    }
    m->tmpl = *from_model;
    m->has_template = true;
    return Status();
}

// Blocks SIGINT/SIGTERM in this thread and every thread started after it.
sigset_t block_stop_signals() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    return set;
}

}  // namespace

int cmd_serve(int argc, char **argv) {
    ServeOptions o;
    Status parsed = parse_serve_options(argc, argv, &o);
    if (parsed.ok())
        parsed = parse_cache_types(o.cache_type_k, o.cache_type_v, &o.engine.kv_type, o.rotate_k);
    if (parsed.ok() && !o.kv_policy.empty()) parsed = parse_kv_policy_flag(o.kv_policy, &o.engine.kv_policy);
    if (!parsed.ok()) {
        std::fprintf(stderr, "error: %s\nsee `sieve serve --help` for the options\n", parsed.message().c_str());
        return k_exit_usage;
    }
    if (o.help) {
        serve_usage(stdout);
        return 0;
    }
    log_set_level(o.verbose ? LogLevel::debug : LogLevel::info);
    // glibc gives every thread that allocates its own arena (up to 8 per
    // core); each HTTP worker then keeps megabytes of freed memory that
    // malloc_trim cannot return, and an idle server's RSS creeps up with the
    // number of workers that ever ran (docs/reliability.md, the hour-long
    // soak). Two arenas, unless the user set MALLOC_ARENA_MAX themselves.
    if (!std::getenv("MALLOC_ARENA_MAX")) mallopt(M_ARENA_MAX, 2);
    const sigset_t stop_signals = block_stop_signals();
    std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a signal

    if (o.model.empty()) {
        o.model = default_model_path();
        struct stat st {};
        if (stat(o.model.c_str(), &st) != 0)
            return fail(Status::errorf("no -m given and the default model is not at %s; run scripts/fetch_model.sh "
                                       "to fetch it, or pass -m FILE",
                                       o.model.c_str()));
    }

    Result<std::unique_ptr<HttpServer>> server = HttpServer::create(o.http);
    if (!server.ok()) return fail(server.status());
    (*server)->start();
    // The port on its own line first, so scripts that pass --port 0 can read it.
    std::fprintf(stderr, "sieve serve: listening on http://%s:%d\n", o.http.host.c_str(), (*server)->port());
    std::fflush(stderr);

    Result<std::unique_ptr<GgufFile>> file = GgufFile::open(o.model);
    if (!file.ok()) return fail(file.status().with_context("model '" + o.model + "'"));
    Result<std::unique_ptr<Model>> model = Model::load(**file, ModelLoadOptions{o.mmap});
    if (!model.ok()) return fail(model.status().with_context("model '" + o.model + "'"));
    Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(**file);
    if (!tok.ok()) return fail(tok.status().with_context("tokenizer of '" + o.model + "'"));

    const ModelConfig &cfg = (*model)->config();
    o.engine.max_ctx = o.n_ctx > 0 ? o.n_ctx : std::min<int64_t>(cfg.n_ctx_train > 0 ? cfg.n_ctx_train : 4096, 4096);
    if (o.engine.max_ctx > cfg.n_ctx_train && cfg.n_ctx_train > 0)
        SIEVE_LOG_WARN("-c %lld exceeds the model's training context (%lld): quality may drop past it",
                       static_cast<long long>(o.engine.max_ctx), static_cast<long long>(cfg.n_ctx_train));
    if (o.engine.n_threads == 0) o.engine.n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

    ServingModel sm;
    if (Status st = load_template(o, **file, **tok, &sm); !st.ok()) return fail(st);
    Result<std::unique_ptr<Engine>> engine = Engine::create(**model, **tok, o.engine);
    if (!engine.ok()) return fail(engine.status());  // its messages start with "engine:"
    sm.engine = engine->get();
    sm.tok = tok->get();
    sm.model_id = o.served_name.empty() ? base_name(o.model) : o.served_name;
    sm.created = static_cast<int64_t>(std::time(nullptr));
    (*server)->set_model(sm);
    const EngineStats es = (*engine)->stats();
    SIEVE_LOG_INFO("ready: model '%s', %d sequences x %lld tokens, %lld KV pages, chat template: %s",
                   sm.model_id.c_str(), o.engine.max_seqs, static_cast<long long>((*engine)->options().max_ctx),
                   static_cast<long long>(es.kv_pages_total),
                   sm.has_template ? chat_format_name(sm.tmpl.format) : "none");

    int sig = 0;
    sigwait(&stop_signals, &sig);
    SIEVE_LOG_INFO("%s: refusing new requests, draining for up to %.0f s", sig == SIGINT ? "SIGINT" : "SIGTERM",
                   o.drain_timeout_s);
    (*server)->begin_shutdown();
    const auto poll = std::chrono::milliseconds(20);
    for (double waited = 0; waited < o.drain_timeout_s && (*server)->n_active() > 0; waited += 0.02)
        std::this_thread::sleep_for(poll);
    // Whatever is left is cancelled; each writer sees its cancelled event and ends.
    (*engine)->shutdown(/*drain=*/false);
    for (int i = 0; i < 100 && (*server)->n_active() > 0; ++i) std::this_thread::sleep_for(poll);
    (*server)->stop();
    engine->reset();
    SIEVE_LOG_INFO("stopped");
    return 0;
}

}  // namespace sieve::cli
