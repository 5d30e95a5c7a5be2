// Request validation of the HTTP server without a server: JSON guards
// (nesting depth, UTF-8) and the OpenAI request parser's types and ranges.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "sieve/server/api_request.h"
#include "sieve/server/json_guard.h"
#include "sieve/server/metrics.h"

namespace sieve {
namespace {

bool parse(const std::string &body, ApiKind kind, ApiRequest *out, ApiError *err) {
    return api_parse_request(body, kind, ApiLimits{}, out, err);
}

ApiError parse_err(const std::string &body, ApiKind kind = ApiKind::completion) {
    ApiRequest r;
    ApiError e;
    EXPECT_FALSE(parse(body, kind, &r, &e)) << body.substr(0, 200);
    return e;
}

TEST(JsonGuard, DepthIgnoresBracketsInStrings) {
    EXPECT_EQ(json_nesting_depth(R"({"a": "[[[[{{{{", "b": [1, [2]]})", 64), 3);
    EXPECT_EQ(json_nesting_depth(R"({"a": "\"[[[", "b": "x\\"})", 64), 1);
    EXPECT_EQ(json_nesting_depth("]]]][", 64), 1);  // stray closers never go negative
    EXPECT_EQ(json_nesting_depth(std::string(100000, '['), 64), 65);
    std::string ok(64, '[');
    ok += std::string(64, ']');
    EXPECT_EQ(json_nesting_depth(ok, 64), 64);
}

TEST(JsonGuard, RandomNestingMatchesCount) {
    std::mt19937 rng(7);
    for (int iter = 0; iter < 200; ++iter) {
        const int depth = static_cast<int>(rng() % 90) + 1;
        std::string s;
        for (int i = 0; i < depth; ++i) s += (rng() & 1) ? "{\"k]\":" : "[\"{\",";
        s += "1";
        for (int i = 0; i < depth; ++i) s += "]";  // closer kind does not matter to the scan
        EXPECT_EQ(json_nesting_depth(s, 64), depth > 64 ? 65 : depth) << s;
    }
}

TEST(JsonGuard, Utf8Strict) {
    size_t bad = 0;
    EXPECT_TRUE(utf8_is_valid("plain \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", &bad));
    struct Case {
        const char *bytes;
        size_t offset;
    } cases[] = {
        {"ab\xff", 2},          // never valid
        {"\xc0\xaf", 0},         // overlong '/'
        {"x\xe0\x80\xaf", 1},    // overlong 3-byte
        {"\xed\xa0\x80", 0},     // surrogate U+D800
        {"\xf4\x90\x80\x80", 0}, // above U+10FFFF
        {"ok\xe2\x82", 2},       // truncated at the end
        {"\xc3(", 0},            // bad continuation
    };
    for (const Case &c : cases) {
        EXPECT_FALSE(utf8_is_valid(c.bytes, &bad)) << c.bytes;
        EXPECT_EQ(bad, c.offset) << c.bytes;
    }
    EXPECT_FALSE(json_body_check("{\"p\": \"\xff\"}", 64).ok());
    EXPECT_FALSE(json_body_check(std::string(70, '['), 64).ok());
}

TEST(ApiRequest, CompletionDefaultsAndFields) {
    ApiRequest r;
    ApiError e;
    ASSERT_TRUE(parse(R"({"model": "m", "prompt": "hi", "max_tokens": 7, "temperature": 0, "top_p": 0.5,
                          "top_k": -1, "min_p": 0.1, "seed": -3, "n": 2, "stop": "END", "logprobs": 3,
                          "stream": true, "stream_options": {"include_usage": true}, "ignore_eos": true,
                          "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
                          "user": "ignored"})",
                      ApiKind::completion, &r, &e))
        << e.message;
    EXPECT_EQ(r.model, "m");
    EXPECT_EQ(r.prompt_text, "hi");
    EXPECT_EQ(r.max_tokens, 7);
    EXPECT_EQ(r.sampling.temperature, 0.0f);
    EXPECT_EQ(r.sampling.top_p, 0.5f);
    EXPECT_EQ(r.sampling.top_k, 0);
    EXPECT_TRUE(r.seed_given);
    EXPECT_EQ(r.sampling.seed, static_cast<uint64_t>(int64_t{-3}));
    EXPECT_EQ(r.n, 2);
    ASSERT_EQ(r.stop.size(), 1u);
    EXPECT_EQ(r.n_logprobs, 3);
    EXPECT_TRUE(r.stream && r.include_usage && r.ignore_eos);
    EXPECT_TRUE(sampler_params_validate(r.sampling).ok());

    ASSERT_TRUE(parse(R"({"prompt": [1, 2, 3.0]})", ApiKind::completion, &r, &e)) << e.message;
    EXPECT_TRUE(r.prompt_is_ids);
    EXPECT_EQ(r.prompt_ids, (std::vector<int64_t>{1, 2, 3}));
    EXPECT_EQ(r.max_tokens, -1);
    EXPECT_EQ(r.sampling.temperature, 1.0f);  // OpenAI's default, not llama.cpp's
    EXPECT_EQ(r.n_logprobs, -1);
    ASSERT_TRUE(parse(R"({"prompt": ["one"]})", ApiKind::completion, &r, &e));
    EXPECT_EQ(r.prompt_text, "one");
}

TEST(ApiRequest, ChatMessagesAndLogprobs) {
    ApiRequest r;
    ApiError e;
    ASSERT_TRUE(parse(R"({"messages": [{"role": "developer", "content": "be brief"},
                                       {"role": "user", "content": [{"type": "text", "text": "a"},
                                                                     {"type": "text", "text": "b"}]},
                                       {"role": "assistant", "content": null}],
                          "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 20})",
                      ApiKind::chat, &r, &e))
        << e.message;
    ASSERT_EQ(r.messages.size(), 3u);
    EXPECT_EQ(r.messages[0].role, "system");
    EXPECT_EQ(r.messages[1].content, "ab");
    EXPECT_EQ(r.max_tokens, 5);
    EXPECT_EQ(r.n_logprobs, 20);
    EXPECT_EQ(parse_err(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})",
                        ApiKind::chat).param,
              "top_logprobs");
}

TEST(ApiRequest, ErrorsNameTheField) {
    struct Case {
        const char *body;
        const char *param;
    } cases[] = {
        {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
        {R"({"prompt": "x", "max_tokens": "3"})", "max_tokens"},
        {R"({"prompt": "x", "max_tokens": true})", "max_tokens"},
        {R"({"prompt": "x", "temperature": -1})", "temperature"},
        {R"({"prompt": "x", "temperature": 2.5})", "temperature"},
        {R"({"prompt": "x", "top_p": 1.01})", "top_p"},
        {R"({"prompt": "x", "n": 0})", "n"},
        {R"({"prompt": "x", "n": 17})", "n"},
        {R"({"prompt": "x", "n": 1e300})", "n"},
        {R"({"prompt": "x", "logprobs": 6})", "logprobs"},
        {R"({"prompt": "x", "stop": ""})", "stop"},
        {R"({"prompt": "x", "stop": ["a","b","c","d","e"]})", "stop"},
        {R"({"prompt": "x", "stop": [1]})", "stop"},
        {R"({"prompt": ""})", "prompt"},
        {R"({"prompt": []})", "prompt"},
        {R"({"prompt": [1, "a"]})", "prompt"},
        {R"({"prompt": ["a", "b"]})", "prompt"},
        {R"({})", "prompt"},
        {R"({"prompt": "x", "model": 3})", "model"},
        {R"({"prompt": "x", "stream": 1})", "stream"},
        {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
        {R"({"prompt": "x", "seed": 1.5})", "seed"},
    };
    for (const Case &c : cases) {
        const ApiError e = parse_err(c.body);
        EXPECT_EQ(e.http_status, 400) << c.body;
        EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
        EXPECT_NE(e.message.find(c.param), std::string::npos) << e.message;
    }
    EXPECT_EQ(parse_err(R"({"messages": []})", ApiKind::chat).param, "messages");
    EXPECT_EQ(parse_err(R"({"messages": [{"role": "x", "content": "y"}]})", ApiKind::chat).param, "messages[0].role");
    for (const char *body : {"{", "[1]", "\"s\"", "{\"prompt\": NaN}", "{\"prompt\": \"x\", \"temperature\": 1e999}",
                             "{\"prompt\": \"\\ud800\"}"})
        EXPECT_EQ(parse_err(body).http_status, 400) << body;
}

TEST(ApiRequest, RandomBytesNeverCrash) {
    std::mt19937 rng(11);
    const std::string alphabet = "{}[]\":,0123456789.eE-+ truefalsnul\\u\xc3\xa9\xff";
    for (int iter = 0; iter < 3000; ++iter) {
        std::string s = "{\"prompt\": ";
        const size_t n = rng() % 64;
        for (size_t i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
        ApiRequest r;
        ApiError e;
        if (!parse(s, iter % 2 ? ApiKind::chat : ApiKind::completion, &r, &e)) {
            EXPECT_GE(e.http_status, 400);
            EXPECT_FALSE(e.message.empty());
        }
    }
}

TEST(ApiError, JsonShape) {
    const std::string j = api_error_json(api_error(404, "model", "no such model \xff", "model_not_found"));
    EXPECT_NE(j.find("\"type\":\"not_found_error\""), std::string::npos) << j;
    EXPECT_NE(j.find("\"param\":\"model\""), std::string::npos) << j;
    EXPECT_NE(j.find("\"code\":\"model_not_found\""), std::string::npos) << j;
    EXPECT_NE(api_error_json(api_error(400, "", "x")).find("\"param\":null"), std::string::npos);
}

TEST(Metrics, HistogramBucketsAreCumulative) {
    Histogram h({0.1, 1.0});
    for (double v : {0.05, 0.5, 0.7, 3.0}) h.observe(v);
    std::string out;
    h.render("x", "help", &out);
    EXPECT_NE(out.find("x_bucket{le=\"0.1\"} 1\n"), std::string::npos) << out;
    EXPECT_NE(out.find("x_bucket{le=\"1\"} 3\n"), std::string::npos) << out;
    EXPECT_NE(out.find("x_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << out;
    EXPECT_NE(out.find("x_count 4\n"), std::string::npos) << out;
}

}  // namespace
}  // namespace sieve
