#include "sieve/eval/calibrate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "sieve/eval/eval_metrics.h"
#include "sieve/kv/contiguous_kv.h"

namespace sieve {

namespace {

// Per KV head of every layer: the sum of the per-position ratios and their count.
struct Acc {
    std::vector<double> sum;
    int64_t n = 0;
};

// Runs tokens[0, end) of slot 0 through the model in chunks of `chunk`
// (dense attention); *at is the first position of the chunk in flight, for
// an activation callback.
Status prefill_dense(const Model &model, const std::vector<int32_t> &tokens, int64_t end, int64_t chunk, KvCache &kv,
                     Workspace &ws, ThreadPool &pool, int64_t *at) {
    std::vector<int32_t> pos(static_cast<size_t>(chunk)), seq(static_cast<size_t>(chunk), 0);
    for (*at = 0; *at < end;) {
        const int64_t m = std::min(chunk, end - *at);
        for (int64_t i = 0; i < m; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(*at + i);
        Batch b;
        b.tokens = tokens.data() + *at;
        b.pos = pos.data();
        b.seq = seq.data();
        b.n_tokens = m;
        SIEVE_TRY(model.forward(b, kv, ws, pool));
        *at += m;
    }
    return Status();
}

// One sample: the prompt + its answer through the model, then the ratios.
Status calibrate_sample(const Model &model, const std::vector<int32_t> &tokens, int64_t n_prompt,
                        const CalibrateOptions &opt, ThreadPool &pool, Acc *acc) {
    const ModelConfig &c = model.config();
    const int64_t n = static_cast<int64_t>(tokens.size()), hd = c.head_dim, nkv = c.n_head_kv;
    const int64_t group = c.n_head / nkv, qd = c.q_dim();
    Result<std::unique_ptr<ContiguousKv>> kvr = ContiguousKv::create(model.kv_shape(1, opt.kv_type), n);
    if (!kvr.ok()) return kvr.status();
    ContiguousKv &kv = **kvr;
    // The answer positions: queries at p0 .. n - 2 predict tokens p0 + 1 .. n - 1.
    const int64_t p0 = n_prompt - 1, n_ans = n - 1 - p0;
    std::vector<float> qs(static_cast<size_t>(c.n_layer * n_ans * qd));
    int64_t chunk0 = 0;
    std::unique_ptr<Workspace> ws = model.make_workspace(opt.chunk);
    ws->callback = [&](const char *name, int il, const float *data, int64_t rows, int64_t cols) {
        if (il < 0 || std::string(name) != "q") return;
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t pos = chunk0 + r;
            if (pos < p0 || pos >= n - 1) continue;
            std::copy(data + r * cols, data + (r + 1) * cols,
                      qs.data() + (static_cast<int64_t>(il) * n_ans + (pos - p0)) * qd);
        }
    };
    SIEVE_TRY(prefill_dense(model, tokens, n, opt.chunk, kv, *ws, pool, &chunk0));
    ws->callback = nullptr;
    // Both attentions per (layer, answer position), every KV head at once
    // (each head's output depends on its own rows only).
    std::vector<const void *> kp(static_cast<size_t>(nkv)), vp(static_cast<size_t>(nkv));
    std::vector<float> o_full(static_cast<size_t>(qd)), o_str(static_cast<size_t>(qd));
    std::vector<int32_t> rows;
    std::vector<int64_t> first(static_cast<size_t>(nkv + 1));
    for (int64_t il = 0; il < c.n_layer; ++il) {
        for (int64_t g = 0; g < nkv; ++g) {
            kp[static_cast<size_t>(g)] = kv.k_data(0, il, g);
            vp[static_cast<size_t>(g)] = kv.v_data(0, il, g);
        }
        for (int64_t t = 0; t < n_ans; ++t) {
            const int64_t n_vis = p0 + t + 1;
            cpu::AttnArgs a;
            a.q = qs.data() + (il * n_ans + t) * qd;
            a.k = kp.data();
            a.v = vp.data();
            a.kv_type = opt.kv_type;
            a.n_q = 1;
            a.n_past = n_vis - 1;
            a.n_head = c.n_head;
            a.n_head_kv = nkv;
            a.head_dim = hd;
            a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
            a.o = o_full.data();
            cpu::attention_decode(a, pool);
            // The streaming pattern: [0, sink) and the last `recent` rows.
            rows.clear();
            const int64_t s_end = std::min(opt.sink, n_vis), r_begin = std::max(s_end, n_vis - opt.recent);
            for (int64_t g = 0; g < nkv; ++g) {
                if (r_begin == s_end) {  // the pattern covers every row
                    rows.push_back(0);
                    rows.push_back(static_cast<int32_t>(n_vis));
                } else {
                    if (s_end > 0) {
                        rows.push_back(0);
                        rows.push_back(static_cast<int32_t>(s_end));
                    }
                    rows.push_back(static_cast<int32_t>(r_begin));
                    rows.push_back(static_cast<int32_t>(n_vis));
                }
                first[static_cast<size_t>(g + 1)] = static_cast<int64_t>(rows.size() / 2);
            }
            first[0] = 0;
            cpu::RowSpans sp;
            sp.rows = rows.data();
            sp.first = first.data();
            a.spans = &sp;
            a.o = o_str.data();
            cpu::attention_decode(a, pool);
            for (int64_t g = 0; g < nkv; ++g) {
                double num = 0.0, den = 0.0;
                for (int64_t i = g * group * hd; i < (g + 1) * group * hd; ++i) {
                    const double f = o_full[static_cast<size_t>(i)], s = o_str[static_cast<size_t>(i)];
                    num += (s - f) * (s - f);
                    den += f * f;
                }
                acc->sum[static_cast<size_t>(il * nkv + g)] += den > 0.0 ? num / den : 0.0;
            }
        }
    }
    acc->n += n_ans;
    return Status();
}

// One sample, answer_kl: the prompt's head prefilled once, then its tail and
// the answer once dense and once per KV head h with scored[h] set, with h and
// every head of `fixed` streaming.
Status calibrate_sample_kl(const Model &model, const std::vector<int32_t> &tokens, int64_t n_prompt,
                           const CalibrateOptions &opt, const std::vector<uint8_t> &fixed,
                           const std::vector<uint8_t> &scored, ThreadPool &pool, Acc *acc) {
    const ModelConfig &c = model.config();
    const int64_t n = static_cast<int64_t>(tokens.size()), nkv = c.n_head_kv, n_heads = c.n_layer * nkv;
    const int64_t vocab = c.n_vocab;
    Result<std::unique_ptr<ContiguousKv>> kvr = ContiguousKv::create(model.kv_shape(1, opt.kv_type), n);
    if (!kvr.ok()) return kvr.status();
    ContiguousKv &kv = **kvr;
    // Answer positions p0 .. n - 2 (their logits predict tokens p0 + 1 .. n - 1);
    // positions t0 .. n - 1 are rerun, at least two so the run is a prefill run.
    const int64_t p0 = n_prompt - 1, n_ans = n - 1 - p0;
    const int64_t t0 = std::max<int64_t>(0, std::min(p0 - opt.tail, n - 2)), n_tail = n - t0;
    std::unique_ptr<Workspace> ws = model.make_workspace(std::max(opt.chunk, n_tail), std::max<int64_t>(n_ans, 1));
    int64_t at = 0;
    SIEVE_TRY(prefill_dense(model, tokens, t0, opt.chunk, kv, *ws, pool, &at));
    std::vector<int32_t> pos(static_cast<size_t>(n_tail));
    const std::vector<int32_t> seq(static_cast<size_t>(n_tail), 0);
    // The tail: every token a prompt token (the prefill kernel, where the Λ
    // mask lives), logits at the answer positions.
    std::vector<int8_t> want(static_cast<size_t>(n_tail)), in_prompt(static_cast<size_t>(n_tail), 1);
    for (int64_t i = 0; i < n_tail; ++i) {
        pos[static_cast<size_t>(i)] = static_cast<int32_t>(t0 + i);
        want[static_cast<size_t>(i)] = t0 + i >= p0 && t0 + i < n - 1 ? 1 : 0;
    }
    std::vector<uint8_t> streaming = fixed;
    PrefillMask mask;
    mask.streaming = streaming.data();
    mask.sink = opt.sink;
    mask.recent = opt.recent;
    std::vector<const PrefillMask *> masks(static_cast<size_t>(n_tail), &mask);
    auto run_tail = [&](bool masked) -> Status {
        Batch b;
        b.tokens = tokens.data() + t0;
        b.pos = pos.data();
        b.seq = seq.data();
        b.n_tokens = n_tail;
        b.want_logits = want.data();
        b.in_prompt = in_prompt.data();
        if (masked) b.prefill_masks = masks.data();
        SIEVE_TRY(model.forward(b, kv, *ws, pool));  // rolls the lanes back to t0 first
        SIEVE_CHECKF(ws->n_outputs() == n_ans, "calibrate: %lld logits rows, expected %lld",
                     static_cast<long long>(ws->n_outputs()), static_cast<long long>(n_ans));
        return Status();
    };
    // KL as `sieve eval` reports it (eval_metrics.h).
    SIEVE_TRY(run_tail(false));
    std::vector<std::vector<float>> ref(static_cast<size_t>(n_ans), std::vector<float>(static_cast<size_t>(vocab)));
    for (int64_t t = 0; t < n_ans; ++t)
        eval_log_softmax(ws->logits() + t * vocab, vocab, ref[static_cast<size_t>(t)].data());
    std::vector<float> lq(static_cast<size_t>(vocab));
    for (int64_t h = 0; h < n_heads; ++h) {
        if (!scored[static_cast<size_t>(h)]) continue;
        streaming[static_cast<size_t>(h)] = 1;
        SIEVE_TRY(run_tail(true));
        streaming[static_cast<size_t>(h)] = fixed[static_cast<size_t>(h)];
        for (int64_t t = 0; t < n_ans; ++t) {
            eval_log_softmax(ws->logits() + t * vocab, vocab, lq.data());
            const double kl = eval_kl(ref[static_cast<size_t>(t)].data(), lq.data(), vocab);
            acc->sum[static_cast<size_t>(h)] += std::max(0.0, kl);
        }
    }
    acc->n += n_ans;
    return Status();
}

Status check_options(const CalibrateOptions &opt) {
    if (opt.n_samples < 1 || opt.ctx.empty() || opt.sink < 0 || opt.recent < 1 || opt.chunk < 1 || opt.tail < 0)
        return Status::errorf("calibrate: samples %lld, %zu lengths, sink %lld, recent %lld, tail %lld: expected "
                              "samples >= 1, a length, sink >= 0, recent >= 1, tail >= 0",
                              static_cast<long long>(opt.n_samples), opt.ctx.size(), static_cast<long long>(opt.sink),
                              static_cast<long long>(opt.recent), static_cast<long long>(opt.tail));
    return Status();
}

// The samples: prompt + answer token ids and the prompt's length.
using CalSample = std::pair<std::vector<int32_t>, int64_t>;

// A sample whose prompt + answer runs past the model's training context
// (n_ctx_train > 0) is refused, naming the longest --ctx that fits: the
// positions past it are ones the model never saw, and a profile scored
// there says little about the heads.
Result<std::vector<CalSample>> calibration_samples(const Tokenizer &tok, const ChatTemplate *tmpl,
                                                   const CalibrateOptions &opt, int64_t n_ctx_train) {
    std::vector<CalSample> samples;
    for (int64_t ctx : opt.ctx) {
        for (int64_t i = 0; i < opt.n_samples; ++i) {
            TaskOptions to = opt.task_opt;
            to.n_tokens = ctx;
            to.seed = opt.seed + static_cast<uint64_t>(i);
            to.depth = opt.n_samples > 1 ? static_cast<double>(i) / static_cast<double>(opt.n_samples - 1) : 0.5;
            Result<EvalSample> s = make_sample(opt.task, to, tok, tmpl);
            if (!s.ok()) return s.status().with_context("calibrate");
            if (s->answers.empty())
                return Status::errorf("calibrate: task '%s' has no answers to calibrate on; use a retrieval task "
                                      "(passkey, niah_multikey, ...)",
                                      opt.task.c_str());
            std::string answer;
            for (const std::string &a : s->answers) answer += " " + a;
            std::vector<int32_t> tokens = s->prompt_ids;
            const std::vector<int32_t> ans = tok.encode(answer, /*add_bos=*/false, /*parse_special=*/false);
            tokens.insert(tokens.end(), ans.begin(), ans.end());
            const auto n_total = static_cast<int64_t>(tokens.size());
            if (n_ctx_train > 0 && n_total > n_ctx_train)
                return Status::errorf(
                    "--ctx %lld makes a sample of %lld tokens with its answer (%zu "
                    "prompt + %zu answer), past the model's context of %lld tokens; try --ctx "
                    "%lld or less",
                    static_cast<long long>(ctx), static_cast<long long>(n_total), s->prompt_ids.size(),
                    ans.size(), static_cast<long long>(n_ctx_train),
                    static_cast<long long>(ctx - (n_total - n_ctx_train)));
            samples.emplace_back(std::move(tokens), static_cast<int64_t>(s->prompt_ids.size()));
        }
    }
    return samples;
}

}  // namespace

const char *calibrate_method_name(CalibrateMethod m) {
    return m == CalibrateMethod::answer_kl ? "answer_kl" : "attn_output";
}

Result<double> calibrate_restricted_kl(const Model &model, const Tokenizer &tok, const ChatTemplate *tmpl,
                                       const CalibrateOptions &opt, const std::vector<uint8_t> &streaming,
                                       ThreadPool &pool) {
    const ModelConfig &c = model.config();
    const int64_t n_heads = c.n_layer * c.n_head_kv;
    SIEVE_TRY(check_options(opt));
    if (static_cast<int64_t>(streaming.size()) != n_heads)
        return Status::errorf("calibrate: a streaming mask of %zu heads; the model has %lld KV heads",
                              streaming.size(), static_cast<long long>(n_heads));
    Result<std::vector<CalSample>> sr = calibration_samples(tok, tmpl, opt, model.config().n_ctx_train);
    if (!sr.ok()) return sr.status();
    // One scored head with the rest of the set fixed is the set restricted.
    int64_t h = n_heads - 1;
    while (h >= 0 && !streaming[static_cast<size_t>(h)]) --h;
    if (h < 0) return 0.0;
    std::vector<uint8_t> fixed = streaming, scored(static_cast<size_t>(n_heads), 0);
    fixed[static_cast<size_t>(h)] = 0;
    scored[static_cast<size_t>(h)] = 1;
    Acc acc;
    acc.sum.assign(static_cast<size_t>(n_heads), 0.0);
    for (const auto &[tokens, n_prompt] : *sr)
        SIEVE_TRY(calibrate_sample_kl(model, tokens, n_prompt, opt, fixed, scored, pool, &acc));
    return acc.n > 0 ? acc.sum[static_cast<size_t>(h)] / static_cast<double>(acc.n) : 0.0;
}

Result<HeadProfile> calibrate_heads(const Model &model, const Tokenizer &tok, const ChatTemplate *tmpl,
                                    const CalibrateOptions &opt, ThreadPool &pool,
                                    const std::function<void(int64_t, int64_t)> &progress) {
    SIEVE_TRY(check_options(opt));
    if (opt.rounds < 1 || !(opt.greedy_static >= 0.0 && opt.greedy_static <= 1.0) ||
        (opt.rounds > 1 && opt.method != CalibrateMethod::answer_kl))
        return Status::errorf("calibrate: %lld rounds, greedy fraction %g with method %s: expected rounds >= 1 "
                              "(more than 1 only with answer_kl) and a fraction in [0, 1]",
                              static_cast<long long>(opt.rounds), opt.greedy_static,
                              calibrate_method_name(opt.method));
    const ModelConfig &c = model.config();
    const int64_t n_heads = c.n_layer * c.n_head_kv;
    Result<std::vector<CalSample>> sr = calibration_samples(tok, tmpl, opt, c.n_ctx_train);
    if (!sr.ok()) return sr.status();
    const std::vector<CalSample> &samples = *sr;
    // Round r scores the heads not chosen yet with the chosen ones streaming
    // too; the last pass (r == rounds, or the only one) scores what is left.
    const int64_t n_choose =
        opt.rounds > 1 ? std::clamp<int64_t>(std::llround(opt.greedy_static * static_cast<double>(n_heads)), 0,
                                              n_heads)
                       : 0;
    const int64_t passes = opt.rounds > 1 ? opt.rounds + 1 : 1;
    const int64_t total = static_cast<int64_t>(samples.size()) * passes;
    std::vector<uint8_t> fixed(static_cast<size_t>(n_heads), 0), scored(static_cast<size_t>(n_heads), 1);
    std::vector<double> score(static_cast<size_t>(n_heads), 0.0);
    double floor = -1.0;  // the highest score written in earlier rounds (scores are >= 0)
    int64_t done = 0, chosen = 0, n_positions = 0;
    for (int64_t r = 0; r < passes; ++r) {
        Acc acc;
        acc.sum.assign(static_cast<size_t>(n_heads), 0.0);
        for (const auto &[tokens, n_prompt] : samples) {
            SIEVE_TRY(opt.method == CalibrateMethod::answer_kl
                          ? calibrate_sample_kl(model, tokens, n_prompt, opt, fixed, scored, pool, &acc)
                          : calibrate_sample(model, tokens, n_prompt, opt, pool, &acc));
            if (progress) progress(++done, total);
        }
        n_positions = acc.n;
        // This pass's candidates, lowest first (ties as head_profile_streaming breaks them).
        std::vector<int64_t> order;
        for (int64_t h = 0; h < n_heads; ++h)
            if (scored[static_cast<size_t>(h)]) order.push_back(h);
        auto mean = [&](int64_t h) {
            return acc.n > 0 ? acc.sum[static_cast<size_t>(h)] / static_cast<double>(acc.n) : 0.0;
        };
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
            const double sa = mean(a), sb = mean(b);
            return sa < sb || (sa == sb && a > b);
        });
        const bool last = r == passes - 1;
        const int64_t take = last ? static_cast<int64_t>(order.size())
                                  : (n_choose - chosen + (opt.rounds - r) - 1) / (opt.rounds - r);
        double top = floor;
        for (int64_t i = 0; i < take; ++i) {
            const int64_t h = order[static_cast<size_t>(i)];
            double v = mean(h);
            if (v <= floor) v = std::nextafter(floor, std::numeric_limits<double>::infinity());
            score[static_cast<size_t>(h)] = v;
            top = std::max(top, v);
            scored[static_cast<size_t>(h)] = 0;
            if (!last) fixed[static_cast<size_t>(h)] = 1;
        }
        floor = top;
        chosen += last ? 0 : take;
    }
    HeadProfile p;
    p.n_layer = c.n_layer;
    p.n_head_kv = c.n_head_kv;
    p.sink = opt.sink;
    p.recent = opt.recent;
    p.method =
        opt.method == CalibrateMethod::answer_kl
            ? "gradient-free DuoAttention, answer_kl: per KV head, the mean over answer positions of KL(p_dense || "
              "p_restricted) (nats) of the next-token distributions, that head alone restricted to the first `sink` "
              "and the last `recent` rows (Λ mask) over the prompt's last `tail` tokens and the answer"
            : "gradient-free DuoAttention: per KV head, the mean over answer positions of |o(sink+recent) - "
              "o(full)|^2 / |o(full)|^2 over the head's query group, the head's decode attention restricted to the "
              "first `sink` and the last `recent` rows";
    if (opt.rounds > 1)
        p.method += "; greedy in `rounds` rounds: each round restricts the heads chosen in earlier rounds too and "
                    "chooses the lowest of the rest (an equal share of `greedy_static` of all heads), a head's score "
                    "being its KL when chosen, kept above every earlier choice";
    nlohmann::json d;
    d["method"] = calibrate_method_name(opt.method);
    if (opt.method == CalibrateMethod::answer_kl) d["tail"] = opt.tail;
    d["task"] = opt.task;
    d["ctx"] = opt.ctx;
    d["samples"] = opt.n_samples;
    d["seed"] = opt.seed;
    d["n_needles"] = opt.task_opt.n_needles;
    if (opt.rounds > 1) {
        d["rounds"] = opt.rounds;
        d["greedy_static"] = opt.greedy_static;
    }
    d["answer_positions"] = n_positions;
    d["kv_type"] = cpu::row_type_name(opt.kv_type);
    p.data_json = d.dump();
    p.scores = std::move(score);
    return p;
}

}  // namespace sieve
