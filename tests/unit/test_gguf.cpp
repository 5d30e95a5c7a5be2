// GGUF reader and writer: round trips of every metadata type and several
// tensor types, the real models, and targeted corruptions of good files.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gguf_broken_corpus.h"
#include "sieve/gguf/gguf.h"

using namespace sieve;

namespace {

// from_memory does not copy: `bytes` must outlive the result, hence no temporaries.
std::unique_ptr<GgufFile> parse_ok(const std::vector<uint8_t> &&) = delete;
std::unique_ptr<GgufFile> parse_ok(const std::vector<uint8_t> &bytes) {
    auto r = GgufFile::from_memory(bytes.data(), bytes.size());
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? std::move(r.value()) : nullptr;
}

std::string parse_error(const std::vector<uint8_t> &bytes) {
    auto r = GgufFile::from_memory(bytes.data(), bytes.size());
    EXPECT_FALSE(r.ok()) << "a broken file parsed";
    return r.ok() ? std::string() : r.status().message();
}

std::vector<uint8_t> random_bytes(std::mt19937 &rng, size_t n) {
    std::vector<uint8_t> v(n);
    for (uint8_t &b : v) b = static_cast<uint8_t>(rng() & 0xff);
    return v;
}

}  // namespace

TEST(GgufRoundTrip, EveryMetadataType) {
    GgufWriter w;
    w.add_u8("t.u8", 200);
    w.add_i8("t.i8", -100);
    w.add_u16("t.u16", 65000);
    w.add_i16("t.i16", -32000);
    w.add_u32("t.u32", 4000000000u);
    w.add_i32("t.i32", -2000000000);
    w.add_u64("t.u64", 18000000000000000000ull);
    w.add_i64("t.i64", -9000000000000000000ll);
    w.add_f32("t.f32", 1.5e-5f);
    w.add_f64("t.f64", -3.25e100);
    w.add_bool("t.true", true);
    w.add_bool("t.false", false);
    w.add_string("t.str", "héllo wörld");
    w.add_string("t.empty", "");
    w.add_string_array("t.strs", {"a", "", "<|im_start|>", "\xe4\xb8\xad"});
    w.add_f32_array("t.f32s", {0.5f, -1.25f, 3e7f});
    w.add_i32_array("t.i32s", {-7, 0, 2147483647});
    const std::vector<uint8_t> bytes = w.to_bytes();
    auto f = parse_ok(bytes);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->kvs().size(), 17u);

    int64_t i = 0;
    uint64_t u = 0;
    double d = 0;
    bool b = false;
    std::string s;
    ASSERT_TRUE(f->get_uint("t.u8", &u).ok());
    EXPECT_EQ(u, 200u);
    ASSERT_TRUE(f->get_int("t.i8", &i).ok());
    EXPECT_EQ(i, -100);
    ASSERT_TRUE(f->get_uint("t.u16", &u).ok());
    EXPECT_EQ(u, 65000u);
    ASSERT_TRUE(f->get_int("t.i16", &i).ok());
    EXPECT_EQ(i, -32000);
    ASSERT_TRUE(f->get_uint("t.u32", &u).ok());
    EXPECT_EQ(u, 4000000000u);
    ASSERT_TRUE(f->get_int("t.u32", &i).ok());
    EXPECT_EQ(i, 4000000000ll);
    ASSERT_TRUE(f->get_int("t.i32", &i).ok());
    EXPECT_EQ(i, -2000000000);
    ASSERT_TRUE(f->get_uint("t.u64", &u).ok());
    EXPECT_EQ(u, 18000000000000000000ull);
    EXPECT_FALSE(f->get_int("t.u64", &i).ok()) << "u64 past INT64_MAX must not fit get_int";
    ASSERT_TRUE(f->get_int("t.i64", &i).ok());
    EXPECT_EQ(i, -9000000000000000000ll);
    EXPECT_FALSE(f->get_uint("t.i64", &u).ok()) << "negative value through get_uint";
    ASSERT_TRUE(f->get_float("t.f32", &d).ok());
    EXPECT_EQ(static_cast<float>(d), 1.5e-5f);
    ASSERT_TRUE(f->get_float("t.f64", &d).ok());
    EXPECT_EQ(d, -3.25e100);
    ASSERT_TRUE(f->get_float("t.i32", &d).ok());
    EXPECT_EQ(d, -2000000000.0);
    ASSERT_TRUE(f->get_bool("t.true", &b).ok());
    EXPECT_TRUE(b);
    ASSERT_TRUE(f->get_bool("t.false", &b).ok());
    EXPECT_FALSE(b);
    ASSERT_TRUE(f->get_string("t.str", &s).ok());
    EXPECT_EQ(s, "héllo wörld");
    ASSERT_TRUE(f->get_string("t.empty", &s).ok());
    EXPECT_EQ(s, "");

    std::vector<std::string_view> strs;
    ASSERT_TRUE(f->get_string_array("t.strs", &strs).ok());
    ASSERT_EQ(strs.size(), 4u);
    EXPECT_EQ(strs[1], "");
    EXPECT_EQ(strs[2], "<|im_start|>");
    EXPECT_EQ(strs[3], "\xe4\xb8\xad");
    std::vector<float> fl;
    ASSERT_TRUE(f->get_float_array("t.f32s", &fl).ok());
    EXPECT_EQ(fl, (std::vector<float>{0.5f, -1.25f, 3e7f}));
    ASSERT_TRUE(f->get_float_array("t.i32s", &fl).ok());
    EXPECT_EQ(fl[0], -7.0f);
    std::vector<int64_t> il;
    ASSERT_TRUE(f->get_int_array("t.i32s", &il).ok());
    EXPECT_EQ(il, (std::vector<int64_t>{-7, 0, 2147483647}));
    EXPECT_FALSE(f->get_int_array("t.f32s", &il).ok());
    uint64_t n = 0;
    ASSERT_TRUE(f->get_array_size("t.strs", &n).ok());
    EXPECT_EQ(n, 4u);

    // Wrong-type and missing-key errors name the key and both types.
    Status st = f->get_int("t.str", &i);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("'t.str'"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("STRING"), std::string::npos) << st.message();
    st = f->get_string_array("t.f32s", &strs);
    EXPECT_NE(st.message().find("ARRAY of FLOAT32"), std::string::npos) << st.message();
    st = f->get_bool("no.such.key", &b);
    EXPECT_NE(st.message().find("missing key 'no.such.key'"), std::string::npos) << st.message();
}

TEST(GgufRoundTrip, RawArraysOfEveryElementTypeAndNestedArrays) {
    GgufWriter w;
    // u16 array, bool array, nested array of two i8 arrays.
    std::vector<uint8_t> u16s = gguf_test::array_header(GgufType::UINT16, 3);
    for (uint16_t x : {1, 65535, 300}) gguf_test::append(&u16s, x);
    w.add_raw("a.u16", GgufType::ARRAY, u16s);
    std::vector<uint8_t> bools = gguf_test::array_header(GgufType::BOOL, 3);
    bools.insert(bools.end(), {1, 0, 1});
    w.add_raw("a.bool", GgufType::ARRAY, bools);
    std::vector<uint8_t> nested = gguf_test::array_header(GgufType::ARRAY, 2);
    for (int k = 0; k < 2; ++k) {
        std::vector<uint8_t> inner = gguf_test::array_header(GgufType::INT8, 2);
        inner.insert(inner.end(), {static_cast<uint8_t>(k), 0xff});
        nested.insert(nested.end(), inner.begin(), inner.end());
    }
    w.add_raw("a.nested", GgufType::ARRAY, nested);
    w.add_u32("after", 77);  // parsing resumes at the right place after the arrays
    const std::vector<uint8_t> bytes = w.to_bytes();
    auto f = parse_ok(bytes);
    ASSERT_TRUE(f);
    std::vector<int64_t> il;
    ASSERT_TRUE(f->get_int_array("a.u16", &il).ok());
    EXPECT_EQ(il, (std::vector<int64_t>{1, 65535, 300}));
    const GgufKV *kv = f->find("a.bool");
    ASSERT_TRUE(kv);
    EXPECT_EQ(kv->value.arr_type, GgufType::BOOL);
    EXPECT_EQ(kv->value.arr_n, 3u);
    kv = f->find("a.nested");
    ASSERT_TRUE(kv);
    EXPECT_EQ(kv->value.arr_type, GgufType::ARRAY);
    EXPECT_EQ(kv->value.arr_n, 2u);
    uint64_t u = 0;
    ASSERT_TRUE(f->get_uint("after", &u).ok());
    EXPECT_EQ(u, 77u);
}

TEST(GgufRoundTrip, TensorsOfSeveralTypesAndShapes) {
    std::mt19937 rng(1234);
    struct Spec {
        const char *name;
        GgmlType type;
        std::vector<int64_t> ne;
    };
    const std::vector<Spec> specs = {
        {"f32.1d", GgmlType::F32, {7}},
        {"f16.2d", GgmlType::F16, {5, 3}},
        {"q4_0.2d", GgmlType::Q4_0, {64, 3}},
        {"q8_0.3d", GgmlType::Q8_0, {32, 2, 3}},
        {"q6_k.4d", GgmlType::Q6_K, {256, 1, 2, 2}},
        {"bf16.odd", GgmlType::BF16, {13, 11}},
    };
    for (uint32_t alignment : {32u, 1u, 64u, 4096u}) {
        GgufWriter w;
        w.set_alignment(alignment);
        std::vector<std::vector<uint8_t>> datas;
        for (const Spec &s : specs) {
            int64_t row = 0;
            ASSERT_TRUE(type_row_bytes(s.type, s.ne[0], &row));
            int64_t rows = 1;
            for (size_t d = 1; d < s.ne.size(); ++d) rows *= s.ne[d];
            datas.push_back(random_bytes(rng, static_cast<size_t>(row * rows)));
            w.add_tensor(s.name, s.type, s.ne, datas.back().data(), datas.back().size());
        }
        const std::vector<uint8_t> bytes = w.to_bytes();
        auto f = parse_ok(bytes);
        ASSERT_TRUE(f);
        EXPECT_EQ(f->alignment(), alignment);
        EXPECT_EQ(f->data_offset() % alignment, 0u);
        ASSERT_EQ(f->tensors().size(), specs.size());
        for (size_t k = 0; k < specs.size(); ++k) {
            const GgufTensor *t = f->find_tensor(specs[k].name);
            ASSERT_TRUE(t) << specs[k].name;
            EXPECT_EQ(t->type, specs[k].type);
            EXPECT_EQ(t->n_dims, static_cast<int>(specs[k].ne.size()));
            for (size_t d = 0; d < specs[k].ne.size(); ++d) EXPECT_EQ(t->ne[d], specs[k].ne[d]);
            EXPECT_EQ(t->offset % alignment, 0u);
            ASSERT_EQ(t->n_bytes, datas[k].size());
            EXPECT_EQ(std::memcmp(t->data, datas[k].data(), datas[k].size()), 0) << specs[k].name;
        }
        EXPECT_EQ(f->find_tensor("nope"), nullptr);
    }
}

TEST(GgufRoundTrip, WriteAndOpenFromDisk) {
    GgufWriter w;
    w.add_string("general.architecture", "test");
    const float data[3] = {1.0f, -2.0f, 0.25f};
    w.add_tensor("x", GgmlType::F32, {3}, data, sizeof(data));
    const std::string path = ::testing::TempDir() + "/sieve_roundtrip.gguf";
    ASSERT_TRUE(w.write(path).ok());
    auto r = GgufFile::open(path);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const GgufTensor *t = r.value()->find_tensor("x");
    ASSERT_TRUE(t);
    EXPECT_EQ(std::memcmp(t->data, data, sizeof(data)), 0);
    EXPECT_EQ(r.value()->path(), path);

    auto missing = GgufFile::open(path + ".does-not-exist");
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.status().message().find("cannot open"), std::string::npos);
}

// release() drops pages from the resident set only: a mapped file reads
// back the same bytes, and a caller's buffer (from_memory) is left alone.
TEST(GgufRoundTrip, ReleasedTensorsReadTheSameBytes) {
    std::mt19937 rng(8);
    std::vector<float> data(300000);  // ~1.2 MB: whole pages inside
    for (float &x : data) x = static_cast<float>(static_cast<int32_t>(rng() % 20001) - 10000) * 1e-3f + 0.5f;
    GgufWriter w;
    w.add_string("general.architecture", "test");
    w.add_tensor("big", GgmlType::F32, {static_cast<int64_t>(data.size())}, data.data(), data.size() * sizeof(float));
    std::string path = ::testing::TempDir();
    path.append("/sieve_release.gguf");
    ASSERT_TRUE(w.write(path).ok());
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.ok()) << f.status().message();
    const GgufTensor *t = f.value()->find_tensor("big");
    ASSERT_TRUE(t);
    f.value()->release(t->data, t->n_bytes);
    EXPECT_EQ(std::memcmp(t->data, data.data(), data.size() * sizeof(float)), 0);

    const std::vector<uint8_t> bytes = w.to_bytes();
    auto m = GgufFile::from_memory(bytes.data(), bytes.size());
    ASSERT_TRUE(m.ok()) << m.status().message();
    const GgufTensor *tm = m.value()->find_tensor("big");
    ASSERT_TRUE(tm);
    m.value()->release(tm->data, tm->n_bytes);
    EXPECT_EQ(std::memcmp(tm->data, data.data(), data.size() * sizeof(float)), 0);
}

TEST(GgufReader, EveryTruncationOfAGoodFileFails) {
    GgufWriter w;
    w.add_string("general.architecture", "llama");
    w.add_string_array("tokenizer.ggml.tokens", {"a", "bb", "ccc"});
    const float data[5] = {1, 2, 3, 4, 5};
    w.add_tensor("t", GgmlType::F32, {5}, data, sizeof(data));
    const std::vector<uint8_t> full = w.to_bytes();
    // The data of the only tensor ends 12 bytes before the (padded) end.
    const size_t min_ok = full.size() - 12;
    const std::vector<uint8_t> shortest(full.begin(), full.begin() + static_cast<long>(min_ok));
    ASSERT_TRUE(parse_ok(shortest));
    for (size_t n = 0; n < min_ok; ++n) {
        // A fresh heap buffer of exactly n bytes so ASan sees any overread.
        std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<long>(n));
        auto r = GgufFile::from_memory(cut.data(), cut.size());
        EXPECT_FALSE(r.ok()) << "truncated to " << n << " bytes";
    }
}

TEST(GgufReader, RandomByteFlipsNeverCrash) {
    GgufWriter w;
    w.add_string("general.architecture", "llama");
    w.add_u32("llama.block_count", 2);
    w.add_string_array("tokenizer.ggml.tokens", {"x", "yy", "zzz", "w"});
    w.add_f32_array("scores", {0.1f, 0.2f});
    const float data[64] = {};
    w.add_tensor("a", GgmlType::F32, {8, 2}, data, 64);
    w.add_tensor("b", GgmlType::F16, {16}, data, 32);
    const std::vector<uint8_t> good = w.to_bytes();
    std::mt19937 rng(99);
    int n_ok = 0;
    for (int iter = 0; iter < 3000; ++iter) {
        std::vector<uint8_t> bad = good;
        const int n_flips = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < n_flips; ++k) bad[rng() % bad.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
        auto r = GgufFile::from_memory(bad.data(), bad.size());
        n_ok += r.ok();
    }
    // Flips inside tensor data or string bytes still parse; most flips don't.
    EXPECT_GT(n_ok, 0);
    EXPECT_LT(n_ok, 3000);
}

TEST(GgufReader, RejectsHeaderProblemsWithNamedFields) {
    GgufWriter w;
    w.add_u32("k", 1);
    const std::vector<uint8_t> good = w.to_bytes();

    std::vector<uint8_t> b = good;
    b[0] = 'X';
    EXPECT_NE(parse_error(b).find("bad magic"), std::string::npos);
    for (uint32_t v : {0u, 1u, 99u}) {
        b = good;
        std::memcpy(b.data() + 4, &v, 4);
        const std::string e = parse_error(b);
        EXPECT_NE(e.find(v == 1 ? "version 1 is not supported" : "unsupported GGUF version"), std::string::npos) << e;
    }
    b = good;
    const uint64_t huge = 1ull << 60;
    std::memcpy(b.data() + 16, &huge, 8);  // n_kv
    EXPECT_NE(parse_error(b).find("n_kv = 1152921504606846976 is impossible"), std::string::npos);
    b = good;
    std::memcpy(b.data() + 8, &huge, 8);  // n_tensors
    EXPECT_NE(parse_error(b).find("n_tensors"), std::string::npos);
    b = good;
    std::memcpy(b.data() + 24, &huge, 8);  // key length
    EXPECT_NE(parse_error(b).find("string length"), std::string::npos);

    // v2 files share the v3 layout.
    b = good;
    const uint32_t v2 = 2;
    std::memcpy(b.data() + 4, &v2, 4);
    auto f = parse_ok(b);
    ASSERT_TRUE(f);
    EXPECT_EQ(f->version(), 2u);
}

TEST(GgufReader, AlignmentKeyIsValidated) {
    for (uint32_t bad : {0u, 3u, 48u, 1u << 30}) {
        GgufWriter w;
        w.add_u32("general.alignment", bad);
        const std::string e = parse_error(w.to_bytes());
        EXPECT_NE(e.find("general.alignment"), std::string::npos) << e;
        EXPECT_NE(e.find("power of two"), std::string::npos) << e;
    }
    GgufWriter w;
    w.add_u64("general.alignment", 32);
    const std::string e = parse_error(w.to_bytes());
    EXPECT_NE(e.find("expected UINT32, got UINT64"), std::string::npos) << e;
}

TEST(GgufReader, RejectsBadArrays) {
    {
        GgufWriter w;
        std::vector<uint8_t> a = gguf_test::array_header(GgufType::UINT32, 1ull << 62);
        w.add_raw("big", GgufType::ARRAY, a);
        EXPECT_NE(parse_error(w.to_bytes()).find("array of 4611686018427387904 UINT32"), std::string::npos);
    }
    {
        // Nesting one level past the limit.
        std::vector<uint8_t> a;
        for (int d = 0; d < k_gguf_max_array_depth; ++d) {
            std::vector<uint8_t> h = gguf_test::array_header(GgufType::ARRAY, 1);
            a.insert(a.end(), h.begin(), h.end());
        }
        std::vector<uint8_t> leaf = gguf_test::array_header(GgufType::UINT8, 0);
        a.insert(a.end(), leaf.begin(), leaf.end());
        GgufWriter w;
        w.add_raw("deep", GgufType::ARRAY, a);
        EXPECT_NE(parse_error(w.to_bytes()).find("nest deeper"), std::string::npos);
    }
    {
        std::vector<uint8_t> a = gguf_test::array_header(GgufType::BOOL, 2);
        a.insert(a.end(), {1, 2});
        GgufWriter w;
        w.add_raw("flags", GgufType::ARRAY, a);
        EXPECT_NE(parse_error(w.to_bytes()).find("BOOL element 1 is 2"), std::string::npos);
    }
    {
        GgufWriter w;
        w.add_raw("weird", static_cast<GgufType>(13), {0, 0, 0, 0});
        EXPECT_NE(parse_error(w.to_bytes()).find("unknown value type 13"), std::string::npos);
    }
    {
        GgufWriter w;
        w.add_u8("dup", 1);
        w.add_u8("dup", 2);
        EXPECT_NE(parse_error(w.to_bytes()).find("key 'dup': duplicate key"), std::string::npos);
    }
}

TEST(GgufReader, RejectsBadTensorInfos) {
    const std::vector<uint8_t> d(4096, 0x5a);
    auto err = [&](GgmlType type, std::vector<int64_t> ne, size_t n_bytes) {
        GgufWriter w;
        w.add_tensor("bad", type, ne, d.data(), n_bytes);
        return parse_error(w.to_bytes());
    };
    EXPECT_NE(err(GgmlType::F32, {4, 0}, 0).find("tensor 'bad': dimension 1 is 0"), std::string::npos);
    EXPECT_NE(err(GgmlType::F32, {}, 0).find("n_dims is 0"), std::string::npos);
    EXPECT_NE(err(GgmlType::F32, {1, 1, 1, 1, 1}, 4).find("n_dims is 5"), std::string::npos);
    EXPECT_NE(err(GgmlType::F32, {1ll << 40, 1ll << 40}, 4).find("overflows"), std::string::npos);
    EXPECT_NE(err(static_cast<GgmlType>(77), {4}, 16).find("unknown tensor type id 77"), std::string::npos);
    EXPECT_NE(err(GgmlType::Q4_0, {48}, 36).find("not a multiple of the Q4_0 block size 32"), std::string::npos);
    EXPECT_NE(err(GgmlType::F32, {100}, 40).find("ends past the end of the file"), std::string::npos);
    {
        // First tensor claims 64 floats but only 16 bytes were written: it runs into the second.
        GgufWriter w;
        w.add_tensor("a", GgmlType::F32, {64}, d.data(), 16);
        w.add_tensor("b", GgmlType::F32, {64}, d.data(), 256);
        w.add_tensor("c", GgmlType::F32, {64}, d.data(), 256);
        EXPECT_NE(parse_error(w.to_bytes()).find("'a' [0, 256) and 'b' [32, 288) overlap"), std::string::npos);
    }
    {
        GgufWriter w;
        w.add_tensor("same", GgmlType::F32, {4}, d.data(), 16);
        w.add_tensor("same", GgmlType::F32, {4}, d.data(), 16);
        EXPECT_NE(parse_error(w.to_bytes()).find("duplicate tensor name"), std::string::npos);
    }
    {
        // Offset patched to 8: misaligned for alignment 32.
        GgufWriter w;
        w.add_tensor("m", GgmlType::F32, {4}, d.data(), 16);
        std::vector<uint8_t> b = w.to_bytes();
        const size_t off_pos = 24 + 8 + 1 + 4 + 8 + 4;  // header, name, n_dims, ne[0], type
        const uint64_t off = 8;
        std::memcpy(b.data() + off_pos, &off, 8);
        EXPECT_NE(parse_error(b).find("offset 8 is not a multiple of the alignment 32"), std::string::npos);
    }
}

TEST(GgufReader, ParsesTheTinyModel) {
    const std::string path = std::string(SIEVE_TEST_MODELS) + "/stories260K.gguf";
    auto r = GgufFile::open(path);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const GgufFile &f = *r.value();
    std::string arch;
    ASSERT_TRUE(f.get_string("general.architecture", &arch).ok());
    EXPECT_EQ(arch, "llama");
    std::vector<std::string_view> tokens;
    ASSERT_TRUE(f.get_string_array("tokenizer.ggml.tokens", &tokens).ok());
    EXPECT_EQ(tokens.size(), 512u);
    const GgufTensor *emb = f.find_tensor("token_embd.weight");
    ASSERT_TRUE(emb);
    EXPECT_EQ(emb->ne[1], 512);
    EXPECT_EQ(f.data_offset() % f.alignment(), 0u);
}

// Every reader-level case of the broken corpus fails from memory too, with
// the buffer exactly the file's size so ASan catches any overread.
TEST(GgufReader, BrokenCorpusFromMemory) {
    int n_gguf = 0;
    for (const gguf_test::BrokenCase &c : gguf_test::make_broken_corpus()) {
        SCOPED_TRACE(c.name);
        auto r = GgufFile::from_memory(c.bytes.data(), c.bytes.size());
        if (c.stage != "gguf") {
            EXPECT_TRUE(r.ok()) << r.status().message();
            continue;
        }
        ++n_gguf;
        ASSERT_FALSE(r.ok());
        EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
    }
    EXPECT_GE(n_gguf, 25);
}
