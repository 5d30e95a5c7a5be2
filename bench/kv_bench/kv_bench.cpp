// kv_bench: the measurements of docs/kv-memory.md.
//
//   kv_bench attn  [reps] [threads]   decode attention, contiguous lanes vs paged blocks 16/64/256
//   kv_bench map   [reps] [threads]   mapping cost per decode step and per prefill (batch 16, 4k)
//   kv_bench trace [seed]             pool waste for 1,000 log-normal sequence lengths
//
// threads defaults to 1: on a small shared machine a second pool thread that
// loses its core stalls every kernel call for a scheduler tick, which hides
// the memory-layout effect being measured.
//
// Timings: each repeat measures every variant once, interleaved, so drift on a
// shared machine hits all of them alike; we print the median and min..max over
// repeats and the ratio of medians.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "sieve/core/thread_pool.h"
#include "sieve/core/timer.h"
#include "sieve/kernels/cpu/attention_paged.h"
#include "sieve/kernels/cpu/ops.h"
#include "sieve/kv/paged_kv.h"
#include "sieve/kv/vattention_kv.h"

namespace sieve {
namespace {

struct HeadShape {
    const char *name;
    int64_t n_head, n_head_kv, head_dim, n_layer;
};
constexpr HeadShape k_smollm2{"SmolLM2-135M", 9, 3, 64, 30};
constexpr HeadShape k_llama1b{"Llama-3.2-1B", 32, 8, 64, 16};

struct Spread {
    double median, lo, hi;
};
Spread spread(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    const double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return {med, v.front(), v.back()};
}

// Cheap deterministic values in [-1, 1) (filling GiBs with <random> is slow).
void fill_values(float *p, int64_t n, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = static_cast<float>(static_cast<int64_t>(x >> 40) - (1 << 23)) / static_cast<float>(1 << 23);
    }
}

VAttentionKvOptions lane_opts(const HeadShape &hs, int n_seq, int64_t n_layer, int64_t ctx, int64_t page_bytes) {
    VAttentionKvOptions o;
    o.shape = KvShape{n_seq, n_layer, hs.n_head_kv, hs.head_dim};
    o.max_ctx = ctx + 1024;
    o.pool.page_bytes = page_bytes;
    o.pool.budget_bytes = n_seq * n_layer * hs.n_head_kv * 2 *
                          ((o.max_ctx * hs.head_dim * 4 + page_bytes - 1) / page_bytes + 1) * page_bytes;
    return o;
}

// ---------------------------------------------------------------------------
// attn: one layer's decode attention for a batch of sequences
// ---------------------------------------------------------------------------

// One decode step of one layer: every sequence attends over its ctx keys.
double time_contiguous(VAttentionKv &kv, const HeadShape &hs, int batch, int64_t ctx, const float *q, float *o,
                       ThreadPool &pool, int iters) {
    std::vector<const void *> kp(static_cast<size_t>(hs.n_head_kv)), vp(kp.size());
    cpu::AttnArgs a;
    a.n_q = 1, a.n_past = ctx - 1, a.n_head = hs.n_head, a.n_head_kv = hs.n_head_kv;
    a.head_dim = hs.head_dim, a.scale = 0.125f, a.k = kp.data(), a.v = vp.data();
    std::vector<double> t;
    for (int it = 0; it < iters; ++it) {
        const int64_t t0 = time_us();
        for (int s = 0; s < batch; ++s) {
            for (int64_t g = 0; g < hs.n_head_kv; ++g) {
                kp[static_cast<size_t>(g)] = kv.k_lane(s, 0, g);
                vp[static_cast<size_t>(g)] = kv.v_lane(s, 0, g);
            }
            a.q = q + s * hs.n_head * hs.head_dim;
            a.o = o + s * hs.n_head * hs.head_dim;
            cpu::attention_decode(a, pool);
        }
        t.push_back(static_cast<double>(time_us() - t0));
    }
    return spread(t).median;
}

double time_paged(PagedKv &kv, const HeadShape &hs, int batch, int64_t ctx, const float *q, float *o,
                  ThreadPool &pool, int iters) {
    cpu::PagedAttnArgs a;
    a.k_blocks = kv.k_blocks(0), a.v_blocks = kv.v_blocks(0), a.n_kv = ctx, a.block_size = kv.block_size();
    a.n_head = hs.n_head, a.n_head_kv = hs.n_head_kv, a.head_dim = hs.head_dim, a.scale = 0.125f;
    std::vector<double> t;
    for (int it = 0; it < iters; ++it) {
        const int64_t t0 = time_us();
        for (int s = 0; s < batch; ++s) {
            a.block_table = kv.block_table(s);
            a.q = q + s * hs.n_head * hs.head_dim;
            a.o = o + s * hs.n_head * hs.head_dim;
            cpu::attention_decode_paged(a, pool);
        }
        t.push_back(static_cast<double>(time_us() - t0));
    }
    return spread(t).median;
}

int run_attn(int reps, int n_threads) {
    ThreadPool pool(n_threads);
    std::printf("# decode attention, one layer, %d threads, %d repeats; time per step (all sequences) in us\n",
                pool.n_threads(), reps);
    std::printf("shape,batch,ctx,contig_us,contig_lo,contig_hi,bs16_us,bs16_lo,bs16_hi,bs64_us,bs64_lo,bs64_hi,"
                "bs256_us,bs256_lo,bs256_hi,ratio16,ratio64,ratio256,contig_GBps\n");
    for (const HeadShape &hs : {k_smollm2, k_llama1b}) {
        for (int batch : {1, 8, 16}) {
            for (int64_t ctx : {1024, 4096, 16384}) {
                auto kr = VAttentionKv::create(lane_opts(hs, batch, 1, ctx, 64 << 10));
                if (!kr.ok()) return std::fprintf(stderr, "%s\n", kr.status().message().c_str()), 1;
                VAttentionKv &lanes = **kr;
                std::vector<std::unique_ptr<PagedKv>> paged;
                for (int64_t bs : {16, 64, 256}) {
                    PagedKvOptions po;
                    po.shape = KvShape{batch, 1, hs.n_head_kv, hs.head_dim};
                    po.block_size = bs;
                    po.max_ctx = ctx;
                    po.budget_bytes = batch * ((ctx + bs - 1) / bs) * 2 * hs.n_head_kv * bs * hs.head_dim * 4;
                    auto pr = PagedKv::create(po);
                    if (!pr.ok()) return std::fprintf(stderr, "%s\n", pr.status().message().c_str()), 1;
                    paged.push_back(std::move(pr.value()));
                }
                // Grow all sequences round-robin, a block at a time, as decode
                // would: block tables interleave across sequences.
                for (int64_t n = 256; n <= ctx; n = std::min(ctx, n + 256)) {
                    for (int s = 0; s < batch; ++s) {
                        if (!lanes.reserve(s, n).ok()) return 1;
                        lanes.set_n_pos(s, n);
                        for (auto &p : paged)
                            if (!p->reserve(s, n).ok()) return 1;
                    }
                    if (n == ctx) break;
                }
                for (int s = 0; s < batch; ++s) {
                    for (int64_t g = 0; g < hs.n_head_kv; ++g) {
                        float *k = lanes.k_lane(s, 0, g), *v = lanes.v_lane(s, 0, g);
                        fill_values(k, ctx * hs.head_dim, static_cast<uint64_t>(s * 100 + g));
                        fill_values(v, ctx * hs.head_dim, static_cast<uint64_t>(s * 100 + g + 50));
                        for (auto &p : paged) {
                            for (int64_t t = 0; t < ctx; ++t) {
                                std::memcpy(p->k_row(s, 0, g, t), k + t * hs.head_dim, hs.head_dim * 4);
                                std::memcpy(p->v_row(s, 0, g, t), v + t * hs.head_dim, hs.head_dim * 4);
                            }
                        }
                    }
                }
                std::vector<float> q(static_cast<size_t>(batch * hs.n_head * hs.head_dim)), o(q.size());
                fill_values(q.data(), static_cast<int64_t>(q.size()), 7);
                const int iters = ctx * batch >= 65536 ? 3 : 10;
                std::vector<double> tc, tp[3];
                time_contiguous(lanes, hs, batch, ctx, q.data(), o.data(), pool, 1);  // warm caches and pool
                for (int r = 0; r < reps; ++r) {
                    tc.push_back(time_contiguous(lanes, hs, batch, ctx, q.data(), o.data(), pool, iters));
                    for (int i = 0; i < 3; ++i)
                        tp[i].push_back(time_paged(*paged[static_cast<size_t>(i)], hs, batch, ctx, q.data(),
                                                   o.data(), pool, iters));
                }
                const Spread c = spread(tc);
                Spread p[3];
                for (int i = 0; i < 3; ++i) p[i] = spread(tp[i]);
                const double bytes = 2.0 * batch * ctx * hs.n_head_kv * hs.head_dim * 4;
                std::printf("%s,%d,%lld,%.0f,%.0f,%.0f", hs.name, batch, static_cast<long long>(ctx), c.median,
                            c.lo, c.hi);
                for (const Spread &x : p) std::printf(",%.0f,%.0f,%.0f", x.median, x.lo, x.hi);
                for (const Spread &x : p) std::printf(",%.3f", x.median / c.median);
                std::printf(",%.1f\n", bytes / c.median / 1e3);
                std::fflush(stdout);
            }
        }
    }
    return 0;
}

// ---------------------------------------------------------------------------
// map: mapping cost in decode steps and prefill, SmolLM2 KV shape, batch 16, 4k
// ---------------------------------------------------------------------------

int run_map(int reps, int n_threads) {
    ThreadPool pool(n_threads);
    const HeadShape hs = k_smollm2;
    const int batch = 16;
    const int64_t ctx = 4096, n_decode = 1024;
    std::printf("# mapping cost, %s KV (%lld layers x %lld KV heads x %lld), batch %d, context %lld, 64 KiB pages, "
                "%d threads, %d repeats\n",
                hs.name, static_cast<long long>(hs.n_layer), static_cast<long long>(hs.n_head_kv),
                static_cast<long long>(hs.head_dim), batch, static_cast<long long>(ctx), pool.n_threads(), reps);
    std::vector<double> pre_fresh, pre_reuse, dec_sync, dec_ahead, dec_ahead_bg, dec_worst, step_attn, pre_attn;
    int64_t calls_sync = 0, calls_ahead_in_reserve = 0;
    for (int r = 0; r < reps; ++r) {
        auto kr = VAttentionKv::create(lane_opts(hs, batch, hs.n_layer, ctx + n_decode, 64 << 10));
        if (!kr.ok()) return std::fprintf(stderr, "%s\n", kr.status().message().c_str()), 1;
        VAttentionKv &kv = **kr;
        // Prefill: map 4k rows for every lane of 16 sequences; first on a fresh
        // pool (pages backed on first use), then on pages cached by clear().
        for (int pass = 0; pass < 2; ++pass) {
            const int64_t t0 = time_us();
            for (int s = 0; s < batch; ++s)
                if (!kv.reserve(s, ctx).ok()) return 1;
            (pass ? pre_reuse : pre_fresh).push_back(static_cast<double>(time_us() - t0) / batch);
            if (pass == 0)
                for (int s = 0; s < batch; ++s) kv.clear(s);
        }
        for (int s = 0; s < batch; ++s) kv.set_n_pos(s, ctx);
        // Decode, mapping inside reserve() (headroom only): n_decode steps.
        for (int mode = 0; mode < 2; ++mode) {
            if (mode == 1) {
                for (int s = 0; s < batch; ++s) kv.set_n_pos(s, ctx);
                kv.trim();
                for (int s = 0; s < batch; ++s)  // what the engine does after a prefill step
                    if (!kv.map_ahead(s).ok()) return 1;
            }
            kv.reset_stats();
            int64_t in_reserve = 0, bg = 0;
            double worst = 0;
            for (int64_t i = 1; i <= n_decode; ++i) {
                const int64_t t0 = time_us();
                for (int s = 0; s < batch; ++s)
                    if (!kv.reserve(s, ctx + i).ok()) return 1;
                const int64_t dt = time_us() - t0;
                in_reserve += dt;
                worst = std::max(worst, static_cast<double>(dt));
                for (int s = 0; s < batch; ++s) kv.set_n_pos(s, ctx + i);
                if (mode == 1) {
                    const int64_t t1 = time_us();
                    for (int s = 0; s < batch; ++s)
                        if (!kv.map_ahead(s).ok()) return 1;
                    bg += time_us() - t1;
                }
            }
            if (mode == 0) {
                dec_sync.push_back(static_cast<double>(in_reserve) / n_decode);
                dec_worst.push_back(worst);
                calls_sync += kv.stats().n_map_calls_reserve;
            } else {
                dec_ahead.push_back(static_cast<double>(in_reserve) / n_decode);
                dec_ahead_bg.push_back(static_cast<double>(bg) / n_decode);
                calls_ahead_in_reserve += kv.stats().n_map_calls_reserve;
            }
        }
        // Step time: decode attention of one layer for the batch, times n_layer.
        std::vector<const void *> kp(static_cast<size_t>(hs.n_head_kv)), vp(kp.size());
        std::vector<float> q(static_cast<size_t>(hs.n_head * hs.head_dim)), o(q.size());
        fill_values(q.data(), static_cast<int64_t>(q.size()), 3);
        cpu::AttnArgs a;
        a.n_q = 1, a.n_past = ctx - 1, a.n_head = hs.n_head, a.n_head_kv = hs.n_head_kv;
        a.head_dim = hs.head_dim, a.scale = 0.125f, a.k = kp.data(), a.v = vp.data(), a.q = q.data(), a.o = o.data();
        for (int s = 0; s < batch; ++s)
            for (int64_t g = 0; g < hs.n_head_kv; ++g) {
                fill_values(kv.k_lane(s, 0, g), ctx * hs.head_dim, static_cast<uint64_t>(s + g));
                fill_values(kv.v_lane(s, 0, g), ctx * hs.head_dim, static_cast<uint64_t>(s + g + 9));
            }
        std::vector<double> ts;
        for (int it = 0; it < 5; ++it) {
            const int64_t t0 = time_us();
            for (int s = 0; s < batch; ++s) {
                for (int64_t g = 0; g < hs.n_head_kv; ++g) {
                    kp[static_cast<size_t>(g)] = kv.k_lane(s, 0, g);
                    vp[static_cast<size_t>(g)] = kv.v_lane(s, 0, g);
                }
                cpu::attention_decode(a, pool);
            }
            ts.push_back(static_cast<double>(time_us() - t0));
        }
        step_attn.push_back(spread(ts).median * static_cast<double>(hs.n_layer));
        // Prefill attention of one 4k sequence, one layer, times n_layer.
        std::vector<float> qp(static_cast<size_t>(ctx * hs.n_head * hs.head_dim)), op(qp.size());
        fill_values(qp.data(), static_cast<int64_t>(qp.size()), 5);
        for (int64_t g = 0; g < hs.n_head_kv; ++g) {
            kp[static_cast<size_t>(g)] = kv.k_lane(0, 0, g);
            vp[static_cast<size_t>(g)] = kv.v_lane(0, 0, g);
        }
        a.n_q = ctx, a.n_past = 0, a.q = qp.data(), a.o = op.data();
        const int64_t t0 = time_us();
        cpu::attention_prefill(a, pool);
        pre_attn.push_back(static_cast<double>(time_us() - t0) * static_cast<double>(hs.n_layer));
    }
    auto show = [](const char *what, const std::vector<double> &v) {
        const Spread s = spread(v);
        std::printf("%-58s median %10.1f us  (min %.1f, max %.1f)\n", what, s.median, s.lo, s.hi);
        return s.median;
    };
    const double step = show("decode step attention, all layers (lower bound of a step)", step_attn);
    const double sync = show("mapping in reserve() per step, headroom only", dec_sync);
    const double worst = show("  worst single step (a page boundary), headroom only", dec_worst);
    const double ahead = show("mapping in reserve() per step, with map_ahead", dec_ahead);
    const double bg = show("map_ahead per step (between steps)", dec_ahead_bg);
    const double pattn = show("prefill attention per 4k sequence, all layers", pre_attn);
    const double pf = show("prefill mapping per 4k sequence, fresh pool", pre_fresh);
    const double pr = show("prefill mapping per 4k sequence, cached pages", pre_reuse);
    std::printf("mmap calls inside reserve(): headroom only %lld, with map_ahead %lld (over %d x %lld steps)\n",
                static_cast<long long>(calls_sync), static_cast<long long>(calls_ahead_in_reserve), reps,
                static_cast<long long>(n_decode));
    std::printf("decode: reserve %.4f%% of step (headroom only; worst step %.2f%%), %.4f%% with map_ahead "
                "(+%.4f%% between steps)\n",
                100 * sync / step, 100 * worst / step, 100 * ahead / step, 100 * bg / step);
    std::printf("prefill: mapping %.3f%% (fresh) / %.4f%% (cached) of prefill attention\n", 100 * pf / pattn,
                100 * pr / pattn);
    return 0;
}

// ---------------------------------------------------------------------------
// trace: internal fragmentation for 1,000 log-normal lengths
// ---------------------------------------------------------------------------

int run_trace(uint32_t seed) {
    const HeadShape hs = k_smollm2;
    std::mt19937 rng(seed);
    std::lognormal_distribution<double> len_dist(std::log(700.0), 1.1);
    std::vector<int64_t> lens;
    for (int i = 0; i < 1000; ++i)
        lens.push_back(std::clamp<int64_t>(static_cast<int64_t>(len_dist(rng)), 8, 32768));
    std::vector<int64_t> sorted = lens;
    std::sort(sorted.begin(), sorted.end());
    const int64_t lanes = hs.n_layer * hs.n_head_kv * 2, row = hs.head_dim * 4;
    int64_t used = 0;
    for (int64_t n : lens) used += n * row * lanes;
    std::printf("# %s KV (%lld lanes of %lld-byte rows per sequence); 1,000 lengths, log-normal(median 700, "
                "sigma 1.1), seed %u: min %lld, median %lld, p90 %lld, p99 %lld, max %lld; KV in use %.1f MiB\n",
                hs.name, static_cast<long long>(lanes), static_cast<long long>(row), seed,
                static_cast<long long>(sorted.front()), static_cast<long long>(sorted[500]),
                static_cast<long long>(sorted[900]), static_cast<long long>(sorted[990]),
                static_cast<long long>(sorted.back()), static_cast<double>(used) / (1 << 20));
    std::printf("layout,unit,allocated_MiB,wasted_MiB,wasted_pct,wasted_per_seq_KiB\n");
    // vAttention lanes: each lane rounds up to whole pages (+ headroom pages when mapped ahead).
    for (int64_t headroom : {0, 1}) {
        for (int64_t pb : {int64_t{4} << 10, int64_t{64} << 10, int64_t{2} << 20}) {
            int64_t alloc = 0;
            for (int64_t n : lens) alloc += ((n * row + pb - 1) / pb + headroom) * pb * lanes;
            std::printf("lanes%s,%lld KiB page,%.1f,%.1f,%.1f,%.1f\n", headroom ? "+headroom" : "",
                        static_cast<long long>(pb >> 10), static_cast<double>(alloc) / (1 << 20),
                        static_cast<double>(alloc - used) / (1 << 20), 100.0 * (alloc - used) / alloc,
                        static_cast<double>(alloc - used) / 1000 / 1024);
        }
    }
    // Paged: one block = block_size tokens of every head of a layer, K and V.
    for (int64_t bs : {16, 256}) {
        int64_t alloc = 0;
        for (int64_t n : lens) alloc += (n + bs - 1) / bs * bs * row * lanes;
        std::printf("paged,%lld-token block,%.1f,%.1f,%.1f,%.1f\n", static_cast<long long>(bs),
                    static_cast<double>(alloc) / (1 << 20), static_cast<double>(alloc - used) / (1 << 20),
                    100.0 * (alloc - used) / alloc, static_cast<double>(alloc - used) / 1000 / 1024);
    }
    // Cross-check the lane arithmetic with the store itself on the first 100 sequences (64 KiB, no headroom).
    VAttentionKvOptions o = lane_opts(hs, 1, hs.n_layer, 32768, 64 << 10);
    o.headroom_pages = 0;
    o.pool.budget_bytes = lanes * (32768 * row / (64 << 10) + 1) * (64 << 10);
    auto kr = VAttentionKv::create(o);
    if (!kr.ok()) return std::fprintf(stderr, "%s\n", kr.status().message().c_str()), 1;
    int64_t measured = 0, predicted = 0;
    for (int i = 0; i < 100; ++i) {
        if (!(*kr)->reserve(0, lens[static_cast<size_t>(i)]).ok()) return 1;
        measured += (*kr)->seq_mapped_bytes(0);
        predicted += (lens[static_cast<size_t>(i)] * row + (64 << 10) - 1) / (64 << 10) * (64 << 10) * lanes;
        (*kr)->release(0);
    }
    std::printf("# check: store mapped %lld bytes for the first 100 sequences, arithmetic says %lld\n",
                static_cast<long long>(measured), static_cast<long long>(predicted));
    return measured == predicted ? 0 : 1;
}

}  // namespace
}  // namespace sieve

int main(int argc, char **argv) {
    const std::string cmd = argc > 1 ? argv[1] : "";
    const int arg = argc > 2 ? std::atoi(argv[2]) : 0;
    const int threads = argc > 3 ? std::max(1, std::atoi(argv[3])) : 1;
    if (cmd == "attn") return sieve::run_attn(arg > 0 ? arg : 5, threads);
    if (cmd == "map") return sieve::run_map(arg > 0 ? arg : 5, threads);
    if (cmd == "trace") return sieve::run_trace(arg > 0 ? static_cast<uint32_t>(arg) : 1);
    std::fprintf(stderr, "usage: kv_bench attn [reps] [threads] | map [reps] [threads] | trace [seed]\n");
    return 2;
}
