// Micro-benchmarks of the CPU kernels on the default model's shapes
// (SmolLM2-135M: dim 576, ffn 1536, vocab 49152; 9 query / 3 KV heads of 64).
// Built as build/bench/bench_kernels (bench/CMakeLists.txt):
//
//   ./build/bench/bench_kernels --benchmark_filter=Matmul
//
// Counters: FLOP/s (2 per multiply-add) and, for matmul, weight bytes/s.
// Google Benchmark computes rates from the main thread's CPU time; on a busy
// machine compare the wall-clock "Time" column instead.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kernels_test_util.h"
#include "sieve/core/aligned.h"
#include "sieve/core/fp16.h"
#include "sieve/kernels/cpu/attention_score.h"
#include "sieve/kernels/cpu/kv_rows.h"
#include "sieve/kernels/cpu/matmul_q8.h"
#include "sieve/kernels/cpu/ops.h"
#include "sieve/kernels/cpu/page_select.h"

using namespace sieve;

namespace {

int bench_threads() { return 2; }

void bm_matmul_impl(benchmark::State &state, GgmlType type, int64_t n_rows, int64_t n_cols, bool repacked) {
    const int64_t n_tokens = state.range(0);
    std::mt19937 rng(1);
    auto w = test::random_weights(rng, type, n_rows, n_cols);
    const auto x = test::random_values(rng, static_cast<size_t>(n_tokens * n_cols));
    std::vector<float> y(static_cast<size_t>(n_tokens * n_rows));
    ThreadPool pool(bench_threads());
    AlignedBuffer<uint8_t> x16;
    if (repacked) {
        // As the model loads it: the 16-row tile copy (matmul_q8.h).
        x16.resize(static_cast<size_t>(cpu::q8::x16_bytes(type, n_rows, n_cols)));
        cpu::q8::repack_x16(type, w.bytes.data(), w.view.row_bytes, n_rows, n_cols, x16.data());
        w.view.x16 = x16.data();
    }
    for (auto _ : state) {
        cpu::matmul(w.view, x.data(), n_tokens, y.data(), pool);
        benchmark::DoNotOptimize(y.data());
    }
    const double iters = static_cast<double>(state.iterations());
    state.counters["FLOP/s"] = benchmark::Counter(2.0 * n_rows * n_cols * n_tokens * iters, benchmark::Counter::kIsRate);
    state.counters["weight_B/s"] =
        benchmark::Counter(static_cast<double>(w.bytes.size()) * iters, benchmark::Counter::kIsRate);
}

// The file's rows as given (the unpack / raw-dot paths) ...
void bm_matmul(benchmark::State &state, GgmlType type, int64_t n_rows, int64_t n_cols) {
    bm_matmul_impl(state, type, n_rows, n_cols, false);
}
// ... and repacked at load as the model does (every step size reads 16-row tiles).
void bm_matmul_x16(benchmark::State &state, GgmlType type, int64_t n_rows, int64_t n_cols) {
    if (!cpu::q8::x16_ok(type, n_rows, n_cols)) {
        state.SkipWithError("no x16 layout in this build");
        return;
    }
    bm_matmul_impl(state, type, n_rows, n_cols, true);
}

struct AttnData {
    std::vector<std::vector<float>> k, v;
    std::vector<const void *> kp, vp;
    std::vector<float> q, o;
    cpu::AttnArgs a;
    AttnData(int64_t n_q, int64_t n_kv) {
        std::mt19937 rng(2);
        const int64_t n_head = 9, n_head_kv = 3, d = 64;
        for (int64_t h = 0; h < n_head_kv; ++h) {
            k.push_back(test::random_values(rng, static_cast<size_t>(n_kv * d), 0.5f));
            v.push_back(test::random_values(rng, static_cast<size_t>(n_kv * d)));
        }
        for (int64_t h = 0; h < n_head_kv; ++h) {
            kp.push_back(k[h].data());
            vp.push_back(v[h].data());
        }
        q = test::random_values(rng, static_cast<size_t>(n_q * n_head * d), 0.5f);
        o.resize(q.size());
        a.q = q.data();
        a.k = kp.data();
        a.v = vp.data();
        a.o = o.data();
        a.n_q = n_q;
        a.n_past = n_kv - n_q;
        a.n_head = n_head;
        a.n_head_kv = n_head_kv;
        a.head_dim = d;
        a.scale = 0.125f;
    }
};

void bm_attention_prefill(benchmark::State &state) {
    const int64_t n = state.range(0);
    AttnData data(n, n);
    ThreadPool pool(bench_threads());
    for (auto _ : state) cpu::attention_prefill(data.a, pool);
    // causal: about half of the n x n scores, QK and PV 2 FLOP each per element of d
    state.counters["FLOP/s"] = benchmark::Counter(2.0 * n * n * 64 * 9 * static_cast<double>(state.iterations()),
                                                  benchmark::Counter::kIsRate);
}

void bm_attention_decode(benchmark::State &state) {
    const int64_t n_kv = state.range(0);
    AttnData data(1, n_kv);
    ThreadPool pool(bench_threads());
    for (auto _ : state) cpu::attention_decode(data.a, pool);
    state.counters["kv_B/s"] = benchmark::Counter(2.0 * 3 * n_kv * 64 * 4 * static_cast<double>(state.iterations()),
                                                  benchmark::Counter::kIsRate);
}

// Prefill of n_q new tokens after n_kv - n_q cached ones (pp512 at depth 8192
// is 512, 8704): attention over the deep prefix dominates.
void bm_attention_prefill_deep(benchmark::State &state) {
    const int64_t n_q = state.range(0), n_kv = state.range(1);
    AttnData data(n_q, n_kv);
    ThreadPool pool(bench_threads());
    for (auto _ : state) cpu::attention_prefill(data.a, pool);
    state.counters["FLOP/s"] = benchmark::Counter(
        4.0 * n_q * (n_kv - n_q / 2) * 64 * 9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// Qwen2.5-0.5B-like attention (14 query / 2 KV heads of 64, f16 KV rows):
// n_q queries that end a lane of n_rows rows (n_past = n_rows - n_q), with the
// lse of a real attention pass, for the eviction score kernel and the
// attention it rides on.
struct QwenAttn {
    static constexpr int64_t d = 64;
    int64_t n_head = 14, n_head_kv = 2;
    std::vector<std::vector<uint16_t>> k, v;
    std::vector<const void *> kp, vp;
    std::vector<float> q, o, lse, acc;
    cpu::AttnArgs a;
    QwenAttn(int64_t n_q, int64_t n_rows, int64_t heads = 14, int64_t kv_heads = 2) : n_head(heads), n_head_kv(kv_heads) {
        std::mt19937 rng(3);
        const auto f16 = [](const std::vector<float> &x) {
            std::vector<uint16_t> h(x.size());
            for (size_t i = 0; i < x.size(); ++i) h[i] = fp32_to_fp16(x[i]);
            return h;
        };
        for (int64_t g = 0; g < n_head_kv; ++g) {
            k.push_back(f16(test::random_values(rng, static_cast<size_t>(n_rows * d), 0.5f)));
            v.push_back(f16(test::random_values(rng, static_cast<size_t>(n_rows * d))));
        }
        for (int64_t g = 0; g < n_head_kv; ++g) {
            kp.push_back(k[static_cast<size_t>(g)].data());
            vp.push_back(v[static_cast<size_t>(g)].data());
        }
        q = test::random_values(rng, static_cast<size_t>(n_q * n_head * d), 0.5f);
        o.resize(q.size());
        lse.resize(static_cast<size_t>(n_head * n_q));
        acc.assign(static_cast<size_t>(n_head * n_rows), 0.0f);
        a.q = q.data();
        a.k = kp.data();
        a.v = vp.data();
        a.kv_type = cpu::RowType::f16;
        a.o = o.data();
        a.lse = lse.data();
        a.n_q = n_q;
        a.n_past = n_rows - n_q;
        a.n_head = n_head;
        a.n_head_kv = n_head_kv;
        a.head_dim = d;
        a.scale = 0.125f;
    }
    cpu::AttnScoreArgs score_args() {
        cpu::AttnScoreArgs s;
        s.q = a.q;
        s.lse = a.lse;
        s.lse_stride = a.n_q;
        s.k = a.k;
        s.kv_type = a.kv_type.k;
        s.n_q = a.n_q;
        s.n_past = a.n_past;
        s.n_head = n_head;
        s.n_head_kv = n_head_kv;
        s.head_dim = d;
        s.scale = a.scale;
        s.acc = acc.data();
        s.acc_stride = a.n_past + a.n_q;
        return s;
    }
};

// The eviction score pass (cpu::attention_scores): n_q = 32 is a SnapKV
// observation window after the prompt's last chunk, 1 an H2O decode step,
// 512 an H2O prefill chunk. items/s counts (query head, row) probabilities.
void bm_attention_scores_qwen(benchmark::State &state) {
    const int64_t n_q = state.range(0), n_rows = state.range(1);
    QwenAttn data(n_q, n_rows);
    ThreadPool pool(bench_threads());
    if (n_q == 1)
        cpu::attention_decode(data.a, pool);
    else
        cpu::attention_prefill(data.a, pool);
    const cpu::AttnScoreArgs s = data.score_args();
    for (auto _ : state) {
        cpu::attention_scores(s, pool);
        benchmark::DoNotOptimize(data.acc.data());
    }
    const double pairs = static_cast<double>(n_q) * (n_rows - n_q) + 0.5 * static_cast<double>(n_q) * (n_q + 1);
    state.SetItemsProcessed(static_cast<int64_t>(pairs * static_cast<double>(data.n_head)) * state.iterations());
}

// The attention the score pass follows, same shapes: prefill of the prompt's
// last chunk of n_q = 512 queries (or a decode step, n_q = 1) over n_rows rows.
void bm_attention_qwen(benchmark::State &state) {
    const int64_t n_q = state.range(0), n_rows = state.range(1);
    QwenAttn data(n_q, n_rows);
    ThreadPool pool(bench_threads());
    for (auto _ : state) {
        if (n_q == 1)
            cpu::attention_decode(data.a, pool);
        else
            cpu::attention_prefill(data.a, pool);
        benchmark::DoNotOptimize(data.o.data());
    }
}

// The same prefill on each path for f16 rows: the f32 tiles over widened
// rows, and the AMX tiles (where the CPU has them; else it says so). Qwen2.5
// 0.5B's heads (14 / 2), or SmolLM2-135M's (9 / 3) with smol.
void bm_attention_prefill_path(benchmark::State &state, bool amx, bool smol) {
    const int64_t n_q = state.range(0), n_rows = state.range(1);
    QwenAttn data(n_q, n_rows, smol ? 9 : 14, smol ? 3 : 2);
    ThreadPool pool(bench_threads());
    const bool was = cpu::attention_prefill_uses_amx();
    if (cpu::attention_prefill_use_amx(amx) != amx) {
        state.SkipWithError("no AMX tiles on this machine");
        return;
    }
    for (auto _ : state) {
        cpu::attention_prefill(data.a, pool);
        benchmark::DoNotOptimize(data.o.data());
    }
    cpu::attention_prefill_use_amx(was);
    state.counters["FLOP/s"] = benchmark::Counter(
        4.0 * n_q * (n_rows - n_q / 2.0) * QwenAttn::d * static_cast<double>(data.n_head * state.iterations()),
        benchmark::Counter::kIsRate);
}

// A decode step of a batch, SmolLM2-like (9 query / 3 KV heads of 64, f16
// rows): n_seq sequences, the first holding `first` rows and the others
// `rest`. `multi` = false is one attention_decode per sequence (a dispatch
// each, as Model::attention did), true one attention_decode_multi over all.
struct DecodeBatch {
    static constexpr int64_t d = 64;
    int64_t n_head, n_head_kv;
    cpu::KvRowTypes type;
    std::vector<std::vector<uint8_t>> k, v;  // [seq * n_head_kv + g], rows of type.k / type.v
    std::vector<const void *> kp, vp;
    std::vector<float> q, o;
    std::vector<cpu::AttnArgs> args;
    int64_t rows = 0;  // in all lanes of one layer's K
    DecodeBatch(int64_t n_seq, int64_t first, int64_t rest, int64_t heads = 9, int64_t kv_heads = 3,
                cpu::KvRowTypes t = cpu::RowType::f16)
        : n_head(heads), n_head_kv(kv_heads), type(t) {
        std::mt19937 rng(4);
        const auto rows_of = [](cpu::RowType rt, const std::vector<float> &x) {
            std::vector<uint8_t> h(static_cast<size_t>(cpu::row_bytes(rt, static_cast<int64_t>(x.size()))));
            cpu::f32_to_rows(rt, x.data(), h.data(), static_cast<int64_t>(x.size()));
            return h;
        };
        for (int64_t s = 0; s < n_seq; ++s) {
            const int64_t n_rows = s == 0 ? first : rest;
            rows += n_rows * n_head_kv;
            for (int64_t g = 0; g < n_head_kv; ++g) {
                k.push_back(rows_of(t.k, test::random_values(rng, static_cast<size_t>(n_rows * d), 0.5f)));
                v.push_back(rows_of(t.v, test::random_values(rng, static_cast<size_t>(n_rows * d))));
            }
        }
        for (size_t i = 0; i < k.size(); ++i) {
            kp.push_back(k[i].data());
            vp.push_back(v[i].data());
        }
        q = test::random_values(rng, static_cast<size_t>(n_seq * n_head * d), 0.5f);
        o.resize(q.size());
        for (int64_t s = 0; s < n_seq; ++s) {
            cpu::AttnArgs a;
            a.q = q.data() + s * n_head * d;
            a.k = kp.data() + s * n_head_kv;
            a.v = vp.data() + s * n_head_kv;
            a.kv_type = t;
            a.o = o.data() + s * n_head * d;
            a.n_q = 1;
            a.n_past = (s == 0 ? first : rest) - 1;
            a.n_head = n_head;
            a.n_head_kv = n_head_kv;
            a.head_dim = d;
            a.scale = 0.125f;
            args.push_back(a);
        }
    }
};

// One sequence's decode attention over rows of each KV type (range 0: rows;
// range 1: 1 = Qwen2.5-0.5B's heads, 0 = SmolLM2's); the rows fit the
// last-level cache, so this is the per-key arithmetic of each row type.
void bm_attention_decode_kv_type(benchmark::State &state, cpu::KvRowTypes t) {
    const bool qwen = state.range(1) != 0;
    DecodeBatch data(1, state.range(0), state.range(0), qwen ? 14 : 9, qwen ? 2 : 3, t);
    ThreadPool pool(bench_threads());
    for (auto _ : state) {
        cpu::attention_decode(data.args[0], pool);
        benchmark::DoNotOptimize(data.o.data());
    }
    state.counters["rows/s"] =
        benchmark::Counter(static_cast<double>(data.rows * state.iterations()), benchmark::Counter::kIsRate);
}

// SmolLM2's heads (9 query, 3 KV) or Qwen2.5-0.5B's (14 query, 2 KV).
void bm_attention_decode_batch(benchmark::State &state, bool multi, bool qwen) {
    DecodeBatch data(state.range(0), state.range(1), state.range(2), qwen ? 14 : 9, qwen ? 2 : 3);
    ThreadPool pool(bench_threads());
    const int64_t n_seq = static_cast<int64_t>(data.args.size());
    for (auto _ : state) {
        if (multi)
            cpu::attention_decode_multi(data.args.data(), n_seq, pool);
        else
            for (const cpu::AttnArgs &a : data.args) cpu::attention_decode(a, pool);
        benchmark::DoNotOptimize(data.o.data());
    }
    // K and V rows read, 2 bytes per element
    state.counters["kv_B/s"] = benchmark::Counter(2.0 * 2 * static_cast<double>(data.rows) * DecodeBatch::d *
                                                      static_cast<double>(state.iterations()),
                                                  benchmark::Counter::kIsRate);
}

// A whole decode step's attention: `layers` layers of n_seq sequences with
// `rows` rows each, run one layer after another as the model does, so the
// K/V working set (SmolLM2 at 8 x 544 rows: 100 MB) is that of a real step
// rather than one layer's few MB that stay in cache between iterations.
void bm_attention_decode_step(benchmark::State &state) {
    std::vector<std::unique_ptr<DecodeBatch>> layers;
    for (int64_t l = 0; l < state.range(2); ++l)
        layers.push_back(std::make_unique<DecodeBatch>(state.range(0), state.range(1), state.range(1)));
    ThreadPool pool(bench_threads());
    const int64_t n_seq = state.range(0);
    for (auto _ : state) {
        for (auto &l : layers) cpu::attention_decode_multi(l->args.data(), n_seq, pool);
        benchmark::DoNotOptimize(layers.back()->o.data());
    }
    state.counters["kv_B/s"] =
        benchmark::Counter(2.0 * 2 * static_cast<double>(layers[0]->rows) * DecodeBatch::d *
                               static_cast<double>(layers.size() * state.iterations()),
                           benchmark::Counter::kIsRate);
}

// Quest page scores of one KV head's group (Qwen2.5-0.5B: 7 query heads of
// 64) over range(0) logical pages of 16 rows (2048 = a 32k lane), with the
// group combined by max (raw bounds) or mass (a softmax over pages per head).
void bm_page_scores(benchmark::State &state, cpu::PageAgg agg) {
    const int64_t n_pages = state.range(0), group = 7, d = 64;
    std::mt19937 rng(5);
    const std::vector<float> mm = test::random_values(rng, static_cast<size_t>(n_pages * 2 * d), 2.0f);
    std::vector<uint16_t> summary(mm.size());
    for (int64_t p = 0; p < n_pages; ++p)
        for (int64_t c = 0; c < d; ++c) {  // min <= max per channel
            const float a = mm[static_cast<size_t>((2 * p) * d + c)],
                        b = mm[static_cast<size_t>((2 * p + 1) * d + c)];
            summary[static_cast<size_t>((2 * p) * d + c)] = fp32_to_fp16(std::min(a, b));
            summary[static_cast<size_t>((2 * p + 1) * d + c)] = fp32_to_fp16(std::max(a, b));
        }
    const std::vector<float> q = test::random_values(rng, static_cast<size_t>(group * d));
    std::vector<float> out(static_cast<size_t>(n_pages));
    cpu::PageScoreArgs a;
    a.q = q.data();
    a.group = group;
    a.d = d;
    a.summary = summary.data();
    a.n_pages = n_pages;
    a.agg = agg;
    a.scale = 0.125f;
    a.out = out.data();
    for (auto _ : state) {
        cpu::quest_page_scores(a);
        benchmark::DoNotOptimize(out.data());
    }
    state.counters["pages/s"] =
        benchmark::Counter(static_cast<double>(n_pages * state.iterations()), benchmark::Counter::kIsRate);
}

// Exact page scores (refine=, score=exact) of one KV head's 7-head group
// over range(0) f16 key rows of a lane of 32,768, listed as every 4th run of
// 16-row pages (what refine's candidates look like: scattered pages), mass.
void bm_page_scores_exact(benchmark::State &state) {
    const int64_t n_list_rows = state.range(0), n_rows = 32768, group = 7, d = 64;
    std::mt19937 rng(6);
    const std::vector<float> kf = test::random_values(rng, static_cast<size_t>(n_rows * d), 2.0f);
    std::vector<uint16_t> keys(kf.size());
    for (size_t i = 0; i < kf.size(); ++i) keys[i] = fp32_to_fp16(kf[i]);
    const std::vector<float> q = test::random_values(rng, static_cast<size_t>(group * d));
    std::vector<int32_t> pages;
    const int64_t stride = std::max<int64_t>(1, n_rows / n_list_rows);
    for (int64_t p = 0; p < n_rows / 16 && static_cast<int64_t>(pages.size()) * 16 < n_list_rows; p += stride)
        pages.push_back(static_cast<int32_t>(p));
    std::vector<float> out(pages.size());
    cpu::PageExactArgs a;
    a.q = q.data();
    a.group = group;
    a.d = d;
    a.type = cpu::RowType::f16;
    a.keys = keys.data();
    a.n_rows = n_rows;
    a.agg = cpu::PageAgg::mass;
    a.scale = 0.125f;
    a.pages = pages.data();
    a.n_list = static_cast<int64_t>(pages.size());
    a.out = out.data();
    for (auto _ : state) {
        cpu::page_scores_exact(a);
        benchmark::DoNotOptimize(out.data());
    }
    state.counters["rows/s"] =
        benchmark::Counter(static_cast<double>(static_cast<int64_t>(pages.size()) * 16 * state.iterations()),
                           benchmark::Counter::kIsRate);
}

}  // namespace

// Decode steps of 1..32 tokens on the shapes of the two long-context files
// and the default model, repacked as loaded.
BENCHMARK_CAPTURE(bm_matmul_x16, q4_1_576x1536, GgmlType::Q4_1, 576, 1536)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->Arg(32)->Arg(64)->Arg(512);
BENCHMARK_CAPTURE(bm_matmul, q4_1_576x1536_prefill, GgmlType::Q4_1, 576, 1536)->Arg(512);
BENCHMARK_CAPTURE(bm_matmul_x16, q5_0_4864x896, GgmlType::Q5_0, 4864, 896)->Arg(1)->Arg(8)->Arg(16)->Arg(64);
BENCHMARK_CAPTURE(bm_matmul_x16, q6_k_896x4864, GgmlType::Q6_K, 896, 4864)->Arg(1)->Arg(8)->Arg(16)->Arg(64);
BENCHMARK_CAPTURE(bm_matmul_x16, q4_k_896x4864, GgmlType::Q4_K, 896, 4864)->Arg(1)->Arg(8)->Arg(16)->Arg(64);
BENCHMARK_CAPTURE(bm_matmul_x16, q8_0_896x896, GgmlType::Q8_0, 896, 896)->Arg(1)->Arg(8)->Arg(16)->Arg(64);
BENCHMARK_CAPTURE(bm_matmul, q5_0_4864x896, GgmlType::Q5_0, 4864, 896)->Arg(1)->Arg(8)->Arg(16);
BENCHMARK_CAPTURE(bm_matmul, q6_k_896x4864, GgmlType::Q6_K, 896, 4864)->Arg(1)->Arg(8)->Arg(16);
BENCHMARK_CAPTURE(bm_matmul, q4_k_896x4864, GgmlType::Q4_K, 896, 4864)->Arg(1)->Arg(8)->Arg(16);
// Larger than the last-level cache: decode streams these from DRAM.
BENCHMARK_CAPTURE(bm_matmul, q5_0_65536x896, GgmlType::Q5_0, 65536, 896)->Arg(1)->Arg(8);
BENCHMARK_CAPTURE(bm_matmul_x16, q5_0_65536x896, GgmlType::Q5_0, 65536, 896)->Arg(1)->Arg(8);
BENCHMARK_CAPTURE(bm_matmul, q6_k_16384x4864, GgmlType::Q6_K, 16384, 4864)->Arg(1)->Arg(8);
BENCHMARK_CAPTURE(bm_matmul_x16, q6_k_16384x4864, GgmlType::Q6_K, 16384, 4864)->Arg(1)->Arg(8);
BENCHMARK_CAPTURE(bm_matmul, q4_1_576x576, GgmlType::Q4_1, 576, 576)->Arg(1)->Arg(4)->Arg(64)->Arg(256);
BENCHMARK_CAPTURE(bm_matmul, q4_1_1536x576, GgmlType::Q4_1, 1536, 576)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(bm_matmul, q4_1_576x1536, GgmlType::Q4_1, 576, 1536)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(bm_matmul, q8_0_49152x576, GgmlType::Q8_0, 49152, 576)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(bm_matmul, f16_576x576, GgmlType::F16, 576, 576)->Arg(1)->Arg(64);
BENCHMARK_CAPTURE(bm_matmul, q4_k_576x768, GgmlType::Q4_K, 576, 768)->Arg(1)->Arg(64);
// The Q4_K_M file's types: Q5_0 for q/k/o/gate/up (576-wide, and 1536-wide
// where Q4_K does not divide), Q4_K / Q6_K for the 1536-wide down projection.
BENCHMARK_CAPTURE(bm_matmul, q5_0_576x576, GgmlType::Q5_0, 576, 576)->Arg(1)->Arg(8)->Arg(64);
BENCHMARK_CAPTURE(bm_matmul, q5_0_1536x576, GgmlType::Q5_0, 1536, 576)->Arg(1)->Arg(8)->Arg(64);
BENCHMARK_CAPTURE(bm_matmul, q5_0_576x1536, GgmlType::Q5_0, 576, 1536)->Arg(1)->Arg(8)->Arg(64);
BENCHMARK_CAPTURE(bm_matmul, q4_k_576x1536, GgmlType::Q4_K, 576, 1536)->Arg(1)->Arg(8)->Arg(64);
BENCHMARK_CAPTURE(bm_matmul, q6_k_576x1536, GgmlType::Q6_K, 576, 1536)->Arg(1)->Arg(8)->Arg(64);
// The same shape in the types the Q4_K_M file is compared against.
BENCHMARK_CAPTURE(bm_matmul, q4_0_576x1536, GgmlType::Q4_0, 576, 1536)->Arg(1)->Arg(8)->Arg(64);
BENCHMARK_CAPTURE(bm_matmul, q8_0_576x1536, GgmlType::Q8_0, 576, 1536)->Arg(1)->Arg(8)->Arg(64);
// Llama-3.2-1B shapes in Q4_0, decode (weights read in place).
BENCHMARK_CAPTURE(bm_matmul, q4_0_2048x2048, GgmlType::Q4_0, 2048, 2048)->Arg(1)->Arg(4);
BENCHMARK_CAPTURE(bm_matmul, q4_0_8192x2048, GgmlType::Q4_0, 8192, 2048)->Arg(1)->Arg(4);
// Llama-3.2-1B shapes on the float path (F16 / BF16 weights): decode, batched decode, prefill.
BENCHMARK_CAPTURE(bm_matmul, f16_2048x2048, GgmlType::F16, 2048, 2048)->Arg(1)->Arg(8)->Arg(64)->Arg(512);
BENCHMARK_CAPTURE(bm_matmul, f16_8192x2048, GgmlType::F16, 8192, 2048)->Arg(1)->Arg(8)->Arg(64)->Arg(512);
BENCHMARK_CAPTURE(bm_matmul, f16_2048x8192, GgmlType::F16, 2048, 8192)->Arg(1)->Arg(8)->Arg(64)->Arg(512);
BENCHMARK_CAPTURE(bm_matmul, bf16_2048x2048, GgmlType::BF16, 2048, 2048)->Arg(1)->Arg(8)->Arg(64)->Arg(512);
BENCHMARK_CAPTURE(bm_matmul, f32_2048x2048, GgmlType::F32, 2048, 2048)->Arg(1)->Arg(64)->Arg(512);
BENCHMARK(bm_attention_prefill)->Arg(128)->Arg(512)->Arg(2048);
BENCHMARK(bm_attention_decode)->Arg(128)->Arg(1024)->Arg(8192);
BENCHMARK(bm_attention_prefill_deep)->Args({512, 8704})->Args({64, 8256})->Args({7, 4103});
BENCHMARK(bm_attention_scores_qwen)
    ->Args({32, 4096})->Args({32, 16384})->Args({1, 4096})->Args({1, 16384})->Args({512, 4096})->Args({512, 16384})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_attention_qwen)
    ->Args({512, 4096})->Args({512, 16384})->Args({1, 4096})->Args({1, 16384})->Unit(benchmark::kMicrosecond);

BENCHMARK_CAPTURE(bm_attention_prefill_path, qwen_f32_tiles, false, false)
    ->Args({512, 512})->Args({512, 4096})->Args({512, 16384})->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_attention_prefill_path, qwen_amx_tiles, true, false)
    ->Args({512, 512})->Args({512, 4096})->Args({512, 16384})->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_attention_prefill_path, smol_f32_tiles, false, true)
    ->Args({512, 512})->Args({512, 4096})->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bm_attention_prefill_path, smol_amx_tiles, true, true)
    ->Args({512, 512})->Args({512, 4096})->Unit(benchmark::kMillisecond);

// Args: sequences, rows of the first, rows of each other one.
BENCHMARK_CAPTURE(bm_attention_decode_batch, loop, false, false)
    ->Args({16, 512, 512})->Args({16, 4096, 64})->Args({8, 128, 128})->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(bm_attention_decode_batch, multi, true, false)
    ->Args({16, 512, 512})->Args({16, 4096, 64})->Args({8, 128, 128})->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(bm_attention_decode_batch, multi_qwen, true, true)
    ->Args({1, 544, 544})->Args({8, 544, 544})->Args({16, 544, 544})->Unit(benchmark::kMicrosecond);
// Larger than the last-level cache: the K/V rows come from DRAM.
BENCHMARK_CAPTURE(bm_attention_decode_batch, multi_dram, true, false)->Args({16, 4096, 4096})->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(bm_attention_decode_kv_type, f16, cpu::RowType::f16)
    ->Args({16384, 1})
    ->Args({8192, 0})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(bm_attention_decode_kv_type, q8_0, cpu::RowType::q8_0)
    ->Args({16384, 1})
    ->Args({8192, 0})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(bm_attention_decode_kv_type, q4_0, cpu::RowType::q4_0)
    ->Args({16384, 1})
    ->Args({8192, 0})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(bm_attention_decode_kv_type, q8_0_q4_0,
                  cpu::KvRowTypes(cpu::RowType::q8_0, cpu::RowType::q4_0))
    ->Args({16384, 1})
    ->Args({8192, 0})
    ->Unit(benchmark::kMicrosecond);
// SmolLM2's 30 layers, 1 and 8 sequences at depth 544 (the -npl bench's mean).
BENCHMARK(bm_attention_decode_step)->Args({1, 544, 30})->Args({8, 544, 30})->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(bm_page_scores, max, cpu::PageAgg::max)->Arg(512)->Arg(2048)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(bm_page_scores, mass, cpu::PageAgg::mass)
    ->Arg(512)
    ->Arg(2048)
    ->Unit(benchmark::kMicrosecond);
// refine=2 and 4 at budget 2048, and score=exact over a whole 32k lane.
BENCHMARK(bm_page_scores_exact)->Arg(4096)->Arg(8192)->Arg(32768)->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
