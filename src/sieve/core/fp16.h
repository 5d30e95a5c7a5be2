// IEEE half and bfloat16 conversions. Scalar code that is exact for every
// input (including subnormals, inf and NaN); SIMD kernels use F16C/AVX-512
// instructions directly.
#pragma once

#include <cstdint>
#include <cstring>

namespace sieve {

inline float fp32_from_bits(uint32_t w) {
    float f;
    std::memcpy(&f, &w, 4);
    return f;
}
inline uint32_t fp32_to_bits(float f) {
    uint32_t w;
    std::memcpy(&w, &f, 4);
    return w;
}

inline float fp16_to_fp32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        if (mant == 0) return fp32_from_bits(sign);
        // subnormal: value = mant * 2^-24
        float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exp == 31) return fp32_from_bits(sign | 0x7f800000u | (mant << 13));
    return fp32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

// Round to nearest even, like _cvtss_sh(x, 0).
inline uint16_t fp32_to_fp16(float f) {
    uint32_t x = fp32_to_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) {  // inf or NaN
        return static_cast<uint16_t>(sign | 0x7c00u | (x > 0x7f800000u ? 0x200u | ((x >> 13) & 0x3ffu) : 0));
    }
    if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
    if (x < 0x38800000u) {                                                // subnormal or zero in half
        // Use float arithmetic: adding 0.5 aligns the mantissa so the FPU rounds (RNE).
        float v = fp32_from_bits(x) + 0.5f;
        return static_cast<uint16_t>(sign | (fp32_to_bits(v) - 0x3f000000u));
    }
    uint32_t mant_odd = (x >> 13) & 1u;
    x += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
    return static_cast<uint16_t>(sign | (x >> 13));
}

inline float bf16_to_fp32(uint16_t h) { return fp32_from_bits(static_cast<uint32_t>(h) << 16); }

// Round to nearest even; NaN stays NaN (quiet).
inline uint16_t fp32_to_bf16(float f) {
    uint32_t x = fp32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>(x >> 16);
}

}  // namespace sieve
