// How much memory this machine can give the KV pool: the kernel's own
// estimate of what can be allocated without swapping (MemAvailable in
// /proc/meminfo, no more than the container's cgroup limit where there is
// one) and the free reserved huge pages (which MemAvailable does not
// count). The pool backs its pages lazily, so a budget above this is a
// promise the kernel cannot keep: the OOM killer would end the process once
// the pool fills. Pools refuse such a budget; sizes computed by default are
// capped below it instead (cap_kv_default).
#pragma once

#include <cstdint>
#include <string>

namespace sieve {

struct MemInfo {
    int64_t available = -1;  // MemAvailable in bytes; -1 when unknown (no /proc/meminfo)
    int64_t huge_free = 0;   // HugePages_Free x Hugepagesize, in bytes
};
MemInfo read_meminfo();
// Parses the text of /proc/meminfo (for tests).
MemInfo parse_meminfo(const std::string &text);

// Share of the available memory a default KV pool may take: the rest is for
// the activations, the prefix cache's bookkeeping, swap images and the OS.
constexpr double k_kv_default_share = 0.75;

// bytes, or k_kv_default_share of the available memory when bytes is more,
// with a log line naming `what` sized it; bytes when the memory is unknown.
int64_t cap_kv_default(int64_t bytes, const char *what);

// "1.50 GiB" / "640.0 MiB".
std::string format_bytes(int64_t bytes);

}  // namespace sieve
