// GGUF v3 writer. Builds the whole file in memory: the files it makes are
// test models and broken-file fixtures, small enough that streaming would buy
// nothing.
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "sieve/gguf/gguf.h"

namespace sieve {

namespace {

template <class T>
void put(std::vector<uint8_t> *out, T v) {
    const size_t at = out->size();
    out->resize(at + sizeof(T));
    std::memcpy(out->data() + at, &v, sizeof(T));
}

void put_string(std::vector<uint8_t> *out, const std::string &s) {
    put<uint64_t>(out, s.size());
    out->insert(out->end(), s.begin(), s.end());
}

template <class T>
std::vector<uint8_t> scalar_bytes(T v) {
    std::vector<uint8_t> b;
    put(&b, v);
    return b;
}

// Padding that brings `pos` up to a multiple of `alignment` (any non-zero value).
uint64_t pad_to(uint64_t pos, uint64_t alignment) { return (alignment - pos % alignment) % alignment; }

}  // namespace

void GgufWriter::set_alignment(uint32_t alignment) {
    SIEVE_CHECKF(alignment > 0, "GgufWriter alignment must be non-zero");
    alignment_ = alignment;
}

void GgufWriter::add_u8(const std::string &key, uint8_t v) { kvs_.push_back({key, GgufType::UINT8, scalar_bytes(v)}); }
void GgufWriter::add_i8(const std::string &key, int8_t v) { kvs_.push_back({key, GgufType::INT8, scalar_bytes(v)}); }
void GgufWriter::add_u16(const std::string &key, uint16_t v) {
    kvs_.push_back({key, GgufType::UINT16, scalar_bytes(v)});
}
void GgufWriter::add_i16(const std::string &key, int16_t v) {
    kvs_.push_back({key, GgufType::INT16, scalar_bytes(v)});
}
void GgufWriter::add_u32(const std::string &key, uint32_t v) {
    kvs_.push_back({key, GgufType::UINT32, scalar_bytes(v)});
}
void GgufWriter::add_i32(const std::string &key, int32_t v) {
    kvs_.push_back({key, GgufType::INT32, scalar_bytes(v)});
}
void GgufWriter::add_u64(const std::string &key, uint64_t v) {
    kvs_.push_back({key, GgufType::UINT64, scalar_bytes(v)});
}
void GgufWriter::add_i64(const std::string &key, int64_t v) {
    kvs_.push_back({key, GgufType::INT64, scalar_bytes(v)});
}
void GgufWriter::add_f32(const std::string &key, float v) {
    kvs_.push_back({key, GgufType::FLOAT32, scalar_bytes(v)});
}
void GgufWriter::add_f64(const std::string &key, double v) {
    kvs_.push_back({key, GgufType::FLOAT64, scalar_bytes(v)});
}
void GgufWriter::add_bool(const std::string &key, bool v) {
    kvs_.push_back({key, GgufType::BOOL, scalar_bytes<uint8_t>(v ? 1 : 0)});
}

void GgufWriter::add_string(const std::string &key, const std::string &v) {
    std::vector<uint8_t> b;
    put_string(&b, v);
    kvs_.push_back({key, GgufType::STRING, std::move(b)});
}

void GgufWriter::add_string_array(const std::string &key, const std::vector<std::string> &v) {
    std::vector<uint8_t> b;
    put(&b, static_cast<uint32_t>(GgufType::STRING));
    put<uint64_t>(&b, v.size());
    for (const std::string &s : v) put_string(&b, s);
    kvs_.push_back({key, GgufType::ARRAY, std::move(b)});
}

void GgufWriter::add_f32_array(const std::string &key, const std::vector<float> &v) {
    std::vector<uint8_t> b;
    put(&b, static_cast<uint32_t>(GgufType::FLOAT32));
    put<uint64_t>(&b, v.size());
    for (float x : v) put(&b, x);
    kvs_.push_back({key, GgufType::ARRAY, std::move(b)});
}

void GgufWriter::add_i32_array(const std::string &key, const std::vector<int32_t> &v) {
    std::vector<uint8_t> b;
    put(&b, static_cast<uint32_t>(GgufType::INT32));
    put<uint64_t>(&b, v.size());
    for (int32_t x : v) put(&b, x);
    kvs_.push_back({key, GgufType::ARRAY, std::move(b)});
}

void GgufWriter::add_raw(const std::string &key, GgufType type, const std::vector<uint8_t> &value_bytes) {
    kvs_.push_back({key, type, value_bytes});
}

void GgufWriter::add_tensor(const std::string &name, GgmlType type, const std::vector<int64_t> &ne, const void *data,
                            size_t n_bytes) {
    const uint8_t *p = static_cast<const uint8_t *>(data);
    tensors_.push_back({name, type, ne, std::vector<uint8_t>(p, p + n_bytes)});
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
    bool has_alignment_key = false;
    for (const Kv &kv : kvs_) has_alignment_key |= kv.key == "general.alignment";
    const bool add_alignment_key = alignment_ != k_gguf_default_alignment && !has_alignment_key;

    std::vector<uint8_t> out(4);
    std::memcpy(out.data(), "GGUF", 4);
    put<uint32_t>(&out, 3);
    put<uint64_t>(&out, tensors_.size());
    put<uint64_t>(&out, kvs_.size() + (add_alignment_key ? 1 : 0));
    if (add_alignment_key) {
        put_string(&out, "general.alignment");
        put(&out, static_cast<uint32_t>(GgufType::UINT32));
        put(&out, alignment_);
    }
    for (const Kv &kv : kvs_) {
        put_string(&out, kv.key);
        put(&out, static_cast<uint32_t>(kv.type));
        out.insert(out.end(), kv.bytes.begin(), kv.bytes.end());
    }
    // Offsets: each tensor starts at the next multiple of the alignment.
    uint64_t offset = 0;
    for (const Tensor &t : tensors_) {
        put_string(&out, t.name);
        put(&out, static_cast<uint32_t>(t.ne.size()));
        for (int64_t n : t.ne) put(&out, n);
        put(&out, static_cast<uint32_t>(t.type));
        put(&out, offset);
        offset += t.data.size();
        offset += pad_to(offset, alignment_);
    }
    out.resize(out.size() + pad_to(out.size(), alignment_), 0);
    for (const Tensor &t : tensors_) {
        out.insert(out.end(), t.data.begin(), t.data.end());
        out.resize(out.size() + pad_to(t.data.size(), alignment_), 0);
    }
    return out;
}

Status GgufWriter::write(const std::string &path) const {
    const std::vector<uint8_t> bytes = to_bytes();
    FILE *f = std::fopen(path.c_str(), "wb");
    if (!f) return Status::errorf("cannot create '%s': %s", path.c_str(), std::strerror(errno));
    const size_t n = std::fwrite(bytes.data(), 1, bytes.size(), f);
    const bool closed = std::fclose(f) == 0;
    if (n != bytes.size() || !closed)
        return Status::errorf("writing '%s': only %zu of %zu bytes written", path.c_str(), n, bytes.size());
    return Status();
}

}  // namespace sieve
