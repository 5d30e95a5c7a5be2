#include "sieve/eval/eval_run.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "sieve/core/sysmem.h"
#include "sieve/core/timer.h"
#include "sieve/kv/vattention_kv.h"
#include "sieve/model/model.h"

namespace sieve {

namespace {

// How often the waiting thread samples EngineStats for the peak KV memory.
constexpr auto k_stats_period = std::chrono::milliseconds(5);

// A cell's sample with its reference run's outputs.
struct CellSample {
    EvalSample s;
    std::vector<int32_t> prompt;  // fed as the prompt
    std::vector<int32_t> tail;    // ppl: forced in every run; empty otherwise
    double depth = -1;
    std::vector<float> ref_logp;  // [n_steps, n_vocab] log-softmax of the reference
    std::vector<int32_t> ref_tokens;
};

// One request and what came back; callbacks write it on the engine thread,
// the main thread reads it once run_jobs has counted every job finished
// (under the run's mutex, so the writes happen before the reads).
struct Job {
    GenRequest req;
    int64_t t_submit_us = 0, t_first_us = 0, t_done_us = 0;
    std::string text;
    std::vector<int32_t> tokens;
    std::vector<int64_t> rows_kept;
    std::vector<std::vector<int32_t>> kept_positions;  // only when the engine keeps positions
    int64_t rows_dense = 0;
    int64_t n_cached = 0;  // prompt tokens the prefix cache supplied
    std::string error;
    // forced runs: per-step comparison with the reference
    const CellSample *ref = nullptr;
    std::vector<float> log_q;  // scratch [n_vocab]
    StepAccumulator acc;
};

void record_rows(Job *job, const KvCache &kv, int slot) {
    const KvShape &sh = kv.shape();
    job->rows_kept.resize(static_cast<size_t>(sh.n_layer * sh.n_head_kv));
    for (int64_t l = 0; l < sh.n_layer; ++l)
        for (int64_t h = 0; h < sh.n_head_kv; ++h)
            job->rows_kept[static_cast<size_t>(l * sh.n_head_kv + h)] = kv.n_rows(slot, l, h);
    job->rows_dense = kv.n_pos(slot);
    if (kv.positions(slot, 0, 0) == nullptr) return;
    job->kept_positions.resize(job->rows_kept.size());
    for (int64_t l = 0; l < sh.n_layer; ++l)
        for (int64_t h = 0; h < sh.n_head_kv; ++h) {
            const int32_t *pos = kv.positions(slot, l, h);
            job->kept_positions[static_cast<size_t>(l * sh.n_head_kv + h)].assign(
                pos, pos + kv.n_rows(slot, l, h));
        }
}

// Submits every job at once (one submit_all, so the first step's batch does
// not depend on timing) and waits for all; returns the peak KV bytes.
// one_done() is called on this thread once per finished job.
Result<int64_t> run_jobs(Engine &engine, std::vector<Job> &jobs, const std::function<void()> &one_done) {
    std::mutex mu;
    std::condition_variable cv;
    int64_t n_done = 0;
    std::vector<GenRequest> reqs;
    std::vector<GenCallback> cbs;
    for (Job &job : jobs) {
        Job *j = &job;
        j->req.on_prefilled = [j](const KvCache &kv, int slot) { record_rows(j, kv, slot); };
        reqs.push_back(j->req);
        cbs.push_back([j, &mu, &cv, &n_done](const GenEvent &ev) {
            const int64_t now = time_us();
            std::lock_guard<std::mutex> lock(mu);
            if (!ev.tokens.empty() && j->t_first_us == 0) j->t_first_us = now;
            j->text += ev.text;
            j->tokens.insert(j->tokens.end(), ev.tokens.begin(), ev.tokens.end());
            if (ev.finished) {
                j->t_done_us = now;
                j->n_cached = ev.n_cached_tokens;
                if (ev.finish_reason == FinishReason::error || ev.finish_reason == FinishReason::cancelled)
                    j->error = ev.error.empty() ? finish_reason_name(ev.finish_reason) : ev.error;
                ++n_done;
                cv.notify_all();
            }
        });
    }
    const int64_t t_submit = time_us();
    for (Job &job : jobs) job.t_submit_us = t_submit;
    Result<std::vector<uint64_t>> ids = engine.submit_all(std::move(reqs), std::move(cbs));
    if (!ids.ok()) return ids.status().with_context("engine refused the eval's requests");
    // stats() takes the engine's lock: never call it while holding `mu`,
    // which the engine thread takes inside the callbacks.
    int64_t peak = 0, reported = 0;
    while (reported < static_cast<int64_t>(jobs.size())) {
        const EngineStats st = engine.stats();
        peak = std::max(peak, st.kv_pages_used * st.kv_page_bytes);
        int64_t done = 0;
        {
            std::unique_lock<std::mutex> lock(mu);
            cv.wait_for(lock, k_stats_period, [&] { return n_done > reported; });
            done = n_done;
        }
        for (; reported < done; ++reported) one_done();
    }
    return peak;
}

// ctx_limit: the model's context (0: none). A sample is its target length
// within 1%, so at a length right below the model's context a prompt a few
// tokens over its target leaves fewer positions than the answer budget: the
// budget gives way by those few tokens (the budgets leave room to spare)
// rather than the engine refusing the whole cell.
GenRequest greedy_request(const CellSample &cs, int64_t max_tokens, int64_t ctx_limit) {
    GenRequest r;
    r.prompt = cs.prompt;
    r.sampling.temperature = 0;
    r.sampling.repeat_last_n = 0;
    const int64_t room = ctx_limit - static_cast<int64_t>(cs.prompt.size());
    r.max_tokens = ctx_limit > 0 && room > 0 ? std::min(max_tokens, room) : max_tokens;
    if (!cs.tail.empty()) {  // ppl: the text's own continuation, EOS or not
        r.forced_tokens = cs.tail;
        r.max_tokens = static_cast<int64_t>(cs.tail.size());
        r.ignore_eos = true;
    }
    return r;
}

// Step 1: the cell's samples.
Result<std::vector<CellSample>> make_cell(const EvalPlan &plan, const std::string &task, int64_t ctx,
                                          const Tokenizer &tok, const ChatTemplate *tmpl,
                                          const EvalHooks &hooks) {
    std::vector<CellSample> out;
    for (int64_t i = 0; i < plan.n_samples; ++i) {
        TaskOptions o = plan.task;
        o.n_tokens = ctx;
        o.seed = plan.seed + static_cast<uint64_t>(i);
        if (!plan.depths.empty())
            o.depth = plan.depths[static_cast<size_t>(i) % plan.depths.size()];
        else
            o.depth =
                plan.n_samples > 1 ? static_cast<double>(i) / static_cast<double>(plan.n_samples - 1) : 0.5;
        Result<EvalSample> s = make_sample(task, o, tok, tmpl);
        if (!s.ok()) return s.status();
        CellSample cs;
        cs.s = std::move(*s);
        cs.depth = cs.s.needles.empty() ? -1.0 : o.depth;
        cs.prompt = cs.s.prompt_ids;
        if (cs.s.answers.empty()) {
            const int64_t n_tail =
                std::min<int64_t>(plan.ppl_tokens, static_cast<int64_t>(cs.prompt.size()) / 2);
            cs.tail.assign(cs.prompt.end() - n_tail, cs.prompt.end());
            cs.prompt.resize(cs.prompt.size() - static_cast<size_t>(n_tail));
        }
        if (hooks.on_sample) hooks.on_sample(cs.s, static_cast<int64_t>(cs.tail.size()));
        out.push_back(std::move(cs));
    }
    return out;
}

EngineOptions cell_engine_options(const EvalPlan &plan, const std::vector<CellSample> &cell,
                                  int64_t max_tokens, int64_t ctx_limit) {
    EngineOptions eo = plan.engine;
    // share_prefill: the rows of a cell run in one engine per KV type, and a
    // row's prompt KV comes from the prefix cache where an earlier row of the
    // same type computed it (a policy that scores queries computes those
    // itself: reusable_prefix). Prefill bits do not depend on how a prompt is
    // cut, nor a token's on its batch, so dense still gives the reference's
    // logits bit for bit. Off: every run computes its whole prompt.
    eo.prefix_cache = plan.share_prefill;
    int64_t longest = 0;
    for (const CellSample &cs : cell)
        longest = std::max(longest, static_cast<int64_t>(cs.prompt.size() + cs.tail.size()));
    eo.max_ctx = longest + max_tokens + 1;
    if (ctx_limit > 0) eo.max_ctx = std::min(eo.max_ctx, ctx_limit);  // greedy_request fits the answers in it
    // Every request of a run is queued at once (forced and free per sample).
    eo.max_waiting = std::max(eo.max_waiting, 2 * static_cast<int>(cell.size()) + 1);
    return eo;
}

EvalSampleResult sample_result(int row, const CellSample &cs, const Job &timing) {
    EvalSampleResult r;
    r.row = row;
    r.task = cs.s.task;
    r.ctx = cs.s.n_tokens_target;
    r.seed = cs.s.seed;
    r.depth = cs.depth;
    r.n_prompt = static_cast<int64_t>(cs.prompt.size());
    r.answers = cs.s.answers;
    r.rows_kept = timing.rows_kept;
    r.rows_dense = timing.rows_dense;
    r.cached_tokens = timing.n_cached;
    r.error = timing.error;
    if (timing.t_first_us > 0) {
        r.prefill_ms = static_cast<double>(timing.t_first_us - timing.t_submit_us) / 1e3;
        r.decode_ms = static_cast<double>(timing.t_done_us - timing.t_first_us) / 1e3;
    }
    return r;
}

void score_free(EvalSampleResult *r, const CellSample &cs, const Job &free_run) {
    r->scored = !cs.s.answers.empty();
    r->correct = r->scored && free_run.error.empty() && score_answer(cs.s, free_run.text);
    r->ruler = r->scored && free_run.error.empty() ? ruler_score(cs.s, free_run.text) : 0.0;
    r->output = free_run.text;
    r->n_gen = static_cast<int64_t>(free_run.tokens.size());
}

// Dense at the reference's KV type decodes exactly as the reference did, so
// its free run would repeat the reference run: its accuracy is the reference's.
bool reuses_reference(const KvPolicyPtr &policy, cpu::KvRowTypes kv_type, const EvalPlan &plan) {
    return !policy && kv_type == plan.ref_kv_type;
}

// The progress bar's estimate of what a request costs, in tokens computed:
// its prompt, less what it is expected to map from the prefix cache, plus
// its generated (or forced) tokens. Rows of the reference's KV type whose
// policy keeps the dense prefill's KV map the reference's prompt and compute
// only what the policy scores (reusable_prefix); other types, and policies
// with a prefill mask (their own namespace), compute it all once.
// The page size of the eval's engines for rows of `shape`: one given by
// hand, else pages that let the prefix cache share each sample's prompt
// between rows (for K and V rows of different sizes coarser than a
// server's default, VAttentionKv::page_bytes_for, which costs nothing with
// a few long sequences).
int64_t eval_page_bytes(const KvShape &shape, const EvalPlan &plan) {
    if (plan.engine.kv_page_bytes > 0) return plan.engine.kv_page_bytes;
    if (plan.share_prefill && plan.engine.prefix_cache)
        if (const int64_t p = VAttentionKv::prefix_page_bytes(shape); p > 0) return p;
    return VAttentionKv::page_bytes_for(shape, 0);
}

class WorkModel {
  public:
    WorkModel(const Model &model, const EvalPlan &plan) : plan_(plan) {
        for (cpu::KvRowTypes t : {plan.ref_kv_type, plan.engine.kv_type}) {
            const KvShape shape = model.kv_shape(plan.engine.max_seqs, t);
            const int64_t page = eval_page_bytes(shape, plan);
            if (VAttentionKv::prefix_block_check(shape, page, plan.engine.prefix_block).empty())
                cacheable_.push_back(t);
        }
    }
    double reference(int64_t ctx, int64_t gen) const { return static_cast<double>(ctx + gen); }
    // A policy row's forced run (free = false) or free run (free = true).
    // A free run maps the prompt its row's forced run left in the cache
    // (whatever namespace that is in) where the type can be cached at all.
    double row(const KvPolicyPtr &policy, cpu::KvRowTypes type, int64_t ctx, int64_t gen, bool free) const {
        const bool cacheable =
            plan_.share_prefill && std::find(cacheable_.begin(), cacheable_.end(), type) != cacheable_.end();
        if (free) return static_cast<double>(cacheable ? gen : ctx + gen);
        const bool maps_reference =
            cacheable && type == plan_.ref_kv_type && (!policy || policy->prefix_namespace() == 0);
        if (!maps_reference) return static_cast<double>(ctx + gen);
        const int64_t reused = policy ? std::min(ctx, policy->reusable_prefix(ctx)) : ctx;
        return static_cast<double>(ctx - reused + gen);
    }

  private:
    const EvalPlan &plan_;
    std::vector<cpu::KvRowTypes> cacheable_;
};

// The engine a run uses. Sharing (plan.share_prefill): one engine alive at
// a time, kept while the runs of a group of samples use its KV type, so its
// prefix cache holds the group's prompts; a run of another type, or the
// next group, starts a fresh one (the pool then holds no prompt that no
// later row needs). Not sharing: a fresh engine per run.
class CellEngines {
  public:
    CellEngines(const Model &model, const Tokenizer &tok, const EvalPlan &plan, EngineOptions eo)
        : model_(model), tok_(tok), plan_(plan), eo_(std::move(eo)) {}

    void next_group() { engine_.reset(); }

    Result<Engine *> get(cpu::KvRowTypes kv_type) {
        if (engine_ && plan_.share_prefill && kv_type == type_) return engine_.get();
        engine_.reset();  // one KV pool and one thread pool at a time
        EngineOptions eo = eo_;
        eo.kv_type = kv_type;
        eo.kv_policy = nullptr;  // every request names its own
        const KvShape shape = model_.kv_shape(eo.max_seqs, kv_type);
        eo.kv_page_bytes = eval_page_bytes(shape, plan_);
        // Rows that do not divide a page (a page size given by hand that
        // does not fit them) cannot be cached: the runs of that type compute
        // their prompts (cached_tokens 0), quietly rather than with the
        // engine's warning per group.
        if (eo.prefix_cache &&
            !VAttentionKv::prefix_block_check(shape, eo.kv_page_bytes, eo.prefix_block).empty())
            eo.prefix_cache = false;
        if (eo.prefix_cache && eo.kv_memory_bytes == 0) {
            // The running sequences' contexts, the group's prompts that the
            // cache keeps for the rows after the first, and the lanes a
            // policy compacts beside the cached pages they leave.
            eo.kv_memory_bytes = cap_kv_default(
                3 * eo.max_seqs * VAttentionKv::seq_pages_for_rows(shape, eo.kv_page_bytes, eo.max_ctx) *
                    eo.kv_page_bytes,
                "the eval's samples (-np) with their cached prompts");
        }
        Result<std::unique_ptr<Engine>> e = Engine::create(model_, tok_, eo);
        if (!e.ok()) return e.status().with_context("engine for the eval");
        engine_ = std::move(*e);
        type_ = kv_type;
        return engine_.get();
    }

  private:
    const Model &model_;
    const Tokenizer &tok_;
    const EvalPlan &plan_;
    const EngineOptions eo_;
    std::unique_ptr<Engine> engine_;
    cpu::KvRowTypes type_ = cpu::RowType::f16;
};

// A row's runs over a cell, summed over its groups of samples.
struct RowRun {
    int64_t peak_kv_bytes = 0;
    double wall_ms = 0;
};

struct CellContext {
    const Model &model;
    const std::vector<KvPolicyPtr> &policies;  // [row - 1]
    const EvalPlan &plan;
    const EvalHooks &hooks;
    int64_t max_tokens;
    int64_t ctx_limit;  // the model's context; 0 = none (greedy_request)
    EvalProgress *progress;
    const WorkModel &work;
    int64_t ctx;
    const EvalResult &result;  // rows
    CellEngines *engines;
};

// Counts n requests of `work` estimated tokens each as done.
void count_done(const CellContext &c, int64_t n, double work, const std::string &what) {
    c.progress->requests_done += n;
    c.progress->work_done += static_cast<double>(n) * work;
    if (n > 0 && c.hooks.progress) c.hooks.progress(*c.progress, what);
}

// Runs the jobs on the engine for kv_type, each counted as `work` estimated
// tokens when it finishes; adds its peak and wall time to *run.
Status run_on(const CellContext &c, cpu::KvRowTypes kv_type, std::vector<Job> &jobs, double work,
              const std::string &what, RowRun *run) {
    Result<Engine *> engine = c.engines->get(kv_type);
    if (!engine.ok()) return engine.status();
    const int64_t t0 = time_us();
    Result<int64_t> peak = run_jobs(**engine, jobs, [&] { count_done(c, 1, work, what); });
    if (!peak.ok()) return peak.status();
    run->peak_kv_bytes = std::max(run->peak_kv_bytes, *peak);
    run->wall_ms += static_cast<double>(time_us() - t0) / 1e3;
    return Status();
}

// Step 2: the reference run of a group of samples; fills each sample's
// ref_logp / ref_tokens and appends the group's reference results to *out.
Status run_reference(const CellContext &c, CellSample *group, size_t n, const std::string &what,
                     std::vector<EvalSampleResult> *out, RowRun *run) {
    std::vector<Job> jobs(n);
    const int64_t n_vocab = c.model.config().n_vocab;
    for (size_t i = 0; i < n; ++i) {
        CellSample *cs = &group[i];
        jobs[i].req = greedy_request(*cs, c.max_tokens, c.ctx_limit);
        jobs[i].req.kv_policy = KvPolicyPtr();  // dense
        cs->ref_logp.reserve(static_cast<size_t>(jobs[i].req.max_tokens * n_vocab));
        jobs[i].req.on_logits = [cs](const float *logits, int64_t nv) {
            const size_t at = cs->ref_logp.size();
            cs->ref_logp.resize(at + static_cast<size_t>(nv));
            eval_log_softmax(logits, nv, cs->ref_logp.data() + at);
        };
    }
    SIEVE_TRY(run_on(c, c.plan.ref_kv_type, jobs, c.work.reference(c.ctx, c.max_tokens), what, run));
    for (size_t i = 0; i < n; ++i) {
        CellSample &cs = group[i];
        cs.ref_tokens = jobs[i].tokens;
        EvalSampleResult r = sample_result(0, cs, jobs[i]);
        score_free(&r, cs, jobs[i]);
        // The reference against itself: only its NLL is meaningful.
        StepAccumulator acc;
        const size_t n_steps =
            std::min(cs.ref_tokens.size(), cs.ref_logp.size() / static_cast<size_t>(n_vocab));
        for (size_t t = 0; t < n_steps; ++t) {
            const float *lp = cs.ref_logp.data() + t * static_cast<size_t>(n_vocab);
            acc.add(lp, lp, n_vocab, cs.ref_tokens[t]);
        }
        r.steps = acc.result();
        out->push_back(std::move(r));
    }
    return Status();
}

// Step 3: one policy (row >= 1) against the reference, for a group of
// samples whose reference results are ref[0, n); appends to *out.
//
// First the teacher-forced runs: each step's logits against the
// reference's. A policy that keeps every row gives the reference's logits
// bit for bit (KL exactly 0), whatever the batches (a token's bits depend
// on neither its batch nor how its prompt was cut). Then a free run for
// the samples that need one: where the policy's argmax agreed with the
// forced token at every step, free decoding would produce exactly the
// reference's tokens (the forced run is the free run until the first
// disagreement), so the sample takes the reference's output and score.
Status run_policy(const CellContext &c, const CellSample *group, size_t n, int row, const std::string &what,
                  const EvalSampleResult *ref, std::vector<EvalSampleResult> *out, RowRun *run) {
    const EvalRow &er = c.result.rows[static_cast<size_t>(row)];
    const KvPolicyPtr &policy = c.policies[static_cast<size_t>(row - 1)];
    const bool reuse_free = reuses_reference(policy, er.kv_type, c.plan);
    const bool ppl = !group[0].tail.empty();
    const int64_t n_vocab = c.model.config().n_vocab;

    std::vector<Job> forced(n);
    for (size_t i = 0; i < n; ++i) {
        const CellSample &cs = group[i];
        Job &f = forced[i];
        f.ref = &cs;
        f.req = greedy_request(cs, c.max_tokens, c.ctx_limit);
        f.req.kv_policy = policy;
        f.req.forced_tokens = cs.ref_tokens;
        f.req.max_tokens = static_cast<int64_t>(cs.ref_tokens.size());
        f.log_q.resize(static_cast<size_t>(n_vocab));
        Job *fj = &f;
        f.req.on_logits = [fj](const float *logits, int64_t nv) {
            const size_t step = static_cast<size_t>(fj->acc.n_steps());
            if (step >= fj->ref->ref_tokens.size()) return;
            eval_log_softmax(logits, nv, fj->log_q.data());
            fj->acc.add(fj->ref->ref_logp.data() + step * static_cast<size_t>(nv), fj->log_q.data(), nv,
                        fj->ref->ref_tokens[step]);
        };
    }
    SIEVE_TRY(
        run_on(c, er.kv_type, forced, c.work.row(policy, er.kv_type, c.ctx, c.max_tokens, false), what, run));

    // Free runs where the forced one left the reference's path.
    std::vector<size_t> free_of(n, SIZE_MAX);
    std::vector<Job> free_jobs;
    for (size_t i = 0; i < n && !reuse_free && !ppl; ++i) {
        const StepMetrics m = forced[i].acc.result();
        const bool same_path = forced[i].error.empty() &&
                               m.n_steps == static_cast<int64_t>(group[i].ref_tokens.size()) &&
                               m.agreement == 1.0;
        if (same_path) continue;
        free_of[i] = free_jobs.size();
        free_jobs.emplace_back();
        free_jobs.back().req = greedy_request(group[i], c.max_tokens, c.ctx_limit);
        free_jobs.back().req.kv_policy = policy;
    }
    // Counted as done for the progress bar either way.
    const double free_work = c.work.row(policy, er.kv_type, c.ctx, c.max_tokens, true);
    if (!reuse_free && !ppl) count_done(c, static_cast<int64_t>(n - free_jobs.size()), free_work, what);
    if (!free_jobs.empty()) SIEVE_TRY(run_on(c, er.kv_type, free_jobs, free_work, what, run));

    for (size_t i = 0; i < n; ++i) {
        const CellSample &cs = group[i];
        const Job &f = forced[i];
        const bool own_free = free_of[i] != SIZE_MAX;
        EvalSampleResult r = sample_result(row, cs, own_free ? free_jobs[free_of[i]] : f);
        r.rows_kept = f.rows_kept;
        r.kept_positions = f.kept_positions;
        r.rows_dense = f.rows_dense;
        r.cached_tokens = f.n_cached;
        r.steps = f.acc.result();
        if (!f.error.empty()) r.error = f.error;
        if (own_free) {
            score_free(&r, cs, free_jobs[free_of[i]]);
        } else if (ppl) {
            score_free(&r, cs, f);
        } else {
            r.scored = ref[i].scored;
            r.correct = ref[i].correct && r.error.empty();
            r.ruler = r.error.empty() ? ref[i].ruler : 0.0;
            r.output = ref[i].output;
            r.n_gen = ref[i].n_gen;
        }
        out->push_back(std::move(r));
    }
    return Status();
}

// One cell: the samples in groups of -np (the slots), each group's
// reference first and then every policy row, so the prefix cache needs to
// hold one group's prompts; results are appended row by row.
Status run_cell(const Model &model, const Tokenizer &tok, const std::vector<KvPolicyPtr> &policies,
                const EvalPlan &plan, const EvalHooks &hooks, std::vector<CellSample> &cell,
                const std::string &task, int64_t ctx, const WorkModel &work, EvalProgress *progress,
                EvalResult *result) {
    const int64_t max_tokens = plan.max_tokens > 0 ? plan.max_tokens : eval_task_max_tokens(task);
    const int64_t ctx_limit = std::max<int64_t>(0, model.config().n_ctx_train);
    CellEngines engines(model, tok, plan, cell_engine_options(plan, cell, max_tokens, ctx_limit));
    const CellContext c{model,    policies, plan, hooks,   max_tokens, ctx_limit,
                        progress, work,     ctx,  *result, &engines};
    const size_t n_rows = result->rows.size();
    std::vector<std::vector<EvalSampleResult>> by_row(n_rows);
    std::vector<RowRun> runs(n_rows);
    const size_t group = static_cast<size_t>(std::max(1, plan.engine.max_seqs));
    const std::string at = task + " @" + std::to_string(ctx) + " ";
    for (size_t g0 = 0; g0 < cell.size(); g0 += group) {
        const size_t n = std::min(group, cell.size() - g0);
        engines.next_group();
        SIEVE_TRY(run_reference(c, cell.data() + g0, n, at + "reference", &by_row[0], &runs[0]));
        for (size_t row = 1; row < n_rows; ++row)
            SIEVE_TRY(run_policy(c, cell.data() + g0, n, static_cast<int>(row), at + result->rows[row].policy,
                                 by_row[0].data() + g0, &by_row[row], &runs[row]));
        // Each sample's reference log-probabilities were only needed by this group's rows.
        for (size_t i = g0; i < g0 + n; ++i) std::vector<float>().swap(cell[i].ref_logp);
    }
    for (size_t row = 0; row < n_rows; ++row) {
        for (EvalSampleResult &r : by_row[row]) result->samples.push_back(std::move(r));
        result->runs.push_back(
            {static_cast<int>(row), task, ctx, runs[row].peak_kv_bytes, runs[row].wall_ms});
    }
    return Status();
}

}  // namespace

int64_t eval_task_max_tokens(const std::string &task) {
    if (task == "passkey" || task == "niah_multikey" || task == "code") return 32;
    // Instruct models list vt's names as "VAR ABCDE = 12345" lines (~12
    // tokens each, SmolLM2): 64 tokens cut the fifth name; cwe lists 10 words.
    if (task == "vt" || task == "cwe") return 128;
    return 64;
}

std::vector<SampleOutcome> eval_outcomes(const EvalResult &r, int row, const std::string &task, int64_t ctx) {
    std::vector<SampleOutcome> out;
    for (const EvalSampleResult &s : r.samples) {
        if (s.row != row || s.task != task || s.ctx != ctx) continue;
        SampleOutcome o;
        o.scored = s.scored;
        o.correct = s.correct;
        o.ruler = s.ruler;
        o.steps = s.steps;
        for (int64_t k : s.rows_kept) o.rows_kept += k;
        o.rows_dense = s.rows_dense * static_cast<int64_t>(s.rows_kept.size());
        out.push_back(o);
    }
    return out;
}

Status eval_plan_check(const EvalPlan &plan, const Tokenizer &tok, const ChatTemplate *tmpl) {
    for (const KvPolicySpec &p : plan.policies) {
        Result<KvPolicyPtr> made = kv_policy_make(p);
        if (!made.ok()) return made.status();
    }
    for (const std::string &task : plan.tasks)
        for (int64_t ctx : plan.ctx) {
            TaskOptions o = plan.task;
            o.n_tokens = ctx;
            o.seed = plan.seed;
            Result<EvalSample> s = make_sample(task, o, tok, tmpl);
            if (!s.ok()) return s.status();
        }
    return Status();
}

Result<EvalResult> eval_run(const Model &model, const Tokenizer &tok, const ChatTemplate *tmpl,
                            const EvalPlan &plan, const EvalHooks &hooks) {
    const int64_t t0 = time_us();
    EvalResult result;
    const ModelConfig &cfg = model.config();
    result.n_layer = cfg.n_layer;
    result.n_head_kv = cfg.n_head_kv;
    result.n_vocab = cfg.n_vocab;
    result.rows.push_back({"dense (reference)", plan.ref_kv_type, true});
    for (const KvPolicySpec &p : plan.policies)
        result.rows.push_back({kv_policy_spec_label(p), plan.engine.kv_type, false});

    std::vector<KvPolicyPtr> policies;
    for (const KvPolicySpec &p : plan.policies) {
        Result<KvPolicyPtr> made = kv_policy_make(p);
        if (!made.ok()) return made.status();
        policies.push_back(*made);
    }

    // Requests in all: the reference, then forced (+ free) per policy.
    const WorkModel work(model, plan);
    EvalProgress progress;
    for (const std::string &task : plan.tasks) {
        const int64_t gen = plan.max_tokens > 0 ? plan.max_tokens : eval_task_max_tokens(task);
        for (int64_t ctx : plan.ctx) {
            const auto n = static_cast<double>(plan.n_samples);
            progress.requests_total += plan.n_samples;
            progress.work_total += n * work.reference(ctx, gen);
            for (size_t r = 0; r < policies.size(); ++r) {
                const cpu::KvRowTypes type = plan.engine.kv_type;
                progress.requests_total += plan.n_samples;
                progress.work_total += n * work.row(policies[r], type, ctx, gen, false);
                if (task == "ppl" || reuses_reference(policies[r], type, plan)) continue;
                progress.requests_total += plan.n_samples;
                progress.work_total += n * work.row(policies[r], type, ctx, gen, true);
            }
        }
    }
    if (hooks.progress) hooks.progress(progress, "starting");
    for (const std::string &task : plan.tasks) {
        for (int64_t ctx : plan.ctx) {
            Result<std::vector<CellSample>> cell = make_cell(plan, task, ctx, tok, tmpl, hooks);
            if (!cell.ok()) return cell.status();
            SIEVE_TRY(
                run_cell(model, tok, policies, plan, hooks, *cell, task, ctx, work, &progress, &result));
        }
    }
    result.wall_s = static_cast<double>(time_us() - t0) / 1e6;
    return result;
}

}  // namespace sieve
