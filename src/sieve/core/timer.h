#pragma once

#include <chrono>
#include <cstdint>

namespace sieve {

inline int64_t time_us() {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

}  // namespace sieve
