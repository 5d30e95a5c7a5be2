#include "sieve/model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "sieve/kernels/cpu/attention_score.h"
#include "sieve/kernels/cpu/kv_rows.h"
#include "sieve/kernels/cpu/matmul_q8.h"
#include "sieve/kernels/cpu/simd.h"
#include "sieve/quant/dequant.h"

namespace sieve {

// ============================================================================
// Loading: bind tensors into the mapping, precompute RoPE frequencies
// ============================================================================

Result<std::unique_ptr<Model>> Model::load(const GgufFile &file, const ModelLoadOptions &opt) {
    std::unique_ptr<Model> m(new Model(file));
    Result<ModelConfig> cfg = ModelConfig::from_gguf(file);
    if (!cfg.ok()) return cfg.status();
    m->cfg_ = std::move(cfg.value());
    Status st = m->bind();
    if (!st.ok()) return st.with_context("loading '" + file.path() + "'");
    st = m->place_weights(opt.map_weights);
    if (!st.ok()) return st.with_context("loading '" + file.path() + "'");
    return m;
}

// The matrices every step streams go to one huge-page arena (PageBuffer):
// the integer-path types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) in
// the 16-row tile layout (matmul_q8.h) that decode and prefill both read,
// the other types as the file's bytes. Reading a multi-GB stream per token
// from 2 MiB pages instead of the file mapping's 4 KiB ones saves a page walk
// per 4 KiB (Llama-3.2-1B F16 tg:
// ~11.3 -> ~13.5 tok/s, docs/benchmarks.md). The mapped originals are
// released (they stay in the page cache): repacked ones are read again only
// by the f32 (exact) path, which maps them back on demand. With map_weights
// the other matrices stay in the mapping and only the repacked copies are
// made. The token embedding is only looked up by row and stays mapped (a
// tied output matrix is placed, as output_).
Status Model::place_weights(bool map_weights) {
    std::vector<cpu::WeightView *> views{&output_};
    for (LayerWeights &l : layers_)
        for (cpu::WeightView *w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) views.push_back(w);
    struct Place {
        cpu::WeightView *w;
        const void *orig;
        bool x16;
        size_t offset, bytes;
    };
    std::vector<Place> places;
    size_t total = 0;
    for (cpu::WeightView *w : views) {
        const bool x16 = cpu::q8::x16_ok(w->type, w->n_rows, w->n_cols);
        if (!x16 && map_weights) continue;
        const size_t bytes = static_cast<size_t>(
            x16 ? cpu::q8::x16_bytes(w->type, w->n_rows, w->n_cols) : w->n_rows * w->row_bytes);
        const size_t offset = (total + 63) / 64 * 64;
        places.push_back({w, w->data, x16, offset, bytes});
        total = offset + bytes;
    }
    if (places.empty()) return Status();
    Result<PageBuffer> arena = PageBuffer::allocate(total);
    if (!arena.ok()) {
        return Status::errorf("weights: %s%s", arena.status().message().c_str(),
                              map_weights ? "" : " (--mmap leaves the weights in the file mapping instead)");
    }
    weights_ = std::move(arena.value());
    for (const Place &p : places) {
        uint8_t *dst = weights_.data() + p.offset;
        const cpu::WeightView &w = *p.w;
        if (p.x16) {
            cpu::q8::repack_x16(w.type, w.data, w.row_bytes, w.n_rows, w.n_cols, dst);
            p.w->x16 = dst;
        } else {
            std::memcpy(dst, w.data, p.bytes);
            p.w->data = dst;
        }
        // Right away, so resident memory peaks at the arena plus one matrix
        // (a tied output's original is the embedding, which stays: it is
        // read by row).
        if (p.orig != tok_embd_.data) file_.release(p.orig, static_cast<uint64_t>(w.n_rows * w.row_bytes));
    }
    return Status();
}

Status Model::bind_matrix(const char *name, int64_t n_rows, int64_t n_cols, cpu::WeightView *out) {
    const GgufTensor *t = file_.find_tensor(name);
    if (!t) return Status::errorf("tensor '%s' is missing", name);
    if (t->n_dims != 2 || t->ne[0] != n_cols || t->ne[1] != n_rows) {
        return Status::errorf("tensor '%s': expected [%lld, %lld], got [%lld, %lld] (%d dims)", name,
                              static_cast<long long>(n_cols), static_cast<long long>(n_rows),
                              static_cast<long long>(t->ne[0]), static_cast<long long>(t->ne[1]), t->n_dims);
    }
    const TypeTraits *tt = type_traits(t->type);
    int64_t row_bytes = 0;
    if (!tt || !tt->weights_ok || !type_row_bytes(t->type, n_cols, &row_bytes)) {
        return Status::errorf("tensor '%s': weight type %s is not supported for a %lld-column matrix", name,
                              type_name(t->type), static_cast<long long>(n_cols));
    }
    if (static_cast<uint64_t>(row_bytes) * static_cast<uint64_t>(n_rows) != t->n_bytes) {
        return Status::errorf("tensor '%s': %llu bytes, expected %lld rows x %lld bytes", name,
                              static_cast<unsigned long long>(t->n_bytes), static_cast<long long>(n_rows),
                              static_cast<long long>(row_bytes));
    }
    *out = cpu::WeightView{t->type, n_rows, n_cols, row_bytes, t->data};
    weight_bytes_ += static_cast<int64_t>(t->n_bytes);
    return Status();
}

Status Model::bind_vector(const char *name, int64_t n, const float **out) {
    const GgufTensor *t = file_.find_tensor(name);
    if (!t) return Status::errorf("tensor '%s' is missing", name);
    if (t->n_elements() != n || t->ne[0] != n) {
        return Status::errorf("tensor '%s': expected [%lld], got %lld elements (ne[0] = %lld)", name,
                              static_cast<long long>(n), static_cast<long long>(t->n_elements()),
                              static_cast<long long>(t->ne[0]));
    }
    int64_t row_bytes = 0;
    const TypeTraits *tt = type_traits(t->type);
    if (!tt || !tt->weights_ok || !type_row_bytes(t->type, n, &row_bytes) ||
        static_cast<uint64_t>(row_bytes) != t->n_bytes) {
        return Status::errorf("tensor '%s': type %s cannot hold a %lld-element vector", name, type_name(t->type),
                              static_cast<long long>(n));
    }
    weight_bytes_ += static_cast<int64_t>(t->n_bytes);
    if (t->type == GgmlType::F32 && reinterpret_cast<uintptr_t>(t->data) % alignof(float) == 0) {
        *out = reinterpret_cast<const float *>(t->data);
        return Status();
    }
    // Norm weights and biases are tiny; a converted copy keeps the kernels f32-only.
    owned_.push_back(std::make_unique<float[]>(static_cast<size_t>(n)));
    dequantize_row(t->type, t->data, owned_.back().get(), n);
    *out = owned_.back().get();
    return Status();
}

Status Model::bind() {
    const ModelConfig &c = cfg_;
    if (c.head_dim % 4 != 0) {
        return Status::errorf("head_dim = %lld: the attention kernels need a multiple of 4",
                              static_cast<long long>(c.head_dim));
    }
    const std::string arch = model_arch_name(c.arch);
    const std::string rot_key = arch + ".rope.dimension_count";
    if (file_.has(rot_key)) {
        int64_t n_rot = 0;
        SIEVE_TRY(file_.get_int(rot_key, &n_rot));
        if (n_rot != c.head_dim) {
            return Status::errorf("'%s' = %lld but head_dim = %lld: partial rotary embeddings are not supported",
                                  rot_key.c_str(), static_cast<long long>(n_rot),
                                  static_cast<long long>(c.head_dim));
        }
    }

    SIEVE_TRY(bind_matrix("token_embd.weight", c.n_vocab, c.n_embd, &tok_embd_));
    SIEVE_TRY(bind_vector("output_norm.weight", c.n_embd, &output_norm_));
    if (c.tied_embeddings) {
        output_ = tok_embd_;
    } else {
        SIEVE_TRY(bind_matrix("output.weight", c.n_vocab, c.n_embd, &output_));
    }
    layers_.resize(static_cast<size_t>(c.n_layer));
    for (int64_t il = 0; il < c.n_layer; ++il) {
        LayerWeights &l = layers_[static_cast<size_t>(il)];
        auto name = [&](const char *suffix) { return strfmt("blk.%lld.%s", static_cast<long long>(il), suffix); };
        SIEVE_TRY(bind_vector(name("attn_norm.weight").c_str(), c.n_embd, &l.attn_norm));
        SIEVE_TRY(bind_matrix(name("attn_q.weight").c_str(), c.q_dim(), c.n_embd, &l.wq));
        SIEVE_TRY(bind_matrix(name("attn_k.weight").c_str(), c.kv_dim(), c.n_embd, &l.wk));
        SIEVE_TRY(bind_matrix(name("attn_v.weight").c_str(), c.kv_dim(), c.n_embd, &l.wv));
        SIEVE_TRY(bind_matrix(name("attn_output.weight").c_str(), c.n_embd, c.q_dim(), &l.wo));
        if (c.has_qkv_bias) {
            SIEVE_TRY(bind_vector(name("attn_q.bias").c_str(), c.q_dim(), &l.bq));
            SIEVE_TRY(bind_vector(name("attn_k.bias").c_str(), c.kv_dim(), &l.bk));
            SIEVE_TRY(bind_vector(name("attn_v.bias").c_str(), c.kv_dim(), &l.bv));
        }
        SIEVE_TRY(bind_vector(name("ffn_norm.weight").c_str(), c.n_embd, &l.ffn_norm));
        SIEVE_TRY(bind_matrix(name("ffn_gate.weight").c_str(), c.n_ff, c.n_embd, &l.w_gate));
        SIEVE_TRY(bind_matrix(name("ffn_up.weight").c_str(), c.n_ff, c.n_embd, &l.w_up));
        SIEVE_TRY(bind_matrix(name("ffn_down.weight").c_str(), c.n_embd, c.n_ff, &l.w_down));
    }

    // RoPE: theta_i = base^(-2i/d), then the model's frequency scaling.
    const int64_t half = c.head_dim / 2;
    std::vector<double> freq(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
        freq[static_cast<size_t>(i)] =
            std::pow(static_cast<double>(c.rope_freq_base), -2.0 * static_cast<double>(i) / c.head_dim);
    }
    if (c.rope_scaling.has_freq_factors) {
        // Llama 3.1+: the converter stores one divisor per frequency.
        const float *divisors = nullptr;
        SIEVE_TRY(bind_vector("rope_freqs.weight", half, &divisors));
        for (int64_t i = 0; i < half; ++i) freq[static_cast<size_t>(i)] /= divisors[i];
    } else if (c.rope_scaling.llama3) {
        // Llama 3.1 rope_scaling: long wavelengths divided by factor, short
        // ones kept, a linear ramp in 1/wavelength between.
        const RopeScaling &s = c.rope_scaling;
        const double n_orig = static_cast<double>(s.original_ctx);
        const double low_wavelen = n_orig / s.low_freq_factor;
        const double high_wavelen = n_orig / s.high_freq_factor;
        for (double &f : freq) {
            const double wavelen = 2.0 * M_PI / f;
            if (wavelen > low_wavelen) {
                f /= s.factor;
            } else if (wavelen >= high_wavelen) {
                const double smooth = (n_orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
                f = (1.0 - smooth) * f / s.factor + smooth * f;
            }
        }
    } else if (c.rope_scaling.linear_factor != 1.0f) {
        // Linear position interpolation: theta = (pos / factor) * freq.
        for (double &f : freq) f /= c.rope_scaling.linear_factor;
    }
    inv_freq_.assign(freq.begin(), freq.end());

    // The K bias's mean over RoPE positions 0 .. P-1 (P: the training
    // context): pair i turns by freq_i per position, and the mean of
    // e^(j freq p) is e^(j freq (P-1)/2) sin(freq P / 2) / (P sin(freq / 2)),
    // about 1 for the slow pairs (where Qwen2's large K biases sit) and
    // about 0 for the fast ones.
    if (!layers_.empty() && layers_[0].bk) {
        const double P = static_cast<double>(std::max<int64_t>(c.n_ctx_train, 1));
        const bool neox = c.rope_type == RopeType::neox;
        std::vector<double> mean_cos(static_cast<size_t>(half)), mean_sin(static_cast<size_t>(half));
        for (int64_t i = 0; i < half; ++i) {
            const double f = freq[static_cast<size_t>(i)];
            const double amp =
                std::fabs(std::sin(f / 2)) < 1e-12 ? 1.0 : std::sin(f * P / 2) / (P * std::sin(f / 2));
            mean_cos[static_cast<size_t>(i)] = amp * std::cos(f * (P - 1) / 2);
            mean_sin[static_cast<size_t>(i)] = amp * std::sin(f * (P - 1) / 2);
        }
        k_centre_.assign(static_cast<size_t>(c.n_layer * c.kv_dim()), 0.0f);
        for (int64_t il = 0; il < c.n_layer; ++il)
            for (int64_t g = 0; g < c.n_head_kv; ++g)
                for (int64_t i = 0; i < half; ++i) {
                    const double C = mean_cos[static_cast<size_t>(i)], S = mean_sin[static_cast<size_t>(i)];
                    const int64_t base = il * c.kv_dim() + g * c.head_dim;
                    const int64_t i0 = base + (neox ? i : 2 * i), i1 = base + (neox ? i + half : 2 * i + 1);
                    const double a = layers_[static_cast<size_t>(il)].bk[i0 - il * c.kv_dim()];
                    const double b = layers_[static_cast<size_t>(il)].bk[i1 - il * c.kv_dim()];
                    k_centre_[static_cast<size_t>(i0)] = static_cast<float>(a * C - b * S);
                    k_centre_[static_cast<size_t>(i1)] = static_cast<float>(a * S + b * C);
                }
    }
    return Status();
}

KvShape Model::kv_shape(int n_seq, cpu::KvRowTypes type) const {
    return KvShape{n_seq, cfg_.n_layer, cfg_.n_head_kv, cfg_.head_dim, type};
}

std::unique_ptr<Workspace> Model::make_workspace(int64_t max_tokens, int64_t max_outputs) const {
    SIEVE_CHECKF(max_tokens >= 1, "make_workspace: max_tokens = %lld", static_cast<long long>(max_tokens));
    if (max_outputs <= 0) max_outputs = max_tokens;
    const ModelConfig &c = cfg_;
    auto ws = std::make_unique<Workspace>();
    ws->max_tokens_ = max_tokens;
    ws->max_outputs_ = max_outputs;
    const auto sz = [](int64_t a, int64_t b) { return static_cast<size_t>(a * b); };
    ws->x_.resize(sz(max_tokens, c.n_embd));
    ws->h_.resize(sz(max_tokens, c.n_embd));
    ws->q_.resize(sz(max_tokens, c.q_dim()));
    ws->att_.resize(sz(max_tokens, c.q_dim()));
    ws->k_.resize(sz(max_tokens, c.kv_dim()));
    ws->v_.resize(sz(max_tokens, c.kv_dim()));
    ws->gate_.resize(sz(max_tokens, c.n_ff));
    ws->up_.resize(sz(max_tokens, c.n_ff));
    ws->out_x_.resize(sz(max_outputs, c.n_embd));
    ws->logits_.resize(sz(max_outputs, c.n_vocab));
    ws->out_ids_.resize(static_cast<size_t>(max_outputs));
    ws->lse_.resize(sz(max_tokens, c.n_head));
    ws->rope_cs_.resize(sz(max_tokens, c.head_dim));
    // Per run of one sequence; a step has at most max_tokens runs.
    ws->k_ptrs_.resize(sz(max_tokens, c.n_head_kv));
    ws->v_ptrs_.resize(sz(max_tokens, c.n_head_kv));
    ws->n_past_.resize(sz(max_tokens, c.n_head_kv));
    ws->decode_args_.resize(static_cast<size_t>(max_tokens));
    return ws;
}

// ============================================================================
// Forward
// ============================================================================

namespace {

// The batch as runs of one sequence: [begin, end) in batch order.
template <class F>
void for_each_run(const Batch &b, F &&fn) {
    int64_t begin = 0;
    for (int64_t i = 1; i <= b.n_tokens; ++i) {
        if (i == b.n_tokens || b.seq[i] != b.seq[begin]) {
            fn(begin, i);
            begin = i;
        }
    }
}

bool wants_logits(const Batch &b, int64_t i) {
    if (b.want_logits) return b.want_logits[i] != 0;
    return i + 1 == b.n_tokens || b.seq[i + 1] != b.seq[i];  // last token of its sequence
}

// Row-wise work on token ranges in parallel (prefill); a handful of tokens
// stays on the calling thread. Each token's row is computed the same way
// whatever the split.
template <class F>
void for_token_ranges(ThreadPool &pool, int64_t n_tokens, F &&fn) {
    const int64_t n_tasks = n_tokens < 8 ? 1 : std::min<int64_t>(n_tokens, 2 * pool.n_threads());
    if (n_tasks == 1) return fn(int64_t{0}, n_tokens);
    pool.run(n_tasks, [&](int64_t task, int) { fn(n_tokens * task / n_tasks, n_tokens * (task + 1) / n_tasks); });
}

void add_inplace(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

// One K or V row into its lane, narrowed to the lane's type (round to nearest even).
// q8_0 / q4_0 rows are quantized here, per row (so a row's bits do not depend
// on its batch).
void store_row(cpu::RowType type, const float *src, uint8_t *dst, int64_t n) { cpu::f32_to_rows(type, src, dst, n); }

void add_bias(float *x, const float *bias, int64_t n_rows, int64_t n_cols) {
    for (int64_t t = 0; t < n_rows; ++t) add_inplace(x + t * n_cols, bias, n_cols);
}

}  // namespace

Status Model::validate(const Batch &b, const KvCache &kv, const Workspace &ws) const {
    if (b.n_tokens < 1 || b.n_tokens > ws.max_tokens()) {
        return Status::errorf("batch of %lld tokens, expected 1 ..= %lld (the workspace's max_tokens)",
                              static_cast<long long>(b.n_tokens), static_cast<long long>(ws.max_tokens()));
    }
    SIEVE_CHECKF(b.tokens && b.pos && b.seq, "batch without tokens, pos or seq");
    const int n_seq = kv.shape().n_seq;
    int64_t n_out = 0;
    for (int64_t i = 0; i < b.n_tokens; ++i) {
        if (b.tokens[i] < 0 || b.tokens[i] >= cfg_.n_vocab) {
            return Status::errorf("batch token %lld: id %d out of the vocabulary [0, %lld)", static_cast<long long>(i),
                                  b.tokens[i], static_cast<long long>(cfg_.n_vocab));
        }
        if (b.seq[i] < 0 || b.seq[i] >= n_seq) {
            return Status::errorf("batch token %lld: sequence slot %d out of [0, %d)", static_cast<long long>(i),
                                  b.seq[i], n_seq);
        }
        n_out += wants_logits(b, i) ? 1 : 0;
    }
    if (n_out > ws.max_outputs()) {
        return Status::errorf("batch asks for %lld logits rows, the workspace holds %lld",
                              static_cast<long long>(n_out), static_cast<long long>(ws.max_outputs()));
    }
    Status st;
    for_each_run(b, [&](int64_t begin, int64_t end) {
        if (!st.ok()) return;
        const int s = b.seq[begin];
        // A sequence must appear as one run: its tokens see each other through the KV.
        for (int64_t j = 0; j < begin; ++j) {
            if (b.seq[j] == s) {
                st = Status::errorf("batch: tokens of sequence %d are not contiguous (at %lld and %lld)", s,
                                    static_cast<long long>(j), static_cast<long long>(begin));
                return;
            }
        }
        if (b.pos[begin] < 0 || b.pos[begin] > kv.n_pos(s)) {
            st = Status::errorf("batch: sequence %d starts at position %d, its KV has seen %lld positions", s,
                                b.pos[begin], static_cast<long long>(kv.n_pos(s)));
            return;
        }
        for (int64_t i = begin + 1; i < end; ++i) {
            if (b.pos[i] != b.pos[i - 1] + 1) {
                st = Status::errorf("batch: sequence %d positions not consecutive at token %lld (%d after %d)", s,
                                    static_cast<long long>(i), b.pos[i], b.pos[i - 1]);
                return;
            }
        }
        // A score sink must hold every row its queries will see.
        const AttnScoreSink *sink = b.score_sinks ? b.score_sinks[begin] : nullptr;
        if (sink && b.pos[begin] + (end - begin) > sink->from_pos) {
            SIEVE_CHECKF(sink->acc, "batch: score sink of sequence %d without an accumulator", s);
            const int64_t back = std::max<int64_t>(0, kv.n_pos(s) - b.pos[begin]);  // rows rolled back first
            for (int64_t il = 0; il < cfg_.n_layer && st.ok(); ++il)
                for (int64_t g = 0; g < cfg_.n_head_kv; ++g)
                    if (kv.n_rows(s, il, g) - back + (end - begin) > sink->cap) {
                        st = Status::errorf("batch: sequence %d's score sink holds %lld rows per head, layer %lld "
                                            "head %lld will hold %lld",
                                            s, static_cast<long long>(sink->cap), static_cast<long long>(il),
                                            static_cast<long long>(g),
                                            static_cast<long long>(kv.n_rows(s, il, g) - back + (end - begin)));
                        break;
                    }
        }
    });
    return st;
}

void Model::attention(const Batch &b, KvCache &kv, Workspace &ws, ThreadPool &pool, int64_t il) const {
    const ModelConfig &c = cfg_;
    const int64_t hd = c.head_dim, nkv = c.n_head_kv;
    const cpu::KvRowTypes type = kv.shape().type;
    const int64_t kb = kv.shape().k_row_bytes(), vb = kv.shape().v_row_bytes();
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    // Runs are numbered in batch order; run r keeps its lane pointers and row
    // counts at [r * n_head_kv, (r + 1) * n_head_kv) of the workspace's
    // arrays and its lse (when a score sink wants it) at lse_ + begin * n_head
    // ([n_head, n] for a run of n tokens: the runs' regions are disjoint).
    const auto args_of = [&](int64_t r, int64_t begin, int64_t end) {
        cpu::AttnArgs a;
        a.q = ws.q_.data() + begin * c.q_dim();
        a.k = ws.k_ptrs_.data() + r * nkv;
        a.v = ws.v_ptrs_.data() + r * nkv;
        a.o = ws.att_.data() + begin * c.q_dim();
        a.n_q = end - begin;
        a.n_past_kv = ws.n_past_.data() + r * nkv;
        a.kv_type = type;
        a.n_head = c.n_head;
        a.n_head_kv = nkv;
        a.head_dim = hd;
        a.scale = scale;
        return a;
    };
    // First token of a run whose attention its score sink wants (n: none;
    // positions are consecutive).
    const auto sink_first = [&](int64_t begin, int64_t end) {
        const AttnScoreSink *sink = b.score_sinks ? b.score_sinks[begin] : nullptr;
        return sink ? std::clamp<int64_t>(sink->from_pos - b.pos[begin], 0, end - begin) : end - begin;
    };

    // 1. Append every run's K/V rows at each lane's own row count (rows are
    // not positions: a compacted lane holds fewer rows than positions):
    //   k_ [t, g, :]  ->  k_lane(s, il, g)[n_past[g] + t - begin, :]
    // and collect the decode runs (one generated token; Batch::decode_run) for
    // one multi-sequence call.
    int64_t r = 0, n_dec = 0;
    for_each_run(b, [&](int64_t begin, int64_t end) {
        const int s = b.seq[begin];
        for (int64_t g = 0; g < nkv; ++g) {
            const int64_t n_past = kv.n_rows(s, il, g);
            uint8_t *kl = static_cast<uint8_t *>(kv.k_data(s, il, g)) + n_past * kb;
            uint8_t *vl = static_cast<uint8_t *>(kv.v_data(s, il, g)) + n_past * vb;
            for (int64_t t = begin; t < end; ++t) {
                store_row(type.k, ws.k_.data() + t * c.kv_dim() + g * hd, kl + (t - begin) * kb, hd);
                store_row(type.v, ws.v_.data() + t * c.kv_dim() + g * hd, vl + (t - begin) * vb, hd);
            }
            if (int32_t *pos = kv.positions(s, il, g))
                for (int64_t t = begin; t < end; ++t) pos[n_past + t - begin] = b.pos[t];
            const size_t i = static_cast<size_t>(r * nkv + g);
            ws.k_ptrs_[i] = kv.k_data(s, il, g);
            ws.v_ptrs_[i] = kv.v_data(s, il, g);
            ws.n_past_[i] = n_past;
        }
        if (b.decode_run(begin, end)) {
            cpu::AttnArgs a = args_of(r, begin, end);
            if (sink_first(begin, end) < 1) a.lse = ws.lse_.data() + begin * c.n_head;
            if (AttnRowSelector *sel = b.selectors ? b.selectors[begin] : nullptr) {
                int64_t *vis = ws.n_past_.data() + r * nkv;  // n_past + 1 for the call, then back
                for (int64_t g = 0; g < nkv; ++g) ++vis[g];
                a.spans = sel->select(il, a.q, kv, s, vis, &pool);
                for (int64_t g = 0; g < nkv; ++g) --vis[g];
            }
            ws.decode_args_[static_cast<size_t>(n_dec++)] = a;
        }
        ++r;
    });

    // 2. Every decode run in one dispatch (each sequence's bits are those of
    // attention_decode on it alone), then prefill runs one by one, and the
    // score sinks per run.
    cpu::attention_decode_multi(ws.decode_args_.data(), n_dec, pool);
    r = 0;
    for_each_run(b, [&](int64_t begin, int64_t end) {
        const int64_t n = end - begin, run = r++;
        const int64_t first = sink_first(begin, end);
        cpu::AttnArgs a = args_of(run, begin, end);
        if (first < n) a.lse = ws.lse_.data() + begin * c.n_head;
        cpu::AttnLambda lam;
        if (const PrefillMask *pm = b.prefill_masks ? b.prefill_masks[begin] : nullptr) {
            SIEVE_CHECKF(first == n, "a prefill mask with a score sink (sequence %d): scores assume dense attention",
                         b.seq[begin]);
            lam.heads = pm->streaming + il * nkv;
            lam.sink = pm->sink;
            lam.recent = pm->recent;
            if (std::any_of(lam.heads, lam.heads + nkv, [](uint8_t x) { return x != 0; })) a.lambda = &lam;
        }
        if (!b.decode_run(begin, end)) cpu::attention_prefill(a, pool);
        if (first < n) {
            AttnScoreSink *sink = b.score_sinks[begin];
            cpu::AttnScoreArgs sa;
            sa.q = a.q + first * c.q_dim();
            sa.lse = a.lse + first;
            sa.lse_stride = n;
            sa.k = a.k;
            sa.kv_type = type.k;
            sa.n_q = n - first;
            // The scored queries see their lane up to their own row.
            int64_t *n_past = ws.n_past_.data() + run * nkv;
            for (int64_t g = 0; g < nkv; ++g) n_past[g] += first;
            sa.n_past_kv = n_past;
            sa.n_head = c.n_head;
            sa.n_head_kv = nkv;
            sa.head_dim = hd;
            sa.scale = a.scale;
            sa.acc = sink->acc + il * c.n_head * sink->cap;
            sa.acc_stride = sink->cap;
            cpu::attention_scores(sa, pool);
        }
    });
}

Status Model::forward(const Batch &b, KvCache &kv, Workspace &ws, ThreadPool &pool) const {
    SIEVE_TRY(validate(b, kv, ws));
    const KvShape &ks = kv.shape();
    SIEVE_CHECKF(ks.n_layer == cfg_.n_layer && ks.n_head_kv == cfg_.n_head_kv && ks.head_dim == cfg_.head_dim,
                 "KV store shape (%lld layers, %lld kv heads, head_dim %lld) does not match the model",
                 static_cast<long long>(ks.n_layer), static_cast<long long>(ks.n_head_kv),
                 static_cast<long long>(ks.head_dim));
    // A run starting before the slot's next position rewrites the tail: roll
    // every lane back by the same number of rows first, then make room.
    Status st;
    for_each_run(b, [&](int64_t begin, int64_t end) {
        const int seq = b.seq[begin];
        if (b.pos[begin] < kv.n_pos(seq)) kv.set_n_pos(seq, b.pos[begin]);
        if (st.ok()) st = kv.reserve(seq, b.pos[end - 1] + 1);
    });
    SIEVE_TRY(st);

    const ModelConfig &c = cfg_;
    const int64_t T = b.n_tokens, E = c.n_embd, F = c.n_ff;
    const bool neox = c.rope_type == RopeType::neox;
    const auto dump = [&](const char *name, int il, const float *data, int64_t rows, int64_t cols) {
        if (ws.callback) ws.callback(name, il, data, rows, cols);
    };
    float *x = ws.x_.data(), *h = ws.h_.data(), *q = ws.q_.data(), *k = ws.k_.data(), *v = ws.v_.data();
    float *att = ws.att_.data(), *gate = ws.gate_.data(), *up = ws.up_.data();

    for (int64_t t = 0; t < T; ++t) cpu::get_row(tok_embd_, b.tokens[t], x + t * E);
    dump("inp_embd", -1, x, T, E);

    // The rotation angles' cos and sin, once for all layers.
    for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
        cpu::rope_table(b.pos + t0, t1 - t0, c.head_dim, inv_freq_.data(), ws.rope_cs_.data() + t0 * c.head_dim);
    });

    for (int64_t il = 0; il < c.n_layer; ++il) {
        const LayerWeights &l = layers_[static_cast<size_t>(il)];
        const int li = static_cast<int>(il);
        // 1. attention block
        for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
            cpu::rmsnorm(x + t0 * E, l.attn_norm, h + t0 * E, t1 - t0, E, c.norm_eps);
        });
        dump("attn_norm", li, h, T, E);
        {
            // One dispatch (and one activation quantization) for all three.
            const cpu::WeightView qkv_w[3] = {l.wq, l.wk, l.wv};
            float *const qkv_y[3] = {q, k, v};
            cpu::matmul_multi(qkv_w, qkv_y, 3, h, T, pool, ws.act_precision);
        }
        for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
            float *qt = q + t0 * c.q_dim(), *kt = k + t0 * c.kv_dim();
            if (l.bq) {
                add_bias(qt, l.bq, t1 - t0, c.q_dim());
                add_bias(kt, l.bk, t1 - t0, c.kv_dim());
                add_bias(v + t0 * c.kv_dim(), l.bv, t1 - t0, c.kv_dim());
            }
            const float *cs = ws.rope_cs_.data() + t0 * c.head_dim;
            cpu::rope_apply(qt, cs, t1 - t0, c.n_head, c.head_dim, neox);
            cpu::rope_apply(kt, cs, t1 - t0, c.n_head_kv, c.head_dim, neox);
            if (ks.type.k_rotated) {
                // Rotated keys (cpu::KvRowTypes::k_rotated): K less its
                // bias's mean over positions (k_centre_), then Q and K rotated
                // alike, after RoPE, so every softmax, score and page rank the
                // kernels compute is the plain one up to rounding.
                if (!k_centre_.empty()) {
                    const float *m = k_centre_.data() + il * c.kv_dim();
                    for (int64_t t = 0; t < t1 - t0; ++t)
                        for (int64_t j = 0; j < c.kv_dim(); ++j) kt[t * c.kv_dim() + j] -= m[j];
                }
                cpu::hadamard_rotate(qt, (t1 - t0) * c.n_head, c.head_dim);
                cpu::hadamard_rotate(kt, (t1 - t0) * c.n_head_kv, c.head_dim);
            }
        });
        dump("q", li, q, T, c.q_dim());
        dump("k", li, k, T, c.kv_dim());
        dump("v", li, v, T, c.kv_dim());
        attention(b, kv, ws, pool, il);
        dump("kqv_out", li, att, T, c.q_dim());
        cpu::matmul(l.wo, att, T, h, pool, ws.act_precision);
        dump("attn_out", li, h, T, E);
        for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) { add_inplace(x + t0 * E, h + t0 * E, (t1 - t0) * E); });
        dump("ffn_inp", li, x, T, E);
        // 2. feed-forward block (SwiGLU)
        for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) {
            cpu::rmsnorm(x + t0 * E, l.ffn_norm, h + t0 * E, t1 - t0, E, c.norm_eps);
        });
        dump("ffn_norm", li, h, T, E);
        {
            const cpu::WeightView gate_up_w[2] = {l.w_gate, l.w_up};
            float *const gate_up_y[2] = {gate, up};
            cpu::matmul_multi(gate_up_w, gate_up_y, 2, h, T, pool, ws.act_precision);
        }
        for_token_ranges(pool, T,
                         [&](int64_t t0, int64_t t1) { cpu::silu_mul(gate + t0 * F, up + t0 * F, (t1 - t0) * F); });
        cpu::matmul(l.w_down, gate, T, h, pool, ws.act_precision);
        dump("ffn_out", li, h, T, E);
        for_token_ranges(pool, T, [&](int64_t t0, int64_t t1) { add_inplace(x + t0 * E, h + t0 * E, (t1 - t0) * E); });
        dump("l_out", li, x, T, E);
    }

    // 3. LM head, only for the rows that want logits
    int64_t n_out = 0;
    for (int64_t t = 0; t < T; ++t) {
        if (!wants_logits(b, t)) continue;
        std::memcpy(ws.out_x_.data() + n_out * E, x + t * E, sizeof(float) * E);
        ws.out_ids_[static_cast<size_t>(n_out)] = t;
        ++n_out;
    }
    ws.n_outputs_ = n_out;
    if (n_out > 0) {
        cpu::rmsnorm(ws.out_x_.data(), output_norm_, ws.out_x_.data(), n_out, E, c.norm_eps);
        dump("result_norm", -1, ws.out_x_.data(), n_out, E);
        cpu::matmul(output_, ws.out_x_.data(), n_out, ws.logits_.data(), pool, ws.act_precision);
        dump("result_output", -1, ws.logits_.data(), n_out, c.n_vocab);
    }
    for_each_run(b, [&](int64_t begin, int64_t end) { kv.set_n_pos(b.seq[begin], b.pos[end - 1] + 1); });
    return Status();
}

}  // namespace sieve
