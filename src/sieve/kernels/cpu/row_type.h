// Element type of a KV row (a lane row of K or V). f16 is the default, as in
// llama.cpp: half the bytes decode attention streams per token; f32 is the
// oracle mode (exact up to f32 rounding).
//
// q8_0 and q4_0 are llama.cpp's block formats of the same names (blocks of 32
// elements, each an f16 scale d and 32 int8 values x = d q, or 16 bytes of
// 4-bit values x = d (q - 8)): a row of head_dim elements is head_dim / 32
// consecutive blocks, 34 or 18 bytes each, so a quantized row is still a
// fixed number of bytes with its scales inside it, and everything that moves
// rows as bytes (compaction, copy-on-write, swaps, the prefix cache) moves
// quantized rows unchanged. They need head_dim to be a multiple of 32.
#pragma once

#include <cstdint>
#include <string>

namespace sieve::cpu {

enum class RowType : uint8_t { f32, f16, bf16, q8_0, q4_0 };

constexpr RowType k_row_types[] = {RowType::f32, RowType::f16, RowType::bf16, RowType::q8_0, RowType::q4_0};

constexpr bool row_type_quantized(RowType t) { return t == RowType::q8_0 || t == RowType::q4_0; }

// Elements per block: 32 for the quantized types, 1 otherwise.
constexpr int64_t row_type_block(RowType t) { return row_type_quantized(t) ? 32 : 1; }

// Bytes of n consecutive elements (n a multiple of row_type_block(t)): a
// row is row_bytes(t, head_dim); element e of a lane starts row_bytes(t, e)
// bytes in when e is a multiple of the block.
constexpr int64_t row_bytes(RowType t, int64_t n) {
    switch (t) {
    case RowType::f32: return 4 * n;
    case RowType::f16:
    case RowType::bf16: return 2 * n;
    case RowType::q8_0: return n / 32 * 34;
    case RowType::q4_0: return n / 32 * 18;
    }
    return 0;
}

inline const char *row_type_name(RowType t) {
    switch (t) {
    case RowType::f32: return "f32";
    case RowType::f16: return "f16";
    case RowType::bf16: return "bf16";
    case RowType::q8_0: return "q8_0";
    case RowType::q4_0: return "q4_0";
    }
    return "?";
}

// The accepted names, for error messages.
inline const char *row_type_names() { return "f16, bf16, f32, q8_0 or q4_0"; }

// "f32" | "f16" | "bf16" | "q8_0" | "q4_0" (llama.cpp's --cache-type names); false otherwise.
inline bool row_type_parse(const std::string &s, RowType *out) {
    for (RowType t : k_row_types) {
        if (s == row_type_name(t)) {
            *out = t;
            return true;
        }
    }
    return false;
}

// The row types of a store's K and V lanes (llama.cpp's --cache-type-k and
// --cache-type-v). One type converts to the pair that uses it for both. K
// and V may differ (q8_0 keys with q4_0 values keep answers where q4_0 keys
// lose them, docs/sparsity.md "Quantized KV"); f32, the oracle, goes with
// f32 only.
//
// k_rotated: the keys are stored centred (less the model's K-bias mean,
// Model::k_centre) and rotated by the fixed orthogonal hadamard_rotate
// (ops.h), every query rotated alike, so softmax is unchanged while outlier
// channels no longer set a 4-bit row's scale (--rotate-k; on by default for
// q4_0 keys). It is part of the
// type: rows of the two kinds are never mixed or shared.
struct KvRowTypes {
    RowType k = RowType::f32, v = RowType::f32;
    bool k_rotated = false;

    constexpr KvRowTypes() = default;
    constexpr KvRowTypes(RowType both) : k(both), v(both) {}  // NOLINT(google-explicit-constructor)
    constexpr KvRowTypes(RowType k_type, RowType v_type, bool rotated = false)
        : k(k_type), v(v_type), k_rotated(rotated) {}
    constexpr bool uniform() const { return k == v; }
    friend constexpr bool operator==(KvRowTypes a, KvRowTypes b) {
        return a.k == b.k && a.v == b.v && a.k_rotated == b.k_rotated;
    }
    friend constexpr bool operator!=(KvRowTypes a, KvRowTypes b) { return !(a == b); }
};

// "q8_0" when K and V share the type, else "K/V" ("q8_0/q4_0"); rotated
// keys add " rotated-K" ("q4_0 rotated-K").
const char *row_type_name(KvRowTypes t);

// Whether rows of head_dim elements can be stored as t (the quantized types
// need whole blocks); the message names both when not.
constexpr bool row_type_fits(RowType t, int64_t head_dim) { return head_dim > 0 && head_dim % row_type_block(t) == 0; }
constexpr bool row_type_fits(KvRowTypes t, int64_t head_dim) {
    return row_type_fits(t.k, head_dim) && row_type_fits(t.v, head_dim);
}

}  // namespace sieve::cpu
