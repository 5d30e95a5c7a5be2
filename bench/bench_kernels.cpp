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

#include <random>
#include <vector>

#include "kernels_test_util.h"
#include "sieve/kernels/cpu/ops.h"

using namespace sieve;

namespace {

int bench_threads() { return 2; }

void bm_matmul(benchmark::State &state, GgmlType type, int64_t n_rows, int64_t n_cols) {
    const int64_t n_tokens = state.range(0);
    std::mt19937 rng(1);
    const auto w = test::random_weights(rng, type, n_rows, n_cols);
    const auto x = test::random_values(rng, static_cast<size_t>(n_tokens * n_cols));
    std::vector<float> y(static_cast<size_t>(n_tokens * n_rows));
    ThreadPool pool(bench_threads());
    for (auto _ : state) {
        cpu::matmul(w.view, x.data(), n_tokens, y.data(), pool);
        benchmark::DoNotOptimize(y.data());
    }
    const double iters = static_cast<double>(state.iterations());
    state.counters["FLOP/s"] = benchmark::Counter(2.0 * n_rows * n_cols * n_tokens * iters, benchmark::Counter::kIsRate);
    state.counters["weight_B/s"] =
        benchmark::Counter(static_cast<double>(w.bytes.size()) * iters, benchmark::Counter::kIsRate);
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

}  // namespace

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

BENCHMARK_MAIN();
