// GGUF files (v2 and v3): a validated, memory-mapped reader and a writer.
//
// The reader treats every byte as untrusted. Every count, length, offset,
// shape and alignment is checked with 64-bit overflow checks before use; a bad
// file gives a Status naming the field with expected vs actual values, never a
// crash or an out-of-bounds read. After open() succeeds the object is
// immutable and every pointer it hands out stays valid for its lifetime.
//
// File layout (all little-endian):
//   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv        (v1 used u32 counts: rejected)
//   n_kv   x { string key | u32 value_type | value }
//   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
//   padding to `general.alignment` (default 32)
//   tensor data; each tensor at data_start + offset, offset % alignment == 0
// string = u64 length + bytes (no terminator).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sieve/core/status.h"
#include "sieve/quant/types.h"

namespace sieve {

enum class GgufType : uint32_t {
    UINT8 = 0,
    INT8 = 1,
    UINT16 = 2,
    INT16 = 3,
    UINT32 = 4,
    INT32 = 5,
    FLOAT32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    UINT64 = 10,
    INT64 = 11,
    FLOAT64 = 12,
};
const char *gguf_type_name(GgufType t);

constexpr int k_gguf_max_dims = 4;
constexpr uint32_t k_gguf_default_alignment = 32;
// Largest general.alignment accepted; real files use 32 (a few use 64).
constexpr uint32_t k_gguf_max_alignment = 1u << 20;
// Arrays of arrays nest at most this deep; a deeper file is rejected.
constexpr int k_gguf_max_array_depth = 8;

// One metadata value. Scalars are widened into the fields below; strings and
// arrays point into the mapped file (valid while the GgufFile lives).
struct GgufValue {
    GgufType type = GgufType::UINT8;
    uint64_t u = 0;   // unsigned integer types and BOOL (0/1)
    int64_t i = 0;    // signed integer types
    double f = 0.0;   // FLOAT32 / FLOAT64
    std::string_view str;  // STRING
    // ARRAY: element type, count, and where the elements start in the file.
    // For arrays of arrays arr_data points at the first nested array's header;
    // nested arrays are validated but not decoded.
    GgufType arr_type = GgufType::UINT8;
    uint64_t arr_n = 0;
    const uint8_t *arr_data = nullptr;         // numeric elements, packed little-endian
    std::vector<std::string_view> arr_strs;    // STRING elements
};

// Element k (< arr.arr_n) of an ARRAY value as a scalar/STRING GgufValue. For
// arrays of arrays only the type (ARRAY) is filled in.
GgufValue gguf_array_element(const GgufValue &arr, uint64_t k);

struct GgufKV {
    std::string_view key;
    GgufValue value;
};

struct GgufTensor {
    std::string_view name;
    GgmlType type = GgmlType::F32;
    int n_dims = 0;
    int64_t ne[k_gguf_max_dims] = {1, 1, 1, 1};  // ne[0] is the row length (fastest-varying)
    uint64_t offset = 0;   // from the start of the data section
    uint64_t n_bytes = 0;  // total bytes of the tensor data
    const uint8_t *data = nullptr;
    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
};

class GgufFile {
public:
    // Maps the file read-only and validates it.
    static Result<std::unique_ptr<GgufFile>> open(const std::string &path);
    // Parses a buffer the caller keeps alive (fuzzing, tests). No copy is made.
    static Result<std::unique_ptr<GgufFile>> from_memory(const void *data, size_t size);
    ~GgufFile();
    GgufFile(const GgufFile &) = delete;
    GgufFile &operator=(const GgufFile &) = delete;

    uint32_t version() const { return version_; }
    uint32_t alignment() const { return alignment_; }
    uint64_t file_size() const { return size_; }
    uint64_t data_offset() const { return data_offset_; }
    const std::string &path() const { return path_; }

    const std::vector<GgufKV> &kvs() const { return kvs_; }
    const GgufKV *find(std::string_view key) const;
    bool has(std::string_view key) const { return find(key) != nullptr; }

    // Typed getters. A missing key gives an error "missing key 'k'" (callers
    // with a default check has() first). A value of the wrong type gives an
    // error naming the key, the expected and the actual type.
    Status get_int(std::string_view key, int64_t *out) const;     // any integer type
    Status get_uint(std::string_view key, uint64_t *out) const;   // any integer type, must be >= 0
    Status get_float(std::string_view key, double *out) const;    // FLOAT32/FLOAT64 (integers accepted)
    Status get_bool(std::string_view key, bool *out) const;
    Status get_string(std::string_view key, std::string *out) const;
    Status get_string_array(std::string_view key, std::vector<std::string_view> *out) const;
    Status get_float_array(std::string_view key, std::vector<float> *out) const;  // numeric arrays
    Status get_int_array(std::string_view key, std::vector<int64_t> *out) const;  // integer arrays
    // Length of an array value (error if not an array).
    Status get_array_size(std::string_view key, uint64_t *n) const;

    const std::vector<GgufTensor> &tensors() const { return tensors_; }
    const GgufTensor *find_tensor(std::string_view name) const;

    // Tells the kernel the process will not read [p, p + n) soon: for a mapped
    // file, the whole pages inside the range leave this process's resident
    // set (they stay in the page cache; a later read maps them again, with
    // the same bytes). For a buffer from from_memory, nothing happens.
    void release(const void *p, uint64_t n) const;

private:
    GgufFile() = default;
    Status parse();

    std::string path_;
    const uint8_t *base_ = nullptr;
    uint64_t size_ = 0;
    bool mapped_ = false;
    uint32_t version_ = 0;
    uint32_t alignment_ = k_gguf_default_alignment;
    uint64_t data_offset_ = 0;
    std::vector<GgufKV> kvs_;
    std::vector<GgufTensor> tensors_;
    std::unordered_map<std::string_view, size_t> kv_index_;      // key -> index in kvs_
    std::unordered_map<std::string_view, size_t> tensor_index_;  // name -> index in tensors_
};

// Writes GGUF v3 files. Used by tests and tools to make models and broken
// files; values are copied at add time, so callers may free their buffers.
class GgufWriter {
public:
    // Also written as general.alignment when not 32. A general.alignment key
    // added by hand is written as given instead (broken-file tests), while
    // the layout still follows set_alignment.
    void set_alignment(uint32_t alignment);
    void add_u8(const std::string &key, uint8_t v);
    void add_i8(const std::string &key, int8_t v);
    void add_u16(const std::string &key, uint16_t v);
    void add_i16(const std::string &key, int16_t v);
    void add_u32(const std::string &key, uint32_t v);
    void add_i32(const std::string &key, int32_t v);
    void add_u64(const std::string &key, uint64_t v);
    void add_i64(const std::string &key, int64_t v);
    void add_f32(const std::string &key, float v);
    void add_f64(const std::string &key, double v);
    void add_bool(const std::string &key, bool v);
    void add_string(const std::string &key, const std::string &v);
    void add_string_array(const std::string &key, const std::vector<std::string> &v);
    void add_f32_array(const std::string &key, const std::vector<float> &v);
    void add_i32_array(const std::string &key, const std::vector<int32_t> &v);
    // Raw escape hatch for tests that need odd types: value bytes are written as given.
    void add_raw(const std::string &key, GgufType type, const std::vector<uint8_t> &value_bytes);

    // data holds the tensor in its on-disk encoding; ne[0] is the row length.
    // Written as given, unchecked, so tests can make broken files (wrong
    // sizes, 0 or 5 dims); the reader is the one that validates.
    void add_tensor(const std::string &name, GgmlType type, const std::vector<int64_t> &ne,
                    const void *data, size_t n_bytes);

    // Serialises to bytes / to a file.
    std::vector<uint8_t> to_bytes() const;
    Status write(const std::string &path) const;

private:
    struct Kv {
        std::string key;
        GgufType type;
        std::vector<uint8_t> bytes;  // encoded value (after the type id)
    };
    struct Tensor {
        std::string name;
        GgmlType type;
        std::vector<int64_t> ne;
        std::vector<uint8_t> data;
    };
    uint32_t alignment_ = k_gguf_default_alignment;
    std::vector<Kv> kvs_;
    std::vector<Tensor> tensors_;
};

}  // namespace sieve
