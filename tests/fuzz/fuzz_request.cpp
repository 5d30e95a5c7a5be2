// libFuzzer target for the HTTP request path up to the engine: the JSON
// guards, the body parsers of every endpoint (completions, chat, /tokenize,
// /detokenize), the "kv_policy" extension and the chat-template rendering of
// parsed messages. Every input goes through all four parsers, so a seed for
// one endpoint also explores the others.
//
// Beyond "no crash, leak, hang or undefined behaviour" (ASan + UBSan), each
// outcome is checked against what the rest of the server relies on:
//   - a refused body gives a 400 whose error object is valid JSON;
//   - an accepted body passed the guards (UTF-8, depth), and its fields are
//     within the ranges the engine's own validation enforces (sampler
//     parameters, n, stop strings, logprobs), so no accepted request can
//     fail later in Engine::submit for a reason the parser should have named;
//   - a kv_policy's label parses back to the same policy (sparse/policy.h);
//   - chat rendering in every template family gives valid UTF-8 or an error.
// A failed check calls __builtin_trap(), which libFuzzer reports as a crash.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "sieve/engine/sampler.h"
#include "sieve/server/api_request.h"
#include "sieve/server/json_guard.h"
#include "sieve/sparse/policy_spec.h"
#include "sieve/tokenizer/chat_template.h"

namespace {

using sieve::ApiError;
using sieve::ApiLimits;

void check(bool ok) {
    if (!ok) __builtin_trap();
}

bool valid_utf8(std::string_view s) {
    size_t bad = 0;
    return sieve::utf8_is_valid(s, &bad);
}

// A refusal must be a well-formed OpenAI error object for a 4xx.
void check_refusal(const ApiError &e) {
    check(e.http_status == 400 && !e.message.empty());
    const nlohmann::json j = nlohmann::json::parse(sieve::api_error_json(e), nullptr, false);
    check(!j.is_discarded() && j.contains("error") && j["error"]["message"].is_string());
}

void check_policy(const sieve::KvPolicyPtr &p) {
    if (!p) return;  // dense
    const std::string label = p->name();
    auto spec = sieve::kv_policy_spec_parse(label);
    check(spec.ok());
    auto again = sieve::kv_policy_make(*spec);
    check(again.ok() && *again && (*again)->name() == label);
}

void render_all(const std::vector<sieve::ChatMessage> &messages) {
    const sieve::ChatFormat formats[] = {sieve::ChatFormat::chatml, sieve::ChatFormat::llama3,
                                         sieve::ChatFormat::llama2, sieve::ChatFormat::mistral};
    for (sieve::ChatFormat f : formats) {
        sieve::ChatTemplate t{f, f == sieve::ChatFormat::chatml ? "You are a helpful assistant." : "", "<s>", "</s>"};
        for (bool gen : {false, true}) {
            auto text = sieve::chat_render(t, messages, gen);
            if (!text.ok()) continue;  // llama2 / mistral refuse turns that do not alternate
            check(valid_utf8(*text));
            // ChatML writes every turn verbatim.
            if (f == sieve::ChatFormat::chatml)
                for (const sieve::ChatMessage &m : messages) check(text->find(m.content) != std::string::npos);
        }
    }
}

void check_accepted(std::string_view body, const sieve::ApiRequest &r, sieve::ApiKind kind, const ApiLimits &lim) {
    check(sieve::json_body_check(body, lim.max_json_depth).ok());
    check(r.kind == kind);
    check(r.n >= 1 && r.n <= lim.max_n);
    check(r.max_tokens == -1 || r.max_tokens >= 1);
    check(sieve::sampler_params_validate(r.sampling).ok());
    check(static_cast<int>(r.stop.size()) <= lim.max_stop);
    for (const std::string &s : r.stop)
        check(!s.empty() && static_cast<int>(s.size()) <= lim.max_stop_bytes && valid_utf8(s));
    const int max_lp = kind == sieve::ApiKind::chat ? lim.max_chat_top_logprobs : lim.max_completion_logprobs;
    check(r.n_logprobs >= -1 && r.n_logprobs <= max_lp);
    check(r.stream || !r.include_usage);
    if (r.kv_policy) check_policy(*r.kv_policy);
    if (kind == sieve::ApiKind::completion) {
        check(r.prompt_is_ids ? !r.prompt_ids.empty() : !r.prompt_text.empty() && valid_utf8(r.prompt_text));
        return;
    }
    check(!r.messages.empty() && static_cast<int>(r.messages.size()) <= lim.max_messages);
    for (const sieve::ChatMessage &m : r.messages) {
        check(m.role == "system" || m.role == "user" || m.role == "assistant");
        check(valid_utf8(m.content));
    }
    render_all(r.messages);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const std::string_view body(reinterpret_cast<const char *>(data), size);
    const ApiLimits lim;

    for (sieve::ApiKind kind : {sieve::ApiKind::completion, sieve::ApiKind::chat}) {
        sieve::ApiRequest r;
        ApiError e;
        if (sieve::api_parse_request(body, kind, lim, &r, &e)) check_accepted(body, r, kind, lim);
        else check_refusal(e);
    }

    sieve::TokenizeRequest t;
    ApiError e;
    if (sieve::api_parse_tokenize(body, lim, &t, &e)) check(valid_utf8(t.content));
    else check_refusal(e);

    std::vector<int64_t> ids;
    if (!sieve::api_parse_detokenize(body, lim, &ids, &e)) check_refusal(e);
    return 0;
}
