// The hand-made broken GGUF files of tests/data/gguf_broken, defined in one
// place: tests/cli/make_broken_gguf writes them (with expected.txt), and
// test_config checks the committed files still equal what this makes and that
// each one fails with its expected message.
//
// Each case is broken in exactly one way. `stage` says who must catch it:
// "gguf" = GgufFile parsing, "config" = ModelConfig::from_gguf.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "gguf_test_util.h"

namespace gguf_test {

struct BrokenCase {
    std::string name;    // file name, *.gguf
    std::string stage;   // "gguf" or "config"
    std::string expect;  // substring of the error message (no tabs, no ';')
    std::vector<uint8_t> bytes;
};

// A small valid file with one of everything the header parser walks.
inline sieve::GgufWriter small_file() {
    sieve::GgufWriter w;
    w.add_string("general.architecture", "llama");
    w.add_u32("llama.block_count", 1);
    w.add_string_array("tokenizer.ggml.tokens", {"<s>", "a", "bc"});
    w.add_f32_array("scores", {0.0f, -1.5f, 2.25f});
    const float a[16] = {1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12, 13, -14, 15, -16};
    w.add_tensor("alpha.weight", sieve::GgmlType::F32, {8, 2}, a, sizeof(a));
    w.add_tensor("beta.weight", sieve::GgmlType::F32, {4}, a, 16);
    return w;
}

template <class T>
void patch(std::vector<uint8_t> *b, size_t at, T v) {
    std::memcpy(b->data() + at, &v, sizeof(T));
}

// Byte position of a tensor info's n_dims field (right after its name); the
// dimensions, type and offset follow. 0 if the name is not found.
inline size_t tensor_info_pos(const std::vector<uint8_t> &b, const std::string &name) {
    std::vector<uint8_t> needle;
    append<uint64_t>(&needle, name.size());
    needle.insert(needle.end(), name.begin(), name.end());
    for (size_t p = 24; p + needle.size() <= b.size(); ++p)
        if (std::memcmp(b.data() + p, needle.data(), needle.size()) == 0) return p + needle.size();
    return 0;
}

inline std::vector<BrokenCase> make_broken_corpus() {
    using sieve::GgmlType;
    using sieve::GgufType;
    std::vector<BrokenCase> out;
    auto add = [&out](std::string name, std::string stage, std::string expect, std::vector<uint8_t> bytes) {
        out.push_back({std::move(name), std::move(stage), std::move(expect), std::move(bytes)});
    };
    const std::vector<uint8_t> good = small_file().to_bytes();
    auto cut = [&good](size_t n) { return std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(n)); };
    const size_t a_info = tensor_info_pos(good, "alpha.weight");  // its n_dims field

    // ---- header
    add("truncated_magic.gguf", "gguf", "is the file truncated", cut(3));
    add("truncated_counts.gguf", "gguf", "n_kv: need 8 bytes", cut(20));
    add("truncated_in_kv.gguf", "gguf", "key 'llama.block_count': value: need 4 bytes at offset 98", cut(100));
    add("truncated_in_tensor_info.gguf", "gguf", "is the file truncated", cut(a_info + 6));
    add("truncated_in_data.gguf", "gguf", "ends past the end of the file", cut(good.size() - 40));
    std::vector<uint8_t> b = good;
    std::memcpy(b.data(), "GGML", 4);
    add("bad_magic.gguf", "gguf", "bad magic", b);
    for (uint32_t v : {0u, 1u, 99u}) {
        b = good;
        patch<uint32_t>(&b, 4, v);
        add("version_" + std::to_string(v) + ".gguf", "gguf",
            v == 1 ? "version 1 is not supported" : "unsupported GGUF version " + std::to_string(v), b);
    }
    b = good;
    patch<uint64_t>(&b, 16, uint64_t(1) << 62);
    add("huge_n_kv.gguf", "gguf", "n_kv = 4611686018427387904 is impossible", b);
    b = good;
    patch<uint64_t>(&b, 8, ~uint64_t(0));
    add("huge_n_tensors.gguf", "gguf", "n_tensors = 18446744073709551615 is impossible", b);
    b = good;
    patch<uint64_t>(&b, 24, uint64_t(1) << 40);  // first key's length
    add("huge_string_length.gguf", "gguf", "string length 1099511627776", b);

    // ---- metadata values
    {
        sieve::GgufWriter w = small_file();
        w.add_raw("huge.array", GgufType::ARRAY, array_header(GgufType::UINT64, uint64_t(1) << 61));
        add("huge_array_count.gguf", "gguf", "array of 2305843009213693952 UINT64 elements", w.to_bytes());
    }
    for (uint32_t al : {0u, 3u, 1u << 30}) {
        sieve::GgufWriter w = small_file();
        w.add_u32("general.alignment", al);
        add("alignment_" + std::to_string(al) + ".gguf", "gguf",
            "key 'general.alignment': " + std::to_string(al) + " is not a power of two", w.to_bytes());
    }
    {
        sieve::GgufWriter w = small_file();
        w.add_string("general.alignment", "32");
        add("alignment_wrong_type.gguf", "gguf", "key 'general.alignment': expected UINT32, got STRING", w.to_bytes());
    }
    {
        sieve::GgufWriter w = small_file();
        w.add_raw("odd.type", static_cast<GgufType>(42), {1, 2, 3, 4});
        add("unknown_value_type.gguf", "gguf", "key 'odd.type': unknown value type 42", w.to_bytes());
    }
    {
        sieve::GgufWriter w = small_file();
        w.add_u32("llama.block_count", 2);
        add("duplicate_key.gguf", "gguf", "key 'llama.block_count': duplicate key", w.to_bytes());
    }
    {
        sieve::GgufWriter w = small_file();
        w.add_raw("flag", GgufType::BOOL, {2});
        add("bool_value_2.gguf", "gguf", "key 'flag': BOOL element 0 is 2", w.to_bytes());
    }
    {
        std::vector<uint8_t> v;
        for (int d = 0; d < 40; ++d) {
            const std::vector<uint8_t> h = array_header(GgufType::ARRAY, 1);
            v.insert(v.end(), h.begin(), h.end());
        }
        const std::vector<uint8_t> leaf = array_header(GgufType::UINT8, 0);
        v.insert(v.end(), leaf.begin(), leaf.end());
        sieve::GgufWriter w = small_file();
        w.add_raw("deep", GgufType::ARRAY, v);
        add("array_too_deep.gguf", "gguf", "arrays nest deeper than", w.to_bytes());
    }

    // ---- tensor infos and data
    const float d[64] = {};
    auto one_tensor = [&d](GgmlType type, std::vector<int64_t> ne, size_t n_bytes) {
        sieve::GgufWriter w = small_file();
        w.add_tensor("bad", type, std::move(ne), d, n_bytes);
        return w.to_bytes();
    };
    add("zero_dim.gguf", "gguf", "tensor 'bad': dimension 1 is 0", one_tensor(GgmlType::F32, {4, 0}, 0));
    add("overflowing_dims.gguf", "gguf", "tensor 'bad': the element count of the shape overflows",
        one_tensor(GgmlType::F32, {int64_t(1) << 32, int64_t(1) << 32}, 16));
    add("overflowing_bytes.gguf", "gguf", "tensor 'bad': data size of shape",
        one_tensor(GgmlType::F64, {int64_t(1) << 31, int64_t(1) << 31}, 16));
    add("n_dims_0.gguf", "gguf", "tensor 'bad': n_dims is 0", one_tensor(GgmlType::F32, {}, 4));
    add("n_dims_5.gguf", "gguf", "tensor 'bad': n_dims is 5", one_tensor(GgmlType::F32, {1, 1, 1, 1, 1}, 4));
    add("unknown_tensor_type.gguf", "gguf", "tensor 'bad': unknown tensor type id 77",
        one_tensor(static_cast<GgmlType>(77), {4}, 16));
    add("block_size_mismatch.gguf", "gguf", "not a multiple of the Q4_0 block size 32",
        one_tensor(GgmlType::Q4_0, {48}, 36));
    add("tensor_out_of_file.gguf", "gguf", "tensor 'bad': data [96, 16480) at offset 448 ends past the end of the file (size 512)", one_tensor(GgmlType::F32, {4096}, 64));
    {
        sieve::GgufWriter w = small_file();
        w.add_tensor("first", GgmlType::F32, {16}, d, 32);  // claims 64 bytes, 32 written
        w.add_tensor("second", GgmlType::F32, {8}, d, 32);
        add("tensors_overlap.gguf", "gguf", "'first' [96, 160) and 'second' [128, 160) overlap", w.to_bytes());
    }
    b = good;
    patch<uint64_t>(&b, a_info + 4 + 2 * 8 + 4, 8);  // alpha.weight: offset 0 -> 8
    add("tensor_misaligned.gguf", "gguf", "tensor 'alpha.weight': offset 8 is not a multiple of the alignment 32", b);
    {
        sieve::GgufWriter w = small_file();
        w.add_tensor("alpha.weight", GgmlType::F32, {4}, d, 16);
        add("duplicate_tensor.gguf", "gguf", "tensor 'alpha.weight': duplicate tensor name", w.to_bytes());
    }

    // ---- model configuration (valid GGUF, invalid model)
    auto model = [](TinyModel m) {
        m.n_layer = 1;
        m.weight_type = GgmlType::F16;
        return make_tiny_model(m, 11).to_bytes();
    };
    {
        TinyModel m;
        m.skip_keys = {"llama.block_count"};
        m.extra_kvs = [](sieve::GgufWriter *w) { w->add_string("llama.block_count", "1"); };
        add("block_count_is_string.gguf", "config", "key 'llama.block_count': expected an integer, got STRING",
            model(m));
    }
    {
        TinyModel m;
        m.skip_keys = {"llama.rope.freq_base"};
        m.extra_kvs = [](sieve::GgufWriter *w) { w->add_string("llama.rope.freq_base", "10000"); };
        add("freq_base_is_string.gguf", "config", "key 'llama.rope.freq_base': expected a number", model(m));
    }
    {
        TinyModel m;
        m.n_head_kv = 3;
        add("heads_not_dividing.gguf", "config", "'llama.attention.head_count_kv' = 3 does not divide", model(m));
    }
    {
        TinyModel m;
        m.n_head = 3;
        m.n_head_kv = 1;
        add("embd_not_multiple_of_heads.gguf", "config", "'llama.embedding_length' = 16 is not a multiple", model(m));
    }
    {
        TinyModel m;
        m.edit_tensor = [](std::string *name, std::vector<int64_t> *ne, bool *) {
            if (*name == "token_embd.weight" || *name == "output.weight") (*ne)[1] = 24;
        };
        add("vocab_tokens_mismatch.gguf", "config",
            "tokenizer.ggml.tokens has 20 tokens but token_embd.weight has 24 rows", model(m));
    }
    {
        TinyModel m;
        m.extra_kvs = [](sieve::GgufWriter *w) { w->add_u32("llama.vocab_size", 32000); };
        add("vocab_size_key_mismatch.gguf", "config", "'llama.vocab_size' = 32000 but token_embd.weight has 20 rows",
            model(m));
    }
    {
        TinyModel m;
        m.edit_tensor = [](std::string *name, std::vector<int64_t> *, bool *keep) {
            if (*name == "blk.0.ffn_down.weight") *keep = false;
        };
        add("missing_tensor.gguf", "config", "missing tensor 'blk.0.ffn_down.weight'", model(m));
    }
    {
        TinyModel m;
        m.edit_tensor = [](std::string *name, std::vector<int64_t> *ne, bool *) {
            if (*name == "blk.0.attn_k.weight") (*ne)[1] = 16;
        };
        add("wrong_tensor_shape.gguf", "config", "tensor 'blk.0.attn_k.weight': expected [16, 8], got [16, 16]",
            model(m));
    }
    {
        TinyModel m;
        m.arch = "falcon";
        add("unsupported_arch.gguf", "config", "unsupported architecture 'falcon'", model(m));
    }
    {
        TinyModel m;
        m.skip_keys = {"general.architecture"};
        add("missing_arch.gguf", "config", "missing key 'general.architecture'", model(m));
    }
    {
        TinyModel m;
        m.arch = "qwen2";
        add("qwen2_without_bias.gguf", "config", "missing tensor 'blk.0.attn_q.bias'", model(m));
    }
    {
        TinyModel m;
        m.extra_kvs = [](sieve::GgufWriter *w) { w->add_string("llama.rope.scaling.type", "yarn"); };
        add("rope_scaling_yarn.gguf", "config", "rope scaling type 'yarn' is not supported", model(m));
    }
    return out;
}

}  // namespace gguf_test
