// Weight types as GGUF numbers them (ggml's type ids), with block geometry.
// A row of n elements of a block type takes n / block_size * type_size bytes;
// n must be a multiple of block_size.
#pragma once

#include <cstdint>
#include <string>

namespace sieve {

enum class GgmlType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    BF16 = 30,
};

struct TypeTraits {
    const char *name;
    int64_t block_size;  // elements per block
    int64_t type_size;   // bytes per block
    bool weights_ok;     // sieve can dequantize / multiply weights of this type
};

// nullptr for an id that is not a known type (the caller reports the id).
const TypeTraits *type_traits(uint32_t id);
inline const TypeTraits *type_traits(GgmlType t) { return type_traits(static_cast<uint32_t>(t)); }
const char *type_name(GgmlType t);  // "unknown" if not known

// Bytes of a row of n elements; false if n is not a multiple of the block size
// or the type is unknown.
bool type_row_bytes(GgmlType t, int64_t n, int64_t *bytes);

// Parses "Q4_0", "q8_0", "F16", ... ; false if unknown.
bool type_from_name(const std::string &name, GgmlType *out);

}  // namespace sieve
