// The HTTP side of `sieve bench-serve`: one streamed request on its own
// connection, timed at every content chunk; GET /v1/models. Uses cpp-httplib's
// blocking client, one per request, so a thread per in-flight request.
#include <httplib.h>

#include <algorithm>
#include <string>
#include <vector>

#include "sieve/cli/bench_serve.h"
#include "sieve/cli/bench_serve_sse.h"
#include "sieve/core/timer.h"

namespace sieve::cli {

namespace {

// How much of an error response body is kept for the message.
constexpr size_t k_error_body_bytes = 4096;

double seconds_since(int64_t t0_us) { return double(time_us() - t0_us) * 1e-6; }

// The message of an OpenAI error object, else the body's first line, trimmed.
std::string error_body_message(const std::string &body) {
    nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("error")) {
        const nlohmann::json &e = j["error"];
        if (e.is_object() && e.contains("message") && e["message"].is_string()) return e["message"].get<std::string>();
        if (e.is_string()) return e.get<std::string>();
    }
    std::string line = body.substr(0, body.find('\n'));
    if (line.size() > 300) line = line.substr(0, 300) + "...";
    return line.empty() ? "(empty body)" : line;
}

httplib::Headers request_headers(const ServerAddress &addr) {
    httplib::Headers h;
    if (!addr.api_key.empty()) h.emplace("Authorization", "Bearer " + addr.api_key);
    return h;
}

void set_timeouts(httplib::Client *cli, double timeout_s) {
    auto d = std::chrono::microseconds(int64_t(timeout_s * 1e6));
    cli->set_connection_timeout(d);
    cli->set_read_timeout(d);
    cli->set_write_timeout(d);
}

// Words for a transport failure that say what to check.
std::string transport_error(httplib::Error e, const ServerAddress &addr, bool timed_out, double timeout_s) {
    if (timed_out || e == httplib::Error::ConnectionTimeout)
        return strfmt("timed out after %.1f s (--timeout)", timeout_s);
    if (e == httplib::Error::Connection)
        return "cannot connect to " + addr.scheme_host_port + " — is the server running there?";
    if (e == httplib::Error::Read) return "connection closed or read failed before the response ended";
    return "request to " + addr.scheme_host_port + " failed: " + httplib::to_string(e);
}

}  // namespace

Result<ServerAddress> parse_server_url(const std::string &url) {
    size_t scheme_end = url.find("://");
    if (scheme_end == std::string::npos || (url.compare(0, scheme_end, "http") != 0 &&
                                            url.compare(0, scheme_end, "https") != 0))
        return Status::errorf("URL '%s': expected http://HOST:PORT[/PREFIX] or https://...", url.c_str());
    size_t path_start = url.find('/', scheme_end + 3);
    ServerAddress a;
    a.scheme_host_port = url.substr(0, path_start);
    if (a.scheme_host_port.size() <= scheme_end + 3)
        return Status::errorf("URL '%s': no host after '%s'", url.c_str(), url.substr(0, scheme_end + 3).c_str());
    std::string prefix = path_start == std::string::npos ? "" : url.substr(path_start);
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    if (prefix.size() >= 3 && prefix.compare(prefix.size() - 3, 3, "/v1") == 0) prefix.resize(prefix.size() - 3);
    a.prefix = prefix;
    httplib::Client probe(a.scheme_host_port);
    if (!probe.is_valid()) return Status::errorf("URL '%s': the HTTP client cannot use this address", url.c_str());
    return a;
}

RequestResult send_streamed_request(const ServerAddress &addr, const std::string &path, const std::string &body,
                                    bool chat, int64_t t0_us) {
    RequestResult r;
    httplib::Client cli(addr.scheme_host_port);
    set_timeouts(&cli, addr.timeout_s);

    SseParser sse;
    std::vector<std::string> events;
    std::string error_body;
    bool saw_done = false, timed_out = false;
    int64_t n_content_chunks = 0;
    double last_chunk_s = 0;
    int64_t deadline_us = time_us() + int64_t(addr.timeout_s * 1e6);

    httplib::Request req;
    req.method = "POST";
    req.path = addr.prefix + path;
    req.headers = request_headers(addr);
    req.set_header("Content-Type", "application/json");
    req.set_header("Accept", "text/event-stream");
    req.body = body;
    req.response_handler = [&](const httplib::Response &res) {
        r.http_status = res.status;
        return true;
    };
    // Returning false aborts the transfer; the failure is then recorded in r.
    req.content_receiver = [&](const char *data, size_t n, uint64_t, uint64_t) {
        if (time_us() > deadline_us) {
            timed_out = true;
            return false;
        }
        if (r.http_status != 200) {
            error_body.append(data, std::min(n, k_error_body_bytes - std::min(k_error_body_bytes, error_body.size())));
            return true;
        }
        double now_s = seconds_since(t0_us);
        events.clear();
        if (!sse.feed(std::string_view(data, n), &events)) {
            r.error = sse.error();
            return false;
        }
        for (const std::string &ev : events) {
            StreamChunk c;
            std::string why;
            if (saw_done) {
                r.error = "event after [DONE]: " + ev.substr(0, 200);
                return false;
            }
            if (!parse_stream_chunk(ev, chat, &c, &why)) {
                r.error = why;
                return false;
            }
            if (!c.error.empty()) {
                r.error = "error in stream: " + c.error;
                return false;
            }
            if (c.done) saw_done = true;
            if (c.has_usage) {
                r.usage_reported = true;
                r.prompt_tokens = c.prompt_tokens;
                r.output_tokens = c.completion_tokens;
                r.cached_tokens = c.cached_tokens;
            }
            if (c.text.empty()) continue;
            if (n_content_chunks == 0) {
                r.ttft_s = now_s - r.start_s;
            } else {
                r.itl_s.push_back(now_s - last_chunk_s);
            }
            last_chunk_s = now_s;
            ++n_content_chunks;
        }
        return true;
    };

    r.start_s = seconds_since(t0_us);
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    bool sent = cli.send(req, res, err);
    r.e2e_s = seconds_since(t0_us) - r.start_s;

    if (!r.error.empty()) return r;  // set by the receiver
    if (r.http_status != 0 && r.http_status != 200) {
        r.error = strfmt("HTTP %d: %s", r.http_status, error_body_message(error_body).c_str());
        return r;
    }
    if (!sent || err != httplib::Error::Success) {
        // A read that waited out the read timeout (set to the whole --timeout)
        // reports a plain read error; the elapsed time tells it apart.
        timed_out |= err == httplib::Error::Read && r.e2e_s >= addr.timeout_s * 0.999;
        r.error = transport_error(err, addr, timed_out, addr.timeout_s);
        return r;
    }
    if (!saw_done) {
        r.error = sse.has_partial_event() ? "stream cut off in the middle of an event"
                                          : "stream ended without 'data: [DONE]' (does the server stream?)";
        return r;
    }
    if (n_content_chunks == 0) {
        r.error = "stream carried no content";
        return r;
    }
    if (!r.usage_reported) r.output_tokens = n_content_chunks;
    r.ok = true;
    return r;
}

Result<ServedModel> query_served_model(const ServerAddress &addr) {
    httplib::Client cli(addr.scheme_host_port);
    set_timeouts(&cli, std::min(addr.timeout_s, 30.0));
    std::string path = addr.prefix + "/v1/models";
    httplib::Result res = cli.Get(path, request_headers(addr));
    if (!res) return Status::errorf("GET %s: %s", path.c_str(), transport_error(res.error(), addr, false, 30).c_str());
    if (res->status != 200)
        return Status::errorf("GET %s: HTTP %d: %s", path.c_str(), res->status, error_body_message(res->body).c_str());
    nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
        !j["data"][0].is_object() || !j["data"][0].contains("id") || !j["data"][0]["id"].is_string())
        return Status::errorf("GET %s: expected {\"data\": [{\"id\": ...}]}, got '%s' — pass --model NAME",
                              path.c_str(), res->body.substr(0, 200).c_str());
    const nlohmann::json &m = j["data"][0];
    ServedModel out;
    out.id = m["id"].get<std::string>();
    if (m.contains("meta") && m["meta"].is_object() && m["meta"].contains("n_vocab") &&
        m["meta"]["n_vocab"].is_number_integer())
        out.n_vocab = m["meta"]["n_vocab"].get<int64_t>();
    return out;
}

}  // namespace sieve::cli
