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

MemInfo read_meminfo() {
    std::ifstream f("/proc/meminfo");
    if (!f) return MemInfo{};
    std::ostringstream s;
    s << f.rdbuf();
    return parse_meminfo(s.str());
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
