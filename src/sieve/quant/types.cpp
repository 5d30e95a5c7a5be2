#include "sieve/quant/types.h"

#include <cctype>

namespace sieve {

namespace {
struct Entry {
    uint32_t id;
    TypeTraits traits;
};
// Block sizes and byte sizes follow the GGUF specification (QK_K = 256).
constexpr Entry k_types[] = {
    {0, {"F32", 1, 4, true}},       {1, {"F16", 1, 2, true}},       {2, {"Q4_0", 32, 18, true}},
    {3, {"Q4_1", 32, 20, true}},    {6, {"Q5_0", 32, 22, true}},    {7, {"Q5_1", 32, 24, true}},
    {8, {"Q8_0", 32, 34, true}},    {9, {"Q8_1", 32, 36, false}},   {10, {"Q2_K", 256, 84, true}},
    {11, {"Q3_K", 256, 110, true}}, {12, {"Q4_K", 256, 144, true}}, {13, {"Q5_K", 256, 176, true}},
    {14, {"Q6_K", 256, 210, true}}, {15, {"Q8_K", 256, 292, false}}, {24, {"I8", 1, 1, false}},
    {25, {"I16", 1, 2, false}},     {26, {"I32", 1, 4, false}},     {27, {"I64", 1, 8, false}},
    {28, {"F64", 1, 8, false}},     {30, {"BF16", 1, 2, true}},
};
}  // namespace

const TypeTraits *type_traits(uint32_t id) {
    for (const Entry &e : k_types)
        if (e.id == id) return &e.traits;
    return nullptr;
}

const char *type_name(GgmlType t) {
    const TypeTraits *tr = type_traits(t);
    return tr ? tr->name : "unknown";
}

bool type_row_bytes(GgmlType t, int64_t n, int64_t *bytes) {
    const TypeTraits *tr = type_traits(t);
    if (!tr || n < 0 || n % tr->block_size != 0) return false;
    *bytes = n / tr->block_size * tr->type_size;
    return true;
}

bool type_from_name(const std::string &name, GgmlType *out) {
    std::string up;
    for (char c : name) up += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    for (const Entry &e : k_types) {
        if (up == e.traits.name) {
            *out = static_cast<GgmlType>(e.id);
            return true;
        }
    }
    return false;
}

}  // namespace sieve
