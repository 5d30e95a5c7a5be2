// Element type of a KV row (a lane row of K or V). f16 is the default, as in
// llama.cpp: half the bytes decode attention streams per token; f32 is the
// oracle mode (exact up to f32 rounding). The int8 / int4 rows of the
// quantized lanes (per-row scales beside the lane) extend this enum.
#pragma once

#include <cstdint>
#include <string>

namespace sieve::cpu {

enum class RowType : uint8_t { f32, f16, bf16 };

inline int64_t row_type_bytes(RowType t) { return t == RowType::f32 ? 4 : 2; }

inline const char *row_type_name(RowType t) {
    switch (t) {
    case RowType::f32: return "f32";
    case RowType::f16: return "f16";
    case RowType::bf16: return "bf16";
    }
    return "?";
}

// "f32" | "f16" | "bf16" (llama.cpp's --cache-type names); false otherwise.
inline bool row_type_parse(const std::string &s, RowType *out) {
    for (RowType t : {RowType::f32, RowType::f16, RowType::bf16}) {
        if (s == row_type_name(t)) {
            *out = t;
            return true;
        }
    }
    return false;
}

}  // namespace sieve::cpu
