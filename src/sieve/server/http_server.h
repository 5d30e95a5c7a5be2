// The OpenAI-compatible HTTP front end of `sieve serve`.
//
// HTTP library: cpp-httplib from Debian (libcpp-httplib-dev 0.11.4). Chosen
// over Boost.Beast (a large header-only dependency that is slow to compile on
// small machines) and libmicrohttpd (a C callback API with manual memory
// management) because its thread-per-connection model fits a server whose
// handlers block on the engine, and its chunked content provider gives SSE
// with a write-failed signal for free. Debian's 0.11.4 carries known
// denial-of-service issues, so every limit is set here explicitly rather than
// trusted to defaults: body size (413), header count (431), request line and
// header line length (8 KiB, compiled into the library), read / write / idle
// timeouts, keep-alive request count, and a fixed worker pool that idle and
// slow clients cannot occupy (http_conn.h).
//
// Lifecycle: create() binds the port, start() begins answering (/health says
// 503 "loading" until set_model()), begin_shutdown() turns new generation
// requests away with 503, stop() closes the listener and joins the workers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "sieve/core/status.h"
#include "sieve/server/api_request.h"
#include "sieve/server/generate.h"

namespace sieve {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;                      // 0 = any free port (see HttpServer::port())
    std::string api_key;                  // non-empty: /v1/* and /tokenize need "Authorization: Bearer KEY"
    int64_t max_body_bytes = 8 << 20;     // larger bodies get 413
    int max_headers = 64;                 // more header lines get 431
    int n_http_threads = 64;              // requests read, handled and answered at once (http_conn.h)
    int read_timeout_s = 30;              // a request head from its first byte (408); then its body (408)
    int write_timeout_s = 30;             // per write of the response
    int keep_alive_timeout_s = 5;         // idle time before the first and between requests on one connection
    int keep_alive_max = 100;             // requests per connection
    ApiLimits limits;
};

class HttpServer {
public:
    // Binds the socket (so a bad --host / busy --port fails before the model loads).
    static Result<std::unique_ptr<HttpServer>> create(const ServerOptions &opt);
    ~HttpServer();
    HttpServer(const HttpServer &) = delete;
    HttpServer &operator=(const HttpServer &) = delete;

    int port() const;
    // Answers on a background thread from now on.
    void start();
    // Everything the generation endpoints need; the pointees outlive stop().
    void set_model(const ServingModel &m);
    // New completions get 503; requests in flight continue.
    void begin_shutdown();
    // Generation requests (HTTP requests plus engine work they own) still alive.
    int n_active() const;
    // Stops listening and joins the worker threads.
    void stop();

private:
    struct Impl;
    explicit HttpServer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace sieve
