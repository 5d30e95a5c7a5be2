// ModelConfig::from_gguf: metadata -> hyper-parameters, then the tensor table
// is checked against them so the forward pass can bind weights without any
// further validation.
//
// Stages:
//   1. architecture (general.architecture: llama or qwen2)
//   2. scalar keys "<arch>.*", each type-checked, with defaults where files omit them
//   3. derived sizes and divisibility (head_dim, GQA groups)
//   4. rope scaling (rope_freqs tensor, rope.scaling.type)
//   5. tensors: presence, shape, type, for the globals and every layer
#include "sieve/model/config.h"

#include <cinttypes>
#include <cmath>
#include <vector>

namespace sieve {

const char *model_arch_name(ModelArch a) {
    switch (a) {
    case ModelArch::llama: return "llama";
    case ModelArch::qwen2: return "qwen2";
    }
    return "unknown";
}

namespace {

// Upper bounds that keep every derived product (q_dim * n_embd, KV bytes per
// token, ...) far from int64 overflow; real models are orders of magnitude below.
constexpr int64_t k_max_dim = int64_t(1) << 20;
constexpr int64_t k_max_layers = int64_t(1) << 12;
constexpr int64_t k_max_ctx = int64_t(1) << 31;

struct Keys {
    const GgufFile &f;
    std::string arch;
    std::string k(const char *suffix) const { return arch + "." + suffix; }

    // Required integer in [lo, hi].
    Status get_int(const char *suffix, int64_t lo, int64_t hi, int64_t *out) const {
        const std::string key = k(suffix);
        if (!f.has(key)) return Status::errorf("missing key '%s' — the file does not describe the model's shape", key.c_str());
        return get_int_present(key, lo, hi, out);
    }
    // Optional integer: *out unchanged when absent.
    Status get_int_opt(const char *suffix, int64_t lo, int64_t hi, int64_t *out) const {
        const std::string key = k(suffix);
        return f.has(key) ? get_int_present(key, lo, hi, out) : Status();
    }
    Status get_int_present(const std::string &key, int64_t lo, int64_t hi, int64_t *out) const {
        int64_t v = 0;
        SIEVE_TRY(f.get_int(key, &v));
        if (v < lo || v > hi)
            return Status::errorf("key '%s': %" PRId64 " is out of range, expected %" PRId64 " to %" PRId64, key.c_str(),
                                  v, lo, hi);
        *out = v;
        return Status();
    }
    // Optional positive finite float.
    Status get_pos_float_opt(const char *suffix, float *out) const {
        const std::string key = k(suffix);
        if (!f.has(key)) return Status();
        double v = 0;
        SIEVE_TRY(f.get_float(key, &v));
        if (!std::isfinite(v) || v <= 0 || v > 1e30)
            return Status::errorf("key '%s': %g is not a positive finite number", key.c_str(), v);
        *out = static_cast<float>(v);
        return Status();
    }
};

std::string shape_str(const int64_t *ne, int n) {
    std::string s = "[";
    for (int d = 0; d < n; ++d) s += strfmt("%s%" PRId64, d ? ", " : "", ne[d]);
    return s + "]";
}

enum class Kind { weight, norm };

// Checks one tensor's presence, shape and type. `hint` completes a shape
// mismatch message with the metadata key most likely at fault.
Status check_tensor(const GgufFile &f, const std::string &name, std::vector<int64_t> want, Kind kind,
                    const std::string &hint) {
    const GgufTensor *t = f.find_tensor(name);
    if (!t)
        return Status::errorf("missing tensor '%s' — the file is incomplete or not a llama-family model",
                              name.c_str());
    bool same = t->n_dims == static_cast<int>(want.size());
    for (size_t d = 0; same && d < want.size(); ++d) same = t->ne[d] == want[d];
    if (!same)
        return Status::errorf("tensor '%s': expected %s, got %s — %s", name.c_str(),
                              shape_str(want.data(), static_cast<int>(want.size())).c_str(),
                              shape_str(t->ne, t->n_dims).c_str(), hint.c_str());
    if (kind == Kind::norm && t->type != GgmlType::F32)
        return Status::errorf("tensor '%s': expected type F32, got %s", name.c_str(), type_name(t->type));
    if (kind == Kind::weight) {
        const TypeTraits *tr = type_traits(t->type);
        if (!tr || !tr->weights_ok)
            return Status::errorf("tensor '%s': weight type %s is not supported (use F32, F16, BF16, Q4_0, Q4_1, "
                                  "Q5_0, Q5_1, Q8_0 or Q2_K..Q6_K)",
                                  name.c_str(), type_name(t->type));
    }
    return Status();
}

Status read_arch(const GgufFile &f, ModelArch *arch, std::string *name) {
    if (!f.has("general.architecture")) return Status::error("missing key 'general.architecture' — is this a model file?");
    SIEVE_TRY(f.get_string("general.architecture", name));
    if (*name == "llama") *arch = ModelArch::llama;
    else if (*name == "qwen2") *arch = ModelArch::qwen2;
    else
        return Status::errorf("unsupported architecture '%s' (key 'general.architecture'): sieve supports llama "
                              "(SmolLM2, stories, Llama 2/3, Mistral) and qwen2",
                              name->c_str());
    return Status();
}

Status read_rope_scaling(const GgufFile &f, const Keys &keys, ModelConfig *c) {
    RopeScaling &rs = c->rope_scaling;
    if (f.find_tensor("rope_freqs.weight")) {
        SIEVE_TRY(check_tensor(f, "rope_freqs.weight", {c->head_dim / 2}, Kind::norm,
                               "rope_freqs must hold one divisor per rotated pair (head_dim / 2)"));
        rs.has_freq_factors = true;
    }
    const std::string type_key = keys.k("rope.scaling.type");
    if (!f.has(type_key)) return Status();
    std::string type;
    SIEVE_TRY(f.get_string(type_key, &type));
    if (type == "none") return Status();
    float factor = 1.0f;
    SIEVE_TRY(keys.get_pos_float_opt("rope.scaling.factor", &factor));
    if (type == "linear") {
        if (rs.has_freq_factors)
            return Status::errorf("key '%s' = linear and a rope_freqs.weight tensor both scale RoPE; expected one",
                                  type_key.c_str());
        rs.linear_factor = factor;
        return Status();
    }
    if (type == "llama3") {
        // With rope_freqs present the tensor already holds the result.
        if (rs.has_freq_factors) return Status();
        rs.llama3 = true;
        rs.factor = factor;
        SIEVE_TRY(keys.get_pos_float_opt("rope.scaling.low_freq_factor", &rs.low_freq_factor));
        SIEVE_TRY(keys.get_pos_float_opt("rope.scaling.high_freq_factor", &rs.high_freq_factor));
        SIEVE_TRY(keys.get_int_opt("rope.scaling.original_context_length", 1, k_max_ctx, &rs.original_ctx));
        if (rs.high_freq_factor <= rs.low_freq_factor)
            return Status::errorf("llama3 rope scaling: high_freq_factor %g must exceed low_freq_factor %g",
                                  static_cast<double>(rs.high_freq_factor), static_cast<double>(rs.low_freq_factor));
        return Status();
    }
    return Status::errorf("key '%s': rope scaling type '%s' is not supported (supported: none, linear, llama3)",
                          type_key.c_str(), type.c_str());
}

Status check_tensors(const GgufFile &f, const ModelConfig &c, const std::string &arch) {
    const std::string embd_hint = strfmt("check '%s.embedding_length' (%" PRId64 ")", arch.c_str(), c.n_embd);
    const std::string kv_hint =
        strfmt("check '%s.attention.head_count_kv' (%" PRId64 ") and the head size (%" PRId64
               "); is this file for another architecture?",
               arch.c_str(), c.n_head_kv, c.head_dim);
    const std::string q_hint = strfmt("check '%s.attention.head_count' (%" PRId64 ") and the head size (%" PRId64 ")",
                                      arch.c_str(), c.n_head, c.head_dim);
    const std::string ff_hint = strfmt("check '%s.feed_forward_length' (%" PRId64 ")", arch.c_str(), c.n_ff);

    SIEVE_TRY(check_tensor(f, "output_norm.weight", {c.n_embd}, Kind::norm, embd_hint));
    if (!c.tied_embeddings)
        SIEVE_TRY(check_tensor(f, "output.weight", {c.n_embd, c.n_vocab}, Kind::weight,
                               "the LM head must match token_embd.weight's vocabulary"));
    for (int64_t il = 0; il < c.n_layer; ++il) {
        const std::string p = strfmt("blk.%" PRId64 ".", il);
        SIEVE_TRY(check_tensor(f, p + "attn_norm.weight", {c.n_embd}, Kind::norm, embd_hint));
        SIEVE_TRY(check_tensor(f, p + "attn_q.weight", {c.n_embd, c.q_dim()}, Kind::weight, q_hint));
        SIEVE_TRY(check_tensor(f, p + "attn_k.weight", {c.n_embd, c.kv_dim()}, Kind::weight, kv_hint));
        SIEVE_TRY(check_tensor(f, p + "attn_v.weight", {c.n_embd, c.kv_dim()}, Kind::weight, kv_hint));
        SIEVE_TRY(check_tensor(f, p + "attn_output.weight", {c.q_dim(), c.n_embd}, Kind::weight, q_hint));
        if (c.has_qkv_bias) {
            SIEVE_TRY(check_tensor(f, p + "attn_q.bias", {c.q_dim()}, Kind::norm, q_hint));
            SIEVE_TRY(check_tensor(f, p + "attn_k.bias", {c.kv_dim()}, Kind::norm, kv_hint));
            SIEVE_TRY(check_tensor(f, p + "attn_v.bias", {c.kv_dim()}, Kind::norm, kv_hint));
        }
        SIEVE_TRY(check_tensor(f, p + "ffn_norm.weight", {c.n_embd}, Kind::norm, embd_hint));
        SIEVE_TRY(check_tensor(f, p + "ffn_gate.weight", {c.n_embd, c.n_ff}, Kind::weight, ff_hint));
        SIEVE_TRY(check_tensor(f, p + "ffn_up.weight", {c.n_embd, c.n_ff}, Kind::weight, ff_hint));
        SIEVE_TRY(check_tensor(f, p + "ffn_down.weight", {c.n_ff, c.n_embd}, Kind::weight, ff_hint));
    }
    return Status();
}

}  // namespace

Result<ModelConfig> ModelConfig::from_gguf(const GgufFile &f) {
    ModelConfig c;
    // 1. architecture
    std::string arch;
    SIEVE_TRY(read_arch(f, &c.arch, &arch));
    const Keys keys{f, arch};
    if (f.has("general.name")) SIEVE_TRY(f.get_string("general.name", &c.name));

    // 2. scalar keys
    SIEVE_TRY(keys.get_int("context_length", 1, k_max_ctx, &c.n_ctx_train));
    SIEVE_TRY(keys.get_int("embedding_length", 1, k_max_dim, &c.n_embd));
    SIEVE_TRY(keys.get_int("block_count", 1, k_max_layers, &c.n_layer));
    SIEVE_TRY(keys.get_int("feed_forward_length", 1, k_max_dim, &c.n_ff));
    SIEVE_TRY(keys.get_int("attention.head_count", 1, k_max_dim, &c.n_head));
    c.n_head_kv = c.n_head;
    SIEVE_TRY(keys.get_int_opt("attention.head_count_kv", 1, k_max_dim, &c.n_head_kv));
    {
        const std::string key = keys.k("attention.layer_norm_rms_epsilon");
        if (!f.has(key)) return Status::errorf("missing key '%s' — the file does not give the RMSNorm epsilon", key.c_str());
        double eps = 0;
        SIEVE_TRY(f.get_float(key, &eps));
        if (!std::isfinite(eps) || eps <= 0 || eps >= 1)
            return Status::errorf("key '%s': %g is out of range, expected a small positive number like 1e-5",
                                  key.c_str(), eps);
        c.norm_eps = static_cast<float>(eps);
    }
    SIEVE_TRY(keys.get_pos_float_opt("rope.freq_base", &c.rope_freq_base));
    c.rope_type = c.arch == ModelArch::qwen2 ? RopeType::neox : RopeType::normal;

    // 3. derived sizes
    if (c.n_head_kv > c.n_head || c.n_head % c.n_head_kv != 0)
        return Status::errorf("key '%s' = %" PRId64 " does not divide '%s' = %" PRId64
                              " — grouped-query attention needs whole groups of query heads per KV head",
                              keys.k("attention.head_count_kv").c_str(), c.n_head_kv,
                              keys.k("attention.head_count").c_str(), c.n_head);
    if (f.has(keys.k("attention.key_length"))) {
        SIEVE_TRY(keys.get_int("attention.key_length", 1, k_max_dim, &c.head_dim));
    } else {
        if (c.n_embd % c.n_head != 0)
            return Status::errorf("key '%s' = %" PRId64 " is not a multiple of '%s' = %" PRId64
                                  " and no '%s' gives the head size",
                                  keys.k("embedding_length").c_str(), c.n_embd, keys.k("attention.head_count").c_str(),
                                  c.n_head, keys.k("attention.key_length").c_str());
        c.head_dim = c.n_embd / c.n_head;
    }
    int64_t v_len = c.head_dim, rope_dims = c.head_dim;
    SIEVE_TRY(keys.get_int_opt("attention.value_length", 1, k_max_dim, &v_len));
    if (v_len != c.head_dim)
        return Status::errorf("key '%s' = %" PRId64 " differs from the key head size %" PRId64
                              "; sieve needs equal K and V head sizes",
                              keys.k("attention.value_length").c_str(), v_len, c.head_dim);
    if (c.head_dim % 2 != 0)
        return Status::errorf("head size %" PRId64 " is odd; RoPE rotates pairs, so it must be even", c.head_dim);
    SIEVE_TRY(keys.get_int_opt("rope.dimension_count", 1, k_max_dim, &rope_dims));
    if (rope_dims != c.head_dim)
        return Status::errorf("key '%s' = %" PRId64 " but the head size is %" PRId64
                              "; partial rotary embeddings are not supported",
                              keys.k("rope.dimension_count").c_str(), rope_dims, c.head_dim);
    if (c.q_dim() > k_max_dim)
        return Status::errorf("query width %" PRId64 " x %" PRId64 " is beyond the supported %" PRId64, c.n_head,
                              c.head_dim, k_max_dim);

    // 4. rope scaling
    SIEVE_TRY(read_rope_scaling(f, keys, &c));

    // 5. tensors; the vocabulary size comes from the embedding
    const GgufTensor *emb = f.find_tensor("token_embd.weight");
    if (!emb) return Status::error("missing tensor 'token_embd.weight' — the file is incomplete or not a model");
    if (emb->n_dims != 2 || emb->ne[0] != c.n_embd)
        return Status::errorf("tensor 'token_embd.weight': expected [%" PRId64 ", n_vocab], got %s — check '%s'",
                              c.n_embd, shape_str(emb->ne, emb->n_dims).c_str(), keys.k("embedding_length").c_str());
    SIEVE_TRY(check_tensor(f, "token_embd.weight", {c.n_embd, emb->ne[1]}, Kind::weight, ""));
    c.n_vocab = emb->ne[1];
    if (f.has(keys.k("vocab_size"))) {
        int64_t n = 0;
        SIEVE_TRY(keys.get_int("vocab_size", 1, INT64_MAX, &n));
        if (n != c.n_vocab)
            return Status::errorf("key '%s' = %" PRId64 " but token_embd.weight has %" PRId64 " rows",
                                  keys.k("vocab_size").c_str(), n, c.n_vocab);
    }
    if (f.has("tokenizer.ggml.tokens")) {
        uint64_t n = 0;
        SIEVE_TRY(f.get_array_size("tokenizer.ggml.tokens", &n));
        if (n != static_cast<uint64_t>(c.n_vocab))
            return Status::errorf("tokenizer.ggml.tokens has %" PRIu64 " tokens but token_embd.weight has %" PRId64
                                  " rows (n_vocab) — the tokenizer and the embedding disagree",
                                  n, c.n_vocab);
    }
    c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
    // qwen2 always has q/k/v biases; a llama file may carry them too.
    c.has_qkv_bias = c.arch == ModelArch::qwen2 || f.find_tensor("blk.0.attn_q.bias") != nullptr;
    SIEVE_TRY(check_tensors(f, c, arch));
    return c;
}

}  // namespace sieve
