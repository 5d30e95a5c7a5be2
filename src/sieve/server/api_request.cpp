#include "sieve/server/api_request.h"

#include "sieve/sparse/policy_spec.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "sieve/core/status.h"
#include "sieve/server/json_guard.h"

namespace sieve {

using json = nlohmann::json;

std::string api_error_json(const ApiError &e) {
    json inner = {{"message", e.message}, {"type", e.type}};
    inner["param"] = e.param.empty() ? json(nullptr) : json(e.param);
    inner["code"] = e.code.empty() ? json(nullptr) : json(e.code);
    // Replace, never throw, if a message somehow carries invalid UTF-8 (it
    // may quote user input).
    return json{{"error", inner}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

ApiError api_error(int http_status, std::string param, std::string message, std::string code) {
    ApiError e;
    e.http_status = http_status;
    if (http_status == 401) e.type = "authentication_error";
    else if (http_status == 404) e.type = "not_found_error";
    else if (http_status == 429) e.type = "rate_limit_error";
    else if (http_status == 503) e.type = "service_unavailable_error";
    else if (http_status >= 500) e.type = "server_error";
    e.param = std::move(param);
    e.code = std::move(code);
    e.message = std::move(message);
    return e;
}

namespace {

// "a string", "an integer", ...: what a JSON value is, for messages.
const char *json_kind(const json &v) {
    switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    default: return "an integer";
    }
}

bool fail(ApiError *err, const std::string &param, const std::string &msg) {
    *err = api_error(400, param, param.empty() ? msg : param + ": " + msg);
    return false;
}

bool wrong_type(ApiError *err, const std::string &param, const char *expected, const json &v) {
    return fail(err, param, std::string("expected ") + expected + ", got " + json_kind(v));
}

// Each getter: absent or null leaves *out unchanged and returns true.
bool get_bool(const json &obj, const char *key, bool *out, ApiError *err) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return true;
    if (!it->is_boolean()) return wrong_type(err, key, "a boolean", *it);
    *out = it->get<bool>();
    return true;
}

// A JSON integer, or a float with an integral value (pydantic's lax mode, as vLLM).
bool as_int(const json &v, int64_t *out) {
    if (v.is_number_integer() && !v.is_number_unsigned()) {
        *out = v.get<int64_t>();
        return true;
    }
    if (v.is_number_unsigned()) {
        const uint64_t u = v.get<uint64_t>();
        if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
        *out = static_cast<int64_t>(u);
        return true;
    }
    if (v.is_number_float()) {
        const double d = v.get<double>();
        if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15) return false;
        *out = static_cast<int64_t>(d);
        return true;
    }
    return false;
}

bool get_int(const json &obj, const char *key, int64_t lo, int64_t hi, int64_t *out, bool *present,
             ApiError *err) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return true;
    int64_t v = 0;
    if (it->is_boolean() || !it->is_number() || !as_int(*it, &v)) return wrong_type(err, key, "an integer", *it);
    if (v < lo || v > hi)
        return fail(err, key, strfmt("expected an integer in [%lld, %lld], got %lld", static_cast<long long>(lo),
                                     static_cast<long long>(hi), static_cast<long long>(v)));
    *out = v;
    if (present) *present = true;
    return true;
}

bool get_float(const json &obj, const char *key, double lo, double hi, float *out, ApiError *err) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return true;
    if (it->is_boolean() || !it->is_number()) return wrong_type(err, key, "a number", *it);
    const double v = it->get<double>();
    if (!std::isfinite(v) || v < lo || v > hi) return fail(err, key, strfmt("expected a number in [%g, %g], got %g", lo, hi, v));
    *out = static_cast<float>(v);
    return true;
}

bool parse_stop(const json &obj, const ApiLimits &lim, std::vector<std::string> *out, ApiError *err) {
    auto it = obj.find("stop");
    if (it == obj.end() || it->is_null()) return true;
    std::vector<const json *> items;
    if (it->is_string()) {
        items.push_back(&*it);
    } else if (it->is_array()) {
        for (const json &s : *it) items.push_back(&s);
    } else {
        return wrong_type(err, "stop", "a string or an array of strings", *it);
    }
    if (static_cast<int>(items.size()) > lim.max_stop)
        return fail(err, "stop", strfmt("at most %d stop strings, got %zu", lim.max_stop, items.size()));
    for (const json *s : items) {
        if (!s->is_string()) return wrong_type(err, "stop", "strings", *s);
        const std::string &str = s->get_ref<const std::string &>();
        if (str.empty()) return fail(err, "stop", "empty stop string; remove it");
        if (static_cast<int>(str.size()) > lim.max_stop_bytes)
            return fail(err, "stop", strfmt("stop string of %zu bytes, limit %d", str.size(), lim.max_stop_bytes));
        out->push_back(str);
    }
    return true;
}

// Token ids as sent; ranges against the vocabulary are checked by the caller.
bool parse_id_array(const json &arr, const char *param, std::vector<int64_t> *out, ApiError *err) {
    out->reserve(arr.size());
    for (const json &t : arr) {
        int64_t id = 0;
        if (t.is_boolean() || !t.is_number() || !as_int(t, &id))
            return fail(err, param, std::string("expected an array of integer token ids, found ") + json_kind(t));
        out->push_back(id);
    }
    return true;
}

bool parse_prompt(const json &obj, ApiRequest *out, ApiError *err) {
    auto it = obj.find("prompt");
    if (it == obj.end() || it->is_null()) return fail(err, "prompt", "missing; send a string or an array of token ids");
    const json *p = &*it;
    // A batch of one ([str] or [[ids]]) is the same as the single prompt.
    if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
    if (p->is_string()) {
        out->prompt_text = p->get<std::string>();
        if (out->prompt_text.empty()) return fail(err, "prompt", "empty prompt");
        return true;
    }
    if (!p->is_array()) return wrong_type(err, "prompt", "a string or an array of token ids", *p);
    if (p->empty()) return fail(err, "prompt", "empty prompt");
    if ((*p)[0].is_string() || (*p)[0].is_array())
        return fail(err, "prompt", strfmt("batches of %zu prompts are not supported; send one prompt per request",
                                          p->size()));
    out->prompt_is_ids = true;
    return parse_id_array(*p, "prompt", &out->prompt_ids, err);
}

bool parse_content(const json &c, size_t i, std::string *out, ApiError *err) {
    const std::string param = strfmt("messages[%zu].content", i);
    if (c.is_string()) {
        *out = c.get<std::string>();
        return true;
    }
    if (!c.is_array()) return wrong_type(err, param, "a string or an array of text parts", c);
    for (const json &part : c) {
        if (!part.is_object()) return wrong_type(err, param, "text parts (objects)", part);
        auto type = part.find("type");
        auto text = part.find("text");
        if (type == part.end() || !type->is_string() || *type != "text")
            return fail(err, param, "only parts of type \"text\" are supported");
        if (text == part.end() || !text->is_string()) return fail(err, param, "a text part needs a string \"text\"");
        *out += text->get_ref<const std::string &>();
    }
    return true;
}

bool parse_messages(const json &obj, const ApiLimits &lim, ApiRequest *out, ApiError *err) {
    auto it = obj.find("messages");
    if (it == obj.end() || it->is_null()) return fail(err, "messages", "missing; send an array of messages");
    if (!it->is_array()) return wrong_type(err, "messages", "an array of messages", *it);
    if (it->empty()) return fail(err, "messages", "empty; send at least one message");
    if (static_cast<int>(it->size()) > lim.max_messages)
        return fail(err, "messages", strfmt("at most %d messages, got %zu", lim.max_messages, it->size()));
    for (size_t i = 0; i < it->size(); ++i) {
        const json &m = (*it)[i];
        if (!m.is_object()) return wrong_type(err, strfmt("messages[%zu]", i), "an object", m);
        auto role = m.find("role");
        if (role == m.end() || !role->is_string())
            return fail(err, strfmt("messages[%zu].role", i), "missing or not a string");
        ChatMessage msg;
        msg.role = role->get<std::string>();
        if (msg.role == "developer") msg.role = "system";  // OpenAI's newer name for the same turn
        if (msg.role != "system" && msg.role != "user" && msg.role != "assistant")
            return fail(err, strfmt("messages[%zu].role", i),
                        "expected \"system\", \"user\", \"assistant\" or \"developer\", got \"" + msg.role + "\"");
        auto content = m.find("content");
        if (content == m.end() || content->is_null()) {
            if (msg.role != "assistant") return fail(err, strfmt("messages[%zu].content", i), "missing");
        } else if (!parse_content(*content, i, &msg.content, err)) {
            return false;
        }
        out->messages.push_back(std::move(msg));
    }
    return true;
}

bool parse_logprobs(const json &obj, const ApiLimits &lim, ApiRequest *out, ApiError *err) {
    int64_t v = -1;
    if (out->kind == ApiKind::completion) {
        if (!get_int(obj, "logprobs", 0, lim.max_completion_logprobs, &v, nullptr, err)) return false;
        out->n_logprobs = static_cast<int32_t>(v);
        return true;
    }
    bool want = false;
    if (!get_bool(obj, "logprobs", &want, err)) return false;
    bool top_given = false;
    int64_t top = 0;
    if (!get_int(obj, "top_logprobs", 0, lim.max_chat_top_logprobs, &top, &top_given, err)) return false;
    if (top_given && !want) return fail(err, "top_logprobs", "needs \"logprobs\": true");
    out->n_logprobs = want ? static_cast<int32_t>(top) : -1;
    return true;
}

bool parse_sampling(const json &obj, ApiRequest *out, ApiError *err) {
    SamplerParams &sp = out->sampling;
    sp.temperature = 1.0f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.repeat_penalty = 1.0f;
    sp.repeat_last_n = 64;  // llama-server's penalty window
    sp.presence_penalty = 0.0f;
    sp.frequency_penalty = 0.0f;
    if (!get_float(obj, "temperature", 0.0, 2.0, &sp.temperature, err)) return false;
    if (!get_float(obj, "top_p", 0.0, 1.0, &sp.top_p, err)) return false;
    if (!get_float(obj, "min_p", 0.0, 1.0, &sp.min_p, err)) return false;
    if (!get_float(obj, "presence_penalty", -2.0, 2.0, &sp.presence_penalty, err)) return false;
    if (!get_float(obj, "frequency_penalty", -2.0, 2.0, &sp.frequency_penalty, err)) return false;
    if (!get_float(obj, "repetition_penalty", 1e-3, 100.0, &sp.repeat_penalty, err)) return false;
    int64_t top_k = 0;
    if (!get_int(obj, "top_k", -1, std::numeric_limits<int32_t>::max(), &top_k, nullptr, err)) return false;
    sp.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);  // -1 (vLLM) and 0 both mean off
    int64_t seed = 0;
    if (!get_int(obj, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &seed,
                 &out->seed_given, err))
        return false;
    sp.seed = static_cast<uint64_t>(seed);
    return true;
}

}  // namespace

bool api_parse_request(std::string_view body, ApiKind kind, const ApiLimits &limits, ApiRequest *out,
                       ApiError *err) {
    if (Status st = json_body_check(body, limits.max_json_depth); !st.ok()) return fail(err, "", st.message());
    json obj = json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded()) return fail(err, "", "request body is not valid JSON");
    if (!obj.is_object()) return wrong_type(err, "", "a JSON object as the request body", obj);
    *out = ApiRequest{};
    out->kind = kind;

    auto model = obj.find("model");
    if (model != obj.end() && !model->is_null()) {
        if (!model->is_string()) return wrong_type(err, "model", "a string", *model);
        out->model = model->get<std::string>();
    }
    if (kind == ApiKind::completion ? !parse_prompt(obj, out, err) : !parse_messages(obj, limits, out, err))
        return false;

    const int64_t k_max_tokens = int64_t{1} << 40;  // the context check comes later, with the prompt
    if (!get_int(obj, "max_tokens", 1, k_max_tokens, &out->max_tokens, nullptr, err)) return false;
    if (kind == ApiKind::chat && !get_int(obj, "max_completion_tokens", 1, k_max_tokens, &out->max_tokens, nullptr, err))
        return false;
    if (!parse_sampling(obj, out, err)) return false;
    if (!parse_stop(obj, limits, &out->stop, err)) return false;
    int64_t n = 1;
    if (!get_int(obj, "n", 1, limits.max_n, &n, nullptr, err)) return false;
    out->n = static_cast<int>(n);
    if (!parse_logprobs(obj, limits, out, err)) return false;
    if (!get_bool(obj, "stream", &out->stream, err)) return false;
    if (!get_bool(obj, "ignore_eos", &out->ignore_eos, err)) return false;

    auto so = obj.find("stream_options");
    if (so != obj.end() && !so->is_null()) {
        if (!so->is_object()) return wrong_type(err, "stream_options", "an object", *so);
        if (!out->stream) return fail(err, "stream_options", "only allowed with \"stream\": true");
        if (!get_bool(*so, "include_usage", &out->include_usage, err)) return false;
    }
    auto pol = obj.find("kv_policy");
    if (pol != obj.end() && !pol->is_null()) {
        if (!pol->is_string()) return wrong_type(err, "kv_policy", "a string such as \"snapkv:keep=0.1\"", *pol);
        const std::string text = pol->get<std::string>();
        if (!text.empty() && text[0] == '@')
            return fail(err, "kv_policy", "the server reads no files; give NAME[:key=value,...] (known policies: " +
                                             kv_policy_names() + ")");
        Result<KvPolicySpec> spec = kv_policy_spec_parse(text);
        if (!spec.ok()) return fail(err, "kv_policy", spec.status().message());
        if (spec->params.count("profile"))
            return fail(err, "kv_policy", "the server reads no files, so a request cannot name a head profile; "
                                          "start the server with --kv-policy " + spec->name + ":...,profile=FILE and "
                                          "leave kv_policy out");
        Result<KvPolicyPtr> made = kv_policy_make(*spec);
        if (!made.ok()) return fail(err, "kv_policy", made.status().message());
        out->kv_policy = *made;
    }
    auto echo = obj.find("echo");
    if (echo != obj.end() && echo->is_boolean() && echo->get<bool>())
        return fail(err, "echo", "echo is not supported");
    return true;
}

namespace {
bool parse_object(std::string_view body, const ApiLimits &limits, json *obj, ApiError *err) {
    if (Status st = json_body_check(body, limits.max_json_depth); !st.ok()) return fail(err, "", st.message());
    *obj = json::parse(body, nullptr, false);
    if (obj->is_discarded()) return fail(err, "", "request body is not valid JSON");
    if (!obj->is_object()) return wrong_type(err, "", "a JSON object as the request body", *obj);
    return true;
}
}  // namespace

bool api_parse_tokenize(std::string_view body, const ApiLimits &limits, TokenizeRequest *out, ApiError *err) {
    json obj;
    if (!parse_object(body, limits, &obj, err)) return false;
    auto c = obj.find("content");
    if (c == obj.end() || !c->is_string()) return fail(err, "content", "expected a string");
    out->content = c->get<std::string>();
    return get_bool(obj, "add_special", &out->add_special, err) && get_bool(obj, "with_pieces", &out->with_pieces, err);
}

bool api_parse_detokenize(std::string_view body, const ApiLimits &limits, std::vector<int64_t> *tokens,
                          ApiError *err) {
    json obj;
    if (!parse_object(body, limits, &obj, err)) return false;
    auto t = obj.find("tokens");
    if (t == obj.end() || !t->is_array()) return fail(err, "tokens", "expected an array of token ids");
    return parse_id_array(*t, "tokens", tokens, err);
}

}  // namespace sieve
