// sieve bench: prompt-processing and generation speed, in the manner of
// llama-bench (same flags, same test names, same jsonl field names).
//
// For each model x threads x depth x test x n_parallel (-npl, default 1):
//   1. depth: the KV of each of the n_parallel slots 0..P-1 is filled with
//      n_depth random tokens of its own (prefill in batches of n_batch, not
//      timed) once; every run rolls each slot back to it with set_n_pos, so
//      repetitions see the same KV;
//   2. pp<N>: N random tokens per slot prefilled, timed: the slots' prompts
//      one after another, cut into forward passes of up to n_batch tokens (a
//      pass may hold the end of one slot's prompt and the start of the next);
//      tg<N>: N forward passes, each of one random token per slot (P tokens,
//      seq 0..P-1, each at its slot's next position; no sampling), timed;
//   3. a warm-up run first (tg: up to 16 steps), then -r timed repetitions.
// Each row reports mean ± std of tokens/s over the repetitions (aggregate:
// P x tokens / time), the median, and for tg the achieved bandwidth: (weight
// bytes + the K/V bytes every slot reads per step at the test's mean
// position) x steps/s, and its fraction of the machine's read bandwidth,
// which is measured at start (or given). With -npl > 1 tg rows also report
// the median step time and its ratio to the n_parallel = 1 row's (as
// llama-batched-bench's S_TG, one row per batch size).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "sieve/cli/args.h"
#include "sieve/cli/bench_report.h"
#include "sieve/cli/commands.h"
#include "sieve/core/membw.h"
#include "sieve/core/thread_pool.h"
#include "sieve/core/timer.h"
#include "sieve/gguf/gguf.h"
#include "sieve/kv/contiguous_kv.h"
#include "sieve/kv/vattention_kv.h"
#include "sieve/model/model.h"
#include "sieve/sparse/quest.h"

namespace sieve::cli {

namespace {

struct BenchOptions {
    std::vector<std::string> models;
    std::vector<int64_t> n_prompt = {512};
    std::vector<int64_t> n_gen = {128};
    std::vector<int64_t> n_depth = {0};
    std::vector<int64_t> n_threads;
    std::vector<int64_t> n_parallel = {1};  // -npl: sequences per test, ascending, no repeats
    int64_t n_batch = 512;
    int64_t reps = 5;
    BenchFormat format = BenchFormat::md;
    double bandwidth_gbps = 0;  // 0 = measure
    std::string kv = "vattention";
    cpu::KvRowTypes kv_type = cpu::RowType::f16;  // -ctk / -ctv
    int64_t kv_memory = 0;           // --kv-memory; 0 = what the test needs
    int64_t kv_page = 64 * 1024;     // --kv-page-size
    bool mmap = false;               // -mmp 1 / --mmap: weights stay in the file mapping
    KvPolicyPtr kv_policy;           // --kv-policy: applied to the depth fill (null = dense)
};

void print_usage(FILE *out) {
    std::fprintf(
        out,
        "usage: sieve bench [options]\n"
        "\n"
        "Measures prompt processing (pp) and generation (tg) speed like llama-bench.\n"
        "List options take comma-separated values and may be repeated.\n"
        "\n"
        "  -m, --model FILE[,FILE]     GGUF model(s) (default: the default model)\n"
        "  -p, --n-prompt N[,N]        prompt sizes (default 512; 0 skips pp)\n"
        "  -n, --n-gen N[,N]           generation sizes (default 128; 0 skips tg)\n"
        "  -d, --n-depth N[,N]         tokens already in the KV before each test (default 0)\n"
        "  -t, --threads N[,N]         threads (default: all cores)\n"
        "  -npl, --n-parallel N[,N]    sequences decoded together, 1 ..= 256 (default 1), as\n"
        "                              llama-batched-bench: N KV slots each hold the depth (own\n"
        "                              random tokens); a tg step is one forward pass of N tokens,\n"
        "                              one per slot; pp prefills every slot's prompt in passes of\n"
        "                              up to -b tokens; t/s is aggregate (N x tokens / time);\n"
        "                              tg rows add the median step time and its ratio to the\n"
        "                              N = 1 row's (when the list holds 1); rows by ascending N\n"
        "  -b, --batch-size N          max tokens per forward pass in pp and depth fill (default 512)\n"
        "  -r, --repetitions N         timed runs per test after one warm-up (default 5)\n"
        "  -o, --output md|csv|json|jsonl   output format (default md)\n"
        "      --bandwidth GBPS        the machine's read bandwidth; skips measuring it\n"
        "      --kv vattention|contiguous  KV store (default vattention)\n"
        "      --kv-memory SIZE        KV page pool, e.g. 512MiB (default: what depth + test need)\n"
        "      --kv-page-size SIZE     KV page size, 4KiB .. 2MiB, a multiple of 4KiB (default 64KiB)\n"
        "  -ctk, --cache-type-k T      KV row type: f16 (default), bf16, f32 (exact), q8_0, q4_0\n"
        "  -ctv, --cache-type-v T      V row type (default: as -ctk, which alone sets both;\n"
        "                              K and V may differ, e.g. -ctk q8_0 -ctv q4_0)\n"
        "      --rotate-k auto|on|off  keys rotated by a fixed Hadamard transform (auto: q4_0 keys)\n"
        "      --kv-policy P           KV policy, NAME[:key=value,...] or @FILE.json (default dense):\n"
        "                              the depth fill is the prompt it compresses (once per depth,\n"
        "                              then restored for every run); tg steps run its decode point\n"
        "  -mmp, --mmap 0|1            1: leave the weights in the file mapping; 0: copy them\n"
        "                              into huge pages (default 0)\n"
        "  -h, --help\n");
}

// Exit status, or -1 to go on.
int parse_options(int argc, char **argv, BenchOptions *o) {
    ArgCursor args(argc, argv);
    std::string flag;
    // A list flag given by the user replaces its default; repeats append.
    bool seen_p = false, seen_n = false, seen_d = false, seen_npl = false;
    std::string type_k, type_v, rotate_k;
    const auto fail = [](const Status &st) {
        std::fprintf(stderr, "sieve bench: %s\n", st.message().c_str());
        return k_exit_usage;
    };
    const auto list = [&](std::vector<int64_t> *dst, bool *seen, int64_t min, int64_t max) -> Status {
        Result<std::string> v = args.value("a comma-separated list of integers");
        if (!v.ok()) return v.status();
        if (seen && !*seen) dst->clear();
        if (seen) *seen = true;
        return parse_int_list(flag, v.value(), min, max, dst);
    };
    constexpr int64_t k_max_tokens = int64_t{1} << 24;
    while (args.next(&flag)) {
        Status st;
        if (flag == "-h" || flag == "--help") {
            print_usage(stdout);
            return 0;
        } else if (flag == "-m" || flag == "--model") {
            Result<std::string> v = args.value("a file path");
            if (!v.ok()) return fail(v.status());
            size_t start = 0;
            const std::string &s = v.value();
            while (start <= s.size()) {
                const size_t comma = std::min(s.find(',', start), s.size());
                if (comma > start) o->models.push_back(s.substr(start, comma - start));
                start = comma + 1;
            }
        } else if (flag == "-p" || flag == "--n-prompt") {
            st = list(&o->n_prompt, &seen_p, 0, k_max_tokens);
        } else if (flag == "-n" || flag == "--n-gen") {
            st = list(&o->n_gen, &seen_n, 0, k_max_tokens);
        } else if (flag == "-d" || flag == "--n-depth") {
            st = list(&o->n_depth, &seen_d, 0, k_max_tokens);
        } else if (flag == "-npl" || flag == "--n-parallel") {
            st = list(&o->n_parallel, &seen_npl, 1, 256);
        } else if (flag == "-t" || flag == "--threads") {
            st = list(&o->n_threads, nullptr, 1, 1024);
        } else if (flag == "-b" || flag == "--batch-size") {
            std::vector<int64_t> v;
            st = list(&v, nullptr, 1, 65536);
            if (st.ok()) o->n_batch = v.back();
        } else if (flag == "-r" || flag == "--repetitions") {
            std::vector<int64_t> v;
            st = list(&v, nullptr, 1, 100000);
            if (st.ok()) o->reps = v.back();
        } else if (flag == "-o" || flag == "--output") {
            Result<std::string> v = args.value("md, csv, json or jsonl");
            if (!v.ok()) return fail(v.status());
            const std::string &f = v.value();
            if (f == "md") o->format = BenchFormat::md;
            else if (f == "csv") o->format = BenchFormat::csv;
            else if (f == "json") o->format = BenchFormat::json;
            else if (f == "jsonl") o->format = BenchFormat::jsonl;
            else st = Status::errorf("%s: expected md, csv, json or jsonl, got '%s'", flag.c_str(), f.c_str());
        } else if (flag == "--bandwidth") {
            Result<std::string> v = args.value("a bandwidth in GB/s");
            Result<float> f = v.ok() ? parse_float(flag, v.value()) : Result<float>(v.status());
            if (!f.ok()) return fail(f.status());
            if (!(f.value() > 0)) return fail(Status::errorf("%s: expected a positive GB/s value, got '%s'", flag.c_str(), v.value().c_str()));
            o->bandwidth_gbps = f.value();
        } else if (flag == "-mmp" || flag == "--mmap") {
            Result<std::string> v = args.value("0 or 1");
            if (!v.ok()) return fail(v.status());
            if (v.value() != "0" && v.value() != "1")
                return fail(Status::errorf("%s: expected 0 or 1, got '%s'", flag.c_str(), v.value().c_str()));
            o->mmap = v.value() == "1";
        } else if (flag == "--kv") {
            Result<std::string> v = args.value("vattention or contiguous");
            if (!v.ok()) return fail(v.status());
            if (v.value() != "vattention" && v.value() != "contiguous")
                return fail(Status::errorf("%s: expected vattention or contiguous, got '%s'", flag.c_str(), v.value().c_str()));
            o->kv = v.value();
        } else if (flag == "--rotate-k") {
            Result<std::string> v = args.value("auto, on or off");
            if (!v.ok()) return fail(v.status());
            rotate_k = v.value();
        } else if (flag == "-ctk" || flag == "--cache-type-k" || flag == "-ctv" || flag == "--cache-type-v") {
            Result<std::string> v = args.value("f16, bf16, f32, q8_0 or q4_0");
            if (!v.ok()) return fail(v.status());
            (flag == "-ctk" || flag == "--cache-type-k" ? type_k : type_v) = v.value();
        } else if (flag == "--kv-policy") {
            Result<std::string> v = args.value("NAME[:key=value,...] or @FILE.json");
            if (!v.ok()) return fail(v.status());
            st = parse_kv_policy_flag(v.value(), &o->kv_policy);
        } else if (flag == "--kv-memory" || flag == "--kv-page-size") {
            Result<std::string> v = args.value("a size such as 512MiB");
            if (!v.ok()) return fail(v.status());
            st = parse_bytes(v.value(), flag == "--kv-memory" ? &o->kv_memory : &o->kv_page).with_context(flag);
        } else {
            std::fprintf(stderr, "sieve bench: unknown option '%s'\n\n", flag.c_str());
            print_usage(stderr);
            return k_exit_usage;
        }
        if (!st.ok()) return fail(st);
    }
    if (Status st = parse_cache_types(type_k, type_v, &o->kv_type, rotate_k); !st.ok()) return fail(st);
    if (o->kv_policy && o->kv != "vattention")
        return fail(Status::error("--kv-policy needs --kv vattention (the depth is kept as a swap image)"));
    std::sort(o->n_parallel.begin(), o->n_parallel.end());
    o->n_parallel.erase(std::unique(o->n_parallel.begin(), o->n_parallel.end()), o->n_parallel.end());
    if (o->models.empty()) o->models.push_back(default_model_path());
    if (o->n_threads.empty())
        o->n_threads.push_back(std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency())));
    return -1;
}

std::string cpu_model_name() {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind("model name", 0) == 0) {
            const size_t c = line.find(':');
            if (c != std::string::npos) return line.substr(std::min(line.size(), c + 2));
        }
    }
    return "unknown";
}

std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

// What one model contributes to every row, plus bytes a decode step reads.
struct ModelFacts {
    std::string filename, type_desc;
    int64_t size = 0, n_params = 0;
    int64_t weight_read_bytes = 0;  // per decode token
    int64_t kv_bytes_per_pos = 0;   // K + V bytes of one position over all layers
};

ModelFacts model_facts(const std::string &path, const GgufFile &file, const Model &model,
                       cpu::KvRowTypes kv_type) {
    ModelFacts m;
    m.filename = path;
    const ModelConfig &c = model.config();
    const bool has_output = file.find_tensor("output.weight") != nullptr;
    // The weight type holding most bytes names the model, as a file type would.
    std::vector<int64_t> by_type(64, 0);
    for (const GgufTensor &t : file.tensors()) {
        m.size += static_cast<int64_t>(t.n_bytes);
        m.n_params += t.n_elements();
        // A decode step reads every matrix once, except an untied model's
        // embedding table, of which it reads one row.
        if (!(has_output && t.name == "token_embd.weight")) m.weight_read_bytes += static_cast<int64_t>(t.n_bytes);
        if (t.n_dims >= 2 && static_cast<size_t>(t.type) < by_type.size()) by_type[static_cast<size_t>(t.type)] += static_cast<int64_t>(t.n_bytes);
    }
    const size_t main_type = static_cast<size_t>(std::max_element(by_type.begin(), by_type.end()) - by_type.begin());
    const double p = static_cast<double>(m.n_params);
    const std::string size = p >= 1e9 ? strfmt("%.1fB", p / 1e9) : p >= 1e6 ? strfmt("%.0fM", p / 1e6) : strfmt("%.0fK", p / 1e3);
    m.type_desc = strfmt("%s %s %s", c.arch == ModelArch::qwen2 ? "qwen2" : "llama", size.c_str(),
                         type_name(static_cast<GgmlType>(main_type)));
    m.kv_bytes_per_pos = c.n_layer * c.n_head_kv *
                         (cpu::row_bytes(kv_type.k, c.head_dim) + cpu::row_bytes(kv_type.v, c.head_dim));
    return m;
}

// One model's bench state: KV with the depth prefix in each slot, workspace,
// token source.
class Runner {
public:
    Runner(const Model &model, KvCache &kv, Workspace &ws, ThreadPool &pool, int64_t n_batch)
        : model_(model), kv_(kv), ws_(ws), pool_(pool), n_batch_(n_batch), rng_(1234) {
        const size_t n_slots = static_cast<size_t>(kv.shape().n_seq);
        base_.resize(n_slots);
        slots_.resize(n_slots);
    }

    // Appends n random tokens to each slot of [s0, s1): the slots' tokens one
    // after another, cut into forward passes of up to `batch` tokens (so
    // n = 1, batch = s1 - s0 is one decode step of every slot); returns the
    // first error.
    Status append(int s0, int s1, int64_t n, int64_t batch) {
        std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(model_.config().n_vocab - 1));
        for (int s = s0; s < s1; ++s) base_[static_cast<size_t>(s)] = kv_.n_pos(s);
        const int64_t total = static_cast<int64_t>(s1 - s0) * n;
        for (int64_t done = 0; done < total;) {
            const int64_t m = std::min(batch, total - done);
            tokens_.resize(static_cast<size_t>(m));
            pos_.resize(static_cast<size_t>(m));
            seq_.resize(static_cast<size_t>(m));
            sinks_.resize(static_cast<size_t>(m));
            for (int64_t i = 0; i < m; ++i) {
                const int64_t g = done + i;
                const int s = s0 + static_cast<int>(g / n);
                const size_t k = static_cast<size_t>(i);
                const KvPolicyState *st = slots_[static_cast<size_t>(s)].state.get();
                tokens_[k] = tok(rng_);
                pos_[k] = static_cast<int32_t>(base_[static_cast<size_t>(s)] + g % n);
                seq_[k] = s;
                sinks_[k] = st && st->scoring ? &slots_[static_cast<size_t>(s)].state->sink : nullptr;
            }
            Batch b{tokens_.data(), pos_.data(), seq_.data(), m, nullptr, sinks_.data()};
            // A policy's prefill mask (LServe's streaming heads) for the
            // prompt runs: the depth's fill and the timed prompt.
            if (const PrefillMask *pm = policy_ ? policy_->prefill_mask() : nullptr) {
                masks_.assign(static_cast<size_t>(m), pm);
                b.prefill_masks = masks_.data();
            }
            // Page selection reads a subset in the timed decode steps only.
            if (selecting_) {
                sels_.resize(static_cast<size_t>(m));
                for (int64_t i = 0; i < m; ++i) {
                    KvPolicyState *st = slots_[static_cast<size_t>(seq_[static_cast<size_t>(i)])].state.get();
                    sels_[static_cast<size_t>(i)] = st ? st->selector.get() : nullptr;
                }
                b.selectors = sels_.data();
            }
            SIEVE_TRY(model_.forward(b, kv_, ws_, pool_));
            done += m;
        }
        return Status();
    }

    // Brings slots [0, n_slots) to exactly `depth` rows of KV each: rolls
    // back, or fills (each slot with random tokens of its own).
    Status set_depth(int n_slots, int64_t depth) {
        for (int s = 0; s < n_slots; ++s) {
            if (policy_) {
                SIEVE_TRY(set_depth_with_policy(s, depth));
                continue;
            }
            if (kv_.n_pos(s) > depth) kv_.set_n_pos(s, depth);
            if (kv_.n_pos(s) < depth) SIEVE_TRY(append(s, s + 1, depth - kv_.n_pos(s), n_batch_));
        }
        return Status();
    }

    // With a policy the depth is a prompt it compresses: filled (scored) and
    // compacted once per depth and slot, kept as a swap image with the
    // slot's policy state, and restored before every run (compacted lanes
    // cannot be rolled back).
    void set_policy(KvPolicyPtr p, int64_t max_rows) {
        policy_ = std::move(p);
        max_rows_ = max_rows;
    }

    Status set_depth_with_policy(int s, int64_t depth) {
        auto &vkv = static_cast<VAttentionKv &>(kv_);
        Slot &slot = slots_[static_cast<size_t>(s)];
        if (!slot.image || slot.image_depth != depth) {
            kv_.clear(s);
            slot.state = policy_->make_state(kv_.shape(), model_.config().n_head, max_rows_);
            policy_->begin_prefill(slot.state.get(), depth);
            if (depth > 0) SIEVE_TRY(append(s, s + 1, depth, n_batch_));
            PolicyContext ctx = context(s, depth);
            if (depth > 0) SIEVE_TRY(policy_->after_prefill(ctx));
            slot.image = std::make_unique<KvSwapImage>();
            SIEVE_TRY(vkv.swap_out(s, slot.image.get()));
            slot.image_depth = depth;
            slot.saved_state = slot.state ? std::make_unique<KvPolicyState>(*slot.state) : nullptr;
        }
        vkv.release(s);
        SIEVE_TRY(vkv.swap_in(s, *slot.image));
        if (slot.saved_state) {
            *slot.state = *slot.saved_state;
            slot.state->sink.acc = slot.state->acc.empty() ? nullptr : slot.state->acc.data();
        }
        return Status();
    }

    // One timed run at `depth` over slots [0, n_slots): pp (n_prompt tokens
    // per slot, in passes of up to n_batch) or tg (n_gen steps of one token
    // per slot, each followed by the policy's decode point for every slot).
    // *ns = wall time of the forward passes and the policy's work.
    Status run_once(int n_slots, int64_t depth, int64_t n_prompt, int64_t n_gen, int64_t *ns) {
        SIEVE_TRY(set_depth(n_slots, depth));
        const int64_t t0 = time_ns();
        if (n_prompt > 0) SIEVE_TRY(append(0, n_slots, n_prompt, n_batch_));
        selecting_ = n_gen > 0;
        if (n_gen > 0) {
            if (policy_ && policy_->acts_after_decode()) {
                for (int64_t i = 0; i < n_gen; ++i) {
                    SIEVE_TRY(append(0, n_slots, 1, n_slots));
                    for (int s = 0; s < n_slots; ++s) SIEVE_TRY(policy_->after_decode(context(s, depth)));
                }
            } else if (n_slots == 1) {
                SIEVE_TRY(append(0, 1, n_gen, 1));
            } else {
                for (int64_t i = 0; i < n_gen; ++i) SIEVE_TRY(append(0, n_slots, 1, n_slots));
            }
        }
        *ns = time_ns() - t0;
        selecting_ = false;
        for (int s = 0; s < n_slots; ++s) {
            const KvPolicyState *st = slots_[static_cast<size_t>(s)].state.get();
            if (const auto *q = st ? dynamic_cast<const QuestSelector *>(st->selector.get()) : nullptr) {
                const QuestStats &x = q->stats();
                sel_.n_steps += x.n_steps;
                sel_.rows_read += x.rows_read;
                sel_.rows_seen += x.rows_seen;
                sel_.select_ns += x.select_ns;
                sel_.n_selects += x.n_selects;
                sel_.n_reuses += x.n_reuses;
            }
        }
        return Status();
    }

    // Page selection counters summed over the runs since the last reset
    // (QuestSelector's; zero without a selecting policy).
    const QuestStats &selection() const { return sel_; }
    void reset_selection() { sel_ = QuestStats(); }

private:
    static int64_t time_ns() {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
    }

    // A slot's policy state and the swap image of its compressed depth.
    struct Slot {
        std::unique_ptr<KvPolicyState> state, saved_state;
        std::unique_ptr<KvSwapImage> image;
        int64_t image_depth = -1;
    };

    const Model &model_;
    KvCache &kv_;
    Workspace &ws_;
    ThreadPool &pool_;
    PolicyContext context(int s, int64_t n_prompt) {
        return policy_context(&kv_, s, n_prompt, model_.config().n_head, slots_[static_cast<size_t>(s)].state.get());
    }

    int64_t n_batch_;
    std::mt19937 rng_;
    std::vector<int32_t> tokens_, pos_, seq_;
    std::vector<int64_t> base_;  // append(): each slot's n_pos before the call
    std::vector<AttnScoreSink *> sinks_;
    std::vector<AttnRowSelector *> sels_;
    std::vector<const PrefillMask *> masks_;
    bool selecting_ = false;
    QuestStats sel_;
    KvPolicyPtr policy_;
    int64_t max_rows_ = 0;
    std::vector<Slot> slots_;
};

// A store of n_slots slots of n_ctx positions each.
Result<std::unique_ptr<KvCache>> make_kv(const BenchOptions &bo, const Model &model, int64_t n_ctx, int n_slots) {
    const KvShape shape = model.kv_shape(n_slots, bo.kv_type);
    if (bo.kv == "vattention") {
        VAttentionKvOptions o;
        o.shape = shape;
        o.max_ctx = n_ctx;
        o.pool.page_bytes = bo.kv_page;
        // By default the pool holds the whole context plus a few pages of
        // slack per lane (rows straddle pages; headroom maps one page ahead).
        const int64_t pairs = shape.n_seq * shape.n_layer * shape.n_head_kv;
        o.pool.budget_bytes =
            bo.kv_memory > 0 ? bo.kv_memory
                             : pairs * (n_ctx * (shape.k_row_bytes() + shape.v_row_bytes()) + 6 * bo.kv_page);
        Result<std::unique_ptr<VAttentionKv>> kv = VAttentionKv::create(o);
        if (!kv.ok()) return kv.status();
        return std::unique_ptr<KvCache>(std::move(kv.value()));
    }
    Result<std::unique_ptr<ContiguousKv>> kv = ContiguousKv::create(shape, n_ctx);
    if (!kv.ok()) return kv.status();
    return std::unique_ptr<KvCache>(std::move(kv.value()));
}

struct Test {
    int64_t n_prompt, n_gen;
};

// Runs every test of one model; rows go to the printer as they finish.
Status bench_model(const std::string &path, const BenchOptions &o, double bw_gbps, const std::string &cpu,
                   BenchPrinter &printer) {
    Result<std::unique_ptr<GgufFile>> file = GgufFile::open(path);
    if (!file.ok()) return file.status();
    Result<std::unique_ptr<Model>> model = Model::load(**file, ModelLoadOptions{o.mmap});
    if (!model.ok()) return Status::errorf("%s: %s", path.c_str(), model.status().message().c_str());
    const Model &m = **model;
    const ModelFacts facts = model_facts(path, **file, m, o.kv_type);
    const double huge_frac =
        m.placed_bytes() > 0 ? std::min(1.0, static_cast<double>(m.placed_huge_bytes()) / static_cast<double>(m.placed_bytes())) : 0.0;
    std::fprintf(stderr, "sieve bench: %s: %.1f MiB of weights copied at load, %.0f%% on huge pages%s\n",
                 facts.filename.c_str(), static_cast<double>(m.placed_bytes()) / (1 << 20), 100.0 * huge_frac,
                 o.mmap ? " (-mmp 1: the rest stays mapped)" : "");

    std::vector<Test> tests;
    for (int64_t p : o.n_prompt)
        if (p > 0) tests.push_back({p, 0});
    for (int64_t n : o.n_gen)
        if (n > 0) tests.push_back({0, n});
    int64_t n_ctx = 1;
    for (int64_t d : o.n_depth)
        for (const Test &t : tests) n_ctx = std::max(n_ctx, d + t.n_prompt + t.n_gen);
    // Slots for the largest n_parallel; a tg step of P slots is P tokens and
    // P logits rows whatever -b is.
    const int max_par = static_cast<int>(o.n_parallel.back());
    Result<std::unique_ptr<KvCache>> kv = make_kv(o, m, n_ctx, max_par);
    if (!kv.ok()) {
        const std::string slots = max_par > 1 ? strfmt(" in each of %d slots", max_par) : std::string();
        return Status::errorf("%s: KV store for %lld tokens%s: %s", path.c_str(), static_cast<long long>(n_ctx),
                              slots.c_str(), kv.status().message().c_str());
    }
    std::unique_ptr<Workspace> ws = m.make_workspace(std::max<int64_t>(o.n_batch, max_par), max_par);
    if (o.kv_policy) SIEVE_TRY(o.kv_policy->check_model((*kv)->shape(), m.config().n_head).with_context("--kv-policy"));

    for (int64_t n_threads : o.n_threads) {
        ThreadPool pool(static_cast<int>(n_threads));
        Runner runner(m, **kv, *ws, pool, o.n_batch);
        if (o.kv_policy) runner.set_policy(o.kv_policy, n_ctx);
        for (int s = 0; s < max_par; ++s) (*kv)->clear(s);
        for (int64_t depth : o.n_depth) {
            for (const Test &t : tests) {
                double step_ms_1 = -1;  // the n_parallel = 1 row's median step time (tg)
                for (int64_t n_par : o.n_parallel) {
                    const int n_slots = static_cast<int>(n_par);
                    BenchRow row;
                    row.model_filename = facts.filename;
                    row.model_type = facts.type_desc;
                    row.model_size = facts.size;
                    row.model_n_params = facts.n_params;
                    row.n_batch = o.n_batch;
                    row.n_threads = static_cast<int>(n_threads);
                    row.kv_store = o.kv;
                    row.kv_policy = o.kv_policy ? o.kv_policy->name() : "dense";
                    row.type_k = cpu::row_type_name(o.kv_type.k);
                    row.type_v = cpu::row_type_name(o.kv_type.v);
                    row.k_rotated = o.kv_type.k_rotated;
                    row.use_mmap = o.mmap;
                    row.huge_frac = huge_frac;
                    row.n_prompt = t.n_prompt;
                    row.n_gen = t.n_gen;
                    row.n_depth = depth;
                    row.n_parallel = n_par;
                    row.test_time = utc_now();
                    row.cpu_info = cpu;
                    row.bw_gbps = bw_gbps;
                    std::fprintf(stderr, "sieve bench: %s, %s, %lld threads ...\n", facts.type_desc.c_str(),
                                 bench_test_name(row).c_str(), static_cast<long long>(n_threads));
                    int64_t ns = 0;
                    // Warm-up: caches, page mappings, the pool's spinning workers.
                    SIEVE_TRY(runner.run_once(n_slots, depth, t.n_prompt, std::min<int64_t>(t.n_gen, 16), &ns));
                    runner.reset_selection();
                    for (int64_t r = 0; r < o.reps; ++r) {
                        SIEVE_TRY(runner.run_once(n_slots, depth, t.n_prompt, t.n_gen, &ns));
                        row.samples_ns.push_back(ns);
                    }
                    bench_row_finish(&row);
                    if (t.n_gen > 0) {
                        // Token i (0-based) attends to depth + i + 1 positions.
                        // Rows a lane holds before the first step: the depth, or what the policy kept of it.
                        double rows0 = static_cast<double>(depth);
                        if (o.kv_policy) {
                            const int64_t n_layer = m.config().n_layer;
                            rows0 = 0;
                            for (int64_t l = 0; l < n_layer; ++l) rows0 += static_cast<double>(o.kv_policy->kept_rows(depth, l, n_layer));
                            rows0 /= static_cast<double>(n_layer);
                        }
                        // A step reads the weights once and every slot's K/V rows.
                        double mean_kv_pos = rows0 + 0.5 * static_cast<double>(t.n_gen + 1);
                        const QuestStats &sel = runner.selection();
                        if (sel.n_steps > 0 && sel.rows_seen > 0) {
                            // Page selection: the rows the decode attention really read, per lane and step.
                            const double lanes = static_cast<double>(m.config().n_layer * m.config().n_head_kv);
                            mean_kv_pos = static_cast<double>(sel.rows_read) / static_cast<double>(sel.n_steps) / lanes;
                            row.read_frac = static_cast<double>(sel.rows_read) / static_cast<double>(sel.rows_seen);
                            row.select_ms = static_cast<double>(sel.select_ns) / 1e6 / static_cast<double>(sel.n_steps);
                            std::fprintf(stderr,
                                         "sieve bench: %s: decode read %.1f%% of the lanes' rows (%.0f rows per lane "
                                         "per step); selector %.3f ms per token (%lld selections, %lld reuses)\n",
                                         bench_test_name(row).c_str(), 100.0 * row.read_frac, mean_kv_pos,
                                         row.select_ms, static_cast<long long>(sel.n_selects),
                                         static_cast<long long>(sel.n_reuses));
                        }
                        const double bytes_per_step = static_cast<double>(facts.weight_read_bytes) +
                                                      static_cast<double>(n_par) * mean_kv_pos *
                                                          static_cast<double>(facts.kv_bytes_per_pos);
                        row.gbps = bytes_per_step * (row.avg_ts / static_cast<double>(n_par)) / 1e9;
                        row.bw_frac = bw_gbps > 0 ? row.gbps / bw_gbps : -1;
                        if (n_par == 1) step_ms_1 = row.step_ms;
                        if (step_ms_1 > 0 && row.step_ms >= 0) row.step_ratio = row.step_ms / step_ms_1;
                    }
                    printer.row(row);
                }
            }
        }
    }
    return Status();
}

}  // namespace

int cmd_bench(int argc, char **argv) {
    BenchOptions o;
    const int rc = parse_options(argc, argv, &o);
    if (rc >= 0) return rc;

    double bw = o.bandwidth_gbps;
    if (bw <= 0) {
        std::fprintf(stderr,
                     "sieve bench: measuring memory read bandwidth (1 GiB buffer, 1 and 2 threads, 1/2/4 streams each) ...\n");
        Result<MemBwResult> r = measure_read_bandwidth(MemBwOptions());
        if (!r.ok()) {
            std::fprintf(stderr, "sieve bench: %s (give --bandwidth GBPS)\n", r.status().message().c_str());
            return k_exit_error;
        }
        bw = r->gbps;
        std::fprintf(stderr,
                     "sieve bench: read bandwidth %.2f GB/s (1 thread %.2f, 2 threads %.2f; best with %d stream(s) per "
                     "thread; checksum %llx)\n",
                     bw, r->median_gbps[0], r->median_gbps.size() > 1 ? r->median_gbps[1] : 0.0, r->best_streams,
                     static_cast<unsigned long long>(r->checksum & 0xff));
    }
    const std::string cpu = cpu_model_name();
    BenchPrinter printer(o.format, stdout, o.n_parallel.back() > 1);
    for (const std::string &path : o.models) {
        Status st = bench_model(path, o, bw, cpu, printer);
        if (!st.ok()) {
            printer.finish();
            std::fprintf(stderr, "sieve bench: %s\n", st.message().c_str());
            return k_exit_error;
        }
    }
    printer.finish();
    return 0;
}

}  // namespace sieve::cli
