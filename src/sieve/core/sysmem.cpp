#include "sieve/core/sysmem.h"

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "sieve/core/log.h"

namespace sieve {

MemInfo parse_meminfo(const std::string &text) {
    MemInfo m;
    int64_t huge_pages = 0, huge_kib = 0;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        long long v = 0;
        if (std::sscanf(line.c_str(), "MemAvailable: %lld kB", &v) == 1)
            m.available = static_cast<int64_t>(v) * 1024;
        else if (std::sscanf(line.c_str(), "HugePages_Free: %lld", &v) == 1)
            huge_pages = v;
        else if (std::sscanf(line.c_str(), "Hugepagesize: %lld kB", &v) == 1)
            huge_kib = v;
    }
    m.huge_free = huge_pages * huge_kib * 1024;
    return m;
}

namespace {

std::string read_text(const char *path) {
    std::ifstream f(path);
    if (!f) return {};
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

// The memory limit of this process's container (cgroup v2 memory.max, or
// v1 memory.limit_in_bytes, as mounted at /sys/fs/cgroup); -1 when there
// is none ("max", or v1's "no limit" of nearly 2^63).
int64_t cgroup_limit() {
    for (const char *path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
        const std::string t = read_text(path);
        long long v = 0;
        if (!t.empty() && std::sscanf(t.c_str(), "%lld", &v) == 1 && v > 0 && v < (int64_t{1} << 60))
            return v;
    }
    return -1;
}

}  // namespace

MemInfo read_meminfo() {
    const std::string text = read_text("/proc/meminfo");
    if (text.empty()) return MemInfo{};
    MemInfo m = parse_meminfo(text);
    // /proc/meminfo is the host's inside a container: a pool larger than the
    // container's limit cannot be held either.
    if (const int64_t lim = cgroup_limit(); lim > 0 && m.available > lim) m.available = lim;
    return m;
}

std::string format_bytes(int64_t bytes) {
    char buf[64];
    const double b = static_cast<double>(bytes);
    if (bytes >= (int64_t{1} << 30))
        std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1 << 30));
    else
        std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1 << 20));
    return buf;
}

int64_t cap_kv_default(int64_t bytes, const char *what) {
    const MemInfo m = read_meminfo();
    if (m.available < 0) return bytes;
    const int64_t cap = static_cast<int64_t>(k_kv_default_share * static_cast<double>(m.available));
    if (bytes <= cap) return bytes;
    SIEVE_LOG_WARN(
        "KV memory: %s would take %s, more than this machine has available (%s); using %s "
        "(requests wait or are preempted when it is full; --kv-memory sets it)",
        what, format_bytes(bytes).c_str(), format_bytes(m.available).c_str(), format_bytes(cap).c_str());
    return cap;
}

}  // namespace sieve
