// GGUF reader: parses and validates a whole file up front so that everything
// after open() can trust the tables. The parser walks the bytes once with a
// bounds-checked cursor; every size computed from file data goes through the
// overflow-checked helpers below before it is used as a length or offset.
#include "sieve/gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <limits>

namespace sieve {

const char *gguf_type_name(GgufType t) {
    switch (t) {
    case GgufType::UINT8: return "UINT8";
    case GgufType::INT8: return "INT8";
    case GgufType::UINT16: return "UINT16";
    case GgufType::INT16: return "INT16";
    case GgufType::UINT32: return "UINT32";
    case GgufType::INT32: return "INT32";
    case GgufType::FLOAT32: return "FLOAT32";
    case GgufType::BOOL: return "BOOL";
    case GgufType::STRING: return "STRING";
    case GgufType::ARRAY: return "ARRAY";
    case GgufType::UINT64: return "UINT64";
    case GgufType::INT64: return "INT64";
    case GgufType::FLOAT64: return "FLOAT64";
    }
    return "unknown";
}

namespace {

constexpr uint32_t k_max_value_type = static_cast<uint32_t>(GgufType::FLOAT64);

// Smallest encodings, used to bound counts by the bytes left before allocating:
//   key/value:   u64 key length + 1 key byte + u32 type + 1 value byte
//   tensor info: u64 name length + 1 name byte + u32 n_dims + u64 ne + u32 type + u64 offset
constexpr uint64_t k_min_kv_bytes = 8 + 1 + 4 + 1;
constexpr uint64_t k_min_tensor_info_bytes = 8 + 1 + 4 + 8 + 4 + 8;

// Bytes of one element of a fixed-size type, 0 for STRING / ARRAY.
uint64_t scalar_size(GgufType t) {
    switch (t) {
    case GgufType::UINT8:
    case GgufType::INT8:
    case GgufType::BOOL: return 1;
    case GgufType::UINT16:
    case GgufType::INT16: return 2;
    case GgufType::UINT32:
    case GgufType::INT32:
    case GgufType::FLOAT32: return 4;
    case GgufType::UINT64:
    case GgufType::INT64:
    case GgufType::FLOAT64: return 8;
    case GgufType::STRING:
    case GgufType::ARRAY: return 0;
    }
    return 0;
}

bool is_integer(GgufType t) {
    switch (t) {
    case GgufType::UINT8:
    case GgufType::INT8:
    case GgufType::UINT16:
    case GgufType::INT16:
    case GgufType::UINT32:
    case GgufType::INT32:
    case GgufType::UINT64:
    case GgufType::INT64: return true;
    default: return false;
    }
}

bool is_signed(GgufType t) {
    return t == GgufType::INT8 || t == GgufType::INT16 || t == GgufType::INT32 || t == GgufType::INT64;
}

bool is_float(GgufType t) { return t == GgufType::FLOAT32 || t == GgufType::FLOAT64; }

// Little-endian loads through memcpy: the file gives no alignment guarantee.
template <class T>
T load(const uint8_t *p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

// Decodes one fixed-size element into the scalar fields of a GgufValue.
void decode_scalar(GgufType t, const uint8_t *p, GgufValue *v) {
    switch (t) {
    case GgufType::UINT8:
    case GgufType::BOOL: v->u = load<uint8_t>(p); break;
    case GgufType::INT8: v->i = load<int8_t>(p); break;
    case GgufType::UINT16: v->u = load<uint16_t>(p); break;
    case GgufType::INT16: v->i = load<int16_t>(p); break;
    case GgufType::UINT32: v->u = load<uint32_t>(p); break;
    case GgufType::INT32: v->i = load<int32_t>(p); break;
    case GgufType::UINT64: v->u = load<uint64_t>(p); break;
    case GgufType::INT64: v->i = load<int64_t>(p); break;
    case GgufType::FLOAT32: v->f = load<float>(p); break;
    case GgufType::FLOAT64: v->f = load<double>(p); break;
    case GgufType::STRING:
    case GgufType::ARRAY: break;
    }
    // Signed and unsigned views agree whenever the value fits both.
    if (is_signed(t) && v->i >= 0) v->u = static_cast<uint64_t>(v->i);
    if (!is_signed(t) && is_integer(t) && v->u <= static_cast<uint64_t>(INT64_MAX))
        v->i = static_cast<int64_t>(v->u);
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t *out) { return __builtin_mul_overflow(a, b, out); }
bool add_overflows(uint64_t a, uint64_t b, uint64_t *out) { return __builtin_add_overflow(a, b, out); }

// Bounds-checked cursor over the file. `where` names what is being read for
// error messages ("key 'general.name'", "tensor #4 'blk.0.attn_q.weight'").
class Cursor {
public:
    Cursor(const uint8_t *base, uint64_t size) : base_(base), size_(size) {}

    uint64_t pos() const { return pos_; }
    uint64_t left() const { return size_ - pos_; }
    const uint8_t *here() const { return base_ + pos_; }
    std::string where;

    Status need(uint64_t n, const char *what) const {
        if (n <= left()) return Status();
        return Status::errorf("%s%s%s: need %" PRIu64 " bytes at offset %" PRIu64
                              " but the file ends at %" PRIu64 " — is the file truncated?",
                              where.c_str(), where.empty() ? "" : ": ", what, n, pos_, size_);
    }
    Status skip(uint64_t n, const char *what) {
        SIEVE_TRY(need(n, what));
        pos_ += n;
        return Status();
    }
    Status u32(uint32_t *out, const char *what) {
        SIEVE_TRY(need(4, what));
        *out = load<uint32_t>(here());
        pos_ += 4;
        return Status();
    }
    Status u64(uint64_t *out, const char *what) {
        SIEVE_TRY(need(8, what));
        *out = load<uint64_t>(here());
        pos_ += 8;
        return Status();
    }
    Status string(std::string_view *out, const char *what) {
        uint64_t n = 0;
        SIEVE_TRY(u64(&n, what));
        if (n > left())
            return Status::errorf("%s%s%s: string length %" PRIu64 " at offset %" PRIu64
                                  " exceeds the %" PRIu64 " bytes left in the file",
                                  where.c_str(), where.empty() ? "" : ": ", what, n, pos_ - 8, left());
        *out = std::string_view(reinterpret_cast<const char *>(here()), static_cast<size_t>(n));
        pos_ += n;
        return Status();
    }

private:
    const uint8_t *base_;
    uint64_t size_;
    uint64_t pos_ = 0;
};

Status check_value_type(const Cursor &c, uint32_t id, const char *what) {
    if (id <= k_max_value_type) return Status();
    return Status::errorf("%s: unknown %s %u (known types are 0..%u)", c.where.c_str(), what, id,
                          k_max_value_type);
}

Status check_bool(const Cursor &c, uint8_t b, uint64_t index) {
    if (b <= 1) return Status();
    return Status::errorf("%s: BOOL element %" PRIu64 " is %u, expected 0 or 1", c.where.c_str(), index, b);
}

// Parses an array body (element type + count + elements) at the cursor.
// `out` receives the decoded view at depth 0; nested arrays are only walked.
Status parse_array(Cursor &c, int depth, GgufValue *out) {
    if (depth >= k_gguf_max_array_depth)
        return Status::errorf("%s: arrays nest deeper than %d levels", c.where.c_str(), k_gguf_max_array_depth);
    uint32_t type_id = 0;
    uint64_t n = 0;
    SIEVE_TRY(c.u32(&type_id, "array element type"));
    SIEVE_TRY(check_value_type(c, type_id, "array element type"));
    SIEVE_TRY(c.u64(&n, "array length"));
    const GgufType et = static_cast<GgufType>(type_id);
    const uint8_t *start = c.here();
    const uint64_t elem = scalar_size(et);
    // Minimum bytes per element bounds n before anything is reserved.
    const uint64_t min_elem = elem ? elem : (et == GgufType::STRING ? 8 : 12);
    if (n > c.left() / min_elem)
        return Status::errorf("%s: array of %" PRIu64 " %s elements needs at least %" PRIu64
                              " bytes per element but only %" PRIu64 " bytes are left in the file",
                              c.where.c_str(), n, gguf_type_name(et), min_elem, c.left());
    if (out) {
        out->arr_type = et;
        out->arr_n = n;
        out->arr_data = start;
    }
    if (elem) {
        if (et == GgufType::BOOL)
            for (uint64_t k = 0; k < n; ++k) SIEVE_TRY(check_bool(c, start[k], k));
        return c.skip(n * elem, "array elements");  // n * elem <= left: no overflow
    }
    if (et == GgufType::STRING) {
        if (out) out->arr_strs.reserve(static_cast<size_t>(n));
        for (uint64_t k = 0; k < n; ++k) {
            std::string_view s;
            SIEVE_TRY(c.string(&s, "array string"));
            if (out) out->arr_strs.push_back(s);
        }
        return Status();
    }
    for (uint64_t k = 0; k < n; ++k) SIEVE_TRY(parse_array(c, depth + 1, nullptr));
    return Status();
}

Status parse_value(Cursor &c, GgufType t, GgufValue *v) {
    v->type = t;
    if (t == GgufType::STRING) return c.string(&v->str, "string value");
    if (t == GgufType::ARRAY) return parse_array(c, 0, v);
    const uint64_t n = scalar_size(t);
    SIEVE_TRY(c.need(n, "value"));
    decode_scalar(t, c.here(), v);
    if (t == GgufType::BOOL) SIEVE_TRY(check_bool(c, static_cast<uint8_t>(v->u), 0));
    return c.skip(n, "value");
}

std::string fmt_shape(const GgufTensor &t) {
    std::string s = "[";
    for (int d = 0; d < t.n_dims; ++d) s += strfmt("%s%" PRId64, d ? ", " : "", t.ne[d]);
    return s + "]";
}

Status wrong_type(std::string_view key, const char *expected, const GgufValue &v) {
    std::string got = gguf_type_name(v.type);
    if (v.type == GgufType::ARRAY) got = strfmt("ARRAY of %s", gguf_type_name(v.arr_type));
    return Status::errorf("key '%.*s': expected %s, got %s", static_cast<int>(key.size()), key.data(), expected,
                          got.c_str());
}

Status missing_key(std::string_view key) {
    return Status::errorf("missing key '%.*s'", static_cast<int>(key.size()), key.data());
}

}  // namespace

GgufValue gguf_array_element(const GgufValue &arr, uint64_t k) {
    SIEVE_CHECKF(arr.type == GgufType::ARRAY && k < arr.arr_n, "array element %llu of %llu",
                 static_cast<unsigned long long>(k), static_cast<unsigned long long>(arr.arr_n));
    GgufValue e;
    e.type = arr.arr_type;
    if (arr.arr_type == GgufType::STRING) e.str = arr.arr_strs[static_cast<size_t>(k)];
    else if (const uint64_t n = scalar_size(arr.arr_type)) decode_scalar(arr.arr_type, arr.arr_data + k * n, &e);
    return e;
}

// ---------------------------------------------------------------- open / close

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string &path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::errorf("cannot open '%s': %s", path.c_str(), std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        return Status::errorf("cannot stat '%s': %s", path.c_str(), std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return Status::errorf("'%s' is not a regular file", path.c_str());
    }
    if (st.st_size == 0) {
        ::close(fd);
        return Status::errorf("'%s': file is empty, expected a GGUF file", path.c_str());
    }
    void *p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);  // the mapping keeps the file alive
    if (p == MAP_FAILED) return Status::errorf("cannot map '%s': %s", path.c_str(), std::strerror(err));

    std::unique_ptr<GgufFile> f(new GgufFile());
    f->path_ = path;
    f->base_ = static_cast<const uint8_t *>(p);
    f->size_ = static_cast<uint64_t>(st.st_size);
    f->mapped_ = true;
    Status s = f->parse();
    if (!s.ok()) return s.with_context(path);
    return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::from_memory(const void *data, size_t size) {
    std::unique_ptr<GgufFile> f(new GgufFile());
    f->path_ = "<memory>";
    f->base_ = static_cast<const uint8_t *>(data);
    f->size_ = size;
    if (size > 0 && data == nullptr) return Status::error("from_memory: null buffer with non-zero size");
    SIEVE_TRY(f->parse());
    return f;
}

GgufFile::~GgufFile() {
    if (mapped_) ::munmap(const_cast<uint8_t *>(base_), static_cast<size_t>(size_));
}

void GgufFile::release(const void *p, uint64_t n) const {
    const uint8_t *b = static_cast<const uint8_t *>(p);
    if (!mapped_ || n == 0 || b < base_ || b + n > base_ + size_) return;
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t lo = (reinterpret_cast<uintptr_t>(b) + page - 1) / page * page;
    const uintptr_t hi = (reinterpret_cast<uintptr_t>(b) + n) / page * page;
    // Clean, read-only, private file pages: dropping them loses nothing.
    if (hi > lo) (void)::madvise(reinterpret_cast<void *>(lo), hi - lo, MADV_DONTNEED);
}

// ---------------------------------------------------------------- parsing

Status GgufFile::parse() {
    Cursor c(base_, size_);
    // 1. magic and version
    SIEVE_TRY(c.need(4, "magic"));
    if (std::memcmp(base_, "GGUF", 4) != 0) {
        std::string got;
        for (int k = 0; k < 4; ++k) got += strfmt("%02x ", base_[k]);
        got.pop_back();
        return Status::errorf("bad magic: expected 'GGUF' (47 47 55 46), got %s — not a GGUF file", got.c_str());
    }
    SIEVE_TRY(c.skip(4, "magic"));
    SIEVE_TRY(c.u32(&version_, "version"));
    if (version_ == 1)
        return Status::error("GGUF version 1 is not supported (it uses 32-bit counts); "
                             "re-convert the model with a current converter to get version 3");
    if (version_ != 2 && version_ != 3)
        return Status::errorf("unsupported GGUF version %u: expected 2 or 3", version_);

    // 2. counts, bounded by the bytes left so nothing huge is ever reserved
    uint64_t n_tensors = 0, n_kv = 0;
    SIEVE_TRY(c.u64(&n_tensors, "n_tensors"));
    SIEVE_TRY(c.u64(&n_kv, "n_kv"));
    if (n_kv > c.left() / k_min_kv_bytes)
        return Status::errorf("n_kv = %" PRIu64 " is impossible: %" PRIu64
                              " bytes are left after the header and each key/value takes at least %" PRIu64
                              " — the count is corrupt or the file is truncated",
                              n_kv, c.left(), k_min_kv_bytes);
    if (n_tensors > c.left() / k_min_tensor_info_bytes)
        return Status::errorf("n_tensors = %" PRIu64 " is impossible: %" PRIu64
                              " bytes are left after the header and each tensor info takes at least %" PRIu64
                              " — the count is corrupt or the file is truncated",
                              n_tensors, c.left(), k_min_tensor_info_bytes);

    // 3. key/value pairs
    kvs_.reserve(static_cast<size_t>(n_kv));
    kv_index_.reserve(static_cast<size_t>(n_kv));
    for (uint64_t k = 0; k < n_kv; ++k) {
        c.where = strfmt("key/value #%" PRIu64, k);
        GgufKV kv;
        SIEVE_TRY(c.string(&kv.key, "key"));
        if (kv.key.empty()) return Status::errorf("%s: empty key", c.where.c_str());
        c.where = strfmt("key '%.*s'", static_cast<int>(kv.key.size()), kv.key.data());
        uint32_t type_id = 0;
        SIEVE_TRY(c.u32(&type_id, "value type"));
        SIEVE_TRY(check_value_type(c, type_id, "value type"));
        SIEVE_TRY(parse_value(c, static_cast<GgufType>(type_id), &kv.value));
        if (!kv_index_.emplace(kv.key, kvs_.size()).second)
            return Status::errorf("%s: duplicate key (entries #%zu and #%" PRIu64 ")", c.where.c_str(),
                                  kv_index_[kv.key], k);
        kvs_.push_back(std::move(kv));
    }

    // 4. alignment, which the tensor offsets and the data section depend on
    c.where.clear();
    if (const GgufKV *a = find("general.alignment")) {
        if (a->value.type != GgufType::UINT32) return wrong_type(a->key, "UINT32", a->value);
        const uint64_t al = a->value.u;
        if (al == 0 || (al & (al - 1)) != 0 || al > k_gguf_max_alignment)
            return Status::errorf("key 'general.alignment': %" PRIu64
                                  " is not a power of two between 1 and %u",
                                  al, k_gguf_max_alignment);
        alignment_ = static_cast<uint32_t>(al);
    }

    // 5. tensor infos
    tensors_.reserve(static_cast<size_t>(n_tensors));
    tensor_index_.reserve(static_cast<size_t>(n_tensors));
    for (uint64_t k = 0; k < n_tensors; ++k) {
        c.where = strfmt("tensor info #%" PRIu64, k);
        GgufTensor t;
        SIEVE_TRY(c.string(&t.name, "name"));
        if (t.name.empty()) return Status::errorf("%s: empty tensor name", c.where.c_str());
        c.where = strfmt("tensor '%.*s'", static_cast<int>(t.name.size()), t.name.data());
        uint32_t n_dims = 0;
        SIEVE_TRY(c.u32(&n_dims, "n_dims"));
        if (n_dims < 1 || n_dims > static_cast<uint32_t>(k_gguf_max_dims))
            return Status::errorf("%s: n_dims is %u, expected 1 to %d", c.where.c_str(), n_dims, k_gguf_max_dims);
        t.n_dims = static_cast<int>(n_dims);
        uint64_t n_el = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            uint64_t ne = 0;
            SIEVE_TRY(c.u64(&ne, "dimension"));
            if (ne == 0 || ne > static_cast<uint64_t>(INT64_MAX))
                return Status::errorf("%s: dimension %u is %" PRIu64 ", expected 1 to %" PRId64, c.where.c_str(), d,
                                      ne, INT64_MAX);
            if (mul_overflows(n_el, ne, &n_el) || n_el > static_cast<uint64_t>(INT64_MAX))
                return Status::errorf("%s: the element count of the shape overflows 63 bits (dimension %u = %" PRIu64
                                      ")",
                                      c.where.c_str(), d, ne);
            t.ne[d] = static_cast<int64_t>(ne);
        }
        uint32_t type_id = 0;
        SIEVE_TRY(c.u32(&type_id, "type"));
        const TypeTraits *tr = type_traits(type_id);
        if (!tr) return Status::errorf("%s: unknown tensor type id %u", c.where.c_str(), type_id);
        t.type = static_cast<GgmlType>(type_id);
        if (t.ne[0] % tr->block_size != 0)
            return Status::errorf("%s: row length %" PRId64 " is not a multiple of the %s block size %" PRId64,
                                  c.where.c_str(), t.ne[0], tr->name, tr->block_size);
        // Element count fits 63 bits; bytes = n_el / block * type_size may not.
        if (mul_overflows(n_el / static_cast<uint64_t>(tr->block_size), static_cast<uint64_t>(tr->type_size),
                          &t.n_bytes))
            return Status::errorf("%s: data size of shape %s overflows 64 bits", c.where.c_str(), fmt_shape(t).c_str());
        SIEVE_TRY(c.u64(&t.offset, "offset"));
        if (t.offset % alignment_ != 0)
            return Status::errorf("%s: offset %" PRIu64 " is not a multiple of the alignment %u", c.where.c_str(),
                                  t.offset, alignment_);
        if (!tensor_index_.emplace(t.name, tensors_.size()).second)
            return Status::errorf("%s: duplicate tensor name (tensor infos #%zu and #%" PRIu64 ")", c.where.c_str(),
                                  tensor_index_[t.name], k);
        tensors_.push_back(t);
    }

    // 6. data section: starts at the aligned end of the tensor infos
    c.where.clear();
    data_offset_ = c.pos() + (alignment_ - c.pos() % alignment_) % alignment_;  // pos <= size: no overflow
    for (GgufTensor &t : tensors_) {
        uint64_t begin = 0, end = 0;
        if (add_overflows(data_offset_, t.offset, &begin) || add_overflows(begin, t.n_bytes, &end) || end > size_)
            return Status::errorf("tensor '%.*s': data [%" PRIu64 ", %" PRIu64 ") at offset %" PRIu64
                                  " ends past the end of the file (size %" PRIu64 ") — is the file truncated?",
                                  static_cast<int>(t.name.size()), t.name.data(), t.offset, t.offset + t.n_bytes,
                                  data_offset_ + t.offset, size_);
        t.data = base_ + begin;
    }

    // 7. no two tensors share bytes
    std::vector<const GgufTensor *> by_offset;
    by_offset.reserve(tensors_.size());
    for (const GgufTensor &t : tensors_) by_offset.push_back(&t);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const GgufTensor *a, const GgufTensor *b) { return a->offset < b->offset; });
    for (size_t k = 1; k < by_offset.size(); ++k) {
        const GgufTensor &a = *by_offset[k - 1];
        const GgufTensor &b = *by_offset[k];
        if (a.offset + a.n_bytes > b.offset)
            return Status::errorf("tensors '%.*s' [%" PRIu64 ", %" PRIu64 ") and '%.*s' [%" PRIu64 ", %" PRIu64
                                  ") overlap in the data section",
                                  static_cast<int>(a.name.size()), a.name.data(), a.offset, a.offset + a.n_bytes,
                                  static_cast<int>(b.name.size()), b.name.data(), b.offset, b.offset + b.n_bytes);
    }
    return Status();
}

// ---------------------------------------------------------------- lookups

const GgufKV *GgufFile::find(std::string_view key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kvs_[it->second];
}

const GgufTensor *GgufFile::find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Status GgufFile::get_int(std::string_view key, int64_t *out) const {
    const GgufKV *kv = find(key);
    if (!kv) return missing_key(key);
    const GgufValue &v = kv->value;
    if (!is_integer(v.type)) return wrong_type(key, "an integer", v);
    if (!is_signed(v.type) && v.u > static_cast<uint64_t>(INT64_MAX))
        return Status::errorf("key '%.*s': value %" PRIu64 " does not fit a signed 64-bit integer",
                              static_cast<int>(key.size()), key.data(), v.u);
    *out = v.i;
    return Status();
}

Status GgufFile::get_uint(std::string_view key, uint64_t *out) const {
    const GgufKV *kv = find(key);
    if (!kv) return missing_key(key);
    const GgufValue &v = kv->value;
    if (!is_integer(v.type)) return wrong_type(key, "an integer", v);
    if (is_signed(v.type) && v.i < 0)
        return Status::errorf("key '%.*s': expected a non-negative value, got %" PRId64,
                              static_cast<int>(key.size()), key.data(), v.i);
    *out = v.u;
    return Status();
}

Status GgufFile::get_float(std::string_view key, double *out) const {
    const GgufKV *kv = find(key);
    if (!kv) return missing_key(key);
    const GgufValue &v = kv->value;
    if (is_float(v.type)) *out = v.f;
    else if (is_signed(v.type)) *out = static_cast<double>(v.i);
    else if (is_integer(v.type)) *out = static_cast<double>(v.u);
    else return wrong_type(key, "a number (FLOAT32 or FLOAT64)", v);
    return Status();
}

Status GgufFile::get_bool(std::string_view key, bool *out) const {
    const GgufKV *kv = find(key);
    if (!kv) return missing_key(key);
    if (kv->value.type != GgufType::BOOL) return wrong_type(key, "BOOL", kv->value);
    *out = kv->value.u != 0;
    return Status();
}

Status GgufFile::get_string(std::string_view key, std::string *out) const {
    const GgufKV *kv = find(key);
    if (!kv) return missing_key(key);
    if (kv->value.type != GgufType::STRING) return wrong_type(key, "STRING", kv->value);
    out->assign(kv->value.str);
    return Status();
}

Status GgufFile::get_string_array(std::string_view key, std::vector<std::string_view> *out) const {
    const GgufKV *kv = find(key);
    if (!kv) return missing_key(key);
    const GgufValue &v = kv->value;
    if (v.type != GgufType::ARRAY || v.arr_type != GgufType::STRING) return wrong_type(key, "ARRAY of STRING", v);
    *out = v.arr_strs;
    return Status();
}

Status GgufFile::get_float_array(std::string_view key, std::vector<float> *out) const {
    const GgufKV *kv = find(key);
    if (!kv) return missing_key(key);
    const GgufValue &v = kv->value;
    const uint64_t elem = scalar_size(v.arr_type);
    if (v.type != GgufType::ARRAY || elem == 0 || v.arr_type == GgufType::BOOL)
        return wrong_type(key, "a numeric ARRAY", v);
    out->resize(static_cast<size_t>(v.arr_n));
    for (uint64_t k = 0; k < v.arr_n; ++k) {
        GgufValue e;
        decode_scalar(v.arr_type, v.arr_data + k * elem, &e);
        (*out)[k] = is_float(v.arr_type) ? static_cast<float>(e.f)
                    : is_signed(v.arr_type) ? static_cast<float>(e.i)
                                            : static_cast<float>(e.u);
    }
    return Status();
}

Status GgufFile::get_int_array(std::string_view key, std::vector<int64_t> *out) const {
    const GgufKV *kv = find(key);
    if (!kv) return missing_key(key);
    const GgufValue &v = kv->value;
    if (v.type != GgufType::ARRAY || !is_integer(v.arr_type)) return wrong_type(key, "an integer ARRAY", v);
    const uint64_t elem = scalar_size(v.arr_type);
    out->resize(static_cast<size_t>(v.arr_n));
    for (uint64_t k = 0; k < v.arr_n; ++k) {
        GgufValue e;
        decode_scalar(v.arr_type, v.arr_data + k * elem, &e);
        if (!is_signed(v.arr_type) && e.u > static_cast<uint64_t>(INT64_MAX))
            return Status::errorf("key '%.*s': element %" PRIu64 " = %" PRIu64 " does not fit a signed 64-bit integer",
                                  static_cast<int>(key.size()), key.data(), k, e.u);
        (*out)[k] = e.i;
    }
    return Status();
}

Status GgufFile::get_array_size(std::string_view key, uint64_t *n) const {
    const GgufKV *kv = find(key);
    if (!kv) return missing_key(key);
    if (kv->value.type != GgufType::ARRAY) return wrong_type(key, "ARRAY", kv->value);
    *n = kv->value.arr_n;
    return Status();
}

}  // namespace sieve
