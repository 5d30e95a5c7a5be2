// KV eviction (src/sieve/sparse/): the selection pieces against brute force,
// the policy specs and their errors, the forward pass's attention sums
// against probabilities computed here from the model's own q and k, and the
// policies inside the engine on stories260K: a budget that covers the
// sequence is the dense model bit for bit, budgets shrink the lanes (and the
// pages) as specified, sliding policies stay bounded while decoding, and 32
// concurrent requests with random policies, cancellations and preemption all
// end as asked with every page back in the pool.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine_test_util.h"
#include "sieve/engine/engine.h"
#include "sieve/gguf/gguf.h"
#include "sieve/kv/contiguous_kv.h"
#include "sieve/model/model.h"
#include "sieve/sparse/eviction.h"
#include "sieve/sparse/policy_spec.h"
#include "sieve/sparse/select.h"
#include "sieve/tokenizer/tokenizer.h"

namespace sieve {
namespace {

const std::string k_model = std::string(SIEVE_TEST_MODELS) + "/stories260K.gguf";

std::vector<float> random_scores(int64_t n, uint32_t seed, int distinct = 0) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(0.01f, 1.0f);
    std::vector<float> s(static_cast<size_t>(n));
    for (auto &x : s) x = distinct > 0 ? static_cast<float>(rng() % static_cast<uint32_t>(distinct) + 1) : u(rng);
    return s;
}

TEST(SparseSelect, MaxPoolMatchesBruteForce) {
    for (int64_t n : {1, 2, 7, 8, 100, 1001}) {
        for (int64_t kernel : {1, 3, 7, 9, 2001}) {
            const auto s = random_scores(n, static_cast<uint32_t>(n * 31 + kernel));
            std::vector<float> out(static_cast<size_t>(n));
            sparse::max_pool(s.data(), n, kernel, out.data());
            for (int64_t j = 0; j < n; ++j) {
                float m = -1.0f;
                for (int64_t i = std::max<int64_t>(0, j - kernel / 2); i <= std::min(n - 1, j + kernel / 2); ++i)
                    m = std::max(m, s[static_cast<size_t>(i)]);
                ASSERT_EQ(out[static_cast<size_t>(j)], m) << "n " << n << " kernel " << kernel << " j " << j;
            }
        }
    }
}

// avg_pool is torch's avg_pool1d(kernel, padding = kernel / 2, stride 1)
// with the padding's zeros counted: an edge key's window sums fewer keys but
// is still divided by the kernel.
TEST(SparseSelect, AvgPoolCountsThePaddingLikeTorch) {
    for (int64_t n : {1, 2, 5, 64, 1000}) {
        for (int64_t kernel : {1, 3, 5, 7, 2001}) {
            const auto s = random_scores(n, static_cast<uint32_t>(n * 17 + kernel));
            std::vector<float> out(static_cast<size_t>(n));
            sparse::avg_pool(s.data(), n, kernel, out.data());
            for (int64_t j = 0; j < n; ++j) {
                double sum = 0.0;
                for (int64_t i = j - kernel / 2; i <= j + kernel / 2; ++i)
                    sum += i >= 0 && i < n ? static_cast<double>(s[static_cast<size_t>(i)]) : 0.0;
                ASSERT_NEAR(out[static_cast<size_t>(j)], sum / static_cast<double>(kernel), 1e-6 * (1.0 + sum))
                    << "n " << n << " kernel " << kernel << " j " << j;
            }
        }
    }
    // An edge key averages in zeros: with equal scores everywhere the first
    // and last keys score (r + 1) / kernel of a middle one.
    std::vector<float> flat(9, 1.0f), out(9);
    sparse::avg_pool(flat.data(), 9, 5, out.data());
    EXPECT_FLOAT_EQ(out[0], 3.0f / 5.0f);
    EXPECT_FLOAT_EQ(out[4], 1.0f);
    EXPECT_FLOAT_EQ(out[8], 3.0f / 5.0f);
}

TEST(SparseSelect, GroupScoresMeanAndMax) {
    const auto a = random_scores(37, 1), b = random_scores(37, 2), c = random_scores(37, 3);
    const float *heads[] = {a.data(), b.data(), c.data()};
    std::vector<float> mean(37), mx(37);
    sparse::group_scores(heads, 3, 37, sparse::GroupAgg::mean, mean.data());
    sparse::group_scores(heads, 3, 37, sparse::GroupAgg::max, mx.data());
    for (size_t j = 0; j < 37; ++j) {
        EXPECT_NEAR(mean[j], (a[j] + b[j] + c[j]) / 3.0f, 1e-6f);
        EXPECT_EQ(mx[j], std::max({a[j], b[j], c[j]}));
    }
}

// keep_rows: ascending, sinks and recent rows in, and no row left out scores
// above one taken (ties broken towards the lower row).
TEST(SparseSelect, KeepRowsTakesTheTopScoresPlusSinkAndRecent) {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 300; ++trial) {
        const int64_t n = 1 + static_cast<int64_t>(rng() % 300);
        const int64_t keep = static_cast<int64_t>(rng() % static_cast<uint32_t>(n + 5));
        const int64_t sink = keep > 0 ? static_cast<int64_t>(rng() % static_cast<uint32_t>(keep / 2 + 1)) : 0;
        const int64_t recent = keep - sink > 0 ? static_cast<int64_t>(rng() % static_cast<uint32_t>(keep - sink + 1)) : 0;
        const auto s = random_scores(n, static_cast<uint32_t>(trial), trial % 2 ? 5 : 0);  // odd trials: many ties
        const std::vector<int32_t> rows = sparse::keep_rows(s.data(), n, keep, sink, recent);
        ASSERT_EQ(static_cast<int64_t>(rows.size()), std::min(n, keep));
        ASSERT_TRUE(std::is_sorted(rows.begin(), rows.end()));
        ASSERT_TRUE(std::adjacent_find(rows.begin(), rows.end()) == rows.end());
        if (keep >= n) continue;
        std::vector<char> in(static_cast<size_t>(n), 0);
        for (int32_t r : rows) in[static_cast<size_t>(r)] = 1;
        for (int64_t j = 0; j < sink; ++j) ASSERT_TRUE(in[static_cast<size_t>(j)]);
        for (int64_t j = n - recent; j < n; ++j) ASSERT_TRUE(in[static_cast<size_t>(j)]);
        for (int64_t out = sink; out < n - recent; ++out) {
            if (in[static_cast<size_t>(out)]) continue;
            for (int64_t t = sink; t < n - recent; ++t) {
                if (!in[static_cast<size_t>(t)]) continue;
                const float so = s[static_cast<size_t>(out)], st = s[static_cast<size_t>(t)];
                ASSERT_TRUE(st > so || (st == so && t < out)) << "row " << out << " left out, " << t << " taken";
            }
        }
    }
}

TEST(SparseSelect, PyramidBudgetFallsWithDepthAndKeepsTheTotal) {
    for (int64_t L : {5, 24, 30}) {
        for (int64_t mean : {64, 409, 2000}) {
            int64_t total = 0;
            for (int64_t l = 0; l < L; ++l) {
                const int64_t b = sparse::pyramid_budget(mean, 32, 20.0, l, L);
                total += b;
                if (l > 0) {
                    EXPECT_LE(b, sparse::pyramid_budget(mean, 32, 20.0, l - 1, L));
                }
                EXPECT_GE(b, 32);
            }
            // Same total up to one row of rounding per layer.
            EXPECT_LE(total, mean * L);
            EXPECT_GE(total, mean * L - L);
        }
    }
}

TEST(SparseSpec, EveryPolicyParsesAndMakes) {
    for (const char *text : {"streaming", "streaming:sink=4,recent=60", "snapkv:keep=0.1", "snapkv:budget=64,window=8,pool=3,agg=max",
                             "pyramidkv:keep=0.2,beta=10", "layerwise:keep=0.1,full_layers=2", "h2o:budget=50,recent=10",
                             "h2o:keep=0.5"}) {
        Result<KvPolicySpec> s = kv_policy_spec_parse(text);
        ASSERT_TRUE(s.ok()) << text << ": " << s.status().message();
        Result<KvPolicyPtr> p = kv_policy_make(*s);
        ASSERT_TRUE(p.ok()) << text << ": " << p.status().message();
        ASSERT_TRUE(*p) << text;
        EXPECT_EQ((*p)->name(), kv_policy_spec_label(*s));
        // The label parses back to the same policy.
        Result<KvPolicySpec> again = kv_policy_spec_parse((*p)->name());
        ASSERT_TRUE(again.ok());
        EXPECT_EQ(kv_policy_spec_label(*again), (*p)->name());
    }
}

TEST(SparseSpec, BadValuesNameTheKeyAndWhatIsAccepted) {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"snapkv:keep=0", "keep=0: expected a number in (0, 1]"},
        {"snapkv:keep=1.5", "keep=1.5"},
        {"snapkv:keep=abc", "keep=abc"},
        {"snapkv:keep=0.1,budget=10", "not both"},
        {"snapkv:budget=0", "budget=0: expected an integer"},
        {"snapkv:pool=4", "pool=4: expected an odd"},
        {"snapkv:agg=median", "agg=median: expected mean or max"},
        {"snapkv:pooling=median", "pooling=median: expected max or avg"},
        {"snapkv:window=0", "window=0"},
        {"pyramidkv:beta=0.5", "beta=0.5"},
        {"streaming:window=8", "streaming has no key 'window'"},
        {"streaming:recent=10,keep=0.5", "not both"},
        {"streaming:budget=4,sink=4", "sink=4 must be below budget=4"},
        {"h2o:budget=10,recent=11", "recent=11 exceeds budget=10"},
        {"layerwise:full_layers=-1", "full_layers=-1"},
    };
    for (const auto &[text, want] : cases) {
        Result<KvPolicySpec> s = kv_policy_spec_parse(text);
        std::string msg;
        if (!s.ok()) {
            msg = s.status().message();
        } else {
            Result<KvPolicyPtr> p = kv_policy_make(*s);
            ASSERT_FALSE(p.ok()) << text << " was accepted";
            msg = p.status().message();
        }
        EXPECT_NE(msg.find(want), std::string::npos) << text << ": " << msg;
    }
}

TEST(SparseSpec, BudgetsPerLayer) {
    auto make = [](const char *text) {
        Result<KvPolicyPtr> p = kv_policy_make(*kv_policy_spec_parse(text));
        EXPECT_TRUE(p.ok());
        return *p;
    };
    const KvPolicyPtr lw = make("layerwise:keep=0.1");
    EXPECT_EQ(lw->kept_rows(1000, 0, 10), 1000);
    EXPECT_EQ(lw->kept_rows(1000, 2, 10), 1000);
    EXPECT_EQ(lw->kept_rows(1000, 3, 10), 100);
    const KvPolicyPtr sk = make("snapkv:budget=300");
    EXPECT_EQ(sk->kept_rows(1000, 0, 10), 300);
    EXPECT_EQ(sk->kept_rows(200, 0, 10), 200);      // a budget past the prompt keeps it all
    EXPECT_EQ(sk->decode_rows(1000, 50, 0, 10), 350);
    const KvPolicyPtr st = make("streaming:sink=4,recent=96");
    EXPECT_EQ(st->kept_rows(1000, 5, 10), 100);
    // Slides: never more than the budget + the slide steps while decoding.
    EXPECT_EQ(st->decode_rows(1000, 500, 5, 10), 100 + EvictionPolicy::k_slide + 1);
    EXPECT_EQ(st->decode_rows(1000, 10, 5, 10), 110);
}

class SparseModelTest : public ::testing::Test {
protected:
    void SetUp() override {
        auto f = GgufFile::open(k_model);
        ASSERT_TRUE(f.ok()) << f.status().message();
        file_ = std::move(f.value());
        auto m = Model::load(*file_);
        ASSERT_TRUE(m.ok()) << m.status().message();
        model_ = std::move(m.value());
        auto t = Tokenizer::from_gguf(*file_);
        ASSERT_TRUE(t.ok());
        tok_ = std::move(t.value());
        n_vocab_ = static_cast<int32_t>(model_->config().n_vocab);
    }

    std::vector<int32_t> random_prompt(int64_t n, uint32_t seed) const {
        return random_prompt_ids(n, seed, n_vocab_, tok_->bos_id());
    }

    static GenRequest greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
        return greedy_request(std::move(prompt), max_tokens);
    }

    std::unique_ptr<Engine> make_engine(EngineOptions o) {
        o.n_threads = 2;
        auto e = Engine::create(*model_, *tok_, o);
        EXPECT_TRUE(e.ok()) << e.status().message();
        return e.ok() ? std::move(e.value()) : nullptr;
    }

    static KvPolicyPtr policy(const std::string &text) {
        Result<KvPolicySpec> s = kv_policy_spec_parse(text);
        EXPECT_TRUE(s.ok()) << s.status().message();
        Result<KvPolicyPtr> p = kv_policy_make(*s);
        EXPECT_TRUE(p.ok()) << p.status().message();
        return p.ok() ? *p : nullptr;
    }

    ThreadPool pool_{2};
    std::unique_ptr<GgufFile> file_;
    std::unique_ptr<Model> model_;
    std::unique_ptr<Tokenizer> tok_;
    int32_t n_vocab_ = 0;
};

// The forward pass's sums against probabilities computed here, in double,
// from the q and k the model hands its activation callback: a prompt of 100
// tokens in chunks of 37 with the window's 32 queries spanning a chunk
// boundary, f32 rows.
TEST_F(SparseModelTest, ScoreSinkMatchesProbabilitiesFromTheModelsQandK) {
    const ModelConfig &c = model_->config();
    const int64_t n = 100, chunk = 37, window = 32, hd = c.head_dim, group = c.n_head / c.n_head_kv;
    auto kv = ContiguousKv::create(model_->kv_shape(1), n);
    ASSERT_TRUE(kv.ok());
    auto ws = model_->make_workspace(chunk);
    std::vector<float> q_all(static_cast<size_t>(c.n_layer * n * c.q_dim())), k_all(static_cast<size_t>(c.n_layer * n * c.kv_dim()));
    int64_t base = 0;
    ws->callback = [&](const char *name, int il, const float *data, int64_t rows, int64_t cols) {
        if (std::strcmp(name, "q") == 0)
            std::copy(data, data + rows * cols, q_all.begin() + (il * n + base) * c.q_dim());
        if (std::strcmp(name, "k") == 0)
            std::copy(data, data + rows * cols, k_all.begin() + (il * n + base) * c.kv_dim());
    };
    AttnScoreSink sink;
    std::vector<float> acc(static_cast<size_t>(c.n_layer * c.n_head * (n + 3)), 0.0f);
    sink.from_pos = n - window;
    sink.cap = n + 3;
    sink.acc = acc.data();
    const std::vector<int32_t> prompt = random_prompt(n, 11);
    for (base = 0; base < n; base += chunk) {
        const int64_t m = std::min(chunk, n - base);
        std::vector<int32_t> pos, seq(static_cast<size_t>(m), 0);
        for (int64_t i = 0; i < m; ++i) pos.push_back(static_cast<int32_t>(base + i));
        std::vector<AttnScoreSink *> sinks(static_cast<size_t>(m), &sink);
        Batch b{prompt.data() + base, pos.data(), seq.data(), m, nullptr, sinks.data()};
        ASSERT_TRUE(model_->forward(b, **kv, *ws, pool_).ok());
    }
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    for (int64_t il = 0; il < c.n_layer; ++il) {
        for (int64_t h = 0; h < c.n_head; ++h) {
            std::vector<double> want(static_cast<size_t>(n), 0.0);
            for (int64_t i = n - window; i < n; ++i) {
                const float *q = q_all.data() + (il * n + i) * c.q_dim() + h * hd;
                std::vector<double> s(static_cast<size_t>(i + 1));
                double mx = -INFINITY, l = 0.0;
                for (int64_t j = 0; j <= i; ++j) {
                    const float *k = k_all.data() + (il * n + j) * c.kv_dim() + (h / group) * hd;
                    double d = 0.0;
                    for (int64_t x = 0; x < hd; ++x) d += static_cast<double>(q[x]) * k[x];
                    s[static_cast<size_t>(j)] = d * scale;
                    mx = std::max(mx, d * scale);
                }
                for (double v : s) l += std::exp(v - mx);
                for (int64_t j = 0; j <= i; ++j) want[static_cast<size_t>(j)] += std::exp(s[static_cast<size_t>(j)] - mx) / l;
            }
            const float *got = acc.data() + (il * c.n_head + h) * (n + 3);
            double sum = 0.0;
            for (int64_t j = 0; j < n; ++j) {
                ASSERT_NEAR(got[j], want[static_cast<size_t>(j)], 2e-5 + 1e-4 * want[static_cast<size_t>(j)])
                    << "layer " << il << " head " << h << " row " << j;
                sum += got[j];
            }
            EXPECT_NEAR(sum, static_cast<double>(window), 1e-3);  // each query's probabilities sum to 1
            for (int64_t j = n; j < n + 3; ++j) EXPECT_EQ(got[j], 0.0f);
        }
    }
}

// A too-small sink is an error before anything is written.
TEST_F(SparseModelTest, ScoreSinkTooSmallIsAnError) {
    auto kv = ContiguousKv::create(model_->kv_shape(1), 64);
    ASSERT_TRUE(kv.ok());
    auto ws = model_->make_workspace(64);
    std::vector<float> acc(static_cast<size_t>(model_->config().n_layer * model_->config().n_head * 10));
    AttnScoreSink sink{0, 10, acc.data()};
    const std::vector<int32_t> prompt = random_prompt(20, 3);
    std::vector<int32_t> pos(20), seq(20, 0);
    std::iota(pos.begin(), pos.end(), 0);
    std::vector<AttnScoreSink *> sinks(20, &sink);
    Batch b{prompt.data(), pos.data(), seq.data(), 20, nullptr, sinks.data()};
    Status st = model_->forward(b, **kv, *ws, pool_);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("score sink holds 10 rows"), std::string::npos) << st.message();
    EXPECT_EQ((*kv)->n_pos(0), 0);
}

// Logits of every step, per request.
struct LogitLog {
    std::vector<std::vector<float>> steps;
};

std::vector<LogitLog> run_with_logits(Engine &e, std::vector<GenRequest> reqs, std::vector<std::vector<GenEvent>> *evs) {
    std::vector<LogitLog> logs(reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i)
        reqs[i].on_logits = [&logs, i](const float *l, int64_t nv) { logs[i].steps.emplace_back(l, l + nv); };
    Collector c;
    std::vector<GenCallback> cbs(reqs.size(), c.callback());
    auto ids = e.submit_all(std::move(reqs), cbs);
    EXPECT_TRUE(ids.ok()) << ids.status().message();
    if (!ids.ok()) return logs;
    EXPECT_TRUE(c.wait(static_cast<int>(ids->size())));
    for (uint64_t id : *ids) evs->push_back(c.events(id));
    return logs;
}

// Every policy whose budget covers prompt + generated tokens keeps every row:
// the logits of every step are the dense engine's, bit for bit (the scores
// are computed but nothing is compacted).
TEST_F(SparseModelTest, BudgetCoveringTheSequenceIsDenseBitForBit) {
    EngineOptions o;
    o.max_seqs = 4;
    o.max_ctx = 512;
    o.max_batch_tokens = 48;
    std::vector<GenRequest> reqs;
    for (int i = 0; i < 4; ++i) reqs.push_back(greedy(random_prompt(90 + 23 * i, 40 + static_cast<uint32_t>(i)), 24));
    auto dense = make_engine(o);
    std::vector<std::vector<GenEvent>> dense_evs;
    const auto want = run_with_logits(*dense, reqs, &dense_evs);
    for (const char *text : {"streaming:budget=400", "snapkv:budget=400", "pyramidkv:budget=400", "layerwise:budget=400",
                             "h2o:budget=400", "snapkv:keep=1", "h2o:keep=1,recent=0", "quest:budget=400,page=16",
                             "quest:budget=512,page=64,full_layers=0,interval=1"}) {
        std::vector<GenRequest> r = reqs;
        for (GenRequest &x : r) x.kv_policy = policy(text);
        std::vector<std::vector<GenEvent>> evs;
        auto e = make_engine(o);
        const auto got = run_with_logits(*e, r, &evs);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_EQ(got[i].steps.size(), want[i].steps.size()) << text;
            for (size_t t = 0; t < got[i].steps.size(); ++t)
                ASSERT_EQ(0, std::memcmp(got[i].steps[t].data(), want[i].steps[t].data(), want[i].steps[t].size() * sizeof(float)))
                    << text << ": request " << i << " step " << t << " differs from dense";
            EXPECT_EQ(evs[i].back().kv_rows_kept, evs[i].back().kv_rows_seen) << text;
        }
        e->shutdown(true);
        EXPECT_EQ(e->stats().kv_pages_used, 0);
    }
}

// Page selection with a budget below the sequence: nothing is evicted (every
// row stays, the pages stay mapped), the decode steps read a subset, so
// their logits leave the dense ones but stay finite; a request's output does
// not depend on the requests decoding beside it.
TEST_F(SparseModelTest, QuestKeepsEveryRowAndReadsASubset) {
    EngineOptions o;
    o.max_seqs = 4;
    o.max_ctx = 512;
    o.max_batch_tokens = 64;
    std::vector<GenRequest> reqs;
    for (int i = 0; i < 3; ++i) reqs.push_back(greedy(random_prompt(200 + 37 * i, 60 + static_cast<uint32_t>(i)), 40));
    auto dense = make_engine(o);
    std::vector<std::vector<GenEvent>> dense_evs, alone_evs;
    const auto want = run_with_logits(*dense, reqs, &dense_evs);
    std::vector<GenRequest> r = reqs;
    for (GenRequest &x : r) x.kv_policy = policy("quest:budget=64,page=16,full_layers=1,interval=2");
    std::vector<std::vector<GenEvent>> evs;
    auto e = make_engine(o);
    const auto got = run_with_logits(*e, r, &evs);
    ASSERT_EQ(got.size(), want.size());
    int differ = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i].steps.size(), want[i].steps.size());
        // The prompt's logits (step 0) come from prefill: dense.
        EXPECT_EQ(0, std::memcmp(got[i].steps[0].data(), want[i].steps[0].data(), want[i].steps[0].size() * sizeof(float)));
        for (size_t t = 1; t < got[i].steps.size(); ++t) {
            for (float x : got[i].steps[t]) ASSERT_TRUE(std::isfinite(x)) << "request " << i << " step " << t;
            differ += std::memcmp(got[i].steps[t].data(), want[i].steps[t].data(), want[i].steps[t].size() * sizeof(float)) != 0;
        }
        EXPECT_EQ(evs[i].back().kv_rows_kept, evs[i].back().kv_rows_seen) << "page selection evicts nothing";
    }
    EXPECT_GT(differ, 0) << "a 64-row budget over 200+ rows must change some decode step";
    // Alone, each request gives the same logits as in the batch.
    for (size_t i = 0; i < r.size(); ++i) {
        auto e1 = make_engine(o);
        const auto alone = run_with_logits(*e1, {r[i]}, &alone_evs);
        ASSERT_EQ(alone[0].steps.size(), got[i].steps.size());
        for (size_t t = 0; t < got[i].steps.size(); ++t)
            ASSERT_EQ(0, std::memcmp(alone[0].steps[t].data(), got[i].steps[t].data(), got[i].steps[t].size() * sizeof(float)))
                << "request " << i << " step " << t;
    }
    e->shutdown(true);
    EXPECT_EQ(e->stats().kv_pages_used, 0);
}

// After prefill every lane holds what the policy's budget says (per layer);
// the pages come back; sliding policies stay within budget + k_slide while
// decoding; the stats count the compression per policy.
TEST_F(SparseModelTest, BudgetsShrinkTheLanesAndReturnPages) {
    const ModelConfig &c = model_->config();
    const int64_t n_prompt = 300, n_gen = 100;
    for (const char *text : {"streaming:budget=40", "snapkv:keep=0.1", "pyramidkv:keep=0.2", "layerwise:budget=30,full_layers=1",
                             "h2o:budget=50,recent=20"}) {
        const KvPolicyPtr p = policy(text);
        EngineOptions o;
        o.max_seqs = 2;
        o.max_ctx = 512;
        o.max_batch_tokens = 64;
        o.kv_page_bytes = 4096;
        o.kv_policy = p;
        auto e = make_engine(o);
        GenRequest r = greedy(random_prompt(n_prompt, 5), n_gen);
        std::vector<std::vector<int64_t>> rows(static_cast<size_t>(c.n_layer));
        int64_t pages_after_prefill = -1;
        r.on_prefilled = [&](const KvCache &kv, int slot) {
            for (int64_t l = 0; l < c.n_layer; ++l)
                for (int64_t g = 0; g < c.n_head_kv; ++g) rows[static_cast<size_t>(l)].push_back(kv.n_rows(slot, l, g));
        };
        Collector col;
        ASSERT_TRUE(e->submit(r, col.callback()).ok());
        ASSERT_TRUE(col.wait(1));
        (void)pages_after_prefill;
        for (int64_t l = 0; l < c.n_layer; ++l)
            for (int64_t g = 0; g < c.n_head_kv; ++g)
                EXPECT_EQ(rows[static_cast<size_t>(l)][static_cast<size_t>(g)], p->kept_rows(n_prompt, l, c.n_layer))
                    << text << " layer " << l << " head " << g;
        const GenEvent fin = col.events(1).back();
        ASSERT_EQ(fin.finish_reason, FinishReason::length) << fin.error;
        int64_t max_kept = 0;
        for (int64_t l = 0; l < c.n_layer; ++l) max_kept += c.n_head_kv * p->decode_rows(n_prompt, n_gen, l, c.n_layer);
        EXPECT_LE(fin.kv_rows_kept, max_kept) << text;
        EXPECT_EQ(fin.kv_rows_seen, c.n_layer * c.n_head_kv * (n_prompt + n_gen - 1)) << text;
        EXPECT_LT(fin.kv_rows_kept, fin.kv_rows_seen / 2) << text;
        e->shutdown(true);
        const EngineStats s = e->stats();
        EXPECT_EQ(s.kv_pages_used, 0);
        EXPECT_GT(s.kv_pages_evicted, 0) << text;
        ASSERT_EQ(s.policies.size(), 1u);
        EXPECT_EQ(s.policies[0].policy, p->name());
        EXPECT_EQ(s.policies[0].requests, 1);
        EXPECT_EQ(s.policies[0].rows_seen, c.n_layer * c.n_head_kv * n_prompt);
        int64_t kept = 0;
        for (int64_t l = 0; l < c.n_layer; ++l) kept += c.n_head_kv * p->kept_rows(n_prompt, l, c.n_layer);
        EXPECT_EQ(s.policies[0].rows_kept, kept);
    }
}

// 32 clients with random policies (per request, over an engine default),
// some cancelled mid-way, in a pool small enough to preempt: each request
// finishes or is cancelled as asked, and every page and swap byte comes back.
TEST_F(SparseModelTest, ConcurrentRandomPoliciesCancellationsAndPreemption) {
    const char *specs[] = {"dense", "streaming:budget=40", "snapkv:keep=0.1", "pyramidkv:keep=0.3", "layerwise:keep=0.2",
                           "h2o:budget=60", "snapkv:budget=500", "streaming:sink=2,recent=30",
                           "quest:budget=64,page=16,full_layers=0,interval=2"};
    for (int64_t swap : {int64_t{1} << 30, int64_t{0}}) {
        EngineOptions o;
        o.max_seqs = 12;
        o.max_ctx = 512;
        o.max_batch_tokens = 96;
        o.kv_page_bytes = 4096;
        o.swap_bytes = swap;
        o.kv_policy = policy("snapkv:keep=0.5");
        o.kv_type = cpu::RowType::f32;  // 128 rows a page: growth crosses pages often
        const KvShape shape = model_->kv_shape(1, o.kv_type);
        o.kv_memory_bytes =
            shape.n_layer * shape.n_head_kv * 2 * ((520 * shape.k_row_bytes() + 4095) / 4096) * 4096;
        auto e = make_engine(o);
        std::mt19937 rng(99 + static_cast<uint32_t>(swap & 1));
        Collector col;
        std::vector<uint64_t> ids;
        std::vector<bool> cancel_it;
        for (int i = 0; i < 32; ++i) {
            GenRequest r = greedy(random_prompt(60 + static_cast<int64_t>(rng() % 200), static_cast<uint32_t>(i)), 60 + rng() % 140);
            const int k = static_cast<int>(rng() % 10);
            if (k < 9) r.kv_policy = std::string(specs[k]) == "dense" ? KvPolicyPtr() : policy(specs[k]);
            auto id = e->submit(r, col.callback());
            ASSERT_TRUE(id.ok()) << id.status().message();
            ids.push_back(*id);
            cancel_it.push_back(rng() % 4 == 0);
        }
        for (size_t i = 0; i < ids.size(); ++i)
            if (cancel_it[i]) {
                std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 20));
                e->cancel(ids[i]);
            }
        ASSERT_TRUE(col.wait(32)) << "requests did not finish";
        for (size_t i = 0; i < ids.size(); ++i) {
            const auto evs = col.events(ids[i]);
            ASSERT_FALSE(evs.empty());
            const FinishReason fr = evs.back().finish_reason;
            if (cancel_it[i])
                EXPECT_TRUE(fr == FinishReason::cancelled || fr == FinishReason::length) << finish_reason_name(fr);
            else
                EXPECT_EQ(fr, FinishReason::length) << "request " << i << ": " << evs.back().error;
        }
        e->shutdown(true);
        const EngineStats s = e->stats();
        EXPECT_EQ(s.kv_pages_used, 0);
        EXPECT_EQ(s.swap_bytes_used, 0);
        EXPECT_EQ(s.n_running, 0);
        EXPECT_GT(s.n_preemptions, 0) << "the pool was meant to force preemption";
    }
}

}  // namespace
}  // namespace sieve
