// Status and errors: the three tiers of STYLE.md rule 8.
//   1. untrusted input (GGUF bytes, JSON, tokenizer data) -> return a Status
//      whose message names the object, expected vs actual, and a fix;
//   2. a failing request -> an error for that request only (server layer);
//   3. a broken invariant -> SIEVE_CHECK, always on, prints file:line and aborts.
#pragma once

#include <cstdarg>
#include <string>
#include <utility>

namespace sieve {

// printf-style formatting into a std::string.
std::string strfmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string vstrfmt(const char *fmt, va_list ap);

class [[nodiscard]] Status {
public:
    Status() = default;
    static Status error(std::string msg) { return Status(std::move(msg)); }
    static Status errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

    bool ok() const { return !failed_; }
    const std::string &message() const { return msg_; }

    // Prefix context as the error travels up: "loading 'x.gguf': " + msg.
    Status with_context(const std::string &ctx) const {
        return ok() ? *this : Status(ctx + ": " + msg_);
    }

private:
    explicit Status(std::string msg) : failed_(true), msg_(std::move(msg)) {}
    bool failed_ = false;
    std::string msg_;
};

// Result<T>: a value or the Status that explains why there is none.
template <class T>
class [[nodiscard]] Result {
public:
    Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
    Result(Status st) : status_(std::move(st)) {}  // NOLINT: implicit by design

    bool ok() const { return status_.ok(); }
    const Status &status() const { return status_; }
    T &value() { return value_; }
    const T &value() const { return value_; }
    T &operator*() { return value_; }
    T *operator->() { return &value_; }

private:
    T value_{};
    Status status_;
};

[[noreturn]] void check_failed(const char *file, int line, const char *cond, const std::string &detail);

}  // namespace sieve

// Always-on invariant check (tier 3). Use for programmer errors only, never
// for anything a user or a file can cause.
#define SIEVE_CHECK(cond)                                                        \
    do {                                                                         \
        if (__builtin_expect(!(cond), 0)) ::sieve::check_failed(__FILE__, __LINE__, #cond, ""); \
    } while (0)
#define SIEVE_CHECKF(cond, ...)                                                  \
    do {                                                                         \
        if (__builtin_expect(!(cond), 0))                                        \
            ::sieve::check_failed(__FILE__, __LINE__, #cond, ::sieve::strfmt(__VA_ARGS__)); \
    } while (0)

// Propagate a failed Status from an expression.
#define SIEVE_TRY(expr)                              \
    do {                                             \
        ::sieve::Status sieve_try_st_ = (expr);      \
        if (!sieve_try_st_.ok()) return sieve_try_st_; \
    } while (0)
