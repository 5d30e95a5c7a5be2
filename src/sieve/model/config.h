// Model hyper-parameters read from GGUF metadata and validated against the
// tensor table. Everything the forward pass, the KV store and `sieve info`
// need to know about a model's shape lives here.
#pragma once

#include <cstdint>
#include <string>

#include "sieve/core/status.h"
#include "sieve/gguf/gguf.h"

namespace sieve {

enum class ModelArch { llama, qwen2 };
const char *model_arch_name(ModelArch a);

// Which elements RoPE rotates together.
//   normal: adjacent pairs (x[2i], x[2i+1])       - llama in GGUF (HF q/k rows are permuted at conversion)
//   neox:   halves (x[i], x[i + head_dim / 2])    - qwen2
enum class RopeType { normal, neox };

// llama3-style frequency scaling ("rope.scaling.type" = "llama3" or the
// presence of rope_freqs, Llama 3.1+): low frequencies are divided by factor,
// high ones kept, a smooth ramp between.
//
// Three ways a file asks for scaled RoPE (at most one applies):
//   - a `rope_freqs.weight` tensor (Llama 3.1+ converters bake llama3 scaling
//     into it): has_freq_factors, divide frequency i by rope_freqs[i];
//   - "rope.scaling.type" = "linear": positions are divided by linear_factor;
//   - "rope.scaling.type" = "llama3" without the tensor: llama3 below.
struct RopeScaling {
    bool llama3 = false;
    float factor = 1.0f;
    float low_freq_factor = 1.0f;
    float high_freq_factor = 4.0f;
    int64_t original_ctx = 8192;
    bool has_freq_factors = false;  // rope_freqs.weight: F32 [head_dim / 2]
    float linear_factor = 1.0f;     // "linear": theta = (pos / linear_factor) * freq
};

struct ModelConfig {
    ModelArch arch = ModelArch::llama;
    std::string name;      // general.name, may be empty
    int64_t n_vocab = 0;   // rows of token_embd.weight
    int64_t n_embd = 0;    // hidden size
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0; // GQA: n_head % n_head_kv == 0
    int64_t head_dim = 0;  // n_embd / n_head unless attention.key_length says otherwise
    int64_t n_ff = 0;      // feed-forward hidden size
    int64_t n_ctx_train = 0;
    float norm_eps = 1e-5f;
    float rope_freq_base = 10000.0f;
    RopeType rope_type = RopeType::normal;
    RopeScaling rope_scaling;
    bool tied_embeddings = false;  // no output.weight: the LM head is token_embd.weight
    bool has_qkv_bias = false;     // qwen2

    // Reads "<arch>.*" keys, checks types, ranges and divisibility, and checks
    // every tensor the forward pass needs is present with the expected shape.
    // Errors name the key or tensor, expected vs actual, and suggest a fix.
    static Result<ModelConfig> from_gguf(const GgufFile &file);

    int64_t q_dim() const { return n_head * head_dim; }
    int64_t kv_dim() const { return n_head_kv * head_dim; }
    // KV cache bytes per token (K and V, all layers) at the given element size.
    int64_t kv_bytes_per_token(int64_t elem_bytes) const { return 2 * n_layer * kv_dim() * elem_bytes; }
};

}  // namespace sieve
