#include "sieve/kernels/cpu/amx.h"

#include <cstdio>
#include <cstdlib>
#include <string_view>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace sieve::cpu::amx {

bool cpu_has(unsigned features) {
#if defined(__x86_64__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const unsigned want = features | k_tile;
    if ((edx & want) != want) return false;
    // Linux hands the tile state (8 KiB of XSAVE area per thread) only to a
    // process that asks; asking again is harmless, the answer is kept.
    static const bool granted = [] {
        constexpr long k_req_xcomp_perm = 0x1023, k_xfeature_xtiledata = 18;
        return syscall(SYS_arch_prctl, k_req_xcomp_perm, k_xfeature_xtiledata) == 0;
    }();
    return granted;
#else
    (void)features;
    return false;
#endif
}

bool env_allows() {
    static const bool allowed = [] {
        const char *env = std::getenv("SIEVE_AMX");
        const std::string_view v = env ? env : "";
        if (!v.empty() && v != "0" && v != "1")
            std::fprintf(stderr, "sieve: SIEVE_AMX=%s not understood (expected 0 or 1); AMX stays on\n", env);
        return v != "0";
    }();
    return allowed;
}

}  // namespace sieve::cpu::amx
