#include "sieve/core/status.h"

#include <cstdio>
#include <cstdlib>

namespace sieve {

std::string vstrfmt(const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = std::vsnprintf(nullptr, 0, fmt, ap2);
    va_end(ap2);
    if (n <= 0) return std::string();
    std::string out(static_cast<size_t>(n), '\0');
    std::vsnprintf(out.data(), out.size() + 1, fmt, ap);
    return out;
}

std::string strfmt(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vstrfmt(fmt, ap);
    va_end(ap);
    return s;
}

Status Status::errorf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vstrfmt(fmt, ap);
    va_end(ap);
    return Status(std::move(s));
}

void check_failed(const char *file, int line, const char *cond, const std::string &detail) {
    std::fprintf(stderr, "sieve: internal check failed at %s:%d: %s%s%s\n", file, line, cond,
                 detail.empty() ? "" : " — ", detail.c_str());
    std::fflush(stderr);
    std::abort();
}

}  // namespace sieve
