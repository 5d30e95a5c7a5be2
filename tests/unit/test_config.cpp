// ModelConfig::from_gguf on the real models and on tiny generated models,
// each broken in one way, checking the error names what is wrong.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "gguf_broken_corpus.h"
#include "sieve/model/config.h"

using namespace sieve;
using gguf_test::TinyModel;

namespace {

// Keeps the bytes alive beside the parsed file (from_memory does not copy).
struct Built {
    std::vector<uint8_t> bytes;
    std::unique_ptr<GgufFile> file;
};

Built build(const TinyModel &m) {
    Built b;
    b.bytes = gguf_test::make_tiny_model(m, 7).to_bytes();
    auto r = GgufFile::from_memory(b.bytes.data(), b.bytes.size());
    EXPECT_TRUE(r.ok()) << r.status().message();
    if (r.ok()) b.file = std::move(r.value());
    return b;
}

std::string config_error(const TinyModel &m) {
    Built b = build(m);
    if (!b.file) return "GGUF parse failed";
    auto c = ModelConfig::from_gguf(*b.file);
    EXPECT_FALSE(c.ok()) << "a broken model validated";
    return c.ok() ? std::string() : c.status().message();
}

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

std::string default_model_path() {
    if (const char *c = std::getenv("SIEVE_CACHE")) return std::string(c) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
    const char *home = std::getenv("HOME");
    return std::string(home ? home : ".") + "/.cache/sieve/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace

TEST(ModelConfig, Stories260K) {
    auto f = GgufFile::open(std::string(SIEVE_TEST_MODELS) + "/stories260K.gguf");
    ASSERT_TRUE(f.ok()) << f.status().message();
    auto r = ModelConfig::from_gguf(*f.value());
    ASSERT_TRUE(r.ok()) << r.status().message();
    const ModelConfig &c = r.value();
    EXPECT_EQ(c.arch, ModelArch::llama);
    EXPECT_EQ(c.n_vocab, 512);
    EXPECT_EQ(c.n_embd, 64);
    EXPECT_EQ(c.n_layer, 5);
    EXPECT_EQ(c.n_head, 8);
    EXPECT_EQ(c.n_head_kv, 4);
    EXPECT_EQ(c.head_dim, 8);
    EXPECT_EQ(c.rope_type, RopeType::normal);
    EXPECT_EQ(c.kv_bytes_per_token(4), 2 * 5 * 32 * 4);
}

TEST(ModelConfig, SmolLM2) {
    const std::string path = default_model_path();
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0) << path << " is missing: run scripts/fetch_model.sh";
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.ok()) << f.status().message();
    auto r = ModelConfig::from_gguf(*f.value());
    ASSERT_TRUE(r.ok()) << r.status().message();
    const ModelConfig &c = r.value();
    EXPECT_EQ(c.n_vocab, 49152);
    EXPECT_EQ(c.n_embd, 576);
    EXPECT_EQ(c.n_layer, 30);
    EXPECT_EQ(c.n_head, 9);
    EXPECT_EQ(c.n_head_kv, 3);
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_EQ(c.n_ff, 1536);
    EXPECT_EQ(c.n_ctx_train, 8192);
    EXPECT_FLOAT_EQ(c.rope_freq_base, 100000.0f);
    EXPECT_TRUE(c.tied_embeddings);
    EXPECT_FALSE(c.has_qkv_bias);
}

TEST(ModelConfig, TinyLlamaAndQwen2) {
    TinyModel m;
    Built b = build(m);
    ASSERT_TRUE(b.file);
    auto r = ModelConfig::from_gguf(*b.file);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->n_vocab, m.n_vocab);
    EXPECT_EQ(r->head_dim, 4);
    EXPECT_FALSE(r->tied_embeddings);
    EXPECT_FALSE(r->has_qkv_bias);
    EXPECT_EQ(r->name, "tiny-llama");

    m.arch = "qwen2";
    m.qkv_bias = true;
    m.tied = true;
    m.weight_type = GgmlType::F16;
    b = build(m);
    ASSERT_TRUE(b.file);
    r = ModelConfig::from_gguf(*b.file);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->arch, ModelArch::qwen2);
    EXPECT_EQ(r->rope_type, RopeType::neox);
    EXPECT_TRUE(r->has_qkv_bias);
    EXPECT_TRUE(r->tied_embeddings);
}

TEST(ModelConfig, DefaultsAndOptionalKeys) {
    TinyModel m;
    m.n_head_kv = 4;
    m.skip_keys = {"llama.attention.head_count_kv", "llama.rope.freq_base"};
    m.extra_kvs = [](GgufWriter *w) {
        w->add_u32("llama.rope.dimension_count", 4);
        w->add_u32("llama.attention.key_length", 4);
        w->add_u32("llama.vocab_size", 20);
    };
    Built b = build(m);
    ASSERT_TRUE(b.file);
    auto r = ModelConfig::from_gguf(*b.file);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->n_head_kv, 4);
    EXPECT_FLOAT_EQ(r->rope_freq_base, 10000.0f);
}

TEST(ModelConfig, RopeScaling) {
    TinyModel m;
    m.extra_kvs = [](GgufWriter *w) {
        w->add_string("llama.rope.scaling.type", "linear");
        w->add_f32("llama.rope.scaling.factor", 4.0f);
    };
    Built b = build(m);
    auto r = ModelConfig::from_gguf(*b.file);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_FLOAT_EQ(r->rope_scaling.linear_factor, 4.0f);
    EXPECT_FALSE(r->rope_scaling.has_freq_factors);

    m.extra_kvs = [](GgufWriter *w) {
        w->add_string("llama.rope.scaling.type", "llama3");
        w->add_f32("llama.rope.scaling.factor", 8.0f);
        w->add_u32("llama.rope.scaling.original_context_length", 8192);
    };
    b = build(m);
    r = ModelConfig::from_gguf(*b.file);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_TRUE(r->rope_scaling.llama3);
    EXPECT_FLOAT_EQ(r->rope_scaling.factor, 8.0f);
    EXPECT_EQ(r->rope_scaling.original_ctx, 8192);

    m.extra_kvs = [](GgufWriter *w) { w->add_string("llama.rope.scaling.type", "yarn"); };
    EXPECT_HAS(config_error(m), "rope scaling type 'yarn' is not supported");

    // rope_freqs.weight: one F32 divisor per rotated pair (head_dim / 2 = 2).
    m.extra_kvs = [](GgufWriter *w) {
        const float freqs[2] = {1.0f, 8.0f};
        w->add_tensor("rope_freqs.weight", GgmlType::F32, {2}, freqs, sizeof(freqs));
    };
    b = build(m);
    r = ModelConfig::from_gguf(*b.file);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_TRUE(r->rope_scaling.has_freq_factors);

    m.extra_kvs = [](GgufWriter *w) {
        const float freqs[3] = {1.0f, 8.0f, 2.0f};
        w->add_tensor("rope_freqs.weight", GgmlType::F32, {3}, freqs, sizeof(freqs));
    };
    EXPECT_HAS(config_error(m), "tensor 'rope_freqs.weight': expected [2], got [3]");
}

TEST(ModelConfig, ErrorsNameTheProblem) {
    TinyModel m;
    m.arch = "gpt2";
    EXPECT_HAS(config_error(m), "unsupported architecture 'gpt2'");

    m = TinyModel();
    m.skip_keys = {"llama.block_count"};
    m.extra_kvs = [](GgufWriter *w) { w->add_string("llama.block_count", "two"); };
    EXPECT_HAS(config_error(m), "key 'llama.block_count': expected an integer, got STRING");

    m = TinyModel();
    m.skip_keys = {"llama.attention.layer_norm_rms_epsilon"};
    m.extra_kvs = [](GgufWriter *w) { w->add_bool("llama.attention.layer_norm_rms_epsilon", true); };
    EXPECT_HAS(config_error(m), "expected a number (FLOAT32 or FLOAT64), got BOOL");

    m = TinyModel();
    m.skip_keys = {"llama.embedding_length"};
    EXPECT_HAS(config_error(m), "missing key 'llama.embedding_length'");

    m = TinyModel();
    m.n_head_kv = 3;  // 4 % 3 != 0
    EXPECT_HAS(config_error(m), "'llama.attention.head_count_kv' = 3 does not divide 'llama.attention.head_count' = 4");

    m = TinyModel();
    m.n_head = 3;  // 16 % 3 != 0
    m.n_head_kv = 1;
    EXPECT_HAS(config_error(m), "'llama.embedding_length' = 16 is not a multiple of 'llama.attention.head_count' = 3");

    m = TinyModel();
    m.n_embd = 12;
    m.n_head = 4;  // head_dim 3
    m.n_head_kv = 4;
    EXPECT_HAS(config_error(m), "head size 3 is odd");

    m = TinyModel();
    m.extra_kvs = [](GgufWriter *w) { w->add_u32("llama.vocab_size", 21); };
    EXPECT_HAS(config_error(m), "'llama.vocab_size' = 21 but token_embd.weight has 20 rows");

    m = TinyModel();
    m.edit_tensor = [](std::string *name, std::vector<int64_t> *ne, bool *) {
        if (*name == "token_embd.weight") (*ne)[1] = 22;
        if (*name == "output.weight") (*ne)[1] = 22;
    };
    EXPECT_HAS(config_error(m), "tokenizer.ggml.tokens has 20 tokens but token_embd.weight has 22 rows");

    m = TinyModel();
    m.edit_tensor = [](std::string *name, std::vector<int64_t> *, bool *keep) {
        if (*name == "blk.1.ffn_up.weight") *keep = false;
    };
    EXPECT_HAS(config_error(m), "missing tensor 'blk.1.ffn_up.weight'");

    m = TinyModel();
    m.edit_tensor = [](std::string *name, std::vector<int64_t> *ne, bool *) {
        if (*name == "blk.1.attn_k.weight") (*ne)[1] = 4;
    };
    const std::string e = config_error(m);
    EXPECT_HAS(e, "tensor 'blk.1.attn_k.weight': expected [16, 8], got [16, 4]");
    EXPECT_HAS(e, "head_count_kv");

    m = TinyModel();
    m.arch = "qwen2";  // qwen2 without biases
    EXPECT_HAS(config_error(m), "missing tensor 'blk.0.attn_q.bias'");

    m = TinyModel();
    m.edit_tensor = [](std::string *name, std::vector<int64_t> *ne, bool *) {
        if (*name == "output_norm.weight") ne->push_back(1);
    };
    EXPECT_HAS(config_error(m), "tensor 'output_norm.weight': expected [16], got [16, 1]");
}

// The committed corpus: each file equals what the generator makes today, is
// listed in expected.txt, and fails (at the stage the manifest says) with the
// expected message when opened from disk.
TEST(BrokenCorpus, CommittedFilesFailWithTheirMessages) {
    const std::string dir = std::string(SIEVE_TEST_DATA) + "/gguf_broken";
    std::ifstream manifest(dir + "/expected.txt");
    ASSERT_TRUE(manifest.good()) << "missing " << dir << "/expected.txt";
    std::map<std::string, std::pair<std::string, std::string>> listed;  // name -> (stage, expect)
    std::string line;
    while (std::getline(manifest, line)) {
        if (line.empty() || line[0] == '#') continue;
        const size_t t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
        ASSERT_NE(t2, std::string::npos) << "bad manifest line: " << line;
        listed[line.substr(0, t1)] = {line.substr(t1 + 1, t2 - t1 - 1), line.substr(t2 + 1)};
    }
    const std::vector<gguf_test::BrokenCase> cases = gguf_test::make_broken_corpus();
    EXPECT_GE(cases.size(), 25u);
    EXPECT_EQ(listed.size(), cases.size()) << "regenerate with make_broken_gguf";
    for (const gguf_test::BrokenCase &c : cases) {
        SCOPED_TRACE(c.name);
        ASSERT_TRUE(listed.count(c.name)) << "not in expected.txt: regenerate with make_broken_gguf";
        EXPECT_EQ(listed[c.name].first, c.stage);
        EXPECT_EQ(listed[c.name].second, c.expect);
        std::ifstream in(dir + "/" + c.name, std::ios::binary);
        const std::vector<uint8_t> on_disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        EXPECT_TRUE(on_disk == c.bytes) << "committed file differs from the generator: regenerate";

        auto f = GgufFile::open(dir + "/" + c.name);
        std::string err;
        if (c.stage == "gguf") {
            ASSERT_FALSE(f.ok()) << "the reader accepted a broken file";
            err = f.status().message();
        } else {
            ASSERT_TRUE(f.ok()) << f.status().message();
            auto cfg = ModelConfig::from_gguf(*f.value());
            ASSERT_FALSE(cfg.ok()) << "the config check accepted a broken model";
            err = cfg.status().message();
        }
        EXPECT_HAS(err, c.expect);
    }
}
