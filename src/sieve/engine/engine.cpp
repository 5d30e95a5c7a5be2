// Engine: the request queue, the engine thread and the step loop. The
// scheduling rules live in scheduler.*, batch layout in step_builder.*, token
// handling in output.*; this file wires them together and owns the threading.
//
// Threads: submit()/cancel()/stats()/shutdown() take mu_ and touch only the
// `shared` fields; the engine thread owns the scheduler, the KV store and the
// workspace, and takes mu_ only to pick up new requests and cancellations and
// to publish stats. Callbacks run on the engine thread with no lock held.
#include "sieve/engine/engine.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "sieve/core/log.h"
#include "sieve/core/sysmem.h"
#include "sieve/engine/output.h"
#include "sieve/engine/scheduler.h"
#include "sieve/engine/step_builder.h"
#include "sieve/kv/vattention_kv.h"
#include "sieve/model/model.h"
#include "sieve/tokenizer/tokenizer.h"
#include "sieve/tokenizer/unicode.h"

namespace sieve {

namespace {

const char k_queue_full_prefix[] = "engine queue full";
constexpr int32_t k_max_logprobs = 20;
constexpr size_t k_max_stop_strings = 64;
constexpr size_t k_max_stop_bytes = 1024;
constexpr size_t k_max_policy_labels = 32;  // distinct per-policy counters (then "other")
constexpr int k_trim_idle_ms = 200;         // idle time before the heap is trimmed

}  // namespace

const char *finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::none: return "none";
        case FinishReason::stop: return "stop";
        case FinishReason::length: return "length";
        case FinishReason::cancelled: return "cancelled";
        case FinishReason::error: return "error";
    }
    return "unknown";
}

struct Engine::Impl {
    Impl(const Model &m, const Tokenizer &t, const EngineOptions &o) : model(m), tok(t), opt(o) {}

    const Model &model;
    const Tokenizer &tok;
    EngineOptions opt;  // with defaults resolved
    int32_t n_vocab = 0;
    int64_t kv_pages_total = 0;  // immutable after create: submit() checks against it

    // ---- engine thread only ----
    std::unique_ptr<VAttentionKv> kv;
    std::unique_ptr<Workspace> ws;
    std::unique_ptr<ThreadPool> pool;
    std::unique_ptr<Scheduler> sched;
    StepBuilder builder;
    int64_t prompt_tokens_total = 0;
    int64_t gen_tokens_total = 0;
    int64_t n_steps = 0;
    int64_t kv_map_calls_ahead = 0;  // mmap calls / time spent by map-ahead between steps
    int64_t kv_map_us_ahead = 0;
    std::map<std::string, PolicyCounters> policy_counters;  // by policy label
    int64_t kv_pages_evicted = 0;

    // ---- shared, under mu ----
    mutable std::mutex mu;
    std::condition_variable cv;
    std::vector<SequencePtr> incoming;
    std::vector<uint64_t> cancels;
    uint64_t next_id = 1;
    bool stopping = false;
    bool drain = false;
    EngineStats published;  // n_waiting excludes `incoming`

    std::thread thread;

    Status validate(const GenRequest &req) const;
    void loop();
    void step();
    void take_cancels(const std::vector<uint64_t> &ids);
    bool apply_policy(Sequence &s);
    bool policy_after_decode(Sequence &s);
    Status run_policy(Sequence &s, bool after_prefill);
    void count_rows(const Sequence &s, int64_t *kept, int64_t *seen) const;
    void abort_all();
    void publish_stats();
    void trim_heap();
};

// ---------------------------------------------------------------------------
// Creation and validation
// ---------------------------------------------------------------------------

Result<std::unique_ptr<Engine>> Engine::create(const Model &model, const Tokenizer &tok, const EngineOptions &opt) {
    if (opt.max_seqs < 1) return Status::errorf("engine: max_seqs (--parallel) must be >= 1, got %d", opt.max_seqs);
    if (opt.max_ctx < 1)
        return Status::errorf("engine: max_ctx must be >= 1, got %lld", static_cast<long long>(opt.max_ctx));
    if (opt.max_batch_tokens < 1)
        return Status::errorf("engine: max_batch_tokens must be >= 1, got %lld",
                              static_cast<long long>(opt.max_batch_tokens));
    if (opt.max_waiting < 0) return Status::errorf("engine: max_waiting must be >= 0, got %d", opt.max_waiting);
    if (opt.kv_memory_bytes < 0)
        return Status::errorf("engine: kv_memory_bytes must be >= 0, got %lld",
                              static_cast<long long>(opt.kv_memory_bytes));
    if (opt.kv_page_bytes < 0)
        return Status::errorf(
            "engine: kv_page_bytes (--kv-page-size) must be >= 0 (0: chosen for the KV rows), got %lld",
            static_cast<long long>(opt.kv_page_bytes));

    std::unique_ptr<Engine> e(new Engine());
    e->impl_ = std::make_unique<Impl>(model, tok, opt);
    Impl &im = *e->impl_;
    EngineOptions &o = im.opt;
    const ModelConfig &cfg = model.config();
    im.n_vocab = static_cast<int32_t>(cfg.n_vocab);
    if (o.n_threads <= 0) o.n_threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    if (cfg.n_ctx_train > 0 && o.max_ctx > cfg.n_ctx_train) {
        SIEVE_LOG_WARN("engine: max_ctx %lld is beyond the model's training context %lld; using %lld",
                       static_cast<long long>(o.max_ctx), static_cast<long long>(cfg.n_ctx_train),
                       static_cast<long long>(cfg.n_ctx_train));
        o.max_ctx = cfg.n_ctx_train;
    }

    const KvShape shape = model.kv_shape(o.max_seqs, o.kv_type);
    o.kv_page_bytes = VAttentionKv::page_bytes_for(shape, o.kv_page_bytes);
    if (o.kv_memory_bytes == 0) {
        o.kv_memory_bytes =
            o.max_seqs * VAttentionKv::seq_pages_for_rows(shape, o.kv_page_bytes, o.max_ctx) * o.kv_page_bytes;
        const std::string what = std::to_string(o.max_seqs) + " sequences of " + std::to_string(o.max_ctx) +
                                 " positions (-np x -c)";
        o.kv_memory_bytes = cap_kv_default(o.kv_memory_bytes, what.c_str());
    }

    VAttentionKvOptions ko;
    ko.shape = shape;
    ko.max_ctx = o.max_ctx;
    ko.pool.budget_bytes = o.kv_memory_bytes;
    ko.pool.page_bytes = o.kv_page_bytes;
    // No map-ahead headroom: the scheduler counts pages exactly (scheduler.h).
    ko.headroom_pages = 0;
    ko.with_positions = o.kv_positions;
    if (o.prefix_cache) {
        const std::string why = VAttentionKv::prefix_block_check(shape, o.kv_page_bytes, o.prefix_block);
        if (why.empty()) {
            ko.prefix_block_rows = o.prefix_block;
        } else {
            const int64_t whole = VAttentionKv::prefix_page_bytes(shape);
            const std::string hint =
                whole > 0 && whole != o.kv_page_bytes
                    ? strfmt(" (--kv-page-size %lldKiB holds whole K and V rows and keeps it)",
                             static_cast<long long>(whole >> 10))
                    : std::string();
            SIEVE_LOG_WARN("engine: prefix caching is off for this model and page size: %s%s", why.c_str(),
                           hint.c_str());
            o.prefix_cache = false;
        }
    }
    auto kv = VAttentionKv::create(ko);
    if (!kv.ok()) return kv.status().with_context("engine: the KV store (--kv-memory)");
    im.kv = std::move(kv.value());
    im.kv_pages_total = im.kv->n_total_pages();
    if (im.kv_pages_total < im.kv->seq_pages_for_rows(1)) {
        return Status::errorf("engine: KV memory of %lld bytes holds %lld pages of %lld bytes; one token of one "
                              "sequence needs %lld (a page per layer, KV head and K/V) — raise --kv-memory",
                              static_cast<long long>(o.kv_memory_bytes), static_cast<long long>(im.kv_pages_total),
                              static_cast<long long>(o.kv_page_bytes),
                              static_cast<long long>(im.kv->seq_pages_for_rows(1)));
    }
    im.ws = model.make_workspace(o.max_batch_tokens, o.max_seqs);
    im.ws->act_precision = o.act_precision;
    im.pool = std::make_unique<ThreadPool>(o.n_threads);
    if (o.swap_bytes < 0)
        return Status::errorf("engine: swap_bytes (--swap-space) must be >= 0, got %lld",
                              static_cast<long long>(o.swap_bytes));
    im.sched = std::make_unique<Scheduler>(*im.kv, o.max_seqs, o.max_batch_tokens, o.swap_bytes);
    im.publish_stats();
    im.thread = std::thread([&im] { im.loop(); });
    return e;
}

Status Engine::Impl::validate(const GenRequest &req) const {
    const int64_t n_prompt = static_cast<int64_t>(req.prompt.size());
    if (n_prompt == 0) return Status::error("prompt is empty: give at least one token");
    for (size_t i = 0; i < req.prompt.size(); ++i) {
        if (req.prompt[i] < 0 || req.prompt[i] >= n_vocab)
            return Status::errorf("prompt token %zu is %d: token ids must be in [0, %d)", i, req.prompt[i], n_vocab);
    }
    if (!req.forced_tokens.empty()) {
        if (static_cast<int64_t>(req.forced_tokens.size()) < req.max_tokens)
            return Status::errorf("forced_tokens has %zu tokens, max_tokens is %lld: force every generated token",
                                  req.forced_tokens.size(), static_cast<long long>(req.max_tokens));
        for (size_t i = 0; i < req.forced_tokens.size(); ++i)
            if (req.forced_tokens[i] < 0 || req.forced_tokens[i] >= n_vocab)
                return Status::errorf("forced token %zu is %d: token ids must be in [0, %d)", i,
                                      req.forced_tokens[i], n_vocab);
    }
    if (req.max_tokens < 1)
        return Status::errorf("max_tokens must be >= 1, got %lld", static_cast<long long>(req.max_tokens));
    if (req.max_tokens > opt.max_ctx || n_prompt + req.max_tokens > opt.max_ctx) {
        return Status::errorf("prompt (%lld tokens) + max_tokens (%lld) exceeds the context size of %lld tokens; "
                              "shorten the prompt or lower max_tokens",
                              static_cast<long long>(n_prompt), static_cast<long long>(req.max_tokens),
                              static_cast<long long>(opt.max_ctx));
    }
    // Alone, a sequence peaks at its dense prompt while it is prefilled and
    // then holds what the policy keeps per layer plus what it generates.
    const KvShape shape = model.kv_shape(opt.max_seqs, opt.kv_type);
    const KvPolicyPtr &policy = req.kv_policy ? *req.kv_policy : opt.kv_policy;
    int64_t decode_pages = VAttentionKv::seq_pages_for_rows(shape, opt.kv_page_bytes, n_prompt + req.max_tokens);
    if (policy) {
        SIEVE_TRY(policy->check_model(shape, model.config().n_head));
        KvShape layer = shape;
        layer.n_layer = 1;
        decode_pages = 0;
        for (int64_t l = 0; l < shape.n_layer; ++l) {
            const int64_t rows = policy->decode_rows(n_prompt, req.max_tokens, l, shape.n_layer);
            decode_pages += VAttentionKv::seq_pages_for_rows(layer, opt.kv_page_bytes, rows);
        }
    }
    const int64_t pages = std::max(VAttentionKv::seq_pages_for_rows(shape, opt.kv_page_bytes, n_prompt), decode_pages);
    if (pages > kv_pages_total) {
        return Status::errorf("prompt (%lld tokens) + max_tokens (%lld) needs %lld KV pages, the whole KV pool has "
                              "%lld; lower max_tokens or raise --kv-memory",
                              static_cast<long long>(n_prompt), static_cast<long long>(req.max_tokens),
                              static_cast<long long>(pages), static_cast<long long>(kv_pages_total));
    }
    SIEVE_TRY(sampler_params_validate(req.sampling));
    if (req.n_logprobs < -1 || req.n_logprobs > k_max_logprobs)
        return Status::errorf("logprobs must be in [0, %d] (or -1 for none), got %d", k_max_logprobs, req.n_logprobs);
    if (req.stop.size() > k_max_stop_strings)
        return Status::errorf("at most %zu stop strings, got %zu", k_max_stop_strings, req.stop.size());
    for (size_t i = 0; i < req.stop.size(); ++i) {
        const std::string &s = req.stop[i];
        if (s.empty()) return Status::errorf("stop string %zu is empty", i);
        if (s.size() > k_max_stop_bytes)
            return Status::errorf("stop string %zu is %zu bytes, at most %zu", i, s.size(), k_max_stop_bytes);
        if (!utf8_is_valid(s)) return Status::errorf("stop string %zu is not valid UTF-8", i);
    }
    return Status();
}

Result<uint64_t> Engine::submit(GenRequest req, GenCallback cb) {
    std::vector<GenRequest> reqs;
    std::vector<GenCallback> cbs;
    reqs.push_back(std::move(req));
    cbs.push_back(std::move(cb));
    Result<std::vector<uint64_t>> ids = submit_all(std::move(reqs), std::move(cbs));
    if (!ids.ok()) return ids.status();
    return ids->front();
}

Result<std::vector<uint64_t>> Engine::submit_all(std::vector<GenRequest> reqs, std::vector<GenCallback> cbs) {
    Impl &im = *impl_;
    if (reqs.size() != cbs.size())
        return Status::errorf("submit_all: %zu requests but %zu callbacks", reqs.size(), cbs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
        SIEVE_TRY(im.validate(reqs[i]));
        if (!cbs[i]) return Status::error("submit: the event callback is empty");
    }
    std::unique_lock<std::mutex> lk(im.mu);
    if (im.stopping) return Status::error("engine is shutting down; not accepting requests");
    const int64_t n_waiting = im.published.n_waiting + static_cast<int64_t>(im.incoming.size());
    if (n_waiting + static_cast<int64_t>(reqs.size()) > im.opt.max_waiting) {
        return Status::errorf("%s: %lld requests waiting, the limit is %d; retry later", k_queue_full_prefix,
                              static_cast<long long>(n_waiting), im.opt.max_waiting);
    }
    const uint64_t first_id = im.next_id;
    im.next_id += reqs.size();
    lk.unlock();
    // The sampler allocates n_vocab-sized buffers: outside the lock.
    std::vector<SequencePtr> seqs;
    const KvShape shape = im.model.kv_shape(im.opt.max_seqs, im.opt.kv_type);
    for (size_t i = 0; i < reqs.size(); ++i) {
        auto seq = std::make_unique<Sequence>(first_id + i, std::move(reqs[i]), std::move(cbs[i]), im.tok, im.n_vocab);
        seq->policy = seq->req.kv_policy ? *seq->req.kv_policy : im.opt.kv_policy;
        if (seq->policy)
            seq->pstate = seq->policy->make_state(shape, im.model.config().n_head, seq->n_prompt + seq->req.max_tokens);
        seqs.push_back(std::move(seq));
    }
    lk.lock();
    if (im.stopping) return Status::error("engine is shutting down; not accepting requests");
    for (SequencePtr &seq : seqs) im.incoming.push_back(std::move(seq));
    lk.unlock();
    im.cv.notify_one();
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < seqs.size(); ++i) ids.push_back(first_id + i);
    return ids;
}

bool Engine::is_queue_full_error(const Status &st) {
    return !st.ok() && st.message().rfind(k_queue_full_prefix, 0) == 0;
}

void Engine::cancel(uint64_t request_id) {
    {
        std::lock_guard<std::mutex> lk(impl_->mu);
        impl_->cancels.push_back(request_id);
    }
    impl_->cv.notify_one();
}

EngineStats Engine::stats() const {
    std::lock_guard<std::mutex> lk(impl_->mu);
    EngineStats s = impl_->published;
    s.n_waiting += static_cast<int>(impl_->incoming.size());
    return s;
}

const EngineOptions &Engine::options() const { return impl_->opt; }

void Engine::shutdown(bool drain) {
    Impl &im = *impl_;
    {
        std::lock_guard<std::mutex> lk(im.mu);
        if (!im.stopping) im.drain = drain;
        // A later shutdown(false) still cuts a drain short.
        if (!drain) im.drain = false;
        im.stopping = true;
    }
    im.cv.notify_one();
    if (im.thread.joinable()) im.thread.join();
}

Engine::~Engine() {
    if (impl_) shutdown(false);
}

// ---------------------------------------------------------------------------
// The engine thread
// ---------------------------------------------------------------------------

// Idle after work: hand the allocator's free memory back to the system. glibc
// keeps freed chunks in each thread's arena (the HTTP workers' JSON bodies,
// the sequences' buffers) until told otherwise, so without this the resident
// size of a server that has been busy stays at its peak and says nothing
// about what it still holds. loop() calls it once the engine has been idle
// for k_trim_idle_ms, so back-to-back requests never pay for it.
void Engine::Impl::trim_heap() {
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
}

void Engine::Impl::loop() {
    bool worked = false;
    for (;;) {
        std::vector<SequencePtr> fresh;
        std::vector<uint64_t> cancel_ids;
        bool stop = false, drain_now = false;
        {
            const bool busy = !sched->running().empty() || !sched->waiting().empty();
            std::unique_lock<std::mutex> lk(mu);
            // Idle: sleep until a request, a cancellation or shutdown arrives.
            const auto ready = [&] { return busy || !incoming.empty() || !cancels.empty() || stopping; };
            if (worked && !busy) {
                // Idle after work: trim once nothing new came for a moment.
                if (!cv.wait_for(lk, std::chrono::milliseconds(k_trim_idle_ms), ready)) {
                    lk.unlock();
                    trim_heap();
                    worked = false;
                    lk.lock();
                }
            }
            cv.wait(lk, ready);
            fresh.swap(incoming);
            // Still waiting, now in the scheduler's queue: keep submit()'s
            // queue limit counting them until the next publish.
            published.n_waiting += static_cast<int>(fresh.size());
            cancel_ids.swap(cancels);
            stop = stopping;
            drain_now = drain;
        }
        for (SequencePtr &s : fresh) sched->add_waiting(std::move(s));
        take_cancels(cancel_ids);
        if (stop && !drain_now) {
            abort_all();
            publish_stats();
            return;
        }
        if (sched->running().empty() && sched->waiting().empty()) {
            publish_stats();
            if (stop) return;
            continue;
        }
        step();
        worked = true;
        publish_stats();
    }
}

void Engine::Impl::take_cancels(const std::vector<uint64_t> &ids) {
    for (uint64_t id : ids) {
        SequencePtr s = sched->remove_waiting(id);
        if (!s) {
            Sequence *r = sched->find_running(id);
            if (!r) continue;  // already finished, or never existed
            s = sched->remove_running(r);
        }
        s->cb(output_final_event(*s, FinishReason::cancelled, ""));
    }
}

void Engine::Impl::abort_all() {
    while (!sched->waiting().empty()) {
        SequencePtr s = sched->remove_waiting(sched->waiting().front()->id);
        s->cb(output_final_event(*s, FinishReason::cancelled, ""));
    }
    while (!sched->running().empty()) {
        SequencePtr s = sched->remove_running(sched->running().back().get());
        s->cb(output_final_event(*s, FinishReason::cancelled, ""));
    }
}

// One step (engine.h): schedule (admit, plan, reserve, preempt) -> forward ->
// per sequence: sample, detokenize, stop checks, events.
// Rows mapped ahead of each decoding sequence between steps: the next step
// needs one; a few more make page-boundary crossings rarer than once a step.
constexpr int64_t k_map_ahead_tokens = 16;

void Engine::Impl::step() {
    std::vector<FailedSeq> failed;
    const std::vector<ScheduledSeq> plan = sched->schedule(&failed);
    for (FailedSeq &f : failed) f.seq->cb(output_final_event(*f.seq, FinishReason::error, f.error));
    if (plan.empty()) return;

    // Point 0 of a policy (sparse/policy.h): a prefill starts (fresh, or a
    // recompute after preemption; its first tokens may have come from the
    // prefix cache): reset what it scores.
    for (const ScheduledSeq &p : plan) {
        if (p.seq->prefill_begun) continue;
        p.seq->prefill_begun = true;
        if (p.seq->pstate) p.seq->policy->begin_prefill(p.seq->pstate.get(), p.seq->n_total());
    }
    // Sequences past their after-prefill point before this step: point 2 after it.
    std::vector<Sequence *> decoding;
    for (const ScheduledSeq &p : plan)
        if (p.seq->policy && p.seq->policy_applied && p.seq->policy->acts_after_decode()) decoding.push_back(p.seq);
    const Batch batch = builder.build(plan);
    Status st = model.forward(batch, *kv, *ws, *pool);
    if (!st.ok()) {
        // The scheduler only builds valid batches within reserved KV: this is
        // a bug, but it fails these requests, not the server.
        SIEVE_LOG_ERROR("engine: forward step failed: %s", st.message().c_str());
        for (const ScheduledSeq &p : plan) {
            SequencePtr s = sched->remove_running(p.seq);
            s->cb(output_final_event(*s, FinishReason::error, "forward step failed: " + st.message()));
        }
        return;
    }
    ++n_steps;

    int64_t row = 0;
    for (const ScheduledSeq &p : plan) {
        Sequence *s = p.seq;
        s->n_computed += p.n_tokens;
        // Pages the sequence has filled and will not write again go to the
        // prefix cache now, so a request sharing the prefix can use them
        // while this one still runs (the store skips compacted lanes).
        sched->publish(*s, /*whole_pages_only=*/true);
        if (!p.wants_logits) continue;
        if (!apply_policy(*s)) {
            ++row;
            continue;
        }
        SIEVE_CHECKF(row < ws->n_outputs(), "logits row %lld of %lld", static_cast<long long>(row),
                     static_cast<long long>(ws->n_outputs()));
        const float *logits = ws->logits() + row * n_vocab;
        ++row;
        if (!s->prompt_counted) {
            prompt_tokens_total += s->n_prompt;
            s->prompt_counted = true;
        }
        GenEvent ev = output_next_token(*s, logits, tok, opt.max_ctx);
        ++gen_tokens_total;
        if (!ev.finished && std::find(decoding.begin(), decoding.end(), s) != decoding.end() &&
            !policy_after_decode(*s))
            continue;
        if (ev.finished) {
            count_rows(*s, &ev.kv_rows_kept, &ev.kv_rows_seen);
            SequencePtr done = sched->remove_running(s);
            done->cb(ev);
        } else {
            s->cb(ev);
        }
    }
    SIEVE_CHECKF(row == ws->n_outputs(), "used %lld logits rows of %lld", static_cast<long long>(row),
                 static_cast<long long>(ws->n_outputs()));

    // The step's tokens are out; map the next decode rows now, so the next
    // step's reservations find their pages mapped (scheduler.h, map-ahead).
    const KvMapStats before = kv->stats();
    sched->map_ahead(k_map_ahead_tokens);
    kv_map_calls_ahead += kv->stats().n_map_calls - before.n_map_calls;
    kv_map_us_ahead += kv->stats().map_us - before.map_us;
}

// Step 5 (engine.h): the policy's after-prefill point, once per computed KV,
// when the step that completed the sequence's uncomputed tokens was its
// prefill. False when the policy failed: the request is finished with the
// error and removed.
bool Engine::Impl::apply_policy(Sequence &s) {
    if (s.policy_applied) return true;
    s.policy_applied = true;
    std::string label = s.policy ? s.policy->name() : "dense";
    // Requests choose their policy spec freely: past k_max_policy_labels
    // distinct labels the rest are counted together, so the counters (and
    // the /metrics series made from them) stay bounded.
    if (policy_counters.size() >= k_max_policy_labels && policy_counters.count(label) == 0) label = "other";
    PolicyCounters &pc = policy_counters[label];
    pc.policy = label;
    ++pc.requests;
    int64_t kept = 0, seen = 0;
    count_rows(s, &kept, &seen);
    pc.rows_seen += seen;
    if (!s.policy) {
        pc.rows_kept += kept;
        if (s.req.on_prefilled) s.req.on_prefilled(*kv, s.slot);
        return true;
    }
    s.policy_n_prompt = s.n_computed;
    // The prefix cache keeps the uncompressed prompt (a compacted lane is
    // never published): offer all of it before the policy compacts.
    sched->publish(s, /*whole_pages_only=*/false);
    if (!run_policy(s, /*after_prefill=*/true).ok()) return false;  // s is gone
    count_rows(s, &kept, &seen);
    pc.rows_kept += kept;
    if (s.req.on_prefilled) s.req.on_prefilled(*kv, s.slot);
    return true;
}

// Point 2: false when the policy failed (the request is finished and removed).
bool Engine::Impl::policy_after_decode(Sequence &s) { return run_policy(s, /*after_prefill=*/false).ok(); }

Status Engine::Impl::run_policy(Sequence &s, bool after_prefill) {
    const PolicyContext ctx =
        policy_context(kv.get(), s.slot, s.policy_n_prompt, model.config().n_head, s.pstate.get(), s.id);
    const int64_t pages_before = kv->seq_mapped_pages(s.slot);
    Status st = after_prefill ? s.policy->after_prefill(ctx) : s.policy->after_decode(ctx);
    kv_pages_evicted += std::max<int64_t>(0, pages_before - kv->seq_mapped_pages(s.slot));
    if (st.ok()) return st;
    SIEVE_LOG_ERROR("engine: KV policy %s failed for request %llu: %s", s.policy->name().c_str(),
                    static_cast<unsigned long long>(s.id), st.message().c_str());
    SequencePtr done = sched->remove_running(&s);
    done->cb(output_final_event(*done, FinishReason::error, "KV policy failed: " + st.message()));
    return st;
}

// Rows the slot's lanes hold, and what dense lanes would (lanes x positions).
void Engine::Impl::count_rows(const Sequence &s, int64_t *kept, int64_t *seen) const {
    const KvShape &sh = kv->shape();
    *kept = 0;
    for (int64_t l = 0; l < sh.n_layer; ++l)
        for (int64_t g = 0; g < sh.n_head_kv; ++g) *kept += kv->n_rows(s.slot, l, g);
    *seen = sh.n_layer * sh.n_head_kv * kv->n_pos(s.slot);
}

void Engine::Impl::publish_stats() {
    EngineStats s;
    s.n_running = static_cast<int>(sched->running().size());
    s.n_waiting = static_cast<int>(sched->waiting().size());
    s.kv_pages_total = sched->pages_total();
    s.kv_pages_used = sched->pages_used();
    s.kv_page_bytes = opt.kv_page_bytes;
    s.n_preemptions = sched->n_preemptions();
    s.n_swap_out = sched->n_swap_out();
    s.n_swap_in = sched->n_swap_in();
    s.swap_bytes_used = sched->swap_used();
    s.swap_bytes_total = sched->swap_limit();
    s.prompt_tokens_total = prompt_tokens_total;
    s.gen_tokens_total = gen_tokens_total;
    s.n_steps = n_steps;
    for (const auto &[label, pc] : policy_counters) s.policies.push_back(pc);
    s.kv_pages_evicted = kv_pages_evicted;
    const KvMapStats &ms = kv->stats();
    s.kv_map_calls_ahead = kv_map_calls_ahead;
    s.kv_map_us_ahead = kv_map_us_ahead;
    s.kv_map_calls_in_step = ms.n_map_calls - kv_map_calls_ahead;
    s.kv_map_us_in_step = ms.map_us - kv_map_us_ahead;
    const PrefixCacheStats ps = kv->prefix_stats();
    s.prefix_cache = ps.enabled;
    s.prefix_query_tokens = sched->prefix_query_tokens();
    s.prefix_hit_tokens = sched->prefix_hit_tokens();
    s.prefix_blocks = ps.n_blocks;
    s.prefix_pages_held = ps.n_pages_held;
    s.prefix_pages_only = ps.n_pages_only;
    s.prefix_blocks_evicted = ps.n_blocks_evicted;
    std::lock_guard<std::mutex> lk(mu);
    published = s;
}

}  // namespace sieve
