// OpenAI-API request bodies -> validated, typed requests.
//
// Everything here is untrusted input: every field is type-checked and
// range-checked, and every failure becomes an ApiError naming the field, the
// expected form and what was sent, answered as an OpenAI error object
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// with the matching HTTP status. No engine or HTTP library is involved, so
// the unit tests (tests/unit/test_server_request.cpp) cover all of it.
//
// Defaults follow the OpenAI API (temperature 1, top_p 1, no top-k, no
// min-p), not llama.cpp's sampler defaults; absent and null mean the same.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sieve/engine/sampler.h"
#include "sieve/sparse/policy.h"
#include "sieve/tokenizer/chat_template.h"

namespace sieve {

struct ApiError {
    int http_status = 400;
    std::string type = "invalid_request_error";
    std::string param;    // the offending field, "" when none
    std::string code;     // machine-readable, "" when none
    std::string message;
};

// {"error": {...}} as a compact JSON string (param / code null when empty).
std::string api_error_json(const ApiError &e);
ApiError api_error(int http_status, std::string param, std::string message, std::string code = "");

// Limits on what one request may ask for (the OpenAI API's where it has them).
struct ApiLimits {
    int max_n = 16;                   // choices per request
    int max_stop = 4;                 // stop strings (OpenAI: 4)
    int max_stop_bytes = 256;         // bytes per stop string
    int max_chat_top_logprobs = 20;   // chat: top_logprobs (OpenAI: 20)
    int max_completion_logprobs = 5;  // completions: logprobs (OpenAI: 5)
    int max_messages = 1024;
    int max_json_depth = 64;
};

enum class ApiKind { completion, chat };

struct ApiRequest {
    ApiKind kind = ApiKind::completion;
    std::string model;                 // "" = the served model
    // completions: text, or token ids when prompt_is_ids
    std::string prompt_text;
    std::vector<int64_t> prompt_ids;   // as sent; range-checked against the vocabulary later
    bool prompt_is_ids = false;
    // chat
    std::vector<ChatMessage> messages;

    int64_t max_tokens = -1;           // -1 = until the context is full
    SamplerParams sampling;
    bool seed_given = false;
    std::vector<std::string> stop;
    int n = 1;
    bool stream = false;
    bool include_usage = false;        // stream_options.include_usage
    int32_t n_logprobs = -1;           // -1 = no logprobs; else alternatives per token
    bool ignore_eos = false;
    // "kv_policy": NAME[:key=value,...] (extension; unset = the server's --kv-policy)
    std::optional<KvPolicyPtr> kv_policy;
};

// Parses and validates one body (already past json_body_check). On failure
// returns false and fills *err.
bool api_parse_request(std::string_view body, ApiKind kind, const ApiLimits &limits, ApiRequest *out,
                       ApiError *err);

// /tokenize {"content": str, "add_special": bool, "with_pieces": bool} and
// /detokenize {"tokens": [int]} (llama-server's shapes).
struct TokenizeRequest {
    std::string content;
    bool add_special = false;
    bool with_pieces = false;
};
bool api_parse_tokenize(std::string_view body, const ApiLimits &limits, TokenizeRequest *out, ApiError *err);
bool api_parse_detokenize(std::string_view body, const ApiLimits &limits, std::vector<int64_t> *tokens,
                          ApiError *err);

}  // namespace sieve
