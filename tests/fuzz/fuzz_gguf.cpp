// libFuzzer target for the GGUF reader and the model-config check: any byte
// string must give a Status, never a crash, abort, leak or out-of-bounds read
// (built with ASan + UBSan). On success every accessor the rest of sieve uses
// is exercised too, so pointers the reader hands out are proven in bounds.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sieve/gguf/gguf.h"
#include "sieve/model/config.h"

namespace {

// Touches everything a parsed file exposes; volatile keeps the reads.
void exercise(const sieve::GgufFile &f) {
    volatile uint8_t sink = 0;
    for (const sieve::GgufKV &kv : f.kvs()) {
        int64_t i = 0;
        uint64_t u = 0;
        double d = 0;
        bool b = false;
        std::string s;
        std::vector<std::string_view> strs;
        std::vector<float> fl;
        std::vector<int64_t> il;
        (void)f.get_int(kv.key, &i);
        (void)f.get_uint(kv.key, &u);
        (void)f.get_float(kv.key, &d);
        (void)f.get_bool(kv.key, &b);
        (void)f.get_string(kv.key, &s);
        (void)f.get_array_size(kv.key, &u);
        if (kv.value.type == sieve::GgufType::ARRAY && kv.value.arr_n <= 4096) {
            (void)f.get_string_array(kv.key, &strs);
            (void)f.get_float_array(kv.key, &fl);
            (void)f.get_int_array(kv.key, &il);
        }
        if (kv.value.type == sieve::GgufType::ARRAY)
            for (uint64_t k = 0; k < kv.value.arr_n && k < 8; ++k) {
                const sieve::GgufValue e = sieve::gguf_array_element(kv.value, k);
                if (!e.str.empty()) sink = sink + static_cast<uint8_t>(e.str.back());
            }
    }
    for (const sieve::GgufTensor &t : f.tensors()) {
        sink = sink + t.data[0] + t.data[t.n_bytes - 1];
        if (f.find_tensor(t.name) != &t) __builtin_trap();  // names are unique
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    auto f = sieve::GgufFile::from_memory(data, size);
    if (!f.ok()) return 0;
    exercise(*f.value());
    auto cfg = sieve::ModelConfig::from_gguf(*f.value());
    if (cfg.ok()) {
        // A validated config must keep its derived sizes consistent.
        const sieve::ModelConfig &c = cfg.value();
        if (c.n_head % c.n_head_kv != 0 || c.head_dim % 2 != 0 || c.kv_bytes_per_token(4) <= 0) __builtin_trap();
    }
    return 0;
}
