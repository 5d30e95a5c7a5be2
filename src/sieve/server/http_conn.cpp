#include "sieve/server/http_conn.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sieve/core/log.h"
#include "sieve/core/status.h"
#include "sieve/server/api_request.h"

namespace sieve {

namespace {

using Clock = std::chrono::steady_clock;

// A request head (request line + header lines) larger than this is refused
// with 431 by the poller. nginx's default allows 4 x 8 KiB; the library
// limits one line to 8 KiB and the server the count to 64.
constexpr size_t k_max_head_bytes = 64 * 1024;
// Open connections at most (waiting, queued and being served). Past it the
// connection idle the longest is closed to make room. Below FD_SETSIZE
// (1024) with room for the process's other descriptors: the library answers
// 500 to a request on a descriptor >= FD_SETSIZE.
constexpr size_t k_max_connections = 900;
constexpr size_t k_recv_bytes = 16 * 1024;

int ms_until(Clock::time_point t, Clock::time_point now) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - now).count();
    return static_cast<int>(std::clamp<int64_t>(ms, 0, 60 * 60 * 1000));
}

// True while the peer has not closed or reset the connection. A readable
// socket is peeked: data (a pipelined request) means alive, end of stream
// or an error means gone.
bool peer_alive(int fd) {
    pollfd p{fd, POLLIN, 0};
    const int r = poll(&p, 1, 0);
    if (r == 0) return true;
    if (r < 0) return errno == EINTR;
    if (p.revents & (POLLERR | POLLNVAL)) return false;
    char c = 0;
    const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return true;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
}

// Waits up to timeout_ms for `events` on fd; false on timeout or error.
bool wait_fd(int fd, short events, int timeout_ms) {
    pollfd p{fd, events, 0};
    for (;;) {
        const int r = poll(&p, 1, timeout_ms);
        if (r > 0) return true;
        if (r == 0 || errno != EINTR) return false;
    }
}

void endpoint(int fd, bool peer, std::string &ip, int &port) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int r = peer ? getpeername(fd, reinterpret_cast<sockaddr *>(&addr), &len)
                       : getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len);
    char host[NI_MAXHOST] = "";
    char serv[NI_MAXSERV] = "";
    if (r != 0 || getnameinfo(reinterpret_cast<sockaddr *>(&addr), len, host, sizeof(host), serv, sizeof(serv),
                              NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        ip.clear();
        port = -1;
        return;
    }
    ip = host;
    port = std::atoi(serv);
}

void close_fd(int fd) {
    shutdown(fd, SHUT_RDWR);
    close(fd);
}

}  // namespace

// One accepted connection. Owned by exactly one of: the poller's list, the
// ready queue, a worker.
struct Conn {
    int fd = -1;
    std::string buf;                 // received, not yet parsed
    size_t scanned = 0;              // buf[0, scanned) holds no "\r\n\r\n"
    Clock::time_point idle_since;    // parked at (buf empty)
    Clock::time_point first_byte;    // of the head being received (buf not empty)
    int n_served = 0;

    bool head_complete() {
        const size_t from = scanned >= 3 ? scanned - 3 : 0;
        if (buf.find("\r\n\r\n", from) != std::string::npos) return true;
        scanned = buf.size();
        return false;
    }
};
using ConnPtr = std::unique_ptr<Conn>;

namespace {

// httplib's view of a connection while a worker serves one request: the
// buffered head first, then the socket, every wait bounded by one deadline
// (reads) or the write timeout (writes).
class ConnStream final : public httplib::Stream {
public:
    ConnStream(Conn &c, Clock::time_point read_deadline, int write_timeout_ms)
        : c_(c), deadline_(read_deadline), write_timeout_ms_(write_timeout_ms) {}

    bool is_readable() const override { return off_ < c_.buf.size() || wait_readable(); }
    bool is_writable() const override { return wait_fd(c_.fd, POLLOUT, write_timeout_ms_) && peer_alive(c_.fd); }

    ssize_t read(char *ptr, size_t size) override {
        if (off_ == c_.buf.size()) {
            c_.buf.clear();
            off_ = 0;
            c_.buf.resize(k_recv_bytes);
            ssize_t n = -1;
            for (;;) {
                n = recv(c_.fd, c_.buf.data(), c_.buf.size(), MSG_DONTWAIT);
                if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
                if (!wait_readable()) break;
            }
            c_.buf.resize(n > 0 ? static_cast<size_t>(n) : 0);
            if (n <= 0) {
                failed_ = true;  // end of stream, error or timeout: nothing more can be read
                return n == 0 ? 0 : -1;
            }
        }
        const size_t k = std::min(size, c_.buf.size() - off_);
        std::memcpy(ptr, c_.buf.data() + off_, k);
        off_ += k;
        consumed_ += k;
        return static_cast<ssize_t>(k);
    }

    ssize_t write(const char *ptr, size_t size) override {
        if (!wait_fd(c_.fd, POLLOUT, write_timeout_ms_)) {
            failed_ = true;
            return -1;
        }
        const ssize_t n = send(c_.fd, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) failed_ = true;
        return n < 0 && !failed_ ? 0 : n;
    }

    void get_remote_ip_and_port(std::string &ip, int &port) const override { endpoint(c_.fd, true, ip, port); }
    void get_local_ip_and_port(std::string &ip, int &port) const override { endpoint(c_.fd, false, ip, port); }
    socket_t socket() const override { return c_.fd; }

    // Bytes received past this request (a pipelined next one) stay in c_.buf.
    void keep_unread() { c_.buf.erase(0, off_), off_ = 0, c_.scanned = 0; }
    bool failed() const { return failed_; }
    bool timed_out() const { return timed_out_; }
    // Bytes the parser took, exactly: it reads lines a byte at a time and a
    // body by its length or its chunk sizes.
    size_t consumed() const { return consumed_; }

private:
    // Until data arrives or the deadline passes (then timed_out()).
    bool wait_readable() const {
        for (;;) {
            const Clock::time_point now = Clock::now();
            if (now >= deadline_) {
                timed_out_ = true;
                return false;
            }
            pollfd p{c_.fd, POLLIN, 0};
            const int r = poll(&p, 1, ms_until(deadline_, now) + 1);  // +1: never wake just before it
            if (r > 0) return true;
            if (r < 0 && errno != EINTR) return false;
        }
    }

    Conn &c_;
    size_t off_ = 0;
    size_t consumed_ = 0;
    Clock::time_point deadline_;
    int write_timeout_ms_;
    bool failed_ = false;
    mutable bool timed_out_ = false;
};

// The library's accept loop hands each socket to a task queue; running the
// task at once on the listener thread turns it into a hand-off to the poller
// (process_and_close_socket below), which never blocks.
class InlineQueue final : public httplib::TaskQueue {
public:
    void enqueue(std::function<void()> fn) override { fn(); }
    void shutdown() override {}
};

// A request being served, as the handlers' queries see it.
struct Serving {
    ConnStream *strm = nullptr;
    size_t head_bytes = 0;   // request line + headers + the blank line
    uint64_t body_bytes = 0; // Content-Length
    bool chunked = false;    // Transfer-Encoding: chunked

    // The library reads a body only when the request is routed to a handler
    // that takes one; a refusal before (401, 431) or a GET leaves it unread.
    bool body_unread() const {
        return chunked ? strm->consumed() <= head_bytes : strm->consumed() < head_bytes + body_bytes;
    }
    bool closes_after() const { return strm->failed() || body_unread(); }
};

}  // namespace

struct ConnServer::State {
    ConnOptions opt;
    ConnServer *svr = nullptr;
    int wake_fd = -1;  // eventfd: new connections or stop, for the poller

    std::mutex mu;
    std::condition_variable ready_cv;
    bool stopping = false;                       // guarded by mu
    std::vector<ConnPtr> incoming;               // accepted or parked again, for the poller; guarded by mu
    std::deque<ConnPtr> ready;                   // complete heads waiting for a worker; guarded by mu
    std::map<const httplib::Request *, Serving> serving;       // guarded by mu
    std::vector<int> serving_fds;                // guarded by mu
    size_t n_open = 0;                           // guarded by mu

    std::vector<ConnPtr> parked;  // poller thread only
    std::thread poller;
    std::vector<std::thread> workers;

    void wake() {
        const uint64_t one = 1;
        ssize_t r = ::write(wake_fd, &one, sizeof(one));
        (void)r;  // a full counter already means "wake up"
    }

    // To the poller (new, or between requests), or straight to a worker when
    // the buffer already holds the next head.
    void park(ConnPtr c) {
        c->idle_since = Clock::now();
        if (!c->buf.empty()) c->first_byte = c->idle_since;
        std::lock_guard<std::mutex> lock(mu);
        if (stopping) return drop_locked(std::move(c));
        if (!c->buf.empty() && c->head_complete()) {
            ready.push_back(std::move(c));
            ready_cv.notify_one();
            return;
        }
        incoming.push_back(std::move(c));
        wake();
    }

    void drop_locked(ConnPtr c) {
        close_fd(c->fd);
        --n_open;
    }
    void drop(ConnPtr c) {
        std::lock_guard<std::mutex> lock(mu);
        drop_locked(std::move(c));
    }

    // A refusal the poller writes itself: best effort, the socket is closed after.
    void refuse(ConnPtr c, int status, const std::string &message) {
        const std::string body = api_error_json(api_error(status, "", message));
        const char *reason = status == 408 ? "Request Timeout" : "Request Header Fields Too Large";
        const std::string out = strfmt("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                                       "Connection: close\r\n\r\n",
                                       status, reason, body.size()) +
                                body;
        ssize_t r = send(c->fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)r;
        if (opt.on_refused) opt.on_refused(status);
        drop(std::move(c));
    }

    void poll_loop();
    void worker_loop();
    void serve(ConnPtr c);
};

ConnServer::ConnServer(const ConnOptions &opt) : st_(std::make_unique<State>()) {
    st_->opt = opt;
    st_->svr = this;
    st_->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    SIEVE_CHECKF(st_->wake_fd >= 0, "eventfd: %s", std::strerror(errno));
    new_task_queue = [] { return new InlineQueue(); };
    State *st = st_.get();
    st_->poller = std::thread([st] { st->poll_loop(); });
    for (int i = 0; i < std::max(1, opt.n_workers); ++i) st_->workers.emplace_back([st] { st->worker_loop(); });
}

ConnServer::~ConnServer() {
    stop();
    close_connections();
    close(st_->wake_fd);
}

bool ConnServer::process_and_close_socket(socket_t sock) {
    auto c = std::make_unique<Conn>();
    c->fd = sock;
    {
        std::lock_guard<std::mutex> lock(st_->mu);
        ++st_->n_open;
    }
    st_->park(std::move(c));
    return true;
}

bool ConnServer::client_alive(const httplib::Request &req) const {
    std::lock_guard<std::mutex> lock(st_->mu);
    auto it = st_->serving.find(&req);
    return it != st_->serving.end() && peer_alive(it->second.strm->socket());
}

bool ConnServer::closes_after(const httplib::Request &req) const {
    std::lock_guard<std::mutex> lock(st_->mu);
    auto it = st_->serving.find(&req);
    // Not there: the library refused the head before handing it over.
    return it == st_->serving.end() || it->second.closes_after();
}

bool ConnServer::read_timed_out(const httplib::Request &req) const {
    std::lock_guard<std::mutex> lock(st_->mu);
    auto it = st_->serving.find(&req);
    return it != st_->serving.end() && it->second.strm->timed_out();
}

void ConnServer::close_connections() {
    State &st = *st_;
    {
        std::lock_guard<std::mutex> lock(st.mu);
        if (st.stopping && st.workers.empty()) return;
        st.stopping = true;
        // Reads under way end at once (end of stream); writes still go out,
        // so a handler finishing a response is not cut short.
        for (int fd : st.serving_fds) shutdown(fd, SHUT_RD);
        while (!st.ready.empty()) {
            st.drop_locked(std::move(st.ready.front()));
            st.ready.pop_front();
        }
        st.ready_cv.notify_all();
        st.wake();
    }
    if (st.poller.joinable()) st.poller.join();
    for (std::thread &t : st.workers) t.join();
    st.workers.clear();
}

void ConnServer::State::poll_loop() {
    std::vector<pollfd> fds;
    for (;;) {
        {
            std::lock_guard<std::mutex> lock(mu);
            if (stopping) break;
            for (ConnPtr &c : incoming) parked.push_back(std::move(c));
            incoming.clear();
            // Over the cap: close the connections idle the longest (never one
            // that is sending a head).
            while (n_open > k_max_connections) {
                auto oldest = parked.end();
                for (auto it = parked.begin(); it != parked.end(); ++it)
                    if ((*it)->buf.empty() && (oldest == parked.end() || (*it)->idle_since < (*oldest)->idle_since))
                        oldest = it;
                if (oldest == parked.end()) break;
                drop_locked(std::move(*oldest));
                parked.erase(oldest);
            }
        }
        // Deadlines: the idle timeout for a connection with nothing received,
        // the read timeout from the first byte of a head.
        const Clock::time_point now = Clock::now();
        int timeout_ms = 1000;
        fds.assign(1, pollfd{wake_fd, POLLIN, 0});
        for (const ConnPtr &c : parked) {
            const Clock::time_point due = c->buf.empty() ? c->idle_since + std::chrono::seconds(opt.idle_timeout_s)
                                                         : c->first_byte + std::chrono::seconds(opt.read_timeout_s);
            timeout_ms = std::min(timeout_ms, ms_until(due, now) + 1);
            fds.push_back(pollfd{c->fd, POLLIN, 0});
        }
        const int r = poll(fds.data(), fds.size(), timeout_ms);
        if (r < 0 && errno != EINTR) {
            SIEVE_LOG_ERROR("HTTP: poll over %zu connections failed: %s", parked.size(), std::strerror(errno));
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            continue;
        }
        if (fds[0].revents & POLLIN) {
            uint64_t n = 0;
            ssize_t rd = ::read(wake_fd, &n, sizeof(n));
            (void)rd;
        }
        const Clock::time_point t = Clock::now();
        std::vector<ConnPtr> keep;
        keep.reserve(parked.size());
        for (size_t i = 0; i < parked.size(); ++i) {
            ConnPtr &c = parked[i];
            if (fds[i + 1].revents != 0) {
                const size_t old = c->buf.size();
                c->buf.resize(old + k_recv_bytes);
                const ssize_t n = recv(c->fd, c->buf.data() + old, k_recv_bytes, MSG_DONTWAIT);
                c->buf.resize(old + (n > 0 ? static_cast<size_t>(n) : 0));
                if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                    drop(std::move(c));  // closed or reset by the client
                    continue;
                }
                if (old == 0 && n > 0) c->first_byte = t;
                if (c->head_complete()) {
                    std::lock_guard<std::mutex> lock(mu);
                    ready.push_back(std::move(c));
                    ready_cv.notify_one();
                    continue;
                }
                if (c->buf.size() > k_max_head_bytes) {
                    refuse(std::move(c), 431,
                           strfmt("request head over %zu bytes; send fewer or shorter headers", k_max_head_bytes));
                    continue;
                }
            }
            if (c->buf.empty()) {
                if (t >= c->idle_since + std::chrono::seconds(opt.idle_timeout_s)) {
                    drop(std::move(c));
                    continue;
                }
            } else if (t >= c->first_byte + std::chrono::seconds(opt.read_timeout_s)) {
                refuse(std::move(c), 408,
                       strfmt("the request head was not received within %d s (--timeout)", opt.read_timeout_s));
                continue;
            }
            keep.push_back(std::move(c));
        }
        parked.swap(keep);
    }
    std::lock_guard<std::mutex> lock(mu);
    for (ConnPtr &c : parked) drop_locked(std::move(c));
    for (ConnPtr &c : incoming) drop_locked(std::move(c));
    parked.clear();
    incoming.clear();
}

void ConnServer::State::worker_loop() {
    for (;;) {
        ConnPtr c;
        {
            std::unique_lock<std::mutex> lock(mu);
            ready_cv.wait(lock, [&] { return stopping || !ready.empty(); });
            if (ready.empty()) return;  // stopping
            c = std::move(ready.front());
            ready.pop_front();
        }
        serve(std::move(c));
    }
}

// One request on a worker: the library parses the buffered head, reads the
// body (deadline: the read timeout from now), routes and answers.
void ConnServer::State::serve(ConnPtr c) {
    Serving s;
    s.head_bytes = c->buf.find("\r\n\r\n") + 4;  // complete: that is why it is here
    ConnStream strm(*c, Clock::now() + std::chrono::seconds(opt.read_timeout_s), opt.write_timeout_s * 1000);
    s.strm = &strm;
    const bool last = c->n_served + 1 >= opt.keep_alive_max;
    bool closed_by_client = false;
    const httplib::Request *current = nullptr;
    {
        std::lock_guard<std::mutex> lock(mu);
        serving_fds.push_back(c->fd);
    }
    // Called once the head is parsed, before the body is read and routed.
    const bool ok = svr->process_request(strm, last, closed_by_client, [&](httplib::Request &req) {
        if (req.has_header("Content-Length"))
            s.body_bytes = std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10);
        s.chunked = strcasecmp(req.get_header_value("Transfer-Encoding").c_str(), "chunked") == 0;
        std::lock_guard<std::mutex> lock(mu);
        current = &req;
        serving[current] = s;
    });
    {
        std::lock_guard<std::mutex> lock(mu);
        if (current) serving.erase(current);
        serving_fds.erase(std::find(serving_fds.begin(), serving_fds.end(), c->fd));
    }
    ++c->n_served;
    // A request not read in full (refused head, body cut short, too slow,
    // over the limit, or left unread by a refusal) or a failed write leaves
    // the stream out of step: close rather than parse the rest of it as the
    // next request (the answer said "Connection: close", see closes_after).
    if (!ok || closed_by_client || last || !current || s.closes_after()) return drop(std::move(c));
    strm.keep_unread();
    park(std::move(c));
}

}  // namespace sieve
