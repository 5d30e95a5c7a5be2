// Intel AMX tiles: the tile configuration, whether this process may use the
// tiles, and the SIEVE_AMX switch, for the kernels that use them (the
// prefill attention on AMX-BF16). Private to kernels/cpu.
#pragma once

#include <cstdint>

namespace sieve::cpu::amx {

// The 64-byte operand of ldtilecfg (palette 1): tile i has rows[i] rows of
// colsb[i] bytes.
struct alignas(64) TileConfig {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
    void set(int tile, int n_rows, int n_colsb) {
        rows[tile] = static_cast<uint8_t>(n_rows);
        colsb[tile] = static_cast<uint16_t>(n_colsb);
    }
};

#if defined(__AMX_TILE__)
// Loads `c` into this thread's tile registers. GCC 12's _tile_loadconfig
// tells the compiler it reads 8 bytes of the config, which lets the stores
// that fill it sink past it; the operand here is the whole config.
inline void load_config(const TileConfig &c) { __asm__ volatile("ldtilecfg %0" : : "m"(c)); }
inline void release() { __asm__ volatile("tilerelease"); }
#endif

// CPUID.(EAX=7,ECX=0):EDX bits of the tile instruction sets.
enum Feature : unsigned { k_bf16 = 1u << 22, k_tile = 1u << 24 };
// Whether the CPU has AMX-TILE and every bit of `features`, and Linux grants
// this process the tile state (arch_prctl(ARCH_REQ_XCOMP_PERM), asked once).
bool cpu_has(unsigned features);

// SIEVE_AMX in the environment: unset or "1" lets the kernels use the tiles,
// "0" turns them off. Anything else is read as unset after one warning on
// stderr.
bool env_allows();

}  // namespace sieve::cpu::amx
