// The serving engine: a request queue and an engine thread running
// continuous batching over one Model and one KV store.
//
// The scheduler has no prefill/decode phases (vLLM v1's rule): every running
// sequence has n_computed and n_total tokens; a step gives each sequence
// min(n_total - n_computed, budget left) tokens, decode tokens of running
// sequences first, then prefill chunks, up to max_batch_tokens. One forward
// per step over all scheduled tokens.
//
// One step:
//   1. admit waiting requests while free KV pages cover them (a swapped one
//      gets its KV image mapped back first);
//   2. schedule: decode tokens first, then prefill chunks (chunked prefill);
//   3. reserve KV; on exhaustion preempt the newest running sequence: swap
//      its KV to host memory while the swap space has room, else free its
//      pages to recompute later; either way it goes back to the front of the
//      queue;
//   4. forward;
//   5. the KV policy's after-prefill point for every sequence whose prompt
//      just completed (score, choose rows, compact: the freed pages return
//      to the pool before the next step is planned);
//   6. sample per sequence with its own parameters, detokenize, check stop
//      conditions, emit events; free finished and cancelled sequences.
//
// Threading: submit()/cancel()/stats() are called from any thread (the HTTP
// server's); everything else runs on the engine thread. Events are delivered
// on the engine thread through the request's callback, which must not block
// (push into a queue and return).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "sieve/core/status.h"
#include "sieve/engine/sampler.h"
#include "sieve/kernels/cpu/ops.h"
#include "sieve/kernels/cpu/row_type.h"
#include "sieve/sparse/policy.h"

namespace sieve {

class Model;
class Tokenizer;

struct EngineOptions {
    int n_threads = 0;              // 0 = number of cores
    int max_seqs = 16;              // sequence slots (--parallel)
    int64_t max_ctx = 4096;         // tokens per sequence (prompt + generated)
    int64_t max_batch_tokens = 512; // tokens per forward step
    int64_t kv_memory_bytes = 0;    // KV pool budget (--kv-memory); 0 = enough for max_seqs * max_ctx
    // KV page (--kv-page-size); 0 = VAttentionKv::page_bytes_for's choice:
    // 64 KiB, or the nearest size above that holds whole quantized rows.
    int64_t kv_page_bytes = 0;
    cpu::KvRowTypes kv_type = cpu::RowType::f16;  // K and V row types (--cache-type-k/-v); f32 = the oracle
    KvPolicyPtr kv_policy;                     // null = dense (keep every row)
    int64_t swap_bytes = int64_t{4} << 30;     // host memory for preempted sequences' KV (--swap-space); 0 = recompute only
    int max_waiting = 256;          // queue limit; submit() past it fails (HTTP 429/503)
    // Automatic prefix caching (kv/prefix_cache.h): prompt blocks of
    // prefix_block tokens stay cached after their request and later requests
    // starting with the same tokens map them instead of computing them.
    bool prefix_cache = true;       // --no-prefix-cache turns it off
    int64_t prefix_block = 16;      // tokens per cached block
    // Evaluation settings (sieve eval): f32 activations through dequantized
    // weights (the exact model, as a float reference computes it), and an
    // int32 position per KV row so on_prefilled can see which rows a policy
    // kept. Neither changes a result bit of the q8 path.
    cpu::ActPrecision act_precision = cpu::ActPrecision::q8;
    bool kv_positions = false;
};

enum class FinishReason { none, stop, length, cancelled, error };
const char *finish_reason_name(FinishReason r);  // "stop", "length", ...

struct GenRequest {
    std::vector<int32_t> prompt;        // token ids (BOS already applied)
    SamplerParams sampling;
    int64_t max_tokens = 16;            // generated tokens at most
    std::vector<std::string> stop;      // stop strings (not included in the output)
    bool ignore_eos = false;
    int32_t n_logprobs = -1;            // -1: none; 0..20: chosen token's logprob + that many alternatives

    // The request's KV policy: unset = the engine's (EngineOptions::kv_policy);
    // set to a null pointer = dense.
    std::optional<KvPolicyPtr> kv_policy;
    // Evaluation hooks (sieve eval); both run on the engine thread and must not block.
    // Teacher forcing: when non-empty, generated token i is forced_tokens[i]
    // instead of the sampled one (needs forced_tokens.size() >= max_tokens).
    std::vector<int32_t> forced_tokens;
    // The next-token logits [n_vocab] of every step that yields a token, before sampling.
    std::function<void(const float *logits, int64_t n_vocab)> on_logits;
    // Once the prompt is in the KV and the policy has acted: the lanes as they
    // are kept (rows per layer and head), before the first generated token.
    std::function<void(const KvCache &kv, int slot)> on_prefilled;
};

// One thing that happened to a request, delivered in order.
struct GenEvent {
    uint64_t request_id = 0;
    // Text that is now final (never half a UTF-8 character, never the start of
    // a possible stop string); may be empty when a token produced no text yet.
    std::string text;
    std::vector<int32_t> tokens;         // tokens this event covers
    std::vector<TokenLogprob> logprobs;  // chosen token per entry of tokens, when asked
    std::vector<std::vector<TokenLogprob>> top_logprobs;
    bool finished = false;
    FinishReason finish_reason = FinishReason::none;
    std::string error;                   // when finish_reason == error
    int64_t n_prompt_tokens = 0;         // on the finished event
    int64_t n_cached_tokens = 0;         // on the finished event: prompt tokens the prefix cache supplied
    int64_t n_gen_tokens = 0;            // on the finished event
    // On the finished event of a request that completed its prefill: KV rows
    // its lanes held at the end, and the rows a dense cache would hold
    // (lanes x positions); kept / seen is its compression.
    int64_t kv_rows_kept = 0;
    int64_t kv_rows_seen = 0;
};

// Rows kept and seen by one KV policy's after-prefill point, summed over the
// requests that used it (the /metrics compression ratio).
struct PolicyCounters {
    std::string policy;     // its spec label ("dense" for none)
    int64_t requests = 0;
    int64_t rows_kept = 0;  // lane rows right after the point
    int64_t rows_seen = 0;  // lane rows before it (lanes x prompt rows)
};
using GenCallback = std::function<void(const GenEvent &)>;

struct EngineStats {
    int n_running = 0;
    int n_waiting = 0;
    int64_t kv_pages_total = 0;
    int64_t kv_pages_used = 0;           // mapped for live sequences (cached pages of finished ones count as free)
    int64_t kv_page_bytes = 0;
    int64_t n_preemptions = 0;           // swapped + recomputed
    int64_t n_swap_out = 0;              // preemptions that swapped the KV to host memory
    int64_t n_swap_in = 0;
    int64_t swap_bytes_used = 0;         // host bytes held by swapped sequences now
    int64_t swap_bytes_total = 0;        // the swap space
    int64_t prompt_tokens_total = 0;     // counters since start
    int64_t gen_tokens_total = 0;
    int64_t n_steps = 0;
    std::vector<PolicyCounters> policies;  // one entry per policy label used so far (32 at most, then "other")
    int64_t kv_pages_evicted = 0;        // pages unmapped by policy compactions
    // KV mapping (vAttention lanes): mmap calls made inside a step's
    // reservations vs between steps by map-ahead, and the time in each.
    int64_t kv_map_calls_in_step = 0;
    int64_t kv_map_calls_ahead = 0;
    int64_t kv_map_us_in_step = 0;
    int64_t kv_map_us_ahead = 0;
    // Prefix cache: tokens looked up and found (vLLM's prefix_cache_queries /
    // _hits, counted in tokens), and what it holds now.
    bool prefix_cache = false;
    int64_t prefix_query_tokens = 0;
    int64_t prefix_hit_tokens = 0;
    int64_t prefix_blocks = 0;           // cached blocks
    int64_t prefix_pages_held = 0;       // pages the cache references
    int64_t prefix_pages_only = 0;       // ... of them mapped by no running sequence (reclaimable, counted free)
    int64_t prefix_blocks_evicted = 0;
};

class Engine {
public:
    // The model and tokenizer must outlive the engine. Starts the engine thread.
    static Result<std::unique_ptr<Engine>> create(const Model &model, const Tokenizer &tok,
                                                  const EngineOptions &opt);
    ~Engine();  // aborts what is left (each gets a cancelled event) and joins

    // Validates (prompt length vs max_ctx, sampling params, ids in range) and
    // queues. Returns the request id, or an error naming the bad field, or a
    // "queue full" error (check is_queue_full_error) when max_waiting is hit.
    Result<uint64_t> submit(GenRequest req, GenCallback cb);
    // Queues several requests at once, so the engine thread sees all of them
    // at the same step: the batch composition, and with it every logit, does
    // not depend on how fast the caller submits (sieve eval compares runs
    // bit for bit). cbs[i] belongs to reqs[i]. All are validated first and
    // the queue limit counts them together; on an error none is queued.
    Result<std::vector<uint64_t>> submit_all(std::vector<GenRequest> reqs, std::vector<GenCallback> cbs);
    // Frees the sequence's KV at the next step; its last event says cancelled.
    void cancel(uint64_t request_id);
    // Stops accepting work; drain = finish what is queued and running, else cancel it.
    void shutdown(bool drain);

    EngineStats stats() const;
    const EngineOptions &options() const;

    static bool is_queue_full_error(const Status &st);

private:
    struct Impl;  // scheduler, sequences, KV store, thread: engine/*.cpp
    std::unique_ptr<Impl> impl_;
};

}  // namespace sieve
