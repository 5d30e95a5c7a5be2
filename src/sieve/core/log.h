// Logging to stderr. stdout is reserved for generated text and machine-readable
// output, so every diagnostic goes through here.
#pragma once

namespace sieve {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

void log_set_level(LogLevel level);
LogLevel log_level();
void log_msg(LogLevel level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace sieve

#define SIEVE_LOG_ERROR(...) ::sieve::log_msg(::sieve::LogLevel::error, __VA_ARGS__)
#define SIEVE_LOG_WARN(...) ::sieve::log_msg(::sieve::LogLevel::warn, __VA_ARGS__)
#define SIEVE_LOG_INFO(...) ::sieve::log_msg(::sieve::LogLevel::info, __VA_ARGS__)
#define SIEVE_LOG_DEBUG(...) ::sieve::log_msg(::sieve::LogLevel::debug, __VA_ARGS__)
