// Quantized KV rows (q8_0 / q4_0, kernels/cpu/row_type.h): the row
// conversions against the GGUF reference (de)quantizers, a model whose KV is
// quantized against the same model with f32 KV, the stores moving 68- and
// 36-byte rows (which straddle pages) through compaction exactly, pages
// sized to hold whole quantized rows so the prefix cache works on them, and
// clear errors where a head size cannot be quantized.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine_test_util.h"
#include "gguf_test_util.h"
#include "kernels_test_util.h"
#include "sieve/core/thread_pool.h"
#include "sieve/gguf/gguf.h"
#include "sieve/kernels/cpu/kv_rows.h"
#include "sieve/kv/contiguous_kv.h"
#include "sieve/kv/vattention_kv.h"
#include "sieve/model/model.h"
#include "sieve/quant/dequant.h"
#include "sieve/tokenizer/tokenizer.h"

namespace sieve {
namespace {

GgmlType ggml_of(cpu::RowType t) { return t == cpu::RowType::q8_0 ? GgmlType::Q8_0 : GgmlType::Q4_0; }

// A store's shape of 2 layers x 2 KV heads.
KvShape small_shape(int n_seq, int64_t head_dim, cpu::KvRowTypes type) {
    KvShape s;
    s.n_seq = n_seq;
    s.n_layer = 2;
    s.n_head_kv = 2;
    s.head_dim = head_dim;
    s.type = type;
    return s;
}

// A lane store of max_ctx rows over pool pages of 4 KiB (rows straddle them).
Result<std::unique_ptr<VAttentionKv>> lanes_4k(const KvShape &shape, int64_t max_ctx, int64_t budget) {
    VAttentionKvOptions o;
    o.shape = shape;
    o.max_ctx = max_ctx;
    o.pool.page_bytes = 4096;
    o.pool.budget_bytes = budget;
    return VAttentionKv::create(o);
}

TEST(KvQuant, RowBytesAndNames) {
    EXPECT_EQ(68, cpu::row_bytes(cpu::RowType::q8_0, 64));
    EXPECT_EQ(36, cpu::row_bytes(cpu::RowType::q4_0, 64));
    EXPECT_EQ(272, cpu::row_bytes(cpu::RowType::q8_0, 256));
    EXPECT_EQ(128, cpu::row_bytes(cpu::RowType::f16, 64));
    for (cpu::RowType t : cpu::k_row_types) {
        cpu::RowType back = cpu::RowType::f32;
        ASSERT_TRUE(cpu::row_type_parse(cpu::row_type_name(t), &back));
        EXPECT_EQ(t, back);
    }
    cpu::RowType t = cpu::RowType::f16;
    EXPECT_FALSE(cpu::row_type_parse("q4_1", &t));
    EXPECT_FALSE(cpu::row_type_parse("Q8_0", &t));  // llama.cpp's names are lower case
    EXPECT_TRUE(cpu::row_type_fits(cpu::RowType::q8_0, 96));
    EXPECT_FALSE(cpu::row_type_fits(cpu::RowType::q8_0, 8));
    EXPECT_FALSE(cpu::row_type_fits(cpu::RowType::q4_0, 48));
    EXPECT_TRUE(cpu::row_type_fits(cpu::RowType::f16, 8));
}

TEST(KvQuant, ConversionsMatchTheGgufReference) {
    // f32_to_rows writes the reference quantizer's bytes; rows_to_f32 (SIMD)
    // and row_elem (scalar) give the reference dequantizer's values bit for
    // bit, from any whole block of a run of rows.
    std::mt19937 rng(401);
    for (cpu::RowType t : {cpu::RowType::q8_0, cpu::RowType::q4_0}) {
        for (int64_t n : {32, 64, 96, 128 * 7}) {
            const std::vector<float> x = test::random_values(rng, static_cast<size_t>(n), 1.5f);
            std::vector<uint8_t> got(static_cast<size_t>(cpu::row_bytes(t, n))), want(got.size());
            cpu::f32_to_rows(t, x.data(), got.data(), n);
            ASSERT_TRUE(quantize_row_ref(ggml_of(t), x.data(), want.data(), n));
            ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size())) << cpu::row_type_name(t) << " n " << n;
            std::vector<float> ref(static_cast<size_t>(n));
            dequantize_row(ggml_of(t), want.data(), ref.data(), n);
            for (int64_t e0 = 0; e0 < n; e0 += 32) {
                const int64_t len = std::min<int64_t>(n - e0, 32 * (1 + static_cast<int64_t>(rng() % 5)));
                std::vector<float> w(static_cast<size_t>(len), NAN);
                cpu::rows_to_f32(t, got.data(), e0, len, w.data());
                for (int64_t i = 0; i < len; ++i) {
                    ASSERT_EQ(0, std::memcmp(&w[static_cast<size_t>(i)], &ref[static_cast<size_t>(e0 + i)], 4))
                        << cpu::row_type_name(t) << " element " << e0 + i;
                    const float s = cpu::row_elem(t, got.data(), e0 + i);
                    ASSERT_EQ(0, std::memcmp(&s, &ref[static_cast<size_t>(e0 + i)], 4));
                }
            }
            // Dequantized values are close to the input: within half a step
            // of each block's scale (q8_0: amax / 127; q4_0: amax / 8), plus
            // the scale's rounding to f16 (2^-11 relative) times the largest
            // quantized magnitude (127 or 8). q4_0 maps the largest magnitude
            // to -8, so values of the other sign near it clip at +7: a whole step.
            for (int64_t b = 0; b < n / 32; ++b) {
                float amax = 0.0f;
                for (int64_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[static_cast<size_t>(32 * b + i)]));
                const float step = t == cpu::RowType::q8_0 ? amax / 127.0f : amax / 8.0f;
                for (int64_t i = 0; i < 32; ++i)
                    ASSERT_LE(std::fabs(ref[static_cast<size_t>(32 * b + i)] - x[static_cast<size_t>(32 * b + i)]),
                              step * (t == cpu::RowType::q8_0 ? 0.57f : 1.01f) + 1e-6f)
                        << cpu::row_type_name(t) << " element " << 32 * b + i;
            }
        }
    }
}

// A tiny llama with head_dim 64 (whole q8_0 / q4_0 blocks): 2 layers,
// 4 query heads over 2 KV heads.
class KvQuantModel : public ::testing::Test {
protected:
    static constexpr int64_t k_vocab = 41;
    void SetUp() override {
        gguf_test::TinyModel tm;
        tm.n_embd = 256;
        tm.n_head = 4;
        tm.n_head_kv = 2;
        tm.n_ff = 96;
        tm.n_vocab = k_vocab;
        tm.n_ctx = 512;
        // A vocabulary the engine's tokenizer loads (tokens t0..t40).
        tm.extra_kvs = [](GgufWriter *w) { w->add_string("tokenizer.ggml.model", "llama"); };
        path_ = ::testing::TempDir() + "/sieve_kv_quant.gguf";
        ASSERT_TRUE(gguf_test::make_tiny_model(tm, 403).write(path_).ok());
        auto f = GgufFile::open(path_);
        ASSERT_TRUE(f.ok()) << f.status().message();
        file_ = std::move(f.value());
        auto m = Model::load(*file_);
        ASSERT_TRUE(m.ok()) << m.status().message();
        model_ = std::move(m.value());
        ASSERT_EQ(64, model_->config().head_dim);
    }
    // Logits of every position of `tokens`: a prefill of the first n_prefill,
    // then one decode step per remaining token.
    std::vector<float> run(KvCache &kv, const std::vector<int32_t> &tokens, int64_t n_prefill) {
        ThreadPool pool(2);
        auto ws = model_->make_workspace(static_cast<int64_t>(tokens.size()), static_cast<int64_t>(tokens.size()));
        std::vector<float> out;
        std::vector<int32_t> pos(tokens.size()), seq(tokens.size(), 0);
        for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
        std::vector<int8_t> want(tokens.size(), 1);
        int64_t at = 0;
        while (at < static_cast<int64_t>(tokens.size())) {
            const int64_t n = at == 0 ? n_prefill : 1;
            EXPECT_TRUE(kv.reserve(0, at + n).ok());
            Status st = model_->forward(Batch{tokens.data() + at, pos.data() + at, seq.data() + at, n, want.data() + at},
                                        kv, *ws, pool);
            EXPECT_TRUE(st.ok()) << st.message();
            out.insert(out.end(), ws->logits(), ws->logits() + n * k_vocab);
            at += n;
        }
        return out;
    }
    std::string path_;
    std::unique_ptr<GgufFile> file_;
    std::unique_ptr<Model> model_;
};

TEST_F(KvQuantModel, RowsAreTheReferenceQuantizationAndErrorsFollowPrecision) {
    // Layer 0's K and V rows depend on the embeddings only, so the quantized
    // run stores exactly the reference quantizer's bytes of the f32 run's
    // rows. Logits against f32 KV (the oracle): the mean error grows from f16
    // to q8_0 to q4_0 (an untrained random model amplifies any perturbation,
    // so no absolute bound is meaningful here; docs/accuracy.md measures KL
    // on a real model), and a quantized run is not the exact one.
    std::mt19937 rng(404);
    std::vector<int32_t> tokens(300);
    for (int32_t &t : tokens) t = static_cast<int32_t>(rng() % k_vocab);
    const int64_t n = static_cast<int64_t>(tokens.size()), d = 64, n_kv = model_->config().n_head_kv;
    std::vector<float> ref;
    std::unique_ptr<ContiguousKv> exact;
    double err[3] = {0, 0, 0};
    const cpu::RowType types[] = {cpu::RowType::f16, cpu::RowType::q8_0, cpu::RowType::q4_0};
    for (int i = -1; i < 3; ++i) {
        const cpu::RowType t = i < 0 ? cpu::RowType::f32 : types[i];
        auto kv = ContiguousKv::create(model_->kv_shape(1, t), n);
        ASSERT_TRUE(kv.ok()) << kv.status().message();
        const std::vector<float> l = run(**kv, tokens, 200);
        for (float x : l) ASSERT_TRUE(std::isfinite(x)) << cpu::row_type_name(t);
        if (i < 0) {
            ref = l;
            exact = std::move(kv.value());
            continue;
        }
        for (size_t j = 0; j < l.size(); ++j) err[i] += std::fabs(l[j] - ref[j]) / static_cast<double>(l.size());
        for (int64_t g = 0; g < n_kv; ++g)
            for (int kv_i = 0; kv_i < 2; ++kv_i) {
                const float *x = static_cast<const float *>(kv_i ? exact->v_data(0, 0, g) : exact->k_data(0, 0, g));
                const std::vector<uint8_t> want = test::narrow_rows(t, x, n, d);
                const void *got = kv_i ? (*kv)->v_data(0, 0, g) : (*kv)->k_data(0, 0, g);
                ASSERT_EQ(0, std::memcmp(want.data(), got, want.size()))
                    << cpu::row_type_name(t) << (kv_i ? " V" : " K") << " lane of layer 0, kv head " << g;
            }
    }
    EXPECT_GT(err[0], 0.0);
    EXPECT_LT(err[0], err[1]);
    EXPECT_LT(err[1], err[2]);
}

TEST_F(KvQuantModel, MixedKAndVTypesStoreEachLaneInItsOwnType) {
    // -ctk and -ctv of different types: layer 0's K lanes hold the reference
    // quantizer's bytes of the f32 run's K rows in K's type, its V lanes
    // those of the V rows in V's type (in both stores), and the logits stay
    // finite and close to those of the uniform types they mix: q8_0 keys with
    // q4_0 values err less than q4_0 for both.
    std::mt19937 rng(406);
    std::vector<int32_t> tokens(240);
    for (int32_t &t : tokens) t = static_cast<int32_t>(rng() % k_vocab);
    const int64_t n = static_cast<int64_t>(tokens.size()), d = 64, n_kv = model_->config().n_head_kv;
    auto exact = ContiguousKv::create(model_->kv_shape(1, cpu::RowType::f32), n);
    ASSERT_TRUE(exact.ok());
    const std::vector<float> ref = run(**exact, tokens, 150);
    const auto mean_err = [&](const std::vector<float> &l) {
        double e = 0;
        for (size_t j = 0; j < l.size(); ++j) e += std::fabs(l[j] - ref[j]) / static_cast<double>(l.size());
        return e;
    };
    using cpu::RowType;
    for (const cpu::KvRowTypes t :
         {cpu::KvRowTypes{RowType::q8_0, RowType::q4_0}, cpu::KvRowTypes{RowType::f16, RowType::q8_0},
          cpu::KvRowTypes{RowType::q4_0, RowType::bf16}}) {
        SCOPED_TRACE(cpu::row_type_name(t));
        const KvShape shape = model_->kv_shape(1, t);
        EXPECT_EQ(shape.k_row_bytes(), cpu::row_bytes(t.k, d));
        EXPECT_EQ(shape.v_row_bytes(), cpu::row_bytes(t.v, d));
        auto contig = ContiguousKv::create(shape, n);
        ASSERT_TRUE(contig.ok()) << contig.status().message();
        auto lanes = lanes_4k(shape, n, int64_t{16} << 20);  // rows of both types straddle pages
        ASSERT_TRUE(lanes.ok()) << lanes.status().message();
        std::vector<float> logits[2];
        KvCache *stores[] = {contig->get(), lanes->get()};
        for (int si = 0; si < 2; ++si) {
            logits[si] = run(*stores[si], tokens, 150);
            for (float x : logits[si]) ASSERT_TRUE(std::isfinite(x));
            for (int64_t g = 0; g < n_kv; ++g)
                for (int kv_i = 0; kv_i < 2; ++kv_i) {
                    const float *x = static_cast<const float *>(kv_i ? (*exact)->v_data(0, 0, g)
                                                                     : (*exact)->k_data(0, 0, g));
                    const std::vector<uint8_t> want = test::narrow_rows(kv_i ? t.v : t.k, x, n, d);
                    const void *got = kv_i ? stores[si]->v_data(0, 0, g) : stores[si]->k_data(0, 0, g);
                    ASSERT_EQ(0, std::memcmp(want.data(), got, want.size()))
                        << (si ? "lane store, " : "contiguous store, ") << (kv_i ? "V" : "K")
                        << " lane of layer 0, kv head " << g;
                }
        }
        EXPECT_EQ(0, std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)))
            << "the two stores give the same bits";
        if (t == cpu::KvRowTypes{RowType::q8_0, RowType::q4_0}) {
            auto q4 = ContiguousKv::create(model_->kv_shape(1, RowType::q4_0), n);
            ASSERT_TRUE(q4.ok());
            EXPECT_LT(mean_err(logits[0]), mean_err(run(**q4, tokens, 150)));
            EXPECT_GT(mean_err(logits[0]), 0.0);
        }
    }
}

TEST_F(KvQuantModel, BothStoresGiveTheSameBitsThroughCompaction) {
    // The lane store over pages of 4 KiB: 68- and 36-byte rows straddle page
    // boundaries, compaction moves them as bytes; the contiguous store is the
    // oracle. Logits after a prefill, a compaction of every lane to a random
    // subset, and decode steps are equal bit for bit.
    using cpu::RowType;
    for (cpu::KvRowTypes t :
         {cpu::KvRowTypes(RowType::q8_0), cpu::KvRowTypes(RowType::q4_0),
          cpu::KvRowTypes(RowType::q8_0, RowType::q4_0), cpu::KvRowTypes(RowType::q4_0, RowType::f16)}) {
        std::mt19937 rng(405);
        std::vector<int32_t> tokens(260);
        for (int32_t &x : tokens) x = static_cast<int32_t>(rng() % k_vocab);
        const KvShape shape = model_->kv_shape(1, t);
        auto contig = ContiguousKv::create(shape, 300);
        ASSERT_TRUE(contig.ok());
        auto lanes = lanes_4k(shape, 300, int64_t{16} << 20);
        ASSERT_TRUE(lanes.ok()) << lanes.status().message();
        ThreadPool pool(2);
        auto ws = model_->make_workspace(256, 1);
        std::vector<std::vector<float>> logits(2);
        KvCache *stores[] = {contig->get(), lanes->get()};
        // keep lists per (layer, kv head): the same for both stores
        std::vector<std::vector<int32_t>> keep(static_cast<size_t>(shape.n_layer * shape.n_head_kv));
        for (auto &k : keep)
            for (int32_t r = 0; r < 200; ++r)
                if (rng() % 3 != 0) k.push_back(r);
        for (int si = 0; si < 2; ++si) {
            KvCache &kv = *stores[si];
            std::vector<int32_t> pos(tokens.size()), seq(tokens.size(), 0);
            for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
            ASSERT_TRUE(kv.reserve(0, 200).ok());
            ASSERT_TRUE(model_->forward(Batch{tokens.data(), pos.data(), seq.data(), 200, nullptr}, kv, *ws, pool).ok());
            for (int64_t il = 0; il < shape.n_layer; ++il) {
                std::vector<const int32_t *> ptrs;
                std::vector<int64_t> n_keep;
                for (int64_t g = 0; g < shape.n_head_kv; ++g) {
                    const auto &k = keep[static_cast<size_t>(il * shape.n_head_kv + g)];
                    ptrs.push_back(k.data());
                    n_keep.push_back(static_cast<int64_t>(k.size()));
                }
                ASSERT_TRUE(kv.compact_layer(0, il, ptrs.data(), n_keep.data()).ok());
            }
            for (int64_t at = 200; at < 260; ++at) {
                ASSERT_TRUE(kv.reserve(0, at + 1).ok());
                ASSERT_TRUE(model_->forward(Batch{tokens.data() + at, pos.data() + at, seq.data() + at, 1, nullptr}, kv,
                                            *ws, pool)
                                .ok());
                logits[static_cast<size_t>(si)].insert(logits[static_cast<size_t>(si)].end(), ws->logits(),
                                                       ws->logits() + k_vocab);
            }
        }
        ASSERT_EQ(logits[0].size(), logits[1].size());
        EXPECT_EQ(0, std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)))
            << cpu::row_type_name(t);
    }
}

TEST(KvQuant, DefaultPagesHoldWholeRows) {
    KvShape s = small_shape(1, 64, cpu::RowType::f16);
    const int64_t k64 = VAttentionKv::k_default_page_bytes;
    struct Case {
        cpu::KvRowTypes type;
        int64_t head_dim, page;
    };
    using cpu::RowType;
    // f16 / f32 rows divide 64 KiB; q8_0 rows of 64 are 68 bytes (lcm with
    // 4 KiB: 68 KiB), q4_0 36 (lcm 36 KiB, so 72 KiB); odd f16 heads too.
    // K and V of different types: the page holds whole rows of both (f16
    // with q8_0: 68 KiB).
    for (const Case c :
         {Case{RowType::f16, 64, k64}, Case{RowType::f32, 64, k64}, Case{RowType::q8_0, 64, 68 << 10},
          Case{RowType::q4_0, 64, 72 << 10}, Case{RowType::q8_0, 128, 68 << 10},
          Case{RowType::q4_0, 128, 72 << 10}, Case{RowType::f16, 80, 80 << 10},
          Case{RowType::f16, 96, 72 << 10}, Case{{RowType::f16, RowType::q8_0}, 64, 68 << 10},
          Case{{RowType::q4_0, RowType::bf16}, 64, 72 << 10}, Case{{RowType::bf16, RowType::f16}, 64, k64}}) {
        s.type = c.type;
        s.head_dim = c.head_dim;
        const int64_t pb = VAttentionKv::page_bytes_for(s, 0);
        EXPECT_EQ(pb, c.page) << cpu::row_type_name(c.type) << " x " << c.head_dim;
        EXPECT_EQ(pb % s.k_row_bytes(), 0);
        EXPECT_EQ(pb % s.v_row_bytes(), 0);
        EXPECT_EQ(pb % 4096, 0);
        EXPECT_EQ("", VAttentionKv::prefix_block_check(s, pb, 16)) << cpu::row_type_name(c.type);
        EXPECT_EQ(VAttentionKv::page_bytes_for(s, 4096), 4096) << "a page size given by hand is kept";
        EXPECT_EQ(VAttentionKv::prefix_page_bytes(s), pb);
    }
    // q8_0 K with q4_0 V: whole rows of both need lcm(68, 36, 4096) = 612 KiB
    // pages, which a short sequence's every lane would map; by default the
    // pages hold whole K rows (68 KiB), V rows straddle them and the prefix
    // cache cannot take them (the check says why); the prefix-capable page
    // is there for whoever asks (the eval).
    for (int64_t d : {64, 128}) {
        s.type = {RowType::q8_0, RowType::q4_0};
        s.head_dim = d;
        EXPECT_EQ(VAttentionKv::page_bytes_for(s, 0), 68 << 10);
        EXPECT_NE("", VAttentionKv::prefix_block_check(s, 68 << 10, 16));
        const int64_t pb = VAttentionKv::prefix_page_bytes(s);
        EXPECT_EQ(pb, 612 << 10);
        EXPECT_EQ(pb % s.k_row_bytes(), 0);
        EXPECT_EQ(pb % s.v_row_bytes(), 0);
        EXPECT_EQ("", VAttentionKv::prefix_block_check(s, pb, 16));
    }
    // A non-power-of-two page is a valid pool page.
    PagePoolOptions po;
    po.page_bytes = 68 << 10;
    po.budget_bytes = int64_t{1} << 20;
    auto p = PagePool::create(po);
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_EQ((*p)->n_pages(), (int64_t{1} << 20) / (68 << 10));
}

// Prefix caching with quantized lanes (their pages hold whole rows): a hit
// gives the logprobs of computing the whole prompt, bit for bit, whether the
// hit ends inside a page (copy on write) or leaves one token to compute.
TEST_F(KvQuantModel, PrefixCacheHitsGiveTheBitsOfAFullPrefill) {
    auto tok = Tokenizer::from_gguf(*file_);
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    using cpu::RowType;
    for (cpu::KvRowTypes t : {cpu::KvRowTypes(RowType::q8_0), cpu::KvRowTypes(RowType::q4_0),
                              cpu::KvRowTypes(RowType::q8_0, RowType::q4_0)}) {
        SCOPED_TRACE(cpu::row_type_name(t));
        EngineOptions o;
        o.n_threads = 2;
        o.max_seqs = 3;
        o.max_ctx = 400;
        o.max_batch_tokens = 48;  // prompts are chunked, hits and misses alike
        o.kv_type = t;
        // q8_0 K with q4_0 V: the prefix cache needs pages of whole rows of
        // both, which are not the default for them (DefaultPagesHoldWholeRows).
        if (!t.uniform()) o.kv_page_bytes = VAttentionKv::prefix_page_bytes(model_->kv_shape(o.max_seqs, t));
        EngineOptions off = o;
        off.prefix_cache = false;
        auto e = Engine::create(*model_, **tok, o), plain = Engine::create(*model_, **tok, off);
        ASSERT_TRUE(e.ok()) << e.status().message();
        ASSERT_TRUE(plain.ok()) << plain.status().message();
        std::mt19937 rng(409);
        std::vector<int32_t> shared(203);
        for (int32_t &x : shared) x = static_cast<int32_t>(3 + rng() % (k_vocab - 3));
        const auto request = [](std::vector<int32_t> prompt) {
            GenRequest r = greedy_request(std::move(prompt), 12);
            r.n_logprobs = 5;
            return r;
        };
        std::vector<GenRequest> reqs{request(shared)};
        for (int64_t tail : {1, 37, 90}) {
            std::vector<int32_t> p = shared;
            for (int64_t i = 0; i < tail; ++i) p.push_back(static_cast<int32_t>(3 + rng() % (k_vocab - 3)));
            reqs.push_back(request(p));
        }
        reqs.push_back(request(std::vector<int32_t>(shared.begin(), shared.begin() + 193)));  // 12 blocks + 1
        EXPECT_EQ(run_requests(**e, {reqs[0]})[0].back().n_cached_tokens, 0);
        for (size_t i = 1; i < reqs.size(); ++i) {
            const auto hit = run_requests(**e, {reqs[i]});
            const auto ref = run_requests(**plain, {reqs[i]});
            ASSERT_FALSE(hit.empty() || ref.empty());
            EXPECT_EQ(hit[0].back().n_cached_tokens, 192) << "request " << i << ": 12 whole 16-token blocks";
            EXPECT_EQ(event_tokens(hit[0]), event_tokens(ref[0])) << "request " << i;
            const std::vector<float> a = event_logprobs(hit[0]), b = event_logprobs(ref[0]);
            ASSERT_EQ(a.size(), b.size());
            ASSERT_GE(a.size(), 12u * 6u);
            EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "request " << i;
        }
        (*e)->shutdown(true);
        const EngineStats st = (*e)->stats();
        EXPECT_TRUE(st.prefix_cache);
        EXPECT_EQ(st.kv_page_bytes, t == cpu::KvRowTypes(RowType::q8_0)   ? 68 << 10
                                    : t == cpu::KvRowTypes(RowType::q4_0) ? 72 << 10
                                                                          : 612 << 10);
        EXPECT_EQ(st.kv_pages_used, 0);
        (*plain)->shutdown(true);
    }
}

// What quantized rows buy a server: at a --kv-memory that holds two f16
// sequences, q8_0 K with q4_0 V runs four at once (pages of 4 KiB so the
// lanes' sizes, not the page granularity, decide; each sequence's prompt
// and generation need 80 pages in f16 and 36 in q8_0 / q4_0). The peak of
// running sequences is read while the requests run (2 and 4 in every run
// here); every request finishes with its tokens, none is preempted, and
// every page comes back.
TEST_F(KvQuantModel, QuantizedRowsRunMoreSequencesInTheSameMemory) {
    auto tok = Tokenizer::from_gguf(*file_);
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    using cpu::RowType;
    const KvShape f16 = model_->kv_shape(1, RowType::f16);
    const int64_t rows = 280 + 24, page = 4096;
    const int64_t f16_seq = f16.n_layer * f16.n_head_kv * 2 * ((rows * f16.k_row_bytes() + page - 1) / page);
    int peak_of[2] = {0, 0};
    int i = 0;
    for (cpu::KvRowTypes t : {cpu::KvRowTypes(RowType::f16), cpu::KvRowTypes(RowType::q8_0, RowType::q4_0)}) {
        SCOPED_TRACE(cpu::row_type_name(t));
        EngineOptions o;
        o.n_threads = 2;
        o.max_seqs = 6;
        o.max_ctx = 400;
        o.max_batch_tokens = 64;
        o.kv_type = t;
        o.kv_page_bytes = page;
        o.kv_memory_bytes = 2 * f16_seq * page;
        auto e = Engine::create(*model_, **tok, o);
        ASSERT_TRUE(e.ok()) << e.status().message();
        std::atomic<int> done{0};
        std::vector<uint64_t> ids;
        for (uint32_t r = 0; r < 6; ++r) {
            std::mt19937 rng(500 + r);
            std::vector<int32_t> prompt(280);
            for (int32_t &x : prompt) x = static_cast<int32_t>(3 + rng() % (k_vocab - 3));
            auto id = (*e)->submit(greedy_request(prompt, 24), [&done](const GenEvent &ev) {
                if (ev.finished) done.fetch_add(1);
            });
            ASSERT_TRUE(id.ok()) << id.status().message();
            ids.push_back(*id);
        }
        int peak = 0;
        const auto t0 = std::chrono::steady_clock::now();
        while (done.load() < 6 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
            peak = std::max(peak, (*e)->stats().n_running);
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        ASSERT_EQ(done.load(), 6) << "requests did not finish";
        (*e)->shutdown(true);
        const EngineStats st = (*e)->stats();
        EXPECT_EQ(st.kv_pages_used, 0);
        EXPECT_EQ(st.gen_tokens_total, 6 * 24);
        EXPECT_EQ(st.n_preemptions, 0) << "admission counts what each sequence will need";
        peak_of[i++] = peak;
    }
    EXPECT_LE(peak_of[0], 2) << "f16: the pool holds two sequences";
    EXPECT_GE(peak_of[1], 4) << "q8_0 K / q4_0 V: the same pool holds four";
}

// K lanes of 68-byte rows beside V lanes of 36-byte ones over 4 KiB pages
// (rows of both straddle pages, at different offsets): random rows written
// to both stores, a compaction, a swap out and back in and a shared prefix
// leave every K and V lane holding the contiguous store's bytes, and the
// page accounting balances.
TEST(KvQuant, MixedLanesSurviveCompactionSwapAndSharing) {
    const KvShape s = small_shape(2, 64, {cpu::RowType::q8_0, cpu::RowType::q4_0});
    constexpr int64_t n = 300;
    auto c = ContiguousKv::create(s, n);
    ASSERT_TRUE(c.ok()) << c.status().message();
    auto v = lanes_4k(s, n, int64_t{4} << 20);
    ASSERT_TRUE(v.ok()) << v.status().message();
    ContiguousKv &ck = **c;
    VAttentionKv &lk = **v;
    std::mt19937 rng(411);
    const int64_t kb = s.k_row_bytes(), vb = s.v_row_bytes();
    ASSERT_EQ(kb, 68);
    ASSERT_EQ(vb, 36);
    ASSERT_TRUE(ck.reserve(0, n).ok());
    ASSERT_TRUE(lk.reserve(0, n).ok());
    for (int64_t l = 0; l < s.n_layer; ++l)
        for (int64_t h = 0; h < s.n_head_kv; ++h)
            for (int kv = 0; kv < 2; ++kv) {
                std::vector<uint8_t> bytes(static_cast<size_t>(n * (kv ? vb : kb)));
                for (uint8_t &b : bytes) b = static_cast<uint8_t>(rng());
                std::memcpy(kv ? ck.v_data(0, l, h) : ck.k_data(0, l, h), bytes.data(), bytes.size());
                std::memcpy(kv ? lk.v_data(0, l, h) : lk.k_data(0, l, h), bytes.data(), bytes.size());
            }
    ck.set_n_pos(0, n);
    lk.set_n_pos(0, n);
    const auto same = [&](int seq_l, const char *what) {
        for (int64_t l = 0; l < s.n_layer; ++l)
            for (int64_t h = 0; h < s.n_head_kv; ++h) {
                const int64_t rows = lk.n_rows(seq_l, l, h);
                ASSERT_EQ(rows, ck.n_rows(0, l, h)) << what;
                EXPECT_EQ(0, std::memcmp(ck.k_data(0, l, h), lk.k_data(seq_l, l, h),
                                         static_cast<size_t>(rows * kb)))
                    << what << ": K lane " << l << "/" << h;
                EXPECT_EQ(0, std::memcmp(ck.v_data(0, l, h), lk.v_data(seq_l, l, h),
                                         static_cast<size_t>(rows * vb)))
                    << what << ": V lane " << l << "/" << h;
            }
        EXPECT_TRUE(lk.check_accounting().ok()) << what << ": " << lk.check_accounting().message();
    };
    same(0, "written");
    std::vector<int32_t> keep;
    for (int32_t r = 0; r < n; ++r)
        if (r < 4 || rng() % 3 == 0) keep.push_back(r);
    ASSERT_TRUE(ck.compact(0, 1, 0, keep.data(), static_cast<int64_t>(keep.size())).ok());
    ASSERT_TRUE(lk.compact(0, 1, 0, keep.data(), static_cast<int64_t>(keep.size())).ok());
    same(0, "compacted");
    KvSwapImage img;
    ASSERT_TRUE(lk.swap_out(0, &img).ok());
    EXPECT_EQ(static_cast<int64_t>(img.bytes.size()), lk.swap_bytes(0));
    lk.release(0);
    EXPECT_EQ(lk.seq_mapped_pages(0), 0);
    ASSERT_TRUE(lk.swap_in(0, img).ok());
    same(0, "swapped back in");
    // A prefix every lane holds, shared into slot 1 (its pages mapped, not copied).
    const int64_t shared = static_cast<int64_t>(keep.size());
    ASSERT_TRUE(lk.share_prefix(1, 0, shared).ok());
    for (int64_t l = 0; l < s.n_layer; ++l)
        for (int64_t h = 0; h < s.n_head_kv; ++h) {
            EXPECT_EQ(0,
                      std::memcmp(lk.k_data(0, l, h), lk.k_data(1, l, h), static_cast<size_t>(shared * kb)));
            EXPECT_EQ(0,
                      std::memcmp(lk.v_data(0, l, h), lk.v_data(1, l, h), static_cast<size_t>(shared * vb)));
        }
    EXPECT_TRUE(lk.check_accounting().ok());
    lk.release(1);
    lk.release(0);
    EXPECT_EQ(lk.mapped_pages(), 0);
    EXPECT_TRUE(lk.check_accounting().ok());
}

TEST(KvQuant, HeadSizesThatCannotBeQuantizedAreErrors) {
    const KvShape s = small_shape(1, 8, cpu::RowType::q8_0);  // stories260K's head_dim
    auto c = ContiguousKv::create(s, 16);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(std::string::npos, c.status().message().find("head_dim")) << c.status().message();
    EXPECT_NE(std::string::npos, c.status().message().find("q8_0")) << c.status().message();
    VAttentionKvOptions o;
    o.shape = s;
    o.shape.type = cpu::RowType::q4_0;
    o.max_ctx = 16;
    o.pool.budget_bytes = int64_t{1} << 20;
    auto v = VAttentionKv::create(o);
    ASSERT_FALSE(v.ok());
    EXPECT_NE(std::string::npos, v.status().message().find("multiple of 32")) << v.status().message();
}

// Rotated-key checks: the largest |logit| of a and the largest |a - b|, and
// a K lane (n rows of d) against `want` rotated.
std::pair<double, double> max_logit_and_diff(const std::vector<float> &a, const std::vector<float> &b) {
    double max_logit = 0, max_diff = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        max_logit = std::max(max_logit, static_cast<double>(std::fabs(a[i])));
        max_diff = std::max(max_diff, static_cast<double>(std::fabs(a[i] - b[i])));
    }
    return {max_logit, max_diff};
}

void expect_rotated_lane(const void *lane, std::vector<float> want, int64_t n, int64_t d, int64_t g) {
    cpu::hadamard_rotate(want.data(), n, d);
    const float *got = static_cast<const float *>(lane);
    for (int64_t i = 0; i < n * d; ++i)
        ASSERT_NEAR(got[i], want[static_cast<size_t>(i)],
                    1e-5f * (1.0f + std::fabs(want[static_cast<size_t>(i)])))
            << "kv head " << g << " element " << i;
}

TEST(KvQuant, RotationCutsTheQ4ErrorOfKeysWithOutlierChannels) {
    // Keys with two large channels nearly constant across rows (what a
    // K-projection bias leaves in the slow RoPE pairs): a q4_0 row's scale
    // follows the outlier, and the rest of its block rounds to a few levels.
    // Rotated first (Q alike), the same rows keep q.k several times closer.
    std::mt19937 rng(405);
    const int64_t d = 64, n = 200;
    std::vector<float> k = test::random_values(rng, static_cast<size_t>(n * d));
    std::vector<float> q = test::random_values(rng, static_cast<size_t>(n * d));
    for (int64_t r = 0; r < n; ++r) {
        k[static_cast<size_t>(r * d + 5)] += 30.0f;
        k[static_cast<size_t>(r * d + 40)] -= 24.0f;
    }
    const auto qk_error = [&](const std::vector<float> &qs, const std::vector<float> &ks) {
        const std::vector<uint8_t> rows = test::narrow_rows(cpu::RowType::q4_0, ks.data(), n, d);
        const int64_t rb = cpu::row_bytes(cpu::RowType::q4_0, d);
        double se = 0;
        for (int64_t r = 0; r < n; ++r) {
            double exact = 0, got = 0;
            for (int64_t i = 0; i < d; ++i) {
                const double qi = qs[static_cast<size_t>(r * d + i)];
                exact += qi * ks[static_cast<size_t>(r * d + i)];
                got += qi * cpu::row_elem(cpu::RowType::q4_0, rows.data() + r * rb, i);
            }
            se += (got - exact) * (got - exact);
        }
        return std::sqrt(se / static_cast<double>(n));
    };
    const double plain = qk_error(q, k);
    std::vector<float> qr = q, kr = k;
    cpu::hadamard_rotate(qr.data(), n, d);
    cpu::hadamard_rotate(kr.data(), n, d);
    const double rotated = qk_error(qr, kr);
    EXPECT_LT(rotated, 0.5 * plain) << "rms q.k error, plain " << plain << ", rotated " << rotated;
}

TEST(KvQuant, RotatedKeysAreATypeOfTheirOwn) {
    const cpu::KvRowTypes plain{cpu::RowType::q4_0, cpu::RowType::q4_0};
    const cpu::KvRowTypes rotated{cpu::RowType::q4_0, cpu::RowType::q4_0, true};
    EXPECT_NE(plain, rotated);
    EXPECT_STREQ("q4_0", cpu::row_type_name(plain));
    EXPECT_STREQ("q4_0 rotated-K", cpu::row_type_name(rotated));
    EXPECT_STREQ("q8_0/q4_0 rotated-K",
                 cpu::row_type_name(cpu::KvRowTypes{cpu::RowType::q8_0, cpu::RowType::q4_0, true}));
    // The bytes of a row do not change.
    EXPECT_EQ(small_shape(1, 64, plain).k_row_bytes(), small_shape(1, 64, rotated).k_row_bytes());
}

TEST_F(KvQuantModel, RotatedKeysKeepTheLogitsAndStoreRotatedRows) {
    // With f32 rows the rotation is exact up to rounding: the logits of a
    // prefill and of decode steps stay within float error of the unrotated
    // run's (rotating K alone, or Q alone, would change them entirely), and
    // layer 0's K lanes hold the unrotated run's rows rotated.
    std::mt19937 rng(406);
    std::vector<int32_t> tokens(150);
    for (int32_t &t : tokens) t = static_cast<int32_t>(rng() % k_vocab);
    const int64_t n = static_cast<int64_t>(tokens.size()), d = 64, n_kv = model_->config().n_head_kv;
    auto plain = ContiguousKv::create(model_->kv_shape(1, cpu::RowType::f32), n);
    auto rotated = ContiguousKv::create(
        model_->kv_shape(1, cpu::KvRowTypes{cpu::RowType::f32, cpu::RowType::f32, true}), n);
    ASSERT_TRUE(plain.ok() && rotated.ok());
    const std::vector<float> a = run(**plain, tokens, 100), b = run(**rotated, tokens, 100);
    ASSERT_EQ(a.size(), b.size());
    const auto [max_logit, max_diff] = max_logit_and_diff(a, b);
    EXPECT_GT(max_diff, 0.0);  // a different rounding, not a no-op
    EXPECT_LT(max_diff, 1e-4 * max_logit) << "max |logit| " << max_logit;
    for (int64_t g = 0; g < n_kv; ++g) {
        const float *k = static_cast<const float *>((*plain)->k_data(0, 0, g));
        expect_rotated_lane((*rotated)->k_data(0, 0, g), std::vector<float>(k, k + n * d), n, d, g);
        // V is not rotated.
        ASSERT_EQ(0,
                  std::memcmp((*plain)->v_data(0, 0, g), (*rotated)->v_data(0, 0, g), sizeof(float) * n * d));
    }
    // q4_0 keys, rotated or not, give finite logits that differ.
    auto q4 = ContiguousKv::create(model_->kv_shape(1, cpu::RowType::q4_0), n);
    auto q4r = ContiguousKv::create(
        model_->kv_shape(1, cpu::KvRowTypes{cpu::RowType::q4_0, cpu::RowType::q4_0, true}), n);
    ASSERT_TRUE(q4.ok() && q4r.ok());
    const std::vector<float> c = run(**q4, tokens, 100), e = run(**q4r, tokens, 100);
    for (size_t i = 0; i < c.size(); ++i) ASSERT_TRUE(std::isfinite(c[i]) && std::isfinite(e[i]));
    EXPECT_NE(c, e);
}

TEST(KvQuant, RotatedKeysOfABiasedModelLoseTheBiasMeanAndKeepTheLogits) {
    // A qwen2 model with K biases: rotated keys first subtract each layer's
    // bias averaged over the RoPE positions of the training context. That
    // mean is checked against a brute-force average of the rotated bias, and
    // a constant per KV head leaves every softmax as it was: the logits of
    // f32 rows with and without it agree to float error, and layer 0's K
    // lanes hold the plain rows less the mean, rotated.
    gguf_test::TinyModel tm;
    tm.arch = "qwen2";
    tm.qkv_bias = true;
    tm.n_embd = 256;
    tm.n_head = 4;
    tm.n_head_kv = 2;
    tm.n_ff = 96;
    tm.n_vocab = 41;
    tm.n_ctx = 300;
    const std::string path = ::testing::TempDir() + "/sieve_kv_quant_qwen2.gguf";
    ASSERT_TRUE(gguf_test::make_tiny_model(tm, 407).write(path).ok());
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.ok()) << f.status().message();
    auto m = Model::load(**f);
    ASSERT_TRUE(m.ok()) << m.status().message();
    const Model &model = **m;
    const int64_t d = model.config().head_dim, n_kv = model.config().n_head_kv, kv_dim = n_kv * d;
    ASSERT_EQ(64, d);
    const std::vector<float> &centre = model.k_centre();
    ASSERT_EQ(static_cast<size_t>(model.config().n_layer * kv_dim), centre.size());
    for (int64_t il = 0; il < model.config().n_layer; ++il) {
        std::vector<double> mean(static_cast<size_t>(kv_dim), 0.0);
        for (int32_t p = 0; p < tm.n_ctx; ++p) {
            std::vector<float> b(model.layer(il).bk, model.layer(il).bk + kv_dim);
            cpu::rope(b.data(), &p, 1, n_kv, d, model.rope_inv_freq().data(), true);
            for (int64_t j = 0; j < kv_dim; ++j)
                mean[static_cast<size_t>(j)] += b[static_cast<size_t>(j)] / tm.n_ctx;
        }
        double max_b = 0;
        for (int64_t j = 0; j < kv_dim; ++j)
            max_b = std::max(max_b, static_cast<double>(std::fabs(model.layer(il).bk[j])));
        for (int64_t j = 0; j < kv_dim; ++j)
            ASSERT_NEAR(centre[static_cast<size_t>(il * kv_dim + j)], mean[static_cast<size_t>(j)],
                        1e-5 * max_b)
                << "layer " << il << " channel " << j;
    }

    std::mt19937 rng(408);
    std::vector<int32_t> tokens(150);
    for (int32_t &t : tokens) t = static_cast<int32_t>(rng() % tm.n_vocab);
    const int64_t n = static_cast<int64_t>(tokens.size());
    ThreadPool pool(2);
    const auto run = [&](KvCache &kv) {
        auto ws = model.make_workspace(n, n);
        std::vector<int32_t> pos(tokens.size()), seq(tokens.size(), 0);
        for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
        std::vector<int8_t> want(tokens.size(), 1);
        EXPECT_TRUE(kv.reserve(0, n).ok());
        EXPECT_TRUE(
            model.forward(Batch{tokens.data(), pos.data(), seq.data(), n, want.data()}, kv, *ws, pool).ok());
        return std::vector<float>(ws->logits(), ws->logits() + n * tm.n_vocab);
    };
    auto plain = ContiguousKv::create(model.kv_shape(1, cpu::RowType::f32), n);
    auto rotated = ContiguousKv::create(
        model.kv_shape(1, cpu::KvRowTypes{cpu::RowType::f32, cpu::RowType::f32, true}), n);
    ASSERT_TRUE(plain.ok() && rotated.ok());
    const std::vector<float> a = run(**plain), b = run(**rotated);
    const auto [max_logit, max_diff] = max_logit_and_diff(a, b);
    EXPECT_LT(max_diff, 1e-4 * max_logit) << "max |logit| " << max_logit;
    for (int64_t g = 0; g < n_kv; ++g) {
        const float *k = static_cast<const float *>((*plain)->k_data(0, 0, g));
        std::vector<float> want(k, k + n * d);
        for (int64_t r = 0; r < n; ++r)
            for (int64_t i = 0; i < d; ++i)
                want[static_cast<size_t>(r * d + i)] -= centre[static_cast<size_t>(g * d + i)];
        expect_rotated_lane((*rotated)->k_data(0, 0, g), want, n, d, g);
    }
}

}  // namespace
}  // namespace sieve
