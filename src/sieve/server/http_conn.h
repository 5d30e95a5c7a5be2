// The connections of `sieve serve`: who holds a socket while nothing is
// being computed for it.
//
// cpp-httplib 0.11.4 gives every accepted connection a pool thread from
// accept to close, and that thread blocks while the client is idle between
// requests and during every read of a request. With a fixed pool of N threads,
// N idle keep-alive connections, or N clients that send their headers a byte
// at a time (slowloris), leave no thread for anyone else; an unbounded pool
// would instead give them a thread each. So sieve keeps the library's HTTP
// parsing, routing and response writing (Server::process_request, the hook
// its own TLS server uses) but owns the sockets:
//
//   accept (library listener)
//     │
//     ▼
//   poller thread ── holds every connection without a complete request head:
//     │              new and idle keep-alive ones, and heads still arriving.
//     │              poll() over all of them; what arrives is buffered.
//     │                idle longer than the keep-alive timeout   -> closed
//     │                head not complete within the read timeout -> 408, closed
//     │                head larger than k_max_head_bytes         -> 431, closed
//     ▼ complete head ("\r\n\r\n")
//   worker pool (n_workers threads) ── parses the buffered head, reads the
//     │              body (one deadline for all of it: the read timeout),
//     │              runs the handler, writes the response
//     ▼
//   keep-alive: back to the poller (with any pipelined bytes); else closed.
//
// A worker is therefore busy only while a request is read from a client
// that is sending it, handled, or answered; idle connections cost a file
// descriptor and a poll entry. The number of open connections is capped
// (k_max_connections; past it the longest-idle one is closed) so descriptor
// numbers stay below FD_SETSIZE, which the library still checks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT
#endif
#ifndef CPPHTTPLIB_ZLIB_SUPPORT
#define CPPHTTPLIB_ZLIB_SUPPORT
#endif
#ifndef CPPHTTPLIB_BROTLI_SUPPORT
#define CPPHTTPLIB_BROTLI_SUPPORT
#endif
// Debian builds libcpp-httplib with the three definitions above (see
// `pkg-config --cflags cpp-httplib`); the header must see the same ones.
#include <httplib.h>

namespace sieve {

struct ConnOptions {
    int n_workers = 64;          // requests read, handled and answered at once
    int read_timeout_s = 30;     // a request head from its first byte; then its body
    int write_timeout_s = 30;    // per write of the response
    int idle_timeout_s = 5;      // a connection with no request under way
    int keep_alive_max = 100;    // requests per connection
    // Called (on the poller thread) with 408 or 431 for each request the
    // poller refuses before it reaches a worker.
    std::function<void(int http_status)> on_refused;
};

// httplib::Server with the connection handling above. Routes, handlers and
// limits are set on it as on the library's server.
class ConnServer : public httplib::Server {
public:
    explicit ConnServer(const ConnOptions &opt);
    ~ConnServer() override;
    ConnServer(const ConnServer &) = delete;
    ConnServer &operator=(const ConnServer &) = delete;

    // From the handler of `req` (or its content provider): false once the
    // client closed or reset the connection. Data the client sent ahead
    // (pipelining) counts as alive.
    bool client_alive(const httplib::Request &req) const;
    // True when the connection will be closed after `req`'s answer because
    // not all of the request was read: its body ended early or came too
    // slowly (the library answers 400 or 413), a refusal left it unread (401
    // before routing), or the head itself was refused. Its remaining bytes
    // cannot be told from a next request.
    bool closes_after(const httplib::Request &req) const;
    // True when reading `req`'s body ran past the read timeout (the library
    // answers 400; the server turns it into 408).
    bool read_timed_out(const httplib::Request &req) const;

    // After Server::stop() has ended the listener: closes the connections
    // that wait, ends reads in progress (the handlers of requests already
    // read run to the end), and joins the threads. Idempotent.
    void close_connections();

private:
    bool process_and_close_socket(socket_t sock) override;

    struct State;
    std::unique_ptr<State> st_;
};

}  // namespace sieve
