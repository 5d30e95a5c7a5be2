// Writes random-weight models with the shapes of real ones, for speed
// measurements (`sieve bench`, llama-bench): speed depends on shapes and
// weight types, not on values. The files are complete GGUF models that
// llama.cpp also loads: a gpt2-style BPE vocabulary padded with filler tokens
// to the real vocabulary size (the embedding table's row count must match).
//
//   make_bench_model SHAPE TYPE OUT.gguf [--seed N]
//
//   SHAPE: smollm2-135m  llama, 30 layers, 576, 9/3 heads, ff 1536, vocab 49152, tied
//          qwen2.5-0.5b  qwen2, 24 layers, 896, 14/2 heads, ff 4864, vocab 151936, q/k/v biases, tied
//          llama3.2-1b   llama, 16 layers, 2048, 32/8 heads, ff 8192, vocab 128256, tied,
//                        rope base 500000, llama3 rope_freqs
//   TYPE:  every matrix (embedding included) in one of F32 F16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0
//          (sieve's reference quantizers); norms and biases stay F32.
//
// Values: uniform with the standard deviation of a scaled init (fan-in), from
// a counter-based generator, so multi-GiB files take seconds, not minutes.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "sieve/gguf/gguf.h"
#include "sieve/quant/dequant.h"
#include "sieve/tokenizer/unicode.h"

namespace {

using sieve::GgmlType;

struct Shape {
    const char *name;
    const char *arch;
    int64_t n_layer, n_embd, n_head, n_head_kv, n_ff, n_vocab;
    double rope_base;
    bool bias, rope_freqs;
    int64_t n_ctx_train;
};

constexpr Shape k_shapes[] = {
    {"smollm2-135m", "llama", 30, 576, 9, 3, 1536, 49152, 100000.0, false, false, 8192},
    {"qwen2.5-0.5b", "qwen2", 24, 896, 14, 2, 4864, 151936, 1000000.0, true, false, 32768},
    {"llama3.2-1b", "llama", 16, 2048, 32, 8, 8192, 128256, 500000.0, false, true, 131072},
};

// splitmix64: a stateless mix of a counter; good enough for weights whose
// values nobody reads.
uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

class Maker {
public:
    explicit Maker(uint64_t seed) : state_(seed) {}

    // Uniform values with standard deviation `std` around `mean`, encoded as
    // type row by row (never one float copy of a whole large tensor).
    bool tensor(const std::string &name, GgmlType type, int64_t n_cols, int64_t n_rows, double std, double mean = 0.0) {
        int64_t row_bytes = 0;
        if (!sieve::type_row_bytes(type, n_cols, &row_bytes)) {
            std::fprintf(stderr, "tensor %s: %s rows of %lld elements impossible\n", name.c_str(),
                         sieve::type_name(type), static_cast<long long>(n_cols));
            return false;
        }
        std::vector<uint8_t> bytes(static_cast<size_t>(row_bytes * n_rows));
        std::vector<float> row(static_cast<size_t>(n_cols));
        const double half = std * std::sqrt(3.0);  // uniform [-h, h] has std h / sqrt(3)
        for (int64_t r = 0; r < n_rows; ++r) {
            for (float &x : row) {
                const double u = static_cast<double>(mix(state_++) >> 11) * 0x1.0p-53;  // [0, 1)
                x = static_cast<float>(mean + half * (2.0 * u - 1.0));
            }
            if (!sieve::quantize_row_ref(type, row.data(), bytes.data() + r * row_bytes, n_cols)) {
                std::fprintf(stderr, "no reference quantizer for %s\n", sieve::type_name(type));
                return false;
            }
        }
        const std::vector<int64_t> ne = n_rows == 1 ? std::vector<int64_t>{n_cols} : std::vector<int64_t>{n_cols, n_rows};
        w_.add_tensor(name, type, ne, bytes.data(), bytes.size());
        return true;
    }

    sieve::GgufWriter &writer() { return w_; }

private:
    uint64_t state_;
    sieve::GgufWriter w_;
};

// One token per byte, spelled in GPT-2's byte alphabet (as the tokenizer reads it).
std::vector<std::string> byte_tokens() {
    std::vector<std::string> out(256);
    for (int b = 0; b < 256; ++b)
        sieve::utf8_append(&out[static_cast<size_t>(b)], sieve::gpt2_byte_to_codepoint(static_cast<uint8_t>(b)));
    return out;
}

void add_vocab(sieve::GgufWriter &w, const Shape &s) {
    std::vector<std::string> tokens = byte_tokens();
    std::vector<std::string> merges = {"Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r"};
    for (const std::string &m : merges) tokens.push_back(m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1));
    // Filler up to the real size, then three control tokens at the end.
    for (int64_t i = static_cast<int64_t>(tokens.size()); i < s.n_vocab - 3; ++i) tokens.push_back("<filler" + std::to_string(i) + ">");
    std::vector<int32_t> types(tokens.size(), 1);
    for (const char *c : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
        tokens.push_back(c);
        types.push_back(3);
    }
    const auto id = [&](int back) { return static_cast<uint32_t>(s.n_vocab - back); };
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", std::string(s.arch) == "qwen2" ? "qwen2" : "llama-bpe");
    w.add_string_array("tokenizer.ggml.tokens", tokens);
    w.add_i32_array("tokenizer.ggml.token_type", types);
    w.add_string_array("tokenizer.ggml.merges", merges);
    w.add_u32("tokenizer.ggml.bos_token_id", id(3));
    w.add_u32("tokenizer.ggml.eos_token_id", id(1));
    w.add_u32("tokenizer.ggml.padding_token_id", id(3));
    w.add_bool("tokenizer.ggml.add_bos_token", false);
}

bool make(const Shape &s, GgmlType type, uint64_t seed, const std::string &out) {
    Maker m(seed);
    sieve::GgufWriter &w = m.writer();
    const std::string a = s.arch;
    const int64_t head_dim = s.n_embd / s.n_head;
    const int64_t q_dim = s.n_embd, kv_dim = s.n_head_kv * head_dim;
    w.add_string("general.architecture", a);
    w.add_string("general.name", std::string("sieve-bench-") + s.name);
    w.add_u32("general.file_type", static_cast<uint32_t>(type == GgmlType::F32 ? 0 : type == GgmlType::F16 ? 1
                                                         : type == GgmlType::Q4_0 ? 2 : type == GgmlType::Q4_1 ? 3
                                                         : type == GgmlType::Q8_0 ? 7 : type == GgmlType::Q5_0 ? 8 : 9));
    w.add_u32(a + ".context_length", static_cast<uint32_t>(s.n_ctx_train));
    w.add_u32(a + ".embedding_length", static_cast<uint32_t>(s.n_embd));
    w.add_u32(a + ".feed_forward_length", static_cast<uint32_t>(s.n_ff));
    w.add_u32(a + ".block_count", static_cast<uint32_t>(s.n_layer));
    w.add_u32(a + ".attention.head_count", static_cast<uint32_t>(s.n_head));
    w.add_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
    w.add_u32(a + ".rope.dimension_count", static_cast<uint32_t>(head_dim));
    w.add_f32(a + ".rope.freq_base", static_cast<float>(s.rope_base));
    w.add_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
    w.add_u32(a + ".vocab_size", static_cast<uint32_t>(s.n_vocab));
    add_vocab(w, s);

    const double in_e = 1.0 / std::sqrt(static_cast<double>(s.n_embd));
    const double in_f = 1.0 / std::sqrt(static_cast<double>(s.n_ff));
    bool ok = m.tensor("token_embd.weight", type, s.n_embd, s.n_vocab, 0.3);
    ok = ok && m.tensor("output_norm.weight", GgmlType::F32, s.n_embd, 1, 0.1, 1.0);
    if (s.rope_freqs) {
        // Llama 3's rope scaling as divisors (1 for high frequencies .. 8 for low).
        std::vector<float> div(static_cast<size_t>(head_dim / 2));
        for (size_t i = 0; i < div.size(); ++i) div[i] = 1.0f + 7.0f * static_cast<float>(i) / static_cast<float>(div.size() - 1);
        w.add_tensor("rope_freqs.weight", GgmlType::F32, {head_dim / 2}, div.data(), div.size() * sizeof(float));
    }
    for (int64_t il = 0; il < s.n_layer && ok; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        ok = ok && m.tensor(p + "attn_norm.weight", GgmlType::F32, s.n_embd, 1, 0.1, 1.0);
        ok = ok && m.tensor(p + "attn_q.weight", type, s.n_embd, q_dim, 1.5 * in_e);
        ok = ok && m.tensor(p + "attn_k.weight", type, s.n_embd, kv_dim, 1.5 * in_e);
        ok = ok && m.tensor(p + "attn_v.weight", type, s.n_embd, kv_dim, in_e);
        if (s.bias) {
            ok = ok && m.tensor(p + "attn_q.bias", GgmlType::F32, q_dim, 1, 0.3);
            ok = ok && m.tensor(p + "attn_k.bias", GgmlType::F32, kv_dim, 1, 0.3);
            ok = ok && m.tensor(p + "attn_v.bias", GgmlType::F32, kv_dim, 1, 0.3);
        }
        ok = ok && m.tensor(p + "attn_output.weight", type, q_dim, s.n_embd, in_e);
        ok = ok && m.tensor(p + "ffn_norm.weight", GgmlType::F32, s.n_embd, 1, 0.1, 1.0);
        ok = ok && m.tensor(p + "ffn_gate.weight", type, s.n_embd, s.n_ff, in_e);
        ok = ok && m.tensor(p + "ffn_up.weight", type, s.n_embd, s.n_ff, in_e);
        ok = ok && m.tensor(p + "ffn_down.weight", type, s.n_ff, s.n_embd, in_f);
    }
    if (!ok) return false;
    sieve::Status st = w.write(out);
    if (!st.ok()) {
        std::fprintf(stderr, "error: %s\n", st.message().c_str());
        return false;
    }
    return true;
}

int usage() {
    std::fprintf(stderr,
                 "usage: make_bench_model SHAPE TYPE OUT.gguf [--seed N]\n"
                 "  SHAPE: smollm2-135m | qwen2.5-0.5b | llama3.2-1b\n"
                 "  TYPE:  F32 F16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0\n");
    return 2;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 4) return usage();
    const Shape *shape = nullptr;
    for (const Shape &s : k_shapes)
        if (std::strcmp(argv[1], s.name) == 0) shape = &s;
    if (!shape) {
        std::fprintf(stderr, "unknown shape '%s'\n", argv[1]);
        return usage();
    }
    GgmlType type = GgmlType::F32;
    bool found = false;
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                       GgmlType::Q8_0}) {
        if (std::strcmp(argv[2], sieve::type_name(t)) == 0) {
            type = t;
            found = true;
        }
    }
    if (!found) {
        std::fprintf(stderr, "unknown or unsupported type '%s'\n", argv[2]);
        return usage();
    }
    uint64_t seed = 1234;
    for (int i = 4; i < argc; ++i) {
        if (std::strcmp(argv[i], "--seed") == 0 && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
        else return usage();
    }
    return make(*shape, type, seed, argv[3]) ? 0 : 1;
}
