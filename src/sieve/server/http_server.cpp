#include "sieve/server/http_server.h"

#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "sieve/core/log.h"
#include "sieve/server/chat_page.h"
#include "sieve/server/http_conn.h"
#include "sieve/server/json_guard.h"
#include "sieve/server/metrics.h"

namespace sieve {

using json = nlohmann::json;

namespace {

// The connection behind a chunked response, as a ChunkSink.
class HttplibSink final : public ChunkSink {
public:
    explicit HttplibSink(httplib::DataSink &sink) : sink_(sink) {}
    bool write(const std::string &bytes) override { return sink_.write(bytes.data(), bytes.size()); }
    // is_writable() also peeks the socket, so a peer that closed is seen
    // even when no byte is being written (a request still queued, say).
    bool alive() override { return sink_.is_writable(); }

private:
    httplib::DataSink &sink_;
};

// The client of a request whose response has not started.
class RequestLink final : public ClientLink {
public:
    RequestLink(const ConnServer &svr, const httplib::Request &req) : svr_(svr), req_(req) {}
    bool alive() override { return svr_.client_alive(req_); }

private:
    const ConnServer &svr_;
    const httplib::Request &req_;
};

ConnOptions conn_options(const ServerOptions &o, ServerMetrics *metrics) {
    ConnOptions c;
    c.n_workers = o.n_http_threads;
    c.read_timeout_s = o.read_timeout_s;
    c.write_timeout_s = o.write_timeout_s;
    c.idle_timeout_s = o.keep_alive_timeout_s;
    c.keep_alive_max = o.keep_alive_max;
    c.on_refused = [metrics](int status) { metrics->count_http_error(status); };
    return c;
}

std::string dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

struct HttpServer::Impl {
    explicit Impl(const ServerOptions &o) : opt(o), svr(conn_options(o, &metrics)) {}

    ServerOptions opt;
    ServerMetrics metrics;  // before svr: its connection threads count refusals here
    ConnServer svr;
    std::thread listener;
    std::atomic<bool> ready{false};
    std::atomic<bool> stopping{false};
    std::atomic<bool> listener_done{false};  // set by the listener thread as it returns
    std::atomic<int> n_active{0};
    ServingModel model;  // written once before `ready` is set (release), read after (acquire)
    int bound_port = 0;
    int listen_fd = -1;  // the listening socket (seen by the socket-options hook)

    void send_error(httplib::Response &res, const ApiError &e) {
        metrics.count_http_error(e.http_status);
        res.status = e.http_status;
        res.set_content(api_error_json(e), "application/json");
    }

    // 503 while loading or shutting down; true when the caller may go on.
    bool check_ready(httplib::Response &res) {
        if (stopping.load()) {
            send_error(res, api_error(503, "", "the server is shutting down", "shutting_down"));
            return false;
        }
        if (!ready.load(std::memory_order_acquire)) {
            send_error(res, api_error(503, "", "the model is loading; retry shortly", "loading"));
            return false;
        }
        return true;
    }

    void install_guards();
    void install_routes();
    void handle_generate(const httplib::Request &req, httplib::Response &res, ApiKind kind);
    void handle_tokenize(const httplib::Request &req, httplib::Response &res);
    void handle_detokenize(const httplib::Request &req, httplib::Response &res);
};

void HttpServer::Impl::install_guards() {
    // The library's default also sets SO_REUSEPORT, which lets a second
    // server bind a port already in use and silently split its traffic.
    svr.set_socket_options([this](socket_t sock) {
        int yes = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
        listen_fd = sock;
    });
    svr.set_payload_max_length(static_cast<size_t>(opt.max_body_bytes));
    // Timeouts, the keep-alive limits and the worker pool are ConnServer's
    // (http_conn.h); these two only fill the Keep-Alive response header.
    svr.set_keep_alive_timeout(opt.keep_alive_timeout_s);
    svr.set_keep_alive_max_count(static_cast<size_t>(opt.keep_alive_max));

    svr.set_pre_routing_handler([this](const httplib::Request &req, httplib::Response &res) {
        if (static_cast<int>(req.headers.size()) > opt.max_headers) {
            send_error(res, api_error(431, "", strfmt("%zu request header lines, limit %d", req.headers.size(),
                                                      opt.max_headers)));
            return httplib::Server::HandlerResponse::Handled;
        }
        // The chat page is open like /health: it holds no data, and the key
        // typed into it goes with each of its API calls.
        const bool open_route = req.path == "/" || req.path == "/health" || req.path == "/metrics";
        if (!opt.api_key.empty() && !open_route) {
            const std::string auth = req.get_header_value("Authorization");
            if (auth != "Bearer " + opt.api_key) {
                send_error(res, api_error(401, "", "missing or wrong API key; send \"Authorization: Bearer KEY\"",
                                          "invalid_api_key"));
                return httplib::Server::HandlerResponse::Handled;
            }
        }
        return httplib::Server::HandlerResponse::Unhandled;
    });
    // Errors the library raises itself (unknown route, body too large, bad
    // request line) get an OpenAI error object too.
    svr.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request &req,
                                                                        httplib::Response &res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        // The library answers 400 to a body it could not read in full; when
        // the read ran out of time, say so (a body shorter than its
        // Content-Length, or one sent too slowly).
        if (res.status == 400 && svr.read_timed_out(req)) res.status = 408;
        std::string msg;
        if (res.status == 404) msg = "unknown route " + req.method + " " + req.path;
        else if (res.status == 413) msg = strfmt("request body over the limit of %lld bytes", static_cast<long long>(opt.max_body_bytes));
        else if (res.status == 408) msg = strfmt("the request body was not received within %d s (--timeout)", opt.read_timeout_s);
        else msg = strfmt("HTTP %d", res.status);
        const int status = res.status;
        send_error(res, api_error(status, "", msg));
        res.status = status;
        return httplib::Server::HandlerResponse::Handled;
    }));
    // A request not read in full closes its connection after the answer
    // (http_conn.h): the answer says so instead of offering keep-alive.
    svr.set_post_routing_handler([this](const httplib::Request &req, httplib::Response &res) {
        if (!svr.closes_after(req)) return;
        res.headers.erase("Keep-Alive");
        res.set_header("Connection", "close");
    });
    svr.set_exception_handler([this](const httplib::Request &, httplib::Response &res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
            std::rethrow_exception(ep);
        } catch (const std::exception &e) {
            what = std::string("internal error: ") + e.what();
        } catch (...) {
        }
        send_error(res, api_error(500, "", what));
    });
}

void HttpServer::Impl::handle_generate(const httplib::Request &req, httplib::Response &res, ApiKind kind) {
    if (!check_ready(res)) return;
    ApiRequest ar;
    ApiError err;
    if (!api_parse_request(req.body, kind, opt.limits, &ar, &err)) return send_error(res, err);
    std::shared_ptr<GenJob> job = gen_start(model, &metrics, ar, &n_active, &err);
    if (!job) return send_error(res, err);
    if (!ar.stream) {
        // Headers wait until the answer is known, so an engine error gets a
        // 500; meanwhile the connection is polled, so a client that hangs up
        // frees its sequence at once.
        RequestLink client(svr, req);
        GenResponse out;
        if (!gen_collect_json(*job, client, &out)) {
            gen_abort(*job);
            // Nobody reads this (nginx logs such a request as 499); the
            // connection is closed after the write fails.
            res.status = 499;
            res.set_content(api_error_json(api_error(499, "", "the client closed the connection")), "application/json");
            return;
        }
        if (out.http_status != 200) metrics.count_http_error(out.http_status);
        res.status = out.http_status;
        res.set_content(out.body, "application/json");
        return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [job](size_t, httplib::DataSink &sink) {
            HttplibSink s(sink);
            if (!gen_write_stream(*job, s)) {
                gen_abort(*job);
                return false;
            }
            sink.done();
            return true;
        },
        [job](bool success) {
            if (!success) gen_abort(*job);
        });
}

void HttpServer::Impl::handle_tokenize(const httplib::Request &req, httplib::Response &res) {
    if (!check_ready(res)) return;
    TokenizeRequest tr;
    ApiError err;
    if (!api_parse_tokenize(req.body, opt.limits, &tr, &err)) return send_error(res, err);
    const Tokenizer &tok = *model.tok;
    const std::vector<int32_t> ids = tok.encode(tr.content, tr.add_special && tok.add_bos(), /*parse_special=*/true);
    json tokens = json::array();
    for (int32_t id : ids) {
        if (!tr.with_pieces) {
            tokens.push_back(id);
            continue;
        }
        // llama-server's shape: the piece as text when it is valid UTF-8, else its bytes.
        const std::string piece = tok.token_to_piece(id);
        size_t bad = 0;
        json p = utf8_is_valid(piece, &bad) ? json(piece) : json(std::vector<int>(piece.begin(), piece.end()));
        tokens.push_back({{"id", id}, {"piece", p}});
    }
    res.set_content(dump(json{{"tokens", tokens}}), "application/json");
}

void HttpServer::Impl::handle_detokenize(const httplib::Request &req, httplib::Response &res) {
    if (!check_ready(res)) return;
    std::vector<int64_t> raw;
    ApiError err;
    if (!api_parse_detokenize(req.body, opt.limits, &raw, &err)) return send_error(res, err);
    const Tokenizer &tok = *model.tok;
    std::vector<int32_t> ids;
    ids.reserve(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) {
        if (raw[i] < 0 || raw[i] >= tok.n_vocab())
            return send_error(res, api_error(400, "tokens", strfmt("token id %lld at position %zu is outside the vocabulary [0, %d)",
                                                                   static_cast<long long>(raw[i]), i, tok.n_vocab())));
        ids.push_back(static_cast<int32_t>(raw[i]));
    }
    res.set_content(dump(json{{"content", tok.decode(ids, /*skip_special=*/false)}}), "application/json");
}

void HttpServer::Impl::install_routes() {
    // The chat page (HEAD too: the library answers HEAD from GET routes).
    // no-cache + ETag: every load revalidates, so a new binary's page shows at once.
    svr.Get("/", [](const httplib::Request &req, httplib::Response &res) {
        res.set_header("Cache-Control", "no-cache");
        res.set_header("ETag", std::string(chat_page_html_etag));
        res.set_header("Content-Security-Policy", std::string(chat_page_csp));
        res.set_header("X-Content-Type-Options", "nosniff");
        if (req.get_header_value("If-None-Match") == chat_page_html_etag) res.status = 304;
        else res.set_content(chat_page_html.data(), chat_page_html.size(), "text/html; charset=utf-8");
    });
    svr.Post("/v1/completions", [this](const httplib::Request &req, httplib::Response &res) {
        handle_generate(req, res, ApiKind::completion);
    });
    svr.Post("/v1/chat/completions", [this](const httplib::Request &req, httplib::Response &res) {
        handle_generate(req, res, ApiKind::chat);
    });
    svr.Get("/v1/models", [this](const httplib::Request &, httplib::Response &res) {
        if (!check_ready(res)) return;
        json m = {{"id", model.model_id},
                  {"object", "model"},
                  {"created", model.created},
                  {"owned_by", "sieve"},
                  {"max_model_len", model.engine->options().max_ctx}};
        res.set_content(dump(json{{"object", "list"}, {"data", json::array({m})}}), "application/json");
    });
    svr.Get("/health", [this](const httplib::Request &, httplib::Response &res) {
        if (!check_ready(res)) return;
        res.set_content("{\"status\":\"ok\"}", "application/json");
    });
    svr.Get("/metrics", [this](const httplib::Request &, httplib::Response &res) {
        EngineStats st;
        const bool have = ready.load(std::memory_order_acquire);
        if (have) st = model.engine->stats();
        res.set_content(metrics.render(have ? &st : nullptr), "text/plain; version=0.0.4");
    });
    svr.Post("/tokenize", [this](const httplib::Request &req, httplib::Response &res) { handle_tokenize(req, res); });
    svr.Post("/detokenize", [this](const httplib::Request &req, httplib::Response &res) { handle_detokenize(req, res); });
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { stop(); }

Result<std::unique_ptr<HttpServer>> HttpServer::create(const ServerOptions &opt) {
    if (opt.n_http_threads < 1) return Status::errorf("HTTP threads: expected >= 1, got %d", opt.n_http_threads);
    if (opt.max_body_bytes < 1024)
        return Status::errorf("body limit: expected >= 1024 bytes, got %lld", static_cast<long long>(opt.max_body_bytes));
    auto impl = std::make_unique<Impl>(opt);
    impl->install_guards();
    impl->install_routes();
    if (opt.port == 0) {
        impl->bound_port = impl->svr.bind_to_any_port(opt.host);
        if (impl->bound_port < 0) return Status::errorf("cannot bind %s on any port", opt.host.c_str());
    } else {
        if (!impl->svr.bind_to_port(opt.host, opt.port))
            return Status::errorf("cannot bind %s:%d (in use, or not an address of this machine); pick another "
                                  "--port or --host",
                                  opt.host.c_str(), opt.port);
        impl->bound_port = opt.port;
    }
    // The library listens with a backlog of 5 (compiled into it). Clients
    // that open connections faster than the accept thread takes them (a
    // burst, a busy machine) overflow that queue; Linux then answers with
    // SYN cookies and resets a connection whose cookie fails, and a request
    // is lost without an answer. listen() again sets the system's maximum.
    if (impl->listen_fd >= 0 && ::listen(impl->listen_fd, SOMAXCONN) != 0)
        SIEVE_LOG_WARN("HTTP: raising the listen backlog failed: %s", std::strerror(errno));
    return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

int HttpServer::port() const { return impl_->bound_port; }

void HttpServer::start() {
    Impl *impl = impl_.get();
    impl->listener = std::thread([impl] {
        if (!impl->svr.listen_after_bind()) SIEVE_LOG_WARN("HTTP listener stopped with an error");
        impl->listener_done.store(true);
    });
}

void HttpServer::set_model(const ServingModel &m) {
    impl_->model = m;
    impl_->ready.store(true, std::memory_order_release);
}

void HttpServer::begin_shutdown() { impl_->stopping.store(true); }

int HttpServer::n_active() const { return impl_->n_active.load(); }

void HttpServer::stop() {
    if (!impl_) return;
    impl_->stopping.store(true);
    // The library's stop() does nothing until its listen loop has marked
    // itself running, and that loop then accepts forever: a server stopped
    // right after start() (the model failed to load, the KV pool was
    // refused) would hang in the join below. So stop once the loop runs, or
    // see it return on its own. stop() may be called only once per run (it
    // asserts the socket is still open). Never started, or already joined:
    // there is no loop to stop.
    if (impl_->listener.joinable()) {
        bool stopped = false;
        while (!impl_->listener_done.load()) {
            if (!stopped && impl_->svr.is_running()) {
                impl_->svr.stop();
                stopped = true;
            } else {
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
        }
        impl_->listener.join();
    }
    impl_->svr.close_connections();
}

}  // namespace sieve
