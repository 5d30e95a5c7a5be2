#include "sieve/core/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace sieve {

namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::info)};  // process-wide verbosity, set once by the CLI
const char *const k_prefix[] = {"error: ", "warning: ", "", "debug: "};
}  // namespace

void log_set_level(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

void log_msg(LogLevel level, const char *fmt, ...) {
    if (static_cast<int>(level) > g_level.load(std::memory_order_relaxed)) return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    std::fprintf(stderr, "%s%s\n", k_prefix[static_cast<int>(level)], buf);
}

}  // namespace sieve
