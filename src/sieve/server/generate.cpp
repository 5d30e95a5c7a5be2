#include "sieve/server/generate.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "sieve/core/status.h"

namespace sieve {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {
// A prompt this many bytes per context token cannot fit: no vocabulary has
// tokens that long. Refusing before tokenizing keeps a multi-megabyte prompt
// from holding a worker thread in the tokenizer.
constexpr int64_t k_max_bytes_per_token = 128;
// How often a waiting writer checks that its client is still connected.
constexpr auto k_poll = std::chrono::milliseconds(50);

double seconds_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

std::string dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
}  // namespace

struct ChoiceState {
    uint64_t engine_id = 0;
    bool submitted = false;
    bool finished = false;
    bool got_first = false;
    Clock::time_point t_last{};
    FinishReason reason = FinishReason::none;
    std::string error;
    int64_t n_gen = 0;
    int64_t kv_rows_kept = 0, kv_rows_seen = 0;
    int64_t n_cached = 0;  // prompt tokens the prefix cache supplied
};

struct GenJob {
    GenJob(std::atomic<int> *active) : n_active(active) { n_active->fetch_add(1); }
    ~GenJob() { n_active->fetch_sub(1); }

    std::atomic<int> *n_active;
    Engine *engine = nullptr;
    const Tokenizer *tok = nullptr;
    ServerMetrics *metrics = nullptr;
    ApiKind kind = ApiKind::completion;
    bool include_usage = false;
    int32_t n_logprobs = -1;
    std::string id;
    std::string model;
    int64_t created = 0;
    int64_t n_prompt = 0;
    std::string kv_policy;  // the policy's label ("dense" when none)
    Clock::time_point t_arrival = Clock::now();

    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<int, GenEvent>> events;  // (choice, event), guarded by mu
    std::vector<ChoiceState> choices;             // guarded by mu
    int n_unfinished = 0;                          // guarded by mu

    // Engine thread: must not block beyond the short lock.
    void on_event(int choice, const GenEvent &ev) {
        const Clock::time_point now = Clock::now();
        std::lock_guard<std::mutex> lock(mu);
        ChoiceState &c = choices[choice];
        if (!ev.tokens.empty()) {
            if (!c.got_first) {
                metrics->observe_ttft(seconds_between(t_arrival, now));
                c.got_first = true;
            } else {
                // One gap per token: an event covering k tokens spreads its gap.
                const double gap = seconds_between(c.t_last, now) / static_cast<double>(ev.tokens.size());
                for (size_t k = 0; k < ev.tokens.size(); ++k) metrics->observe_itl(gap);
            }
            c.t_last = now;
        }
        if (ev.finished && !c.finished) {
            c.finished = true;
            c.reason = ev.finish_reason;
            c.error = ev.error;
            c.n_gen = ev.n_gen_tokens;
            c.kv_rows_kept = ev.kv_rows_kept;
            c.kv_rows_seen = ev.kv_rows_seen;
            c.n_cached = ev.n_cached_tokens;
            --n_unfinished;
            metrics->observe_e2e(seconds_between(t_arrival, now));
            metrics->count_finished(ev.finish_reason);
        }
        events.emplace_back(choice, ev);
        cv.notify_all();
    }
};

namespace {

bool starts_with(const std::string &s, const std::string &prefix) {
    return !prefix.empty() && s.compare(0, prefix.size(), prefix) == 0;
}

std::string new_request_id(ApiKind kind) {
    std::random_device rd;
    const uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    return strfmt("%s-%016llx", kind == ApiKind::chat ? "chatcmpl" : "cmpl", static_cast<unsigned long long>(r));
}

// Prompt token ids, checked against the vocabulary and the context.
bool build_prompt(const ServingModel &m, const ApiRequest &req, std::vector<int32_t> *ids, ApiError *err) {
    const int64_t max_ctx = m.engine->options().max_ctx;
    const Tokenizer &tok = *m.tok;
    const std::string bos_text = tok.bos_id() >= 0 ? tok.token_to_piece(tok.bos_id()) : "";
    auto too_long = [&](int64_t n_tokens, const char *what) {
        *err = api_error(400, req.kind == ApiKind::chat ? "messages" : "prompt",
                         strfmt("%s has %lld tokens; the context holds %lld (prompt and output together). "
                                "Shorten it or start the server with a larger -c",
                                what, static_cast<long long>(n_tokens), static_cast<long long>(max_ctx)),
                         "context_length_exceeded");
        return false;
    };
    std::string text;
    if (req.kind == ApiKind::completion && req.prompt_is_ids) {
        ids->reserve(req.prompt_ids.size());
        for (size_t i = 0; i < req.prompt_ids.size(); ++i) {
            const int64_t id = req.prompt_ids[i];
            if (id < 0 || id >= tok.n_vocab()) {
                *err = api_error(400, "prompt", strfmt("token id %lld at position %zu is outside the vocabulary [0, %d)",
                                                       static_cast<long long>(id), i, tok.n_vocab()));
                return false;
            }
            ids->push_back(static_cast<int32_t>(id));
        }
    } else {
        if (req.kind == ApiKind::chat) {
            if (!m.has_template) {
                *err = api_error(400, "messages", "this model has no chat template; use /v1/completions, or start "
                                                  "the server with --chat-template NAME");
                return false;
            }
            Result<std::string> r = chat_render(m.tmpl, req.messages, /*add_generation_prompt=*/true);
            if (!r.ok()) {
                *err = api_error(400, "messages", r.status().message());
                return false;
            }
            text = std::move(*r);
        } else {
            text = req.prompt_text;
        }
        const int64_t n_bytes = static_cast<int64_t>(text.size());
        if (n_bytes > max_ctx * k_max_bytes_per_token) return too_long(n_bytes, "the prompt (in bytes, at least)");
        *ids = tok.encode(text, tok.add_bos() && !starts_with(text, bos_text), /*parse_special=*/true);
    }
    if (ids->empty()) {
        *err = api_error(400, "prompt", "the prompt encodes to no tokens");
        return false;
    }
    const int64_t n = static_cast<int64_t>(ids->size());
    if (n >= max_ctx) return too_long(n, "the prompt");
    if (req.max_tokens > 0 && n + req.max_tokens > max_ctx) {
        *err = api_error(400, "max_tokens",
                         strfmt("max_tokens %lld + %lld prompt tokens exceeds the context of %lld tokens",
                                static_cast<long long>(req.max_tokens), static_cast<long long>(n),
                                static_cast<long long>(max_ctx)),
                         "context_length_exceeded");
        return false;
    }
    return true;
}

}  // namespace

std::shared_ptr<GenJob> gen_start(const ServingModel &m, ServerMetrics *metrics, const ApiRequest &req,
                                  std::atomic<int> *n_active, ApiError *err) {
    if (!req.model.empty() && req.model != m.model_id) {
        *err = api_error(404, "model", "the model '" + req.model + "' does not exist; this server serves '" +
                                           m.model_id + "' (see /v1/models)",
                         "model_not_found");
        return nullptr;
    }
    std::vector<int32_t> prompt;
    if (!build_prompt(m, req, &prompt, err)) return nullptr;

    auto job = std::make_shared<GenJob>(n_active);
    job->engine = m.engine;
    job->tok = m.tok;
    job->metrics = metrics;
    job->kind = req.kind;
    job->include_usage = req.include_usage;
    job->n_logprobs = req.n_logprobs;
    job->id = new_request_id(req.kind);
    job->model = m.model_id;
    job->created = m.created;
    job->n_prompt = static_cast<int64_t>(prompt.size());
    {
        const KvPolicyPtr &p = req.kv_policy ? *req.kv_policy : m.engine->options().kv_policy;
        job->kv_policy = p ? p->name() : "dense";
    }
    job->choices.resize(static_cast<size_t>(req.n));
    job->n_unfinished = req.n;

    std::random_device rd;
    const uint64_t base_seed = req.seed_given ? req.sampling.seed : (static_cast<uint64_t>(rd()) << 32) ^ rd();
    for (int i = 0; i < req.n; ++i) {
        GenRequest g;
        g.prompt = prompt;
        g.sampling = req.sampling;
        g.sampling.seed = base_seed + static_cast<uint64_t>(i);  // choices differ, yet are reproducible
        g.max_tokens = req.max_tokens > 0 ? req.max_tokens : m.engine->options().max_ctx - job->n_prompt;
        g.stop = req.stop;
        g.ignore_eos = req.ignore_eos;
        g.n_logprobs = req.n_logprobs;
        g.kv_policy = req.kv_policy;
        // The callback keeps the job alive until the engine's last event.
        Result<uint64_t> id = m.engine->submit(std::move(g), [job, i](const GenEvent &ev) { job->on_event(i, ev); });
        if (!id.ok()) {
            gen_abort(*job);
            const bool full = Engine::is_queue_full_error(id.status());
            *err = full ? api_error(429, "", "the server is busy (request queue full); retry later", "queue_full")
                        : api_error(400, "", id.status().message());
            metrics->count_http_error(err->http_status);
            // Choices not submitted will never get an event; count them done.
            std::lock_guard<std::mutex> lock(job->mu);
            for (int k = i; k < req.n; ++k) job->choices[k].finished = true;
            job->n_unfinished -= req.n - i;
            return nullptr;
        }
        std::lock_guard<std::mutex> lock(job->mu);
        job->choices[i].engine_id = *id;
        job->choices[i].submitted = true;
    }
    return job;
}

void gen_abort(GenJob &job) {
    std::vector<uint64_t> ids;
    {
        std::lock_guard<std::mutex> lock(job.mu);
        for (const ChoiceState &c : job.choices)
            if (c.submitted && !c.finished) ids.push_back(c.engine_id);
    }
    for (uint64_t id : ids) job.engine->cancel(id);
}

namespace {

const char *finish_name(FinishReason r) {
    switch (r) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "abort";  // vLLM's word for a request stopped by the server
    default: return "error";
    }
}

// Logprobs of one event, appended in the endpoint's shape.
void add_logprobs(const GenJob &job, const GenEvent &ev, json *lp) {
    const Tokenizer &tok = *job.tok;
    for (size_t k = 0; k < ev.tokens.size() && k < ev.logprobs.size(); ++k) {
        const std::string piece = tok.token_to_piece(ev.tokens[k]);
        const std::vector<TokenLogprob> *top = k < ev.top_logprobs.size() ? &ev.top_logprobs[k] : nullptr;
        if (job.kind == ApiKind::chat) {
            json entry = {{"token", piece}, {"logprob", ev.logprobs[k].logprob},
                          {"bytes", std::vector<int>(piece.begin(), piece.end())}};
            json alts = json::array();
            if (top)
                for (const TokenLogprob &t : *top) {
                    const std::string p = tok.token_to_piece(t.token);
                    alts.push_back({{"token", p}, {"logprob", t.logprob}, {"bytes", std::vector<int>(p.begin(), p.end())}});
                }
            entry["top_logprobs"] = alts;
            (*lp)["content"].push_back(entry);
        } else {
            (*lp)["tokens"].push_back(piece);
            (*lp)["token_logprobs"].push_back(ev.logprobs[k].logprob);
            json alts = json::object();
            if (top)
                for (const TokenLogprob &t : *top) alts[tok.token_to_piece(t.token)] = t.logprob;
            (*lp)["top_logprobs"].push_back(alts);
        }
    }
}

json empty_logprobs(ApiKind kind) {
    if (kind == ApiKind::chat) return json{{"content", json::array()}};
    return json{{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
                {"text_offset", json::array()}};
}

json usage_json(const GenJob &job) {
    int64_t n_gen = 0;
    for (const ChoiceState &c : job.choices) n_gen += c.n_gen;
    json u{{"prompt_tokens", job.n_prompt}, {"completion_tokens", n_gen}, {"total_tokens", job.n_prompt + n_gen}};
    // OpenAI's field: prompt tokens served from the prefix cache (the prompt
    // is counted once however many choices ran it; so is this).
    int64_t cached = 0;
    for (const ChoiceState &c : job.choices) cached = std::max(cached, c.n_cached);
    u["prompt_tokens_details"] = {{"cached_tokens", cached}};
    // Extension: the KV the request's lanes held at the end against a dense
    // cache (summed over its choices); compression = dense / kept.
    int64_t kept = 0, seen = 0;
    for (const ChoiceState &c : job.choices) {
        kept += c.kv_rows_kept;
        seen += c.kv_rows_seen;
    }
    if (seen > 0)
        u["kv"] = {{"policy", job.kv_policy},
                   {"rows_kept", kept},
                   {"rows_dense", seen},
                   {"compression", kept > 0 ? static_cast<double>(seen) / static_cast<double>(kept) : 0.0}};
    return u;
}

json chunk_base(const GenJob &job) {
    return json{{"id", job.id},
                {"object", job.kind == ApiKind::chat ? "chat.completion.chunk" : "text_completion"},
                {"created", job.created},
                {"model", job.model}};
}

// Waits for events; false when the client went away first. The client is
// checked every k_poll whether or not events arrive: while tokens flow, a
// non-streamed writer has nothing to write that would fail.
bool next_events(GenJob &job, ClientLink &client, Clock::time_point *next_check,
                 std::deque<std::pair<int, GenEvent>> *out, bool *all_done) {
    for (;;) {
        bool got = false;
        {
            std::unique_lock<std::mutex> lock(job.mu);
            job.cv.wait_for(lock, k_poll, [&] { return !job.events.empty(); });
            if (!job.events.empty()) {
                out->swap(job.events);
                *all_done = job.n_unfinished == 0;
                got = true;
            }
        }
        const Clock::time_point now = Clock::now();
        if (now >= *next_check) {
            if (!client.alive()) return false;
            *next_check = now + k_poll;
        }
        if (got) return true;
    }
}

std::string error_text(const GenJob &job) {
    for (const ChoiceState &c : job.choices)
        if (c.reason == FinishReason::error) return c.error.empty() ? "generation failed" : c.error;
    return "";
}

}  // namespace

bool gen_write_stream(GenJob &job, ChunkSink &sink) {
    const bool chat = job.kind == ApiKind::chat;
    std::vector<bool> opened(job.choices.size(), false);
    std::deque<std::pair<int, GenEvent>> batch;
    bool all_done = false;
    Clock::time_point next_check = Clock::now() + k_poll;
    while (!all_done) {
        batch.clear();
        if (!next_events(job, sink, &next_check, &batch, &all_done)) return false;
        std::string out;
        for (auto &[i, ev] : batch) {
            if (ev.finish_reason == FinishReason::error) continue;  // reported once, below
            json choice = {{"index", i}};
            if (chat) {
                json delta = json::object();
                if (!opened[i]) delta["role"] = "assistant";
                if (!ev.text.empty() || !opened[i]) delta["content"] = ev.text;
                choice["delta"] = delta;
            } else {
                choice["text"] = ev.text;
            }
            opened[i] = true;
            if (job.n_logprobs >= 0 && !ev.tokens.empty()) {
                json lp = empty_logprobs(job.kind);
                add_logprobs(job, ev, &lp);
                choice["logprobs"] = lp;
            } else {
                choice["logprobs"] = nullptr;
            }
            choice["finish_reason"] = ev.finished ? json(finish_name(ev.finish_reason)) : json(nullptr);
            // Nothing new to say (no text, no logprobs, not the end): skip the chunk.
            if (ev.text.empty() && !ev.finished && choice["logprobs"].is_null() &&
                !(chat && choice["delta"].contains("role")))
                continue;
            json chunk = chunk_base(job);
            chunk["choices"] = json::array({choice});
            if (job.include_usage) chunk["usage"] = nullptr;
            out += "data: " + dump(chunk) + "\n\n";
        }
        if (!out.empty() && (!sink.alive() || !sink.write(out))) return false;
    }
    std::string tail;
    const std::string err = error_text(job);
    if (!err.empty()) tail += "data: " + api_error_json(api_error(500, "", err)) + "\n\n";
    if (job.include_usage) {
        json chunk = chunk_base(job);
        chunk["choices"] = json::array();
        chunk["usage"] = usage_json(job);
        tail += "data: " + dump(chunk) + "\n\n";
    }
    tail += "data: [DONE]\n\n";
    return sink.write(tail);
}

bool gen_collect_json(GenJob &job, ClientLink &client, GenResponse *out) {
    const size_t n = job.choices.size();
    std::vector<std::string> text(n);
    std::vector<json> lps(n, empty_logprobs(job.kind));
    std::deque<std::pair<int, GenEvent>> batch;
    bool all_done = false;
    Clock::time_point next_check = Clock::now() + k_poll;
    while (!all_done) {
        batch.clear();
        if (!next_events(job, client, &next_check, &batch, &all_done)) return false;
        for (auto &[i, ev] : batch) {
            text[i] += ev.text;
            if (job.n_logprobs >= 0) add_logprobs(job, ev, &lps[i]);
        }
    }
    // Nothing has been sent yet, so a failure in the engine (a KV policy or a
    // forward step that failed, a sequence that no longer fits the KV pool)
    // gets its own status; the other choices' text is dropped with it.
    if (const std::string err = error_text(job); !err.empty()) {
        out->http_status = 500;
        out->body = api_error_json(api_error(500, "", err));
        return true;
    }
    json choices = json::array();
    for (size_t i = 0; i < n; ++i) {
        json c = {{"index", i}};
        if (job.kind == ApiKind::chat) c["message"] = {{"role", "assistant"}, {"content", text[i]}};
        else c["text"] = text[i];
        c["logprobs"] = job.n_logprobs >= 0 ? lps[i] : json(nullptr);
        c["finish_reason"] = finish_name(job.choices[i].reason);
        choices.push_back(c);
    }
    json body = {{"id", job.id},
                 {"object", job.kind == ApiKind::chat ? "chat.completion" : "text_completion"},
                 {"created", job.created},
                 {"model", job.model},
                 {"choices", choices},
                 {"usage", usage_json(job)}};
    out->http_status = 200;
    out->body = dump(body);
    return true;
}

}  // namespace sieve
