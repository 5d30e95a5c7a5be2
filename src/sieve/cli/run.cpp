// sieve run: text generation from a prompt, or an interactive chat, with
// llama-cli's flags. Generated text goes to stdout as it is produced; logs
// and the closing statistics go to stderr.
//
// One turn (the one-shot prompt, or each line of a chat):
//   1. render: the chat template turns the conversation into text (or the
//      raw prompt is used as is, with -no-cnv);
//   2. delta: only the text not already in the KV is tokenized — in a chat
//      the KV holds the previous turns, and the new rendering starts with
//      exactly that text, so the KV is kept between turns;
//   3. prefill the delta in batches of up to -b tokens;
//   4. decode: sample, stream the token's text, run it through the model;
//      stop at an end-of-generation token, after -n tokens, or when the
//      context is full.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sieve/cli/args.h"
#include "sieve/cli/commands.h"
#include "sieve/cli/run_options.h"
#include "sieve/core/log.h"
#include "sieve/core/thread_pool.h"
#include "sieve/core/timer.h"
#include "sieve/engine/sampler.h"
#include "sieve/gguf/gguf.h"
#include "sieve/kv/vattention_kv.h"
#include "sieve/model/model.h"
#include "sieve/tokenizer/chat_template.h"
#include "sieve/tokenizer/tokenizer.h"

namespace sieve::cli {

namespace {

constexpr double k_mib = 1024.0 * 1024.0;

// Counters for the closing line. Bytes are what a decode step must read:
// every weight once plus the K and V rows attended to.
struct RunStats {
    int64_t n_prompt = 0;
    int64_t prompt_us = 0;
    int64_t n_gen = 0;
    int64_t n_decode = 0;  // single-token forward passes
    int64_t gen_us = 0;
    double decode_bytes = 0.0;
};

// Everything one generation needs, created once and reused by every turn.
class Generator {
public:
    Generator(const Model &model, const Tokenizer &tok, KvCache &kv, Workspace &ws, ThreadPool &pool,
              Sampler &sampler, int64_t n_ctx)
        : model_(model), tok_(tok), kv_(kv), ws_(ws), pool_(pool), sampler_(sampler), n_ctx_(n_ctx) {
        pos_.resize(static_cast<size_t>(ws.max_tokens()));
        seq_.assign(static_cast<size_t>(ws.max_tokens()), 0);
    }

    int64_t n_past() const { return kv_.n_pos(0); }
    const RunStats &stats() const { return stats_; }

    // Appends tokens to the KV in batches; the logits of the last one are
    // left in the workspace. Prompt tokens also enter the penalty history, as
    // in llama-cli.
    Status prefill(const std::vector<int32_t> &tokens) {
        if (n_past() + static_cast<int64_t>(tokens.size()) > n_ctx_)
            return Status::errorf(
                "the prompt needs %zu tokens but only %lld of the context's %lld are free; shorten it or raise -c "
                "(the model was trained on %lld)",
                tokens.size(), static_cast<long long>(n_ctx_ - n_past()), static_cast<long long>(n_ctx_),
                static_cast<long long>(model_.config().n_ctx_train));
        const int64_t t0 = time_us();
        if (policy_) {
            if (!state_) state_ = policy_->make_state(kv_.shape(), model_.config().n_head, n_ctx_);
            policy_->begin_prefill(state_.get(), n_past() + static_cast<int64_t>(tokens.size()));
        }
        for (size_t begin = 0; begin < tokens.size();) {
            const size_t n = std::min(tokens.size() - begin, static_cast<size_t>(ws_.max_tokens()));
            SIEVE_TRY(forward(tokens.data() + begin, static_cast<int64_t>(n)));
            begin += n;
        }
        if (policy_) {
            // The policy's after-prefill point on everything the KV holds now
            // (budgets are fractions of all positions so far).
            policy_n_prompt_ = n_past();
            SIEVE_TRY(policy_->after_prefill(context()).with_context("KV policy " + policy_->name()));
            int64_t kept = 0;
            const KvShape &sh = kv_.shape();
            for (int64_t l = 0; l < sh.n_layer; ++l)
                for (int64_t g = 0; g < sh.n_head_kv; ++g) kept += kv_.n_rows(0, l, g);
            SIEVE_LOG_INFO("KV policy %s: %lld positions, %.1f%% of the rows kept", policy_->name().c_str(),
                           static_cast<long long>(n_past()),
                           100.0 * static_cast<double>(kept) / static_cast<double>(sh.n_layer * sh.n_head_kv * n_past()));
        }
        for (int32_t t : tokens) sampler_.accept(t);
        stats_.n_prompt += static_cast<int64_t>(tokens.size());
        stats_.prompt_us += time_us() - t0;
        return Status();
    }

    // Samples up to n_predict tokens (-1: no limit) after a prefill, writing
    // their text to `out` as it comes. keep_last: also run the last token
    // through the model, so the KV holds everything generated (a chat's next
    // turn continues from it). Returns the generated text.
    Result<std::string> generate(int64_t n_predict, bool keep_last, FILE *out) {
        StreamDetokenizer detok(tok_);
        std::string text;
        const int64_t t0 = time_us();
        int64_t n = 0;
        while (n_predict < 0 || n < n_predict) {
            const int32_t id = sampler_.sample(ws_.logits());
            sampler_.accept(id);
            if (tok_.is_eog(id)) break;
            const std::string piece = detok.push(id);
            text += piece;
            std::fwrite(piece.data(), 1, piece.size(), out);
            std::fflush(out);
            ++n;
            if (!keep_last && n == n_predict) break;
            if (n_past() >= n_ctx_) {
                SIEVE_LOG_WARN("context full (%lld tokens): stopping; raise -c for longer output",
                               static_cast<long long>(n_ctx_));
                break;
            }
            SIEVE_TRY(forward(&id, 1, /*decode=*/true));
            if (policy_ && policy_->acts_after_decode())
                SIEVE_TRY(policy_->after_decode(context()).with_context("KV policy " + policy_->name()));
            ++stats_.n_decode;
            // This step read every weight and the K/V rows of n_past() tokens.
            stats_.decode_bytes +=
                static_cast<double>(model_.weight_bytes()) +
                static_cast<double>(model_.config().n_layer * model_.config().n_head_kv *
                                    (kv_.shape().k_row_bytes() + kv_.shape().v_row_bytes())) *
                    static_cast<double>(n_past());
        }
        const std::string tail = detok.finish();
        text += tail;
        std::fwrite(tail.data(), 1, tail.size(), out);
        std::fflush(out);
        stats_.n_gen += n;
        stats_.gen_us += time_us() - t0;
        return text;
    }

    // Forgets the KV and the penalty history (a chat that must be re-prefilled).
    void clear() {
        kv_.clear(0);
        sampler_.reset();
        state_.reset();
    }

    void set_policy(KvPolicyPtr p) { policy_ = std::move(p); }

private:
    PolicyContext context() {
        return policy_context(&kv_, 0, policy_n_prompt_, model_.config().n_head, state_.get());
    }

    // decode: a generated token (page selection applies; prompts prefill densely).
    Status forward(const int32_t *tokens, int64_t n, bool decode = false) {
        const int64_t p0 = n_past();
        for (int64_t i = 0; i < n; ++i) pos_[static_cast<size_t>(i)] = static_cast<int32_t>(p0 + i);
        Batch b;
        b.tokens = tokens;
        b.pos = pos_.data();
        b.seq = seq_.data();
        b.n_tokens = n;
        sinks_.assign(static_cast<size_t>(n), state_ && state_->scoring ? &state_->sink : nullptr);
        b.score_sinks = sinks_.data();
        AttnRowSelector *sel = decode && state_ ? state_->selector.get() : nullptr;
        if (sel) b.selectors = &sel;
        if (const PrefillMask *pm = !decode && policy_ ? policy_->prefill_mask() : nullptr) {
            masks_.assign(static_cast<size_t>(n), pm);
            b.prefill_masks = masks_.data();
        }
        return model_.forward(b, kv_, ws_, pool_);
    }

    const Model &model_;
    const Tokenizer &tok_;
    KvCache &kv_;
    Workspace &ws_;
    ThreadPool &pool_;
    Sampler &sampler_;
    int64_t n_ctx_;
    std::vector<int32_t> pos_, seq_;  // [max_tokens] batch scratch
    std::vector<AttnScoreSink *> sinks_;
    std::vector<const PrefillMask *> masks_;
    RunStats stats_;
    KvPolicyPtr policy_;                   // null: dense
    std::unique_ptr<KvPolicyState> state_;  // its score sink
    int64_t policy_n_prompt_ = 0;
};

void print_stats(const RunStats &s) {
    const double p_ms = static_cast<double>(s.prompt_us) / 1e3;
    const double g_ms = static_cast<double>(s.gen_us) / 1e3;
    const double p_tps = s.prompt_us > 0 ? static_cast<double>(s.n_prompt) * 1e6 / static_cast<double>(s.prompt_us) : 0;
    const double g_tps = s.gen_us > 0 ? static_cast<double>(s.n_gen) * 1e6 / static_cast<double>(s.gen_us) : 0;
    const double ms_tok = s.n_gen > 0 ? g_ms / static_cast<double>(s.n_gen) : 0;
    const double gbs = s.gen_us > 0 ? s.decode_bytes / (static_cast<double>(s.gen_us) * 1e3) : 0;
    std::fprintf(stderr,
                 "\n\nprompt: %lld tokens in %.1f ms (%.1f tok/s) | generation: %lld tokens in %.1f ms "
                 "(%.1f tok/s, %.2f ms/token, %.2f GB/s)\n",
                 static_cast<long long>(s.n_prompt), p_ms, p_tps, static_cast<long long>(s.n_gen), g_ms, g_tps,
                 ms_tok, gbs);
}

Result<std::string> read_file(const std::string &path) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
        return Status::errorf("-f: cannot read '%s': not a regular file", path.c_str());
    std::ifstream f(path, std::ios::binary);
    if (!f) return Status::errorf("-f: cannot open '%s'", path.c_str());
    std::stringstream ss;
    ss << f.rdbuf();
    std::string text = ss.str();
    if (!text.empty() && text.back() == '\n') text.pop_back();  // as llama-cli: a file's final newline is not prompt
    return text;
}

int fail(const Status &st) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    return k_exit_error;
}

bool starts_with(const std::string &s, const std::string &prefix) {
    return !prefix.empty() && s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

int cmd_run(int argc, char **argv) {
    RunOptions o;
    if (Status st = run_options_parse(argc, argv, &o); !st.ok()) {
        std::fprintf(stderr, "error: %s\nsee `sieve run --help` for the options\n", st.message().c_str());
        return k_exit_usage;
    }
    if (o.help) {
        run_options_usage(stdout);
        return 0;
    }
    log_set_level(o.verbose ? LogLevel::debug : LogLevel::info);

    // ---- model, tokenizer -------------------------------------------------
    if (o.model.empty()) {
        o.model = default_model_path();
        struct stat st {};
        if (stat(o.model.c_str(), &st) != 0)
            return fail(Status::errorf("no -m given and the default model is not at %s; run scripts/fetch_model.sh "
                                       "to fetch it, or pass -m FILE",
                                       o.model.c_str()));
    }
    Result<std::unique_ptr<GgufFile>> file = GgufFile::open(o.model);
    if (!file.ok()) return fail(file.status().with_context("model '" + o.model + "'"));
    Result<std::unique_ptr<Model>> model = Model::load(**file, ModelLoadOptions{o.mmap});
    if (!model.ok()) return fail(model.status().with_context("model '" + o.model + "'"));
    Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(**file);
    if (!tok.ok()) return fail(tok.status().with_context("tokenizer of '" + o.model + "'"));
    const ModelConfig &cfg = (*model)->config();

    // ---- chat template and prompt -----------------------------------------
    ChatTemplate tmpl;
    bool has_template = false;
    const bool cnv_forced = o.conversation == 1;
    if (o.conversation != 0) {
        Status st = choose_chat_template(o.chat_template, **file, **tok, &tmpl, &has_template);
        if (!st.ok()) return fail(st);
        if (cnv_forced && !has_template)
            return fail(Status::error("-cnv: the model has no tokenizer.chat_template; pass --chat-template NAME "
                                      "(one of " + chat_format_names() + ") or use -no-cnv"));
    }
    const bool cnv = has_template;
    if (!o.prompt_file.empty()) {
        Result<std::string> text = read_file(o.prompt_file);
        if (!text.ok()) return fail(text.status());
        o.prompt = *text;
        o.has_prompt = true;
    }
    // No prompt: a chat model waits for input, as llama-cli does.
    const bool interactive = o.interactive || (!o.has_prompt && cnv);
    if (!o.has_prompt && !interactive) {
        std::fprintf(stderr, "error: no prompt: pass -p TEXT, -f FILE, or -i for an interactive session\n");
        return k_exit_usage;
    }
    if (!cnv && !o.system_prompt.empty()) SIEVE_LOG_WARN("-sys is ignored without a chat template (-no-cnv)");

    // ---- context, KV, workspace, sampler ----------------------------------
    int64_t n_ctx = o.n_ctx > 0 ? o.n_ctx : std::min<int64_t>(cfg.n_ctx_train, 4096);
    if (o.n_ctx == 0 && n_ctx <= 0) n_ctx = 4096;  // metadata without a training context
    if (n_ctx > cfg.n_ctx_train)
        SIEVE_LOG_WARN("-c %lld exceeds the model's training context (%lld): quality may drop past it",
                       static_cast<long long>(n_ctx), static_cast<long long>(cfg.n_ctx_train));
    // The KV lives in vAttention lanes over a page pool (docs/kv-memory.md);
    // by default the pool holds the whole context of every lane plus a page of
    // headroom each, so only --kv-memory can make it run short.
    cpu::KvRowTypes kv_type = cpu::RowType::f16;
    if (Status st = parse_cache_types(o.cache_type_k, o.cache_type_v, &kv_type, o.rotate_k); !st.ok()) {
        std::fprintf(stderr, "sieve run: %s\n", st.message().c_str());
        return k_exit_usage;
    }
    VAttentionKvOptions kvo;
    kvo.shape = (*model)->kv_shape(1, kv_type);
    kvo.max_ctx = n_ctx;
    kvo.pool.page_bytes = o.kv_page;
    const int64_t n_pairs = kvo.shape.n_layer * kvo.shape.n_head_kv;
    const int64_t k_lane = n_ctx * kvo.shape.k_row_bytes(), v_lane = n_ctx * kvo.shape.v_row_bytes();
    kvo.pool.budget_bytes =
        o.kv_memory > 0
            ? o.kv_memory
            : n_pairs * ((k_lane + o.kv_page - 1) / o.kv_page + (v_lane + o.kv_page - 1) / o.kv_page + 2) *
                  o.kv_page;
    Result<std::unique_ptr<VAttentionKv>> kv = VAttentionKv::create(kvo);
    if (!kv.ok()) return fail(kv.status().with_context("KV cache for -c " + std::to_string(n_ctx)));
    const int64_t n_batch = std::min(o.n_batch, n_ctx);
    std::unique_ptr<Workspace> ws = (*model)->make_workspace(n_batch, 1);
    const int n_threads = o.n_threads > 0 ? o.n_threads : std::max(1u, std::thread::hardware_concurrency());
    ThreadPool pool(n_threads);

    SamplerParams sp = o.sampler;
    sp.repeat_last_n = o.repeat_last_n < 0 ? static_cast<int32_t>(n_ctx) : static_cast<int32_t>(o.repeat_last_n);
    sp.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();
    if (Status st = sampler_params_validate(sp); !st.ok()) {
        std::fprintf(stderr, "error: %s\n", st.message().c_str());
        return k_exit_usage;
    }
    Sampler sampler(sp, static_cast<int32_t>(cfg.n_vocab));

    SIEVE_LOG_INFO("model: %s (%s, %lld layers, %lld embd, vocab %lld, %.1f MiB of weights)", o.model.c_str(),
                   model_arch_name(cfg.arch), static_cast<long long>(cfg.n_layer), static_cast<long long>(cfg.n_embd),
                   static_cast<long long>(cfg.n_vocab), static_cast<double>((*model)->weight_bytes()) / k_mib);
    SIEVE_LOG_INFO("context: %lld tokens (KV %.1f MiB), batch %lld, %d threads", static_cast<long long>(n_ctx),
                   static_cast<double>((*kv)->pool().n_pages() * (*kv)->page_bytes()) / k_mib, static_cast<long long>(n_batch), n_threads);
    SIEVE_LOG_INFO("sampler: temp %.2f, top-k %d, top-p %.2f, min-p %.2f, repeat %.2f over %d, presence %.2f, "
                   "frequency %.2f, seed %llu",
                   static_cast<double>(sp.temperature), sp.top_k, static_cast<double>(sp.top_p),
                   static_cast<double>(sp.min_p), static_cast<double>(sp.repeat_penalty), sp.repeat_last_n,
                   static_cast<double>(sp.presence_penalty), static_cast<double>(sp.frequency_penalty),
                   static_cast<unsigned long long>(sp.seed));
    if (cnv) SIEVE_LOG_INFO("chat template: %s", chat_format_name(tmpl.format));

    Generator gen(**model, **tok, **kv, *ws, pool, sampler, n_ctx);
    if (!o.kv_policy.empty()) {
        KvPolicyPtr policy;
        if (Status st = parse_kv_policy_flag(o.kv_policy, &policy); !st.ok()) {
            std::fprintf(stderr, "sieve run: %s\n", st.message().c_str());
            return k_exit_usage;
        }
        if (policy) {
            if (Status st = policy->check_model((*kv)->shape(), (*model)->config().n_head); !st.ok()) {
                std::fprintf(stderr, "sieve run: --kv-policy: %s\n", st.message().c_str());
                return k_exit_usage;
            }
        }
        gen.set_policy(std::move(policy));
    }
    const std::string bos_text = (*tok)->bos_id() >= 0 ? (*tok)->token_to_piece((*tok)->bos_id()) : "";

    // Tokenizes text to append to the KV: BOS only at the start of the
    // context, and only when the rendered text does not already begin with it.
    auto tokenize = [&](const std::string &text) {
        const bool add_bos = gen.n_past() == 0 && (*tok)->add_bos() && !starts_with(text, bos_text);
        return (*tok)->encode(text, add_bos, /*parse_special=*/true);
    };

    std::vector<ChatMessage> messages;
    if (cnv && !o.system_prompt.empty()) messages.push_back({"system", o.system_prompt});
    std::string kv_text;  // the text whose tokens the KV holds (chat mode)

    // One turn: user_text is a chat message (cnv) or raw text to continue.
    // echo: write raw text to stdout before its continuation (a -p prompt;
    // lines typed in a chat are already on the terminal).
    auto turn = [&](const std::string &user_text, bool echo) -> Status {
        std::string delta;
        if (cnv) {
            messages.push_back({"user", user_text});
            Result<std::string> full = chat_render(tmpl, messages, /*add_generation_prompt=*/true);
            if (!full.ok()) return full.status();
            if (gen.n_past() > 0 && !starts_with(*full, kv_text)) {
                SIEVE_LOG_DEBUG("rendered chat no longer extends the KV's text: re-reading the conversation");
                gen.clear();
            }
            delta = gen.n_past() > 0 ? full->substr(kv_text.size()) : *full;
            kv_text = *full;
        } else {
            delta = user_text;
            if (echo) {
                std::fwrite(delta.data(), 1, delta.size(), stdout);
                std::fflush(stdout);
            }
        }
        const std::vector<int32_t> tokens = tokenize(delta);
        if (tokens.empty()) return Status::error("the prompt is empty after tokenization; give some text with -p");
        SIEVE_LOG_DEBUG("prefill %zu tokens at position %lld", tokens.size(), static_cast<long long>(gen.n_past()));
        SIEVE_TRY(gen.prefill(tokens));
        Result<std::string> reply = gen.generate(o.n_predict, interactive, stdout);
        if (!reply.ok()) return reply.status();
        if (cnv) {
            messages.push_back({"assistant", *reply});
            kv_text += *reply;
        }
        return Status();
    };

    if (o.has_prompt) {
        if (Status st = turn(o.prompt, o.display_prompt); !st.ok()) return fail(st);
        if (!interactive) std::fputs("\n", stdout);  // end the text's last line, as a shell expects
    }
    if (interactive) {
        std::string line;
        for (;;) {
            std::fputs("\n> ", stdout);
            std::fflush(stdout);
            if (!std::getline(std::cin, line)) break;
            if (line.empty()) continue;
            if (!cnv) line += "\n";
            if (Status st = turn(line, false); !st.ok()) return fail(st);
        }
        std::fputs("\n", stdout);
    }
    print_stats(gen.stats());
    return 0;
}

}  // namespace sieve::cli
