// Helpers shared by the GGUF / config tests and the broken-file generator:
// raw value encoding and a tiny random-weight llama/qwen2 model built with
// GgufWriter, with hooks to break it in one chosen way.
#pragma once

#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "sieve/core/fp16.h"
#include "sieve/gguf/gguf.h"

namespace gguf_test {

template <class T>
void append(std::vector<uint8_t> *out, T v) {
    const size_t at = out->size();
    out->resize(at + sizeof(T));
    std::memcpy(out->data() + at, &v, sizeof(T));
}

// The bytes of an ARRAY value up to its elements: element type, count.
inline std::vector<uint8_t> array_header(sieve::GgufType elem, uint64_t n) {
    std::vector<uint8_t> b;
    append(&b, static_cast<uint32_t>(elem));
    append(&b, n);
    return b;
}

struct TinyModel {
    std::string arch = "llama";
    int64_t n_embd = 16;
    int64_t n_head = 4;
    int64_t n_head_kv = 2;
    int64_t n_ff = 24;
    int64_t n_layer = 2;
    int64_t n_vocab = 20;
    int64_t n_ctx = 64;
    bool tied = false;       // leave out output.weight
    bool tokens = true;      // write tokenizer.ggml.tokens (n_vocab of them)
    bool qkv_bias = false;   // write blk.N.attn_{q,k,v}.bias (qwen2)
    sieve::GgmlType weight_type = sieve::GgmlType::F32;  // F32 or F16
    std::set<std::string> skip_keys;  // metadata to leave out (e.g. to re-add with another type)
    // Called for each tensor before it is written: may rename it, change its
    // shape or drop it (*keep = false). The data is sized for the final shape.
    std::function<void(std::string *name, std::vector<int64_t> *ne, bool *keep)> edit_tensor;
    std::function<void(sieve::GgufWriter *)> extra_kvs;  // added after the standard keys
};

inline sieve::GgufWriter make_tiny_model(const TinyModel &m, uint32_t seed) {
    using sieve::GgmlType;
    sieve::GgufWriter w;
    // Raw mt19937 output (fully specified by the standard, unlike the
    // distributions) keeps generated files byte-identical across toolchains.
    std::mt19937 rng(seed);
    auto uni = [&rng] { return static_cast<float>(rng() >> 8) * (1.0f / 16777216.0f) - 0.5f; };
    const std::string a = m.arch;
    auto key = [&](const std::string &k) { return m.skip_keys.count(k) == 0; };
    if (key("general.architecture")) w.add_string("general.architecture", a);
    if (key("general.name")) w.add_string("general.name", "tiny-" + a);
    if (key(a + ".context_length")) w.add_u32(a + ".context_length", static_cast<uint32_t>(m.n_ctx));
    if (key(a + ".embedding_length")) w.add_u32(a + ".embedding_length", static_cast<uint32_t>(m.n_embd));
    if (key(a + ".block_count")) w.add_u32(a + ".block_count", static_cast<uint32_t>(m.n_layer));
    if (key(a + ".feed_forward_length")) w.add_u32(a + ".feed_forward_length", static_cast<uint32_t>(m.n_ff));
    if (key(a + ".attention.head_count")) w.add_u32(a + ".attention.head_count", static_cast<uint32_t>(m.n_head));
    if (key(a + ".attention.head_count_kv"))
        w.add_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(m.n_head_kv));
    if (key(a + ".attention.layer_norm_rms_epsilon")) w.add_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
    if (key(a + ".rope.freq_base")) w.add_f32(a + ".rope.freq_base", 10000.0f);
    if (m.tokens && key("tokenizer.ggml.tokens")) {
        std::vector<std::string> toks;
        for (int64_t k = 0; k < m.n_vocab; ++k) toks.push_back("t" + std::to_string(k));
        w.add_string_array("tokenizer.ggml.tokens", toks);
    }
    if (m.extra_kvs) m.extra_kvs(&w);

    const int64_t head_dim = m.n_embd / m.n_head;
    const int64_t q_dim = m.n_head * head_dim, kv_dim = m.n_head_kv * head_dim;
    auto tensor = [&](std::string name, std::vector<int64_t> ne, bool is_norm) {
        bool keep = true;
        if (m.edit_tensor) m.edit_tensor(&name, &ne, &keep);
        if (!keep) return;
        int64_t n = 1;
        for (int64_t x : ne) n *= x;
        const GgmlType type = is_norm ? GgmlType::F32 : m.weight_type;
        std::vector<uint8_t> data;
        for (int64_t k = 0; k < n; ++k) {
            const float v = is_norm ? 1.0f + 0.1f * uni() : uni();
            if (type == GgmlType::F32) append(&data, v);
            else append(&data, sieve::fp32_to_fp16(v));
        }
        w.add_tensor(name, type, ne, data.data(), data.size());
    };
    tensor("token_embd.weight", {m.n_embd, m.n_vocab}, false);
    tensor("output_norm.weight", {m.n_embd}, true);
    if (!m.tied) tensor("output.weight", {m.n_embd, m.n_vocab}, false);
    for (int64_t il = 0; il < m.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        tensor(p + "attn_norm.weight", {m.n_embd}, true);
        tensor(p + "attn_q.weight", {m.n_embd, q_dim}, false);
        tensor(p + "attn_k.weight", {m.n_embd, kv_dim}, false);
        tensor(p + "attn_v.weight", {m.n_embd, kv_dim}, false);
        if (m.qkv_bias) {
            tensor(p + "attn_q.bias", {q_dim}, true);
            tensor(p + "attn_k.bias", {kv_dim}, true);
            tensor(p + "attn_v.bias", {kv_dim}, true);
        }
        tensor(p + "attn_output.weight", {q_dim, m.n_embd}, false);
        tensor(p + "ffn_norm.weight", {m.n_embd}, true);
        tensor(p + "ffn_gate.weight", {m.n_embd, m.n_ff}, false);
        tensor(p + "ffn_up.weight", {m.n_embd, m.n_ff}, false);
        tensor(p + "ffn_down.weight", {m.n_ff, m.n_embd}, false);
    }
    return w;
}

}  // namespace gguf_test
