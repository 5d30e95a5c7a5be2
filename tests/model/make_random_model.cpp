// Writes a small random-weight model as a complete GGUF file (config,
// gpt2-style BPE vocabulary, chat template, weights) with sieve's GgufWriter.
// The model tests run it through sieve and the NumPy reference; random
// weights (fixed seed, never zeros) exercise paths stories260K and SmolLM2 do
// not: qwen2 biases and neox RoPE, a separate output matrix, rope_freqs.
//
//   make_random_model OUT.gguf [--arch qwen2|llama] [--seed N] [--float]
//
// qwen2: GQA 8/2, head_dim 32, q/k/v biases, separate output.weight, rope
//        base 1e6, weights in F32, F16 and Q8_0.
// llama: GQA 4/1, head_dim 64, tied embeddings, rope_freqs.weight divisors
//        (Llama 3.1 style), weights in Q8_0, F16, Q4_0, Q4_1 and Q5_1.
// --float stores every block-quantized matrix as F16 instead: no 8-bit
// activation rounding in sieve's matmul, so logits can be held to f32 accuracy.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "sieve/gguf/gguf.h"
#include "sieve/quant/dequant.h"
#include "sieve/tokenizer/unicode.h"

namespace {

using sieve::GgmlType;

struct Shape {
    std::string arch;
    int64_t n_embd, n_head, n_head_kv, n_ff, n_layer;
    double rope_base;
    bool bias, tied, rope_freqs;
    GgmlType t_embd, t_out, t_q, t_k, t_v, t_o, t_gate, t_up, t_down;
};

// One token per byte, spelled in GPT-2's byte alphabet (as the tokenizer reads it).
std::vector<std::string> byte_tokens() {
    std::vector<std::string> out(256);
    for (int b = 0; b < 256; ++b)
        sieve::utf8_append(&out[static_cast<size_t>(b)], sieve::gpt2_byte_to_codepoint(static_cast<uint8_t>(b)));
    return out;
}

struct Vocab {
    std::vector<std::string> tokens, merges;
    std::vector<int32_t> types;  // 1 normal, 3 control
    int32_t eot = 0, im_start = 0, im_end = 0;
};

// 256 byte tokens, a few English merges (each merge's parts already exist),
// then ChatML control tokens: 299 tokens, an odd size on purpose.
Vocab make_vocab() {
    Vocab v;
    v.tokens = byte_tokens();
    const char *merges[] = {"Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ s", "r e", "a t",
                            "e n", "Ġ w", "o r", "i s", "Ġ o", "e s", "a n", "Ġ c", "i t", "Ġ b",
                            "Ġ f", "a r", "a l", "Ġ m", "Ġ p", "Ġ d", "o u", "l e", "Ġ h", "i c",
                            "Ġa n", "Ġan d", "n g", "i ng", "Ġ i", "Ġo f", "Ġt o", "Ġi n", "Ġi s", "e d"};
    for (const char *m : merges) {
        std::string s = m;
        const size_t sp = s.find(' ');
        v.merges.push_back(s);
        v.tokens.push_back(s.substr(0, sp) + s.substr(sp + 1));
    }
    v.types.assign(v.tokens.size(), 1);
    const auto add_control = [&](const char *t) {
        v.tokens.push_back(t);
        v.types.push_back(3);
        return static_cast<int32_t>(v.tokens.size() - 1);
    };
    v.eot = add_control("<|endoftext|>");
    v.im_start = add_control("<|im_start|>");
    v.im_end = add_control("<|im_end|>");
    return v;
}

class Maker {
public:
    Maker(const Shape &s, uint64_t seed) : s_(s), rng_(seed) {}

    // Gaussian values scaled by `std` (plus `mean`), encoded as type.
    void tensor(const std::string &name, GgmlType type, std::vector<int64_t> ne, double std, double mean = 0.0) {
        int64_t n = 1;
        for (int64_t d : ne) n *= d;
        std::vector<float> vals(static_cast<size_t>(n));
        std::normal_distribution<double> dist(0.0, 1.0);
        for (float &x : vals) x = static_cast<float>(mean + std * dist(rng_));
        put(name, type, ne, vals);
    }

    void put(const std::string &name, GgmlType type, const std::vector<int64_t> &ne, const std::vector<float> &vals) {
        int64_t row_bytes = 0;
        if (!sieve::type_row_bytes(type, ne[0], &row_bytes)) {
            std::fprintf(stderr, "tensor %s: %s rows of %lld elements impossible\n", name.c_str(),
                         sieve::type_name(type), static_cast<long long>(ne[0]));
            std::exit(1);
        }
        const int64_t n_rows = static_cast<int64_t>(vals.size()) / ne[0];
        std::vector<uint8_t> bytes(static_cast<size_t>(row_bytes * n_rows));
        for (int64_t r = 0; r < n_rows; ++r) {
            if (!sieve::quantize_row_ref(type, vals.data() + r * ne[0], bytes.data() + r * row_bytes, ne[0])) {
                std::fprintf(stderr, "no reference quantizer for %s\n", sieve::type_name(type));
                std::exit(1);
            }
        }
        w_.add_tensor(name, type, ne, bytes.data(), bytes.size());
    }

    sieve::Status write(const std::string &path);

private:
    const Shape &s_;
    std::mt19937_64 rng_;
    sieve::GgufWriter w_;
};

sieve::Status Maker::write(const std::string &path) {
    const Shape &s = s_;
    const std::string a = s.arch;
    const int64_t head_dim = s.n_embd / s.n_head;
    const int64_t q_dim = s.n_embd, kv_dim = s.n_head_kv * head_dim;
    const Vocab v = make_vocab();
    const int64_t n_vocab = static_cast<int64_t>(v.tokens.size());

    w_.add_string("general.architecture", a);
    w_.add_string("general.name", "sieve-random-" + a);
    w_.add_u32(a + ".context_length", 4096);
    w_.add_u32(a + ".embedding_length", static_cast<uint32_t>(s.n_embd));
    w_.add_u32(a + ".feed_forward_length", static_cast<uint32_t>(s.n_ff));
    w_.add_u32(a + ".block_count", static_cast<uint32_t>(s.n_layer));
    w_.add_u32(a + ".attention.head_count", static_cast<uint32_t>(s.n_head));
    w_.add_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
    w_.add_u32(a + ".rope.dimension_count", static_cast<uint32_t>(head_dim));
    w_.add_f32(a + ".rope.freq_base", static_cast<float>(s.rope_base));
    w_.add_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
    w_.add_u32(a + ".vocab_size", static_cast<uint32_t>(n_vocab));

    w_.add_string("tokenizer.ggml.model", "gpt2");
    w_.add_string("tokenizer.ggml.pre", a == "qwen2" ? "qwen2" : "llama-bpe");
    w_.add_string_array("tokenizer.ggml.tokens", v.tokens);
    w_.add_i32_array("tokenizer.ggml.token_type", v.types);
    w_.add_string_array("tokenizer.ggml.merges", v.merges);
    w_.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(v.eot));
    w_.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(v.im_end));
    w_.add_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(v.eot));
    w_.add_bool("tokenizer.ggml.add_bos_token", false);
    w_.add_string("tokenizer.chat_template",
                  "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                  "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' "
                  "}}{% endif %}");

    // Scales: projections ~ 1/sqrt(fan_in) keep activations O(1); the LM
    // head gets logits with a spread of a few units so top-1 is rarely a tie.
    const double in_e = 1.0 / std::sqrt(static_cast<double>(s.n_embd));
    const double in_f = 1.0 / std::sqrt(static_cast<double>(s.n_ff));
    tensor("token_embd.weight", s.t_embd, {s.n_embd, n_vocab}, s.tied ? 0.3 : 1.0);
    tensor("output_norm.weight", GgmlType::F32, {s.n_embd}, 0.1, 1.0);
    if (!s.tied) tensor("output.weight", s.t_out, {s.n_embd, n_vocab}, 3.0 * in_e);
    if (s.rope_freqs) {
        // Divisors ramp from 1 (high frequencies kept) to 8 (low ones slowed), as Llama 3.1's do.
        std::vector<float> div(static_cast<size_t>(head_dim / 2));
        for (size_t i = 0; i < div.size(); ++i) div[i] = 1.0f + 7.0f * static_cast<float>(i) / (div.size() - 1);
        put("rope_freqs.weight", GgmlType::F32, {head_dim / 2}, div);
    }
    for (int64_t il = 0; il < s.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        tensor(p + "attn_norm.weight", GgmlType::F32, {s.n_embd}, 0.1, 1.0);
        tensor(p + "attn_q.weight", s.t_q, {s.n_embd, q_dim}, 1.5 * in_e);
        tensor(p + "attn_k.weight", s.t_k, {s.n_embd, kv_dim}, 1.5 * in_e);
        tensor(p + "attn_v.weight", s.t_v, {s.n_embd, kv_dim}, in_e);
        if (s.bias) {
            tensor(p + "attn_q.bias", GgmlType::F32, {q_dim}, 0.3);
            tensor(p + "attn_k.bias", GgmlType::F32, {kv_dim}, 0.3);
            tensor(p + "attn_v.bias", GgmlType::F32, {kv_dim}, 0.3);
        }
        tensor(p + "attn_output.weight", s.t_o, {q_dim, s.n_embd}, in_e);
        tensor(p + "ffn_norm.weight", GgmlType::F32, {s.n_embd}, 0.1, 1.0);
        tensor(p + "ffn_gate.weight", s.t_gate, {s.n_embd, s.n_ff}, in_e);
        tensor(p + "ffn_up.weight", s.t_up, {s.n_embd, s.n_ff}, in_e);
        tensor(p + "ffn_down.weight", s.t_down, {s.n_ff, s.n_embd}, in_f);
    }
    return w_.write(path);
}

int usage() {
    std::fprintf(stderr, "usage: make_random_model OUT.gguf [--arch qwen2|llama] [--seed N] [--float]\n");
    return 2;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2) return usage();
    const std::string out = argv[1];
    std::string arch = "qwen2";
    uint64_t seed = 1234;
    bool all_float = false;
    for (int i = 2; i < argc; ++i) {
        if (std::strcmp(argv[i], "--arch") == 0 && i + 1 < argc) {
            arch = argv[++i];
        } else if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            seed = std::strtoull(argv[++i], nullptr, 10);
        } else if (std::strcmp(argv[i], "--float") == 0) {
            all_float = true;
        } else {
            return usage();
        }
    }
    using T = GgmlType;
    Shape s;
    if (arch == "qwen2") {
        s = Shape{"qwen2", 256, 8, 2, 640, 3, 1e6, true, false, false,
                  T::F16, T::F32, T::F16, T::F32, T::Q8_0, T::F16, T::Q8_0, T::F16, T::Q8_0};
    } else if (arch == "llama") {
        s = Shape{"llama", 256, 4, 1, 512, 2, 5e5, false, true, true,
                  T::Q8_0, T::Q8_0, T::Q4_0, T::F16, T::Q5_1, T::Q4_1, T::Q4_0, T::Q5_1, T::Q4_1};
    } else {
        return usage();
    }
    if (all_float) {
        for (GgmlType *t : {&s.t_embd, &s.t_out, &s.t_q, &s.t_k, &s.t_v, &s.t_o, &s.t_gate, &s.t_up, &s.t_down})
            if (*t != T::F32) *t = T::F16;
    }
    Maker m(s, seed);
    sieve::Status st = m.write(out);
    if (!st.ok()) {
        std::fprintf(stderr, "error: %s\n", st.message().c_str());
        return 1;
    }
    return 0;
}
