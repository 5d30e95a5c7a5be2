// Head calibration for streaming heads (`sieve calibrate`): a gradient-free
// version of DuoAttention's (Xiao et al. 2024) retrieval-head identification.
//
// On synthetic retrieval samples (eval/tasks.h; niah_multikey by default:
// several key -> value needles, one asked for), the correct answer is
// appended to each prompt and the whole sequence run through the model once
// (dense KV), keeping every layer's rotated queries at the answer positions
// (the last prompt token and every answer token but the last: the queries
// that produce the answer). Then, for each of those queries, layer and KV
// head, the head's decode attention is computed twice over the same lanes:
// over every row, and restricted to the streaming pattern (the first `sink`
// rows and the last `recent`). A KV head's score is the mean over the
// answer positions of
//
//   sum_{h in group} |o_h(streaming) - o_h(full)|^2  /  sum_{h in group} |o_h(full)|^2
//
// i.e. how much of its output the head loses when it alone sees only sinks
// and a window. Heads that retrieve (the needle lives mid-context) score
// high; heads whose attention is local score near 0 and can be streaming
// heads. Deterministic: the samples come from the seed, the arithmetic is
// the engine's own kernels in a fixed order (bit for bit with the same
// thread count; another count splits the attention differently, which moves
// scores by rounding only).
//
// That score is local: a head whose output changes a lot may not matter to
// the answer, and one whose output changes a little may carry the one fact
// the answer needs. The `answer_kl` method measures what DuoAttention's
// training objective measures, the change at the model's output, one head
// at a time and without gradients: the prompt up to its last `tail` tokens
// is prefilled once (dense), then the rest of the prompt and the answer are
// run again once per KV head with that head alone under the streaming
// pattern (the Λ mask of the prefill attention: each query sees the first
// `sink` rows and its last `recent`), and the head's score is the mean over
// the answer positions of KL(p_dense || p_restricted) of the next-token
// distributions (nats). A run with no head restricted gives p_dense, so a
// pattern covering every row scores exactly 0.
//
// One head at a time misses how heads stand in for each other: cutting two
// heads that both carry a needle may cost far more than the sum of cutting
// each. `rounds` R > 1 (answer_kl only) chooses the streaming heads greedily
// instead, the way DuoAttention's joint gate optimisation would without
// gradients: round r scores every head not yet chosen with it *and every
// head chosen in earlier rounds* restricted (KL still against the dense
// run), and chooses the lowest-scoring share of the `greedy_static`
// fraction of all heads (an R-th of it per round); one last pass scores the
// heads never chosen against the whole chosen set. The written score of a
// head is its KL in the round it was chosen (or in the last pass), raised
// where needed to stay above every earlier choice, so the profile's order is
// the order of choice: `lserve:static=F` with F <= greedy_static takes the
// first rounds' heads. Cost: about (R + 1) (1 - greedy_static / 2) times
// the one-round run.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sieve/core/status.h"
#include "sieve/core/thread_pool.h"
#include "sieve/eval/tasks.h"
#include "sieve/kernels/cpu/row_type.h"
#include "sieve/model/model.h"
#include "sieve/sparse/head_profile.h"

namespace sieve {

enum class CalibrateMethod {
    attn_output,  // the head's own attention output at the answer positions (relative L2 change)
    answer_kl,    // the model's next-token distributions at the answer positions (KL from dense)
};

const char *calibrate_method_name(CalibrateMethod m);

struct CalibrateOptions {
    CalibrateMethod method = CalibrateMethod::attn_output;
    std::string task = "niah_multikey";
    std::vector<int64_t> ctx = {4096};
    int64_t n_samples = 8;    // per length; sample i has seed + i and needle depth i / (n - 1)
    uint64_t seed = 0;
    int64_t sink = 64;
    int64_t recent = 256;
    int64_t chunk = 512;      // prefill chunk
    int64_t tail = 64;        // answer_kl: prompt tokens before the answer that are rerun restricted too
    int64_t rounds = 1;       // answer_kl: greedy rounds (1: each head scored alone)
    double greedy_static = 0.5;  // answer_kl, rounds > 1: the fraction of KV heads the rounds choose
    cpu::KvRowTypes kv_type = cpu::RowType::f16;
    TaskOptions task_opt;     // n_needles and the rest; n_tokens, seed and depth are set per sample
};

// progress(done, total) after each sample (and round).
Result<HeadProfile> calibrate_heads(const Model &model, const Tokenizer &tok, const ChatTemplate *tmpl,
                                    const CalibrateOptions &opt, ThreadPool &pool,
                                    const std::function<void(int64_t, int64_t)> &progress = {});

// answer_kl's measure for a whole set: the mean over the samples' answer
// positions of KL(p_dense || p_restricted) with every head of `streaming`
// ([n_layer * n_head_kv], nonzero = streaming) restricted at once. With
// `rounds` > 1 a head's score in the round that chose it is this, for it and
// the heads chosen before.
Result<double> calibrate_restricted_kl(const Model &model, const Tokenizer &tok, const ChatTemplate *tmpl,
                                       const CalibrateOptions &opt, const std::vector<uint8_t> &streaming,
                                       ThreadPool &pool);

}  // namespace sieve
