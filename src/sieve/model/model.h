// The llama-family forward pass (llama, qwen2) over a batch of tokens from
// one or more sequences, reading and writing KV through a KvCache.
//
// A Model is immutable after load(): the matrices a step streams are copied
// once into a huge-page arena (Q4_0 / Q8_0 repacked on the way, see
// place_weights), the rest stays in the mapped GGUF file, and one Model
// serves any number of Workspaces / threads. A Workspace holds every
// activation buffer, sized once for a maximum batch, so a forward step
// allocates nothing.
//
// One step (Model::forward), the math per layer:
//   x = token_embd[tok]
//   for each layer:
//     h = rmsnorm(x) * attn_norm
//     q, k, v = h Wq (+bq), h Wk (+bk), h Wv (+bv)    // biases: qwen2
//     q, k = rope(q, k, pos)                           // pairs: llama, halves: qwen2
//     K, V lanes[n_rows++] = k, v                      // appended: rows are not positions
//     x += attention(q, K, V) Wo                       // causal, GQA, per sequence
//     h = rmsnorm(x) * ffn_norm
//     x += (silu(h Wgate) * (h Wup)) Wdown
//   logits = rmsnorm(x) * output_norm  Wout           // Wout = token_embd when tied
// Linear layers see all tokens of the batch as one [n_tokens, n_embd] matrix;
// attention runs per sequence over that sequence's lanes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "sieve/core/aligned.h"
#include "sieve/core/page_buffer.h"
#include "sieve/core/status.h"
#include "sieve/core/thread_pool.h"
#include "sieve/gguf/gguf.h"
#include "sieve/kernels/cpu/ops.h"
#include "sieve/kv/kv_cache.h"
#include "sieve/model/config.h"

namespace sieve {

// Tokens of one forward step. Tokens of a sequence are contiguous in the
// batch, at consecutive positions, and the first one is at a position
// <= kv.n_pos(seq) (equal when appending; smaller rolls every lane of the
// slot back by the difference and rewrites the tail). Each token's K/V row
// is appended at its lane's own row count (see kv/kv_cache.h).
//
//   tokens:  [ a0 a1 a2 a3 | b17 | c5 c6 ]      one prefill chunk, one decode token, ...
//   seq:     [ 0  0  0  0  | 1   | 2  2  ]
//   pos:     [ 0  1  2  3  | 17  | 5  6  ]
// Attention probabilities a KV policy ranks rows by (SnapKV's observation
// window, H2O's heavy hitters; sparse/). For every token of its sequence at a
// position >= from_pos the forward pass adds, after the layer's attention,
//   acc[(il * n_head + h) * cap + j] += exp(scale * q_h · k_j - lse_h)
// for each row j the query saw in KV head h's lane (cpu::attention_scores).
// Rows are lane rows, so a policy that compacts a lane compacts its sums too.
struct AttnScoreSink {
    int64_t from_pos = 0;
    int64_t cap = 0;       // entries per (layer, query head); >= the rows any lane will hold
    float *acc = nullptr;  // [n_layer][n_head][cap]
};

// Page selection (Quest, LServe; sparse/quest.h). For a decode token of a
// sequence with a selector, the forward pass asks, per layer, after the
// token's q is rotated and its K/V row appended, which rows each KV head's
// query group reads; the decode kernel then reads only those
// (cpu::AttnArgs::spans). q: the token's queries [n_head, head_dim];
// n_vis[g]: the rows lane g holds with the token's own (the last one).
// nullptr means every row. The spans stay valid until the selector's next
// call. Selectors are called one after another on the forward pass's thread;
// a call may spread its KV heads over pool (idle then; nullptr: one thread).
class AttnRowSelector {
public:
    virtual ~AttnRowSelector() = default;
    virtual const cpu::RowSpans *select(int64_t layer, const float *q, KvCache &kv, int seq,
                                        const int64_t *n_vis, ThreadPool *pool) = 0;
    virtual std::unique_ptr<AttnRowSelector> clone() const = 0;
};

// A policy's Λ-shaped prefill mask (cpu::AttnLambda) for every layer: in
// the prefill attention of layer l, KV head g is a streaming head when
// streaming[l * n_head_kv + g] is nonzero; its queries see the lane's first
// `sink` rows and their last `recent`. Owned by the policy.
struct PrefillMask {
    const uint8_t *streaming = nullptr;  // [n_layer * n_head_kv]
    int64_t sink = 0;
    int64_t recent = 1;
};

struct Batch {
    const int32_t *tokens = nullptr;       // [n_tokens] token ids
    const int32_t *pos = nullptr;          // [n_tokens] positions
    const int32_t *seq = nullptr;          // [n_tokens] KV slots
    int64_t n_tokens = 0;
    // [n_tokens] nonzero where logits are wanted; nullptr means the last
    // token of each sequence in the batch (what generation needs).
    const int8_t *want_logits = nullptr;
    // [n_tokens] the score sink of each token's sequence (the same pointer for
    // a sequence's tokens), or nullptr; the whole array may be nullptr.
    AttnScoreSink *const *score_sinks = nullptr;
    // [n_tokens] the row selector of each token's sequence, or nullptr; used
    // for decode runs (one token of a sequence) only. The array may be nullptr.
    AttnRowSelector *const *selectors = nullptr;
    // [n_tokens] nonzero for the tokens of a prompt. A run of one prompt
    // token (the rest of a prompt after a prefix-cache hit, or a chunk the
    // token budget cut to one) then takes the prefill attention kernel like
    // the prompt's other tokens, so a prompt token's bits do not depend on how
    // its prompt was cut into chunks (the prefill and decode kernels sum in
    // different orders). Null: every one-token run is a decode run.
    const int8_t *in_prompt = nullptr;
    // [n_tokens] the prefill mask of each token's sequence, or nullptr; used
    // for prefill runs only (a sequence's KV is then not the dense one, so
    // its prefix-cache blocks live apart: KvPolicy::prefix_namespace). The
    // array may be nullptr. A sequence that scores queries (score_sinks)
    // must not have one: the scores assume dense attention.
    const PrefillMask *const *prefill_masks = nullptr;

    // Whether the run [begin, end) of one sequence is a decode run.
    bool decode_run(int64_t begin, int64_t end) const { return end - begin == 1 && !(in_prompt && in_prompt[begin]); }
};

// Called with each named intermediate when set on a Workspace (debugging
// against the reference; see tests/model). data is [n_rows, n_cols] f32 and
// valid only during the call. il = layer index, -1 outside layers.
// Names: inp_embd, attn_norm, q, k, v (after bias and rope), kqv_out, attn_out,
//        ffn_inp, ffn_norm, ffn_out, l_out, result_norm, result_output.
using ActivationCallback =
    std::function<void(const char *name, int il, const float *data, int64_t n_rows, int64_t n_cols)>;

// Activation buffers for batches of up to max_tokens tokens producing up to
// max_outputs rows of logits.
class Workspace {
public:
    int64_t max_tokens() const { return max_tokens_; }
    int64_t max_outputs() const { return max_outputs_; }
    // Logits of the last forward: [n_outputs(), n_vocab], rows in batch order
    // of the tokens that asked for them.
    const float *logits() const { return logits_.data(); }
    int64_t n_outputs() const { return n_outputs_; }
    // Batch index of output row i.
    int64_t output_token(int64_t i) const { return out_ids_[static_cast<size_t>(i)]; }

    ActivationCallback callback;  // optional
    // 8-bit activations for block-format weights (fast, as ggml) or f32
    // activations (exact up to f32 rounding; the reference tests' oracle
    // mode). See cpu::ActPrecision.
    cpu::ActPrecision act_precision = cpu::ActPrecision::q8;

private:
    friend class Model;
    int64_t max_tokens_ = 0;
    int64_t max_outputs_ = 0;
    int64_t n_outputs_ = 0;
    AlignedBuffer<float> x_, h_, q_, k_, v_, att_, gate_, up_;  // [max_tokens, ...]
    AlignedBuffer<float> out_x_, logits_;                      // [max_outputs, ...]
    AlignedBuffer<float> lse_;                                  // [max_tokens, n_head]: run at begin, [n_head, n]
    AlignedBuffer<float> rope_cs_;                              // [max_tokens, head_dim]: cos | sin per token
    std::vector<int64_t> out_ids_;
    std::vector<const void *> k_ptrs_, v_ptrs_;                 // [max_tokens runs][n_head_kv]
    std::vector<int64_t> n_past_;                               // [max_tokens runs][n_head_kv] lane rows before a chunk
    std::vector<cpu::AttnArgs> decode_args_;                    // [max_tokens]: a step's decode runs
};

// Weights of one layer, bound into the GGUF mapping.
struct LayerWeights {
    const float *attn_norm = nullptr;  // [n_embd]
    cpu::WeightView wq, wk, wv, wo;    // [q_dim | kv_dim | kv_dim, n_embd], [n_embd, q_dim]
    const float *bq = nullptr, *bk = nullptr, *bv = nullptr;  // qwen2 biases, else nullptr
    const float *ffn_norm = nullptr;   // [n_embd]
    cpu::WeightView w_gate, w_up, w_down;  // [n_ff, n_embd] x2, [n_embd, n_ff]
};

struct ModelLoadOptions {
    // Leave the matrices in the file mapping (4 KiB pages, shared page cache,
    // no copy: quicker start, slower decode); only the Q4_0 / Q8_0 repacked
    // copies are made. Default: every streamed matrix in huge pages.
    bool map_weights = false;
};

class Model {
public:
    // Reads the config, binds every tensor (checking type and shape),
    // precomputes RoPE frequencies and places the weights (ModelLoadOptions).
    // The file must outlive the Model.
    static Result<std::unique_ptr<Model>> load(const GgufFile &file, const ModelLoadOptions &opt = {});

    const ModelConfig &config() const { return cfg_; }
    const GgufFile &file() const { return file_; }
    // [head_dim / 2] RoPE angular frequencies after scaling.
    const std::vector<float> &rope_inv_freq() const { return inv_freq_; }
    // What rotated keys subtract before the rotation, [n_layer][kv_dim]
    // (empty for models without K biases; see k_centre_).
    const std::vector<float> &k_centre() const { return k_centre_; }
    const LayerWeights &layer(int64_t il) const { return layers_[static_cast<size_t>(il)]; }
    // Shape of the KV store this model needs for n_seq sequence slots with
    // rows of `type` (f32: the oracle; f16: what run / serve / bench default to).
    KvShape kv_shape(int n_seq, cpu::KvRowTypes type = cpu::RowType::f32) const;
    // Bytes of weights the forward pass reads per step (for GB/s reports).
    int64_t weight_bytes() const { return weight_bytes_; }
    // Bytes of weights copied to the huge-page arena at load, and how many of
    // them the kernel backs with huge pages now.
    int64_t placed_bytes() const { return static_cast<int64_t>(weights_.size()); }
    int64_t placed_huge_bytes() const { return static_cast<int64_t>(weights_.huge_page_bytes()); }

    // Preallocates activations for batches of max_tokens producing up to
    // max_outputs logits rows (defaults to max_tokens).
    std::unique_ptr<Workspace> make_workspace(int64_t max_tokens, int64_t max_outputs = 0) const;

    // Runs one step. On success ws.logits() holds the requested rows and kv
    // holds the batch's K/V with n_pos(seq) = last position + 1 for each
    // sequence in the batch. Errors (bad token id, batch too large, positions
    // not consecutive, KV out of room) are returned before anything is
    // written to kv.
    Status forward(const Batch &batch, KvCache &kv, Workspace &ws, ThreadPool &pool) const;

private:
    explicit Model(const GgufFile &file) : file_(file) {}
    Status bind();
    Status bind_matrix(const char *name, int64_t n_rows, int64_t n_cols, cpu::WeightView *out);
    Status bind_vector(const char *name, int64_t n, const float **out);
    Status place_weights(bool map_weights);
    Status validate(const Batch &batch, const KvCache &kv, const Workspace &ws) const;
    void attention(const Batch &batch, KvCache &kv, Workspace &ws, ThreadPool &pool, int64_t il) const;

    const GgufFile &file_;
    ModelConfig cfg_;
    cpu::WeightView tok_embd_, output_;
    const float *output_norm_ = nullptr;
    std::vector<LayerWeights> layers_;
    std::vector<float> inv_freq_;
    // [n_layer][kv_dim]: each layer's K bias after RoPE, averaged over the
    // positions of the training context (empty without K biases). Rotated
    // keys subtract it first: a constant vector per KV head changes every
    // q.k of one query by the same amount, so softmax, scores and page
    // ranks do not move, and the large bias channels leave the 4-bit scale.
    std::vector<float> k_centre_;
    // Vectors stored in a non-f32 type are converted once at load and kept here.
    std::vector<std::unique_ptr<float[]>> owned_;
    // The streamed matrices (place_weights): copies, and Q4_0 / Q8_0 ones
    // repacked for the integer tile kernel (WeightView::x16).
    PageBuffer weights_;
    int64_t weight_bytes_ = 0;
};

}  // namespace sieve
