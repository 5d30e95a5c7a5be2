// Model::forward and ContiguousKv without Python: batching invariants (a
// sequence's logits do not depend on what else is in the batch or how its
// prompt is chunked), KV rollback, and clear errors for bad batches. The
// numbers themselves are checked against the NumPy reference in tests/model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gguf_test_util.h"
#include "sieve/gguf/gguf.h"
#include "sieve/kernels/cpu/matmul_q8.h"
#include "sieve/kv/contiguous_kv.h"
#include "sieve/model/model.h"

namespace sieve {
namespace {

const std::string k_model = std::string(SIEVE_TEST_MODELS) + "/stories260K.gguf";

class ModelTest : public ::testing::Test {
protected:
    void SetUp() override {
        auto f = GgufFile::open(k_model);
        ASSERT_TRUE(f.ok()) << f.status().message();
        file_ = std::move(f.value());
        auto m = Model::load(*file_);
        ASSERT_TRUE(m.ok()) << m.status().message();
        model_ = std::move(m.value());
        n_vocab_ = model_->config().n_vocab;
    }

    std::unique_ptr<ContiguousKv> make_kv(int n_seq, int64_t n_ctx) {
        auto kv = ContiguousKv::create(model_->kv_shape(n_seq), n_ctx);
        EXPECT_TRUE(kv.ok()) << kv.status().message();
        return std::move(kv.value());
    }

    std::vector<int32_t> random_tokens(int64_t n, uint32_t seed) {
        std::mt19937 rng(seed);
        std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(n_vocab_ - 1));
        std::vector<int32_t> t(static_cast<size_t>(n));
        for (auto &x : t) x = d(rng);
        return t;
    }

    // Logits of every position of `tokens` run alone in slot 0, in chunks.
    std::vector<float> run_alone(const std::vector<int32_t> &tokens, int64_t chunk) {
        auto kv = make_kv(1, 128);
        auto ws = model_->make_workspace(chunk);
        std::vector<float> out;
        for (size_t start = 0; start < tokens.size(); start += static_cast<size_t>(chunk)) {
            const size_t end = std::min(tokens.size(), start + static_cast<size_t>(chunk));
            std::vector<int32_t> pos, seq(end - start, 0);
            std::vector<int8_t> want(end - start, 1);
            for (size_t i = start; i < end; ++i) pos.push_back(static_cast<int32_t>(i));
            Batch b{tokens.data() + start, pos.data(), seq.data(), static_cast<int64_t>(end - start), want.data()};
            Status st = model_->forward(b, *kv, *ws, pool_);
            EXPECT_TRUE(st.ok()) << st.message();
            out.insert(out.end(), ws->logits(), ws->logits() + ws->n_outputs() * n_vocab_);
        }
        return out;
    }

    ThreadPool pool_{2};
    std::unique_ptr<GgufFile> file_;
    std::unique_ptr<Model> model_;
    int64_t n_vocab_ = 0;
};

float max_abs_diff(const float *a, const float *b, int64_t n) {
    float d = 0.0f;
    for (int64_t i = 0; i < n; ++i) d = std::max(d, std::fabs(a[i] - b[i]));
    return d;
}

TEST_F(ModelTest, ChunkingDoesNotChangeLogits) {
    const auto tokens = random_tokens(21, 1);
    const auto whole = run_alone(tokens, 21);
    for (int64_t chunk : {1, 5, 8}) {
        const auto chunked = run_alone(tokens, chunk);
        ASSERT_EQ(chunked.size(), whole.size());
        // f32 summation order differs between the prefill and decode kernels only.
        EXPECT_LT(max_abs_diff(whole.data(), chunked.data(), static_cast<int64_t>(whole.size())), 1e-4f)
            << "chunk " << chunk;
    }
}

TEST_F(ModelTest, SequencesInOneBatchAreIndependent) {
    const auto a = random_tokens(23, 2), b = random_tokens(9, 3);
    const auto alone_a = run_alone(a, 23), alone_b = run_alone(b, 9);
    // Batch: b in slot 2 first, then a in slot 0; default want_logits = last token of each.
    std::vector<int32_t> tok, pos, seq;
    for (size_t i = 0; i < b.size(); ++i) tok.push_back(b[i]), pos.push_back(static_cast<int32_t>(i)), seq.push_back(2);
    for (size_t i = 0; i < a.size(); ++i) tok.push_back(a[i]), pos.push_back(static_cast<int32_t>(i)), seq.push_back(0);
    auto kv = make_kv(3, 64);
    auto ws = model_->make_workspace(64);
    Batch batch{tok.data(), pos.data(), seq.data(), static_cast<int64_t>(tok.size()), nullptr};
    ASSERT_TRUE(model_->forward(batch, *kv, *ws, pool_).ok());
    ASSERT_EQ(ws->n_outputs(), 2);
    EXPECT_EQ(ws->output_token(0), static_cast<int64_t>(b.size()) - 1);
    EXPECT_EQ(ws->output_token(1), static_cast<int64_t>(tok.size()) - 1);
    EXPECT_LT(max_abs_diff(ws->logits(), alone_b.data() + (b.size() - 1) * n_vocab_, n_vocab_), 1e-4f);
    EXPECT_LT(max_abs_diff(ws->logits() + n_vocab_, alone_a.data() + (a.size() - 1) * n_vocab_, n_vocab_), 1e-4f);
    EXPECT_EQ(kv->n_pos(0), static_cast<int64_t>(a.size()));
    EXPECT_EQ(kv->n_pos(1), 0);
    EXPECT_EQ(kv->n_pos(2), static_cast<int64_t>(b.size()));

    // A decode step for both at once continues each sequence on its own.
    std::vector<int32_t> t2 = {a[0], b[0]}, p2 = {static_cast<int32_t>(a.size()), static_cast<int32_t>(b.size())},
                         s2 = {0, 2};
    Batch step{t2.data(), p2.data(), s2.data(), 2, nullptr};
    ASSERT_TRUE(model_->forward(step, *kv, *ws, pool_).ok());
    auto a2 = a;
    a2.push_back(a[0]);
    const auto alone_a2 = run_alone(a2, static_cast<int64_t>(a2.size()));
    EXPECT_LT(max_abs_diff(ws->logits(), alone_a2.data() + (a2.size() - 1) * n_vocab_, n_vocab_), 1e-4f);
}

TEST_F(ModelTest, RewritingTheTailMatchesAFreshRun) {
    const auto t = random_tokens(12, 4);
    auto kv = make_kv(1, 32);
    auto ws = model_->make_workspace(12);
    std::vector<int32_t> pos(12), seq(12, 0);
    for (int i = 0; i < 12; ++i) pos[static_cast<size_t>(i)] = i;
    ASSERT_TRUE(model_->forward(Batch{t.data(), pos.data(), seq.data(), 12, nullptr}, *kv, *ws, pool_).ok());
    // Roll back to 7 tokens and feed a different token at position 7.
    const auto other = random_tokens(1, 5);
    std::vector<int32_t> p7 = {7}, s0 = {0};
    ASSERT_TRUE(model_->forward(Batch{other.data(), p7.data(), s0.data(), 1, nullptr}, *kv, *ws, pool_).ok());
    EXPECT_EQ(kv->n_pos(0), 8);
    std::vector<int32_t> fresh(t.begin(), t.begin() + 7);
    fresh.push_back(other[0]);
    const auto want = run_alone(fresh, 8);
    EXPECT_LT(max_abs_diff(ws->logits(), want.data() + 7 * n_vocab_, n_vocab_), 1e-4f);
}

TEST_F(ModelTest, BadBatchesAreErrorsAndLeaveKvAlone) {
    auto kv = make_kv(2, 8);
    auto ws = model_->make_workspace(8);
    const auto expect_error = [&](std::vector<int32_t> tok, std::vector<int32_t> pos, std::vector<int32_t> seq,
                                  const char *needle) {
        Batch b{tok.data(), pos.data(), seq.data(), static_cast<int64_t>(tok.size()), nullptr};
        Status st = model_->forward(b, *kv, *ws, pool_);
        ASSERT_FALSE(st.ok()) << needle;
        EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
        EXPECT_EQ(kv->n_pos(0), 0);
        EXPECT_EQ(kv->n_pos(1), 0);
    };
    const int32_t v = static_cast<int32_t>(n_vocab_);
    expect_error({3, v}, {0, 1}, {0, 0}, "out of the vocabulary");
    expect_error({3, -1}, {0, 1}, {0, 0}, "out of the vocabulary");
    expect_error({3, 4}, {0, 1}, {0, 5}, "sequence slot 5");
    expect_error({3, 4, 5}, {0, 0, 1}, {0, 1, 0}, "not contiguous");
    expect_error({3, 4}, {0, 2}, {0, 0}, "not consecutive");
    expect_error({3, 4}, {1, 2}, {0, 0}, "starts at position 1");
    expect_error(std::vector<int32_t>(9, 3), {0, 1, 2, 3, 4, 5, 6, 7, 8}, std::vector<int32_t>(9, 0), "batch of 9");
    // Room for 8 tokens per slot: positions 4..8 need 9.
    std::vector<int32_t> t4(4, 3), p4 = {0, 1, 2, 3}, s4(4, 1);
    ASSERT_TRUE(model_->forward(Batch{t4.data(), p4.data(), s4.data(), 4, nullptr}, *kv, *ws, pool_).ok());
    std::vector<int32_t> t5(5, 3), p5 = {4, 5, 6, 7, 8}, s5(5, 1);
    Status st = model_->forward(Batch{t5.data(), p5.data(), s5.data(), 5, nullptr}, *kv, *ws, pool_);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("capacity is 8"), std::string::npos) << st.message();
    EXPECT_EQ(kv->n_pos(1), 4);
}

// Where the weights live (copied into the huge-page arena, left in the file
// mapping, Q4_0 / Q8_0 repacked either way) changes no bit of the logits, in
// the integer (q8) and the exact (f32, reading the released mapped originals
// again) activation modes, for prefill and decode steps.
TEST(ModelPlacement, CopiedAndMappedWeightsGiveTheSameLogits) {
    for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0}) {
        gguf_test::TinyModel tm;
        tm.n_embd = 64;
        tm.n_head = 4;
        tm.n_head_kv = 2;
        tm.n_ff = 128;
        tm.n_vocab = 48;
        tm.tied = type == GgmlType::Q8_0;  // the tied output is placed; the embedding stays mapped
        tm.weight_type = type;
        std::string path = ::testing::TempDir();
        path.append("/sieve_placement_").append(type_name(type)).append(".gguf");
        ASSERT_TRUE(gguf_test::make_tiny_model(tm, 31).write(path).ok());
        auto file = GgufFile::open(path);
        ASSERT_TRUE(file.ok()) << file.status().message();
        std::vector<float> logits[2][2];  // [map_weights][precision]
        for (int map = 0; map < 2; ++map) {
            auto m = Model::load(**file, ModelLoadOptions{map == 1});
            ASSERT_TRUE(m.ok()) << m.status().message();
            // Q8_0 / Q4_0 are repacked into 16-row tiles where the CPU has the
            // tile kernels (AVX-512 VNNI); elsewhere they stay mapped.
            const bool repacked = cpu::q8::x16_ok(type, tm.n_embd, tm.n_embd);
            if (map == 0 || repacked) EXPECT_GT((*m)->placed_bytes(), 0) << type_name(type);
            else EXPECT_EQ((*m)->placed_bytes(), 0) << type_name(type);
            ThreadPool pool(2);
            for (int prec = 0; prec < 2; ++prec) {
                auto kv = ContiguousKv::create((*m)->kv_shape(1), 32);
                ASSERT_TRUE(kv.ok());
                auto ws = (*m)->make_workspace(9);
                ws->act_precision = prec ? cpu::ActPrecision::f32 : cpu::ActPrecision::q8;
                std::mt19937 rng(4);
                // A 9-token prefill, then two single-token decode steps.
                int32_t pos = 0;
                for (int64_t n : {9, 1, 1}) {
                    std::vector<int32_t> tok(static_cast<size_t>(n)), p(static_cast<size_t>(n)), seq(static_cast<size_t>(n), 0);
                    for (int64_t i = 0; i < n; ++i) {
                        tok[static_cast<size_t>(i)] = static_cast<int32_t>(rng() % 48);
                        p[static_cast<size_t>(i)] = pos++;
                    }
                    std::vector<int8_t> want(static_cast<size_t>(n), 1);
                    Status st = (*m)->forward(Batch{tok.data(), p.data(), seq.data(), n, want.data()}, **kv, *ws, pool);
                    ASSERT_TRUE(st.ok()) << st.message();
                    logits[map][prec].insert(logits[map][prec].end(), ws->logits(), ws->logits() + n * 48);
                }
            }
        }
        for (int prec = 0; prec < 2; ++prec) {
            ASSERT_EQ(logits[0][prec].size(), size_t{11 * 48});
            for (float v : logits[0][prec]) ASSERT_TRUE(std::isfinite(v) && v != 0.0f) << type_name(type);
            EXPECT_EQ(0, std::memcmp(logits[0][prec].data(), logits[1][prec].data(), logits[0][prec].size() * sizeof(float)))
                << type_name(type) << (prec ? " f32" : " q8");
        }
    }
}

// For every weight type a real file uses, a token's logits are the same bits
// alone, in a decode step with 1..16 other sequences, and as the first token
// of a 20-token prefill chunk (the integer types' decode and prefill tile
// kernels compute the same sums; at position 0 attention returns its one V
// row exactly in both kernels, so the chunk compares the matmuls).
TEST(ModelBatchInvariance, EveryWeightTypeGivesATokenTheSameBitsInAnyStep) {
    const GgmlType types[] = {GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                              GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};
    constexpr int64_t V = 37;  // output rows: not a multiple of the 16-row tile
    for (GgmlType type : types) {
        gguf_test::TinyModel tm;
        tm.n_embd = 256;  // K-quants need multiples of 256 columns
        tm.n_head = 4;
        tm.n_head_kv = 2;
        tm.n_ff = 512;
        tm.n_vocab = V;
        tm.weight_type = type;
        std::string path = ::testing::TempDir();
        path.append("/sieve_batch_inv_").append(type_name(type)).append(".gguf");
        ASSERT_TRUE(gguf_test::make_tiny_model(tm, 47).write(path).ok()) << type_name(type);
        auto file = GgufFile::open(path);
        ASSERT_TRUE(file.ok()) << file.status().message();
        auto m = Model::load(**file);
        ASSERT_TRUE(m.ok()) << type_name(type) << ": " << m.status().message();
        const Model &model = **m;
        ThreadPool pool(2);
        constexpr int k_seq = 16;
        std::mt19937 rng(9);
        std::vector<std::vector<int32_t>> prompts(k_seq);
        std::vector<int32_t> next(k_seq);
        for (int s = 0; s < k_seq; ++s) {
            prompts[static_cast<size_t>(s)].resize(static_cast<size_t>(1 + (3 * s) % 7));
            for (int32_t &t : prompts[static_cast<size_t>(s)]) t = static_cast<int32_t>(rng() % V);
            next[static_cast<size_t>(s)] = static_cast<int32_t>(rng() % V);
        }
        auto ws = model.make_workspace(20, k_seq);
        // Prefills each of the first n sequences alone into its own slot.
        const auto prefill = [&](KvCache &kv, int n) {
            for (int s = 0; s < n; ++s) {
                const auto &p = prompts[static_cast<size_t>(s)];
                std::vector<int32_t> pos(p.size()), seq(p.size(), s);
                for (size_t i = 0; i < p.size(); ++i) pos[i] = static_cast<int32_t>(i);
                ASSERT_TRUE(model.forward(Batch{p.data(), pos.data(), seq.data(), static_cast<int64_t>(p.size()), nullptr},
                                          kv, *ws, pool)
                                .ok());
            }
        };
        // One decode step for sequences [0, n): logits [n][V].
        const auto step = [&](KvCache &kv, int first, int n) {
            std::vector<int32_t> tok, pos, seq;
            for (int s = first; s < first + n; ++s) {
                tok.push_back(next[static_cast<size_t>(s)]);
                pos.push_back(static_cast<int32_t>(prompts[static_cast<size_t>(s)].size()));
                seq.push_back(s);
            }
            EXPECT_TRUE(model.forward(Batch{tok.data(), pos.data(), seq.data(), n, nullptr}, kv, *ws, pool).ok());
            return std::vector<float>(ws->logits(), ws->logits() + n * V);
        };
        std::vector<float> alone(static_cast<size_t>(k_seq * V));
        {
            auto kv = ContiguousKv::create(model.kv_shape(k_seq), 32);
            ASSERT_TRUE(kv.ok());
            prefill(**kv, k_seq);
            for (int s = 0; s < k_seq; ++s) {
                const auto l = step(**kv, s, 1);
                std::copy(l.begin(), l.end(), alone.begin() + s * V);
            }
        }
        for (float v : alone) ASSERT_TRUE(std::isfinite(v)) << type_name(type);
        for (int n : {2, 5, 8, 13, 16}) {
            auto kv = ContiguousKv::create(model.kv_shape(k_seq), 32);
            ASSERT_TRUE(kv.ok());
            prefill(**kv, n);
            const auto l = step(**kv, 0, n);
            EXPECT_EQ(0, std::memcmp(l.data(), alone.data(), l.size() * sizeof(float)))
                << type_name(type) << ": a decode step of " << n << " sequences vs each alone";
        }
        // Position 0 alone (a one-token step) vs first in a 20-token prefill chunk.
        std::vector<int32_t> chunk(20), pos(20), seq(20, 0);
        for (int i = 0; i < 20; ++i) chunk[static_cast<size_t>(i)] = static_cast<int32_t>(rng() % V), pos[static_cast<size_t>(i)] = i;
        std::vector<float> first_alone, first_in_chunk;
        for (int64_t n : {int64_t{1}, int64_t{20}}) {
            auto kv = ContiguousKv::create(model.kv_shape(1), 32);
            ASSERT_TRUE(kv.ok());
            std::vector<int8_t> want(static_cast<size_t>(n), 0);
            want[0] = 1;
            ASSERT_TRUE(model.forward(Batch{chunk.data(), pos.data(), seq.data(), n, want.data()}, **kv, *ws, pool).ok());
            (n == 1 ? first_alone : first_in_chunk).assign(ws->logits(), ws->logits() + V);
        }
        EXPECT_EQ(0, std::memcmp(first_alone.data(), first_in_chunk.data(), V * sizeof(float)))
            << type_name(type) << ": a token alone vs inside a 20-token prefill chunk";
    }
}

TEST(ContiguousKv, LanesAreDisjointAndSized) {
    KvShape shape{3, 2, 2, 8};
    auto r = ContiguousKv::create(shape, 5);
    ASSERT_TRUE(r.ok()) << r.status().message();
    ContiguousKv &kv = *r.value();
    // Fill every lane with its own value, then read all back.
    const auto tag = [](int s, int l, int h, int k) { return static_cast<float>(((s * 2 + l) * 2 + h) * 2 + k + 1); };
    for (int s = 0; s < 3; ++s)
        for (int l = 0; l < 2; ++l)
            for (int h = 0; h < 2; ++h) {
                std::fill_n(kv.k_lane(s, l, h), 5 * 8, tag(s, l, h, 0));
                std::fill_n(kv.v_lane(s, l, h), 5 * 8, tag(s, l, h, 1));
            }
    for (int s = 0; s < 3; ++s)
        for (int l = 0; l < 2; ++l)
            for (int h = 0; h < 2; ++h)
                for (int i = 0; i < 5 * 8; ++i) {
                    ASSERT_EQ(kv.k_lane(s, l, h)[i], tag(s, l, h, 0));
                    ASSERT_EQ(kv.v_lane(s, l, h)[i], tag(s, l, h, 1));
                }
    EXPECT_TRUE(kv.reserve(1, 5).ok());
    Status st = kv.reserve(1, 6);
    EXPECT_FALSE(st.ok());
    kv.set_n_pos(2, 4);
    EXPECT_EQ(kv.n_pos(2), 4);
    kv.clear(2);
    EXPECT_EQ(kv.n_pos(2), 0);
}

TEST(ContiguousKv, ImpossibleSizesAreErrors) {
    EXPECT_FALSE(ContiguousKv::create(KvShape{0, 2, 2, 8}, 5).ok());
    EXPECT_FALSE(ContiguousKv::create(KvShape{1, 2, 2, 8}, 0).ok());
    auto huge = ContiguousKv::create(KvShape{1 << 20, 1 << 10, 64, 128}, int64_t{1} << 30);
    ASSERT_FALSE(huge.ok());
    EXPECT_NE(huge.status().message().find("overflows"), std::string::npos) << huge.status().message();
}

}  // namespace
}  // namespace sieve
