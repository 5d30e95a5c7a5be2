// Head profiles, calibration and the lserve policy (stories260K): profiles
// load or fail with a reason, calibration is deterministic and scores what
// it says, streaming heads' lanes hold sink + recent rows while the others
// keep everything, and with no streaming head lserve is quest bit for bit
// (and with a budget over the sequence the dense engine).
#include <gtest/gtest.h>

#include <cmath>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "engine_test_util.h"
#include "sieve/engine/engine.h"
#include "sieve/eval/calibrate.h"
#include "sieve/gguf/gguf.h"
#include "sieve/kv/contiguous_kv.h"
#include "sieve/model/model.h"
#include "sieve/sparse/head_profile.h"
#include "sieve/sparse/lserve.h"
#include "sieve/sparse/policy_spec.h"
#include "sieve/tokenizer/tokenizer.h"

namespace sieve {
namespace {



std::string temp_path(const std::string &name) {
    const char *dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/sieve_test_lserve_" + std::to_string(::getpid()) + "_" + name;
}

void write_file(const std::string &path, const std::string &text) {
    std::ofstream f(path);
    f << text;
}

// The lowest and the highest score of a profile; every score must be finite and >= 0.
std::pair<double, double> score_range(const HeadProfile &p) {
    double lo = 1e9, hi = -1;
    for (double s : p.scores) {
        EXPECT_TRUE(std::isfinite(s) && s >= 0.0) << s;
        lo = std::min(lo, s);
        hi = std::max(hi, s);
    }
    return {lo, hi};
}

TEST(HeadProfile, LoadsWhatItWritesAndNamesWhatIsWrong) {
    HeadProfile p;
    p.model = "m.gguf";
    p.method = "test";
    p.n_layer = 3;
    p.n_head_kv = 2;
    p.sink = 4;
    p.recent = 16;
    p.scores = {0.5, 0.1, 0.3, 0.3, 0.9, 0.05};
    const std::string path = temp_path("ok.json");
    write_file(path, head_profile_json(p));
    Result<HeadProfile> q = head_profile_load(path);
    ASSERT_TRUE(q.ok()) << q.status().message();
    EXPECT_EQ(q->scores, p.scores);
    EXPECT_EQ(q->n_layer, 3);
    EXPECT_EQ(q->sink, 4);
    // The lowest half: 0.05 (2,1), 0.1 (0,1), then of the tied 0.3s the later layer's head (1,1).
    const std::vector<char> m = head_profile_streaming(*q, 0.5);
    EXPECT_EQ(m, (std::vector<char>{0, 1, 0, 1, 0, 1}));
    EXPECT_EQ(head_profile_streaming(*q, 0.0), std::vector<char>(6, 0));
    EXPECT_EQ(head_profile_streaming(*q, 1.0), std::vector<char>(6, 1));
    const std::pair<const char *, const char *> bad[] = {
        {"not json", "not a JSON object"},
        {R"({"format": "x", "version": 1})", "sieve-head-profile"},
        {R"({"format": "sieve-head-profile", "version": 1, "n_layer": 2, "n_head_kv": 1, "scores": [[1]]})",
         "n_layer rows"},
        {R"({"format": "sieve-head-profile", "version": 1, "n_layer": 1, "n_head_kv": 2, "scores": [[1, "a"]]})",
         "not a finite number"},
        {R"({"format": "sieve-head-profile", "version": 2})", "version"},
    };
    for (const auto &[text, want] : bad) {
        write_file(path, text);
        Result<HeadProfile> r = head_profile_load(path);
        ASSERT_FALSE(r.ok()) << text;
        EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
    }
    EXPECT_NE(head_profile_load(path + ".missing").status().message().find("cannot open"), std::string::npos);
    EXPECT_NE(head_profile_load("/dev/zero").status().message().find("larger than 16 MiB"), std::string::npos);
    std::remove(path.c_str());
}

class LServeTest : public ::testing::Test {
protected:
    void SetUp() override {
        auto f = GgufFile::open(std::string(SIEVE_TEST_MODELS) + "/stories260K.gguf");
        ASSERT_TRUE(f.ok());
        file_ = std::move(f.value());
        model_ = std::move(Model::load(*file_).value());
        tok_ = std::move(Tokenizer::from_gguf(*file_).value());
    }
    CalibrateOptions cal_options() const {
        CalibrateOptions o;
        o.ctx = {600};
        o.n_samples = 3;
        o.sink = 16;
        o.recent = 64;
        o.chunk = 128;
        return o;
    }
    KvPolicyPtr policy(const std::string &text) {
        Result<KvPolicySpec> s = kv_policy_spec_parse(text);
        EXPECT_TRUE(s.ok()) << s.status().message();
        Result<KvPolicyPtr> p = kv_policy_make(*s);
        EXPECT_TRUE(p.ok()) << p.status().message();
        return p.ok() ? *p : nullptr;
    }
    std::unique_ptr<Engine> engine(EngineOptions o) {
        o.n_threads = 2;
        auto e = Engine::create(*model_, *tok_, o);
        EXPECT_TRUE(e.ok()) << e.status().message();
        return std::move(e.value());
    }

    ThreadPool pool_{2};
    std::unique_ptr<GgufFile> file_;
    std::unique_ptr<Model> model_;
    std::unique_ptr<Tokenizer> tok_;
};

TEST_F(LServeTest, CalibrationIsDeterministicAndRanksHeads) {
    Result<HeadProfile> a = calibrate_heads(*model_, *tok_, nullptr, cal_options(), pool_);
    ASSERT_TRUE(a.ok()) << a.status().message();
    Result<HeadProfile> b = calibrate_heads(*model_, *tok_, nullptr, cal_options(), pool_);
    ASSERT_TRUE(b.ok());
    const ModelConfig &c = model_->config();
    ASSERT_EQ(static_cast<int64_t>(a->scores.size()), c.n_layer * c.n_head_kv);
    EXPECT_EQ(a->scores, b->scores) << "the same samples and threads give the same profile, bit for bit";
    // Another thread count splits the attention differently: the same up to rounding.
    ThreadPool one(1);
    Result<HeadProfile> d = calibrate_heads(*model_, *tok_, nullptr, cal_options(), one);
    ASSERT_TRUE(d.ok());
    for (size_t i = 0; i < a->scores.size(); ++i)
        EXPECT_NEAR(d->scores[i], a->scores[i], 1e-4 * a->scores[i] + 1e-9) << "head " << i;
    const auto [lo, hi] = score_range(*a);
    EXPECT_GT(hi, lo) << "heads differ in how much they need the whole context";
    // A pattern covering every row loses nothing: all scores 0.
    CalibrateOptions wide = cal_options();
    wide.recent = 4096;
    Result<HeadProfile> w = calibrate_heads(*model_, *tok_, nullptr, wide, pool_);
    ASSERT_TRUE(w.ok());
    for (double s : w->scores) EXPECT_EQ(s, 0.0);
    CalibrateOptions ppl = cal_options();
    ppl.task = "cwe";
    ppl.ctx = {600};
    EXPECT_TRUE(calibrate_heads(*model_, *tok_, nullptr, ppl, pool_).ok());
}

TEST_F(LServeTest, AnswerKlCalibrationIsDeterministicAndZeroWhereNothingIsCut) {
    CalibrateOptions o = cal_options();
    o.method = CalibrateMethod::answer_kl;
    o.tail = 24;
    Result<HeadProfile> a = calibrate_heads(*model_, *tok_, nullptr, o, pool_);
    ASSERT_TRUE(a.ok()) << a.status().message();
    Result<HeadProfile> b = calibrate_heads(*model_, *tok_, nullptr, o, pool_);
    ASSERT_TRUE(b.ok());
    const ModelConfig &c = model_->config();
    ASSERT_EQ(static_cast<int64_t>(a->scores.size()), c.n_layer * c.n_head_kv);
    EXPECT_EQ(a->scores, b->scores) << "the same samples and threads give the same profile, bit for bit";
    EXPECT_NE(a->method.find("answer_kl"), std::string::npos);
    EXPECT_NE(a->data_json.find("\"tail\":24"), std::string::npos) << a->data_json;
    const auto [lo, hi] = score_range(*a);
    EXPECT_GT(hi, 0.0) << "cutting a head's long-range rows moves the answer somewhere";
    EXPECT_GT(hi, lo);
    // Another thread count: the same up to rounding.
    ThreadPool one(1);
    Result<HeadProfile> d = calibrate_heads(*model_, *tok_, nullptr, o, one);
    ASSERT_TRUE(d.ok());
    for (size_t i = 0; i < a->scores.size(); ++i)
        EXPECT_NEAR(d->scores[i], a->scores[i], 1e-3 * a->scores[i] + 1e-7) << "head " << i;
    // A streaming pattern that covers every row changes nothing: the masked
    // runs are the dense run bit for bit, every KL exactly 0.
    CalibrateOptions wide = o;
    wide.recent = 4096;
    Result<HeadProfile> w = calibrate_heads(*model_, *tok_, nullptr, wide, pool_);
    ASSERT_TRUE(w.ok());
    for (double s : w->scores) EXPECT_EQ(s, 0.0);
    // tail 0 reruns only the answer; a tail longer than the prompt reruns it all.
    for (int64_t tail : {int64_t{0}, int64_t{100000}}) {
        CalibrateOptions t = o;
        t.tail = tail;
        t.n_samples = 1;
        Result<HeadProfile> r = calibrate_heads(*model_, *tok_, nullptr, t, pool_);
        ASSERT_TRUE(r.ok()) << "tail " << tail << ": " << r.status().message();
        EXPECT_GT(score_range(*r).second, 0.0) << "tail " << tail;
    }
}

TEST_F(LServeTest, GreedyRoundsChooseInOrderAndScoreTheChosenSet) {
    CalibrateOptions o = cal_options();
    o.method = CalibrateMethod::answer_kl;
    o.tail = 24;
    o.n_samples = 2;
    Result<HeadProfile> single = calibrate_heads(*model_, *tok_, nullptr, o, pool_);
    ASSERT_TRUE(single.ok()) << single.status().message();
    CalibrateOptions g = o;
    g.rounds = 2;
    g.greedy_static = 0.5;
    Result<HeadProfile> a = calibrate_heads(*model_, *tok_, nullptr, g, pool_);
    ASSERT_TRUE(a.ok()) << a.status().message();
    Result<HeadProfile> b = calibrate_heads(*model_, *tok_, nullptr, g, pool_);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(a->scores, b->scores) << "greedy rounds are deterministic";
    EXPECT_NE(a->data_json.find("\"rounds\":2"), std::string::npos) << a->data_json;
    const ModelConfig &c = model_->config();
    const int64_t n = c.n_layer * c.n_head_kv, n_choose = (n + 1) / 2, first = (n_choose + 1) / 2;
    ASSERT_GE(n, 4);
    // Round 1 is the single-head scoring: its choice is the single profile's
    // lowest, with the same scores bit for bit.
    const double f1 = static_cast<double>(first) / static_cast<double>(n);
    const std::vector<char> r1 = head_profile_streaming(*a, f1);
    EXPECT_EQ(r1, head_profile_streaming(*single, f1));
    for (int64_t h = 0; h < n; ++h)
        if (r1[static_cast<size_t>(h)]) {
            EXPECT_EQ(a->scores[static_cast<size_t>(h)], single->scores[static_cast<size_t>(h)]) << "head " << h;
        }
    // The chosen set comes first in the profile's order, and an unchosen
    // head's score is the KL with it and the whole chosen set restricted.
    const std::vector<char> chosen = head_profile_streaming(*a, static_cast<double>(n_choose) / static_cast<double>(n));
    for (int64_t h = 0; h < n; ++h)
        if (r1[static_cast<size_t>(h)]) {
            EXPECT_TRUE(chosen[static_cast<size_t>(h)]) << "head " << h;
        }
    int64_t top = 0;
    for (int64_t h = 1; h < n; ++h)
        if (a->scores[static_cast<size_t>(h)] > a->scores[static_cast<size_t>(top)]) top = h;
    ASSERT_FALSE(chosen[static_cast<size_t>(top)]);
    std::vector<uint8_t> set(chosen.begin(), chosen.end());
    set[static_cast<size_t>(top)] = 1;
    Result<double> kl = calibrate_restricted_kl(*model_, *tok_, nullptr, g, set, pool_);
    ASSERT_TRUE(kl.ok()) << kl.status().message();
    EXPECT_EQ(*kl, a->scores[static_cast<size_t>(top)]);
    // The chosen set restricted moves the answer; nothing restricted is the dense run.
    Result<double> set_kl =
        calibrate_restricted_kl(*model_, *tok_, nullptr, g, std::vector<uint8_t>(chosen.begin(), chosen.end()), pool_);
    ASSERT_TRUE(set_kl.ok());
    EXPECT_GT(*set_kl, 0.0);
    Result<double> none = calibrate_restricted_kl(*model_, *tok_, nullptr, g, std::vector<uint8_t>(n, 0), pool_);
    ASSERT_TRUE(none.ok());
    EXPECT_EQ(*none, 0.0);
    // Rounds are answer_kl's only; a mask of the wrong size is an error.
    CalibrateOptions bad = g;
    bad.method = CalibrateMethod::attn_output;
    EXPECT_FALSE(calibrate_heads(*model_, *tok_, nullptr, bad, pool_).ok());
    EXPECT_FALSE(calibrate_restricted_kl(*model_, *tok_, nullptr, g, std::vector<uint8_t>(3, 1), pool_).ok());
}

TEST_F(LServeTest, StreamingHeadsHoldSinkAndRecentTheOthersEveryRow) {
    Result<HeadProfile> prof = calibrate_heads(*model_, *tok_, nullptr, cal_options(), pool_);
    ASSERT_TRUE(prof.ok());
    const std::string path = temp_path("prof.json");
    write_file(path, head_profile_json(*prof));
    const KvPolicyPtr p = policy("lserve:static=0.5,sink=8,recent=40,budget=64,page=16,profile=" + path);
    ASSERT_NE(p, nullptr);
    const auto &ls = static_cast<const LServePolicy &>(*p);
    const ModelConfig &c = model_->config();
    EXPECT_EQ(ls.n_streaming(), c.n_layer * c.n_head_kv / 2);
    EngineOptions o;
    o.max_seqs = 2;
    o.max_ctx = 512;
    o.max_batch_tokens = 64;
    o.kv_page_bytes = 4096;
    auto e = engine(o);
    const int64_t n_prompt = 300, n_gen = 90;
    GenRequest r = greedy_request(random_prompt_ids(n_prompt, 3, static_cast<int32_t>(c.n_vocab),
                                                                tok_->bos_id()),
                                        n_gen);
    r.kv_policy = p;
    std::vector<int64_t> rows;
    r.on_prefilled = [&](const KvCache &kv, int slot) {
        for (int64_t l = 0; l < c.n_layer; ++l)
            for (int64_t g = 0; g < c.n_head_kv; ++g) rows.push_back(kv.n_rows(slot, l, g));
    };
    Collector col;
    ASSERT_TRUE(e->submit(r, col.callback()).ok());
    ASSERT_TRUE(col.wait(1));
    const GenEvent fin = col.events(1).back();
    ASSERT_EQ(fin.finish_reason, FinishReason::length) << fin.error;
    for (int64_t l = 0; l < c.n_layer; ++l)
        for (int64_t g = 0; g < c.n_head_kv; ++g)
            EXPECT_EQ(rows[static_cast<size_t>(l * c.n_head_kv + g)], ls.streaming(l, g) ? 48 : n_prompt)
                << "layer " << l << " head " << g;
    // Streaming lanes slide: at most sink + recent + the slide, the rest keep every row.
    const int64_t n_seen = n_prompt + n_gen - 1, n_str = ls.n_streaming(), n_all = c.n_layer * c.n_head_kv;
    EXPECT_LE(fin.kv_rows_kept, (n_all - n_str) * n_seen + n_str * (48 + LServePolicy::k_slide + 1));
    EXPECT_GE(fin.kv_rows_kept, (n_all - n_str) * n_seen + n_str * 48);
    e->shutdown(true);
    EXPECT_EQ(e->stats().kv_pages_used, 0);

    // A profile for another shape is refused at validation, naming both shapes.
    HeadProfile other = *prof;
    other.n_layer += 1;
    other.scores.resize(other.scores.size() + static_cast<size_t>(other.n_head_kv), 0.0);
    write_file(path, head_profile_json(other));
    GenRequest bad = r;
    bad.kv_policy = policy("lserve:profile=" + path);
    auto e2 = engine(o);
    Collector col2;
    Result<uint64_t> id = e2->submit(bad, col2.callback());
    ASSERT_FALSE(id.ok());
    EXPECT_NE(id.status().message().find("make one for this model"), std::string::npos) << id.status().message();
    std::remove(path.c_str());
}

TEST_F(LServeTest, NoStreamingHeadsIsQuestAndWithEveryRowReadIsDense) {
    Result<HeadProfile> prof = calibrate_heads(*model_, *tok_, nullptr, cal_options(), pool_);
    ASSERT_TRUE(prof.ok());
    const std::string path = temp_path("prof0.json");
    write_file(path, head_profile_json(*prof));
    EngineOptions o;
    o.max_seqs = 3;
    o.max_ctx = 512;
    o.max_batch_tokens = 48;
    const ModelConfig &c = model_->config();
    // Pass 0 dense; 1 a budget over the sequence; 2 a budget of 64 rows with
    // every layer kept whole (full_layers, Quest's first layers read every
    // row): both dense bit for bit; 3 the same budget with no whole layer
    // selects pages, which must change something (else 2 proves nothing).
    // Pass 4 is quest with lserve's page-selection settings: with no
    // streaming head lserve is quest, bit for bit.
    std::vector<std::vector<float>> logs[5];
    const std::string base = "lserve:static=0,page=16,profile=" + path;
    const std::string specs[5] = {"", base + ",budget=512", base + ",budget=64,full_layers=" + std::to_string(c.n_layer),
                                  base + ",budget=64,full_layers=0", "quest:budget=64,page=16,sink=64,full_layers=0"};
    for (int pass = 0; pass < 5; ++pass) {
        auto e = engine(o);
        GenRequest r = greedy_request(
            random_prompt_ids(260, 8, static_cast<int32_t>(c.n_vocab), tok_->bos_id()), 30);
        if (pass > 0) r.kv_policy = policy(specs[pass]);
        std::vector<std::vector<float>> *out = &logs[pass];
        r.on_logits = [out](const float *l, int64_t nv) { out->emplace_back(l, l + nv); };
        Collector col;
        ASSERT_TRUE(e->submit(r, col.callback()).ok());
        ASSERT_TRUE(col.wait(1));
        e->shutdown(true);
    }
    const auto same = [&](int pass) {
        if (logs[pass].size() != logs[0].size()) return false;
        for (size_t t = 0; t < logs[0].size(); ++t)
            if (std::memcmp(logs[pass][t].data(), logs[0][t].data(), logs[0][t].size() * sizeof(float)) != 0) return false;
        return true;
    };
    ASSERT_EQ(logs[0].size(), 30u);
    EXPECT_TRUE(same(1)) << specs[1];
    EXPECT_TRUE(same(2)) << specs[2];
    EXPECT_FALSE(same(3)) << specs[3] << " reads 64 of ~290 rows per head and still gave dense bits";
    ASSERT_EQ(logs[4].size(), logs[3].size());
    for (size_t t = 0; t < logs[3].size(); ++t)
        ASSERT_EQ(std::memcmp(logs[4][t].data(), logs[3][t].data(), logs[3][t].size() * sizeof(float)), 0)
            << specs[4] << " and " << specs[3] << " differ at step " << t;
    std::remove(path.c_str());
}

// The Λ-shaped prefill: streaming heads see sink + recent rows in prefill,
// which changes the prompt's KV in every later layer. So (1) with a window
// covering the prompt it gives the bits of a dense prefill; (2) with a short
// one it changes the first token's logits; (3) its KV lives in its own
// prefix-cache namespace: a lambda request after a dense one with the same
// prompt (and a dense one after a lambda one) gets the bits it gets alone on
// a fresh engine, while a second lambda request does hit the cache.
TEST_F(LServeTest, LambdaPrefillChangesTheKvAndKeepsItApartInThePrefixCache) {
    Result<HeadProfile> prof = calibrate_heads(*model_, *tok_, nullptr, cal_options(), pool_);
    ASSERT_TRUE(prof.ok());
    const std::string path = temp_path("prof_lambda.json");
    write_file(path, head_profile_json(*prof));
    const std::string base = "lserve:static=0.5,budget=512,page=16,profile=" + path;
    const KvPolicyPtr lam = policy(base + ",sink=8,recent=40");
    const KvPolicyPtr lam_dense = policy(base + ",sink=8,recent=40,prefill=dense");
    const KvPolicyPtr wide = policy(base + ",sink=8,recent=480");
    const KvPolicyPtr wide_dense = policy(base + ",sink=8,recent=480,prefill=dense");
    ASSERT_TRUE(lam && lam_dense && wide && wide_dense);
    EXPECT_NE(lam->prefill_mask(), nullptr);
    EXPECT_EQ(lam_dense->prefill_mask(), nullptr);
    EXPECT_NE(lam->prefix_namespace(), 0u);
    EXPECT_EQ(lam_dense->prefix_namespace(), 0u);
    EXPECT_NE(lam->prefix_namespace(), wide->prefix_namespace());
    EXPECT_EQ(lam->prefix_namespace(), policy(base + ",sink=8,recent=40,interval=2")->prefix_namespace())
        << "the namespace names the mask, not the decode-time keys";

    EngineOptions o;
    o.max_seqs = 4;  // room for both cached chains beside a running request
    o.max_ctx = 512;
    o.max_batch_tokens = 64;
    const ModelConfig &c = model_->config();
    const std::vector<int32_t> prompt = random_prompt_ids(300, 11, static_cast<int32_t>(c.n_vocab), tok_->bos_id());
    // Logits of every step of one greedy request of policy p on engine e.
    const auto run = [&](Engine &e, const KvPolicyPtr &p, int64_t *cached = nullptr) {
        std::vector<std::vector<float>> logs;
        GenRequest r = greedy_request(prompt, 6);
        r.kv_policy = p;
        r.on_logits = [&logs](const float *l, int64_t nv) { logs.emplace_back(l, l + nv); };
        Collector col;
        Result<uint64_t> id = e.submit(r, col.callback());
        EXPECT_TRUE(id.ok()) << id.status().message();
        if (!id.ok() || !col.wait(1) || col.events(*id).empty()) return std::vector<std::vector<float>>();
        const GenEvent fin = col.events(*id).back();
        EXPECT_EQ(fin.finish_reason, FinishReason::length) << fin.error;
        if (cached) *cached = fin.n_cached_tokens;
        return logs;
    };
    const auto same = [](const std::vector<std::vector<float>> &a, const std::vector<std::vector<float>> &b) {
        if (a.size() != b.size() || a.empty()) return false;
        for (size_t t = 0; t < a.size(); ++t)
            if (std::memcmp(a[t].data(), b[t].data(), a[t].size() * sizeof(float)) != 0) return false;
        return true;
    };
    EngineOptions off = o;
    off.prefix_cache = false;
    std::vector<std::vector<float>> alone_lam, alone_dense, alone_wide, alone_wide_dense;
    {
        auto e = engine(off);
        alone_lam = run(*e, lam);
        alone_dense = run(*e, lam_dense);
        alone_wide = run(*e, wide);
        alone_wide_dense = run(*e, wide_dense);
        e->shutdown(true);
    }
    EXPECT_TRUE(same(alone_wide, alone_wide_dense)) << "a window over the whole prompt is a dense prefill";
    ASSERT_FALSE(alone_lam.empty());
    EXPECT_NE(0, std::memcmp(alone_lam[0].data(), alone_dense[0].data(), alone_lam[0].size() * sizeof(float)))
        << "a short window changes the first token's distribution";

    auto e = engine(o);
    int64_t cached = -1;
    EXPECT_TRUE(same(run(*e, lam_dense, &cached), alone_dense));
    EXPECT_EQ(cached, 0);
    EXPECT_TRUE(same(run(*e, lam, &cached), alone_lam)) << "the dense KV of the same prompt is not mapped";
    EXPECT_EQ(cached, 0);
    EXPECT_TRUE(same(run(*e, lam, &cached), alone_lam)) << "its own namespace hits";
    EXPECT_EQ(cached, 288);
    EXPECT_TRUE(same(run(*e, lam_dense, &cached), alone_dense));
    EXPECT_EQ(cached, 288) << "the dense chain is still there";
    EXPECT_TRUE(same(run(*e, wide, &cached), alone_wide));
    EXPECT_EQ(cached, 0) << "another mask, another namespace";
    e->shutdown(true);
    EXPECT_EQ(e->stats().kv_pages_used, 0);
    std::remove(path.c_str());
}

}  // namespace
}  // namespace sieve
