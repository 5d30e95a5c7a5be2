// Tokenizer tests. The oracles are golden ids in tests/data/tokenizer, made by
// eval/tokenizer/gen_golden.py from Hugging Face `tokenizers` (SmolLM2) and
// `sentencepiece` (stories260K) over a committed corpus of 300+ strings.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <tuple>

#include "sieve/gguf/gguf.h"
#include "sieve/tokenizer/pretokenizer.h"
#include "sieve/tokenizer/tokenizer.h"
#include "sieve/tokenizer/unicode.h"

using namespace sieve;

namespace {

std::string smollm2_path() {
    const char *cache = std::getenv("SIEVE_CACHE");
    const char *home = std::getenv("HOME");
    const std::string dir = cache ? cache : std::string(home ? home : "") + "/.cache/sieve";
    return dir + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::string stories_path() { return std::string(SIEVE_TEST_MODELS) + "/stories260K.gguf"; }

struct Loaded {
    std::unique_ptr<GgufFile> file;
    std::unique_ptr<Tokenizer> tok;
};

// Fails the calling test (never skips) when the model is missing.
Loaded load(const std::string &path, const char *hint) {
    Loaded out;
    auto f = GgufFile::open(path);
    if (!f.ok()) {
        ADD_FAILURE() << "cannot open " << path << ": " << f.status().message() << " (" << hint << ")";
        return out;
    }
    out.file = std::move(f.value());
    auto t = Tokenizer::from_gguf(*out.file);
    if (!t.ok()) {
        ADD_FAILURE() << path << ": " << t.status().message();
        return out;
    }
    out.tok = std::move(t.value());
    return out;
}

Loaded load_smollm2() { return load(smollm2_path(), "run scripts/fetch_model.sh to fetch the default model"); }
Loaded load_stories() { return load(stories_path(), "stories260K.gguf is committed under tests/data/models"); }

struct Golden {
    std::string text;
    std::vector<int32_t> ids_special, ids_plain;
};

std::vector<int32_t> parse_ids(const std::string &s) {
    std::vector<int32_t> ids;
    std::istringstream in(s);
    for (long v; in >> v;) ids.push_back(static_cast<int32_t>(v));
    return ids;
}

std::vector<Golden> read_golden(const std::string &name) {
    std::vector<Golden> out;
    std::ifstream in(std::string(SIEVE_TEST_DATA) + "/tokenizer/" + name);
    EXPECT_TRUE(in.good()) << "missing golden file " << name << "; run eval/tokenizer/gen_golden.py";
    std::string line;
    while (std::getline(in, line)) {
        if (!line.empty() && line[0] == '#') continue;
        const size_t t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
        if (t1 == std::string::npos || t2 == std::string::npos) {
            ADD_FAILURE() << name << ": malformed line '" << line << "'";
            continue;
        }
        Golden g;
        for (size_t i = 0; i + 1 < t1; i += 2) g.text.push_back(static_cast<char>(std::stoi(line.substr(i, 2), nullptr, 16)));
        g.ids_special = parse_ids(line.substr(t1 + 1, t2 - t1 - 1));
        g.ids_plain = parse_ids(line.substr(t2 + 1));
        out.push_back(std::move(g));
    }
    return out;
}

std::string ids_str(const std::vector<int32_t> &ids) {
    std::string s;
    for (int32_t id : ids) s += std::to_string(id) + " ";
    return s;
}

// True when every byte of text has a token in the byte-level alphabet (HF
// drops the others, so such text cannot round-trip).
bool bpe_lossless(const Tokenizer &tok, const std::string &text) {
    for (char c : text) {
        std::string ch;
        utf8_append(&ch, gpt2_byte_to_codepoint(static_cast<uint8_t>(c)));
        if (tok.find_token(ch) < 0) return false;
    }
    return true;
}

// Feeds ids one at a time; checks every chunk is valid UTF-8; returns the concatenation.
std::string stream_all(const Tokenizer &tok, const std::vector<int32_t> &ids, bool skip_special) {
    StreamDetokenizer sd(tok, skip_special);
    std::string all;
    for (int32_t id : ids) {
        const std::string chunk = sd.push(id);
        EXPECT_TRUE(utf8_is_valid(chunk)) << "chunk after id " << id << " is not valid UTF-8";
        all += chunk;
    }
    const std::string tail = sd.finish();
    EXPECT_TRUE(utf8_is_valid(tail));
    return all + tail;
}

}  // namespace

// ---------------------------------------------------------------------------
// Golden ids
// ---------------------------------------------------------------------------

TEST(TokenizerGolden, SmolLM2MatchesHuggingFace) {
    Loaded m = load_smollm2();
    ASSERT_TRUE(m.tok);
    const Tokenizer &tok = *m.tok;
    EXPECT_FALSE(tok.is_spm());
    EXPECT_EQ(tok.pre_family(), "smollm");
    const auto golden = read_golden("smollm2.golden");
    ASSERT_GE(golden.size(), 300u);
    int n_bad = 0;
    for (const Golden &g : golden) {
        const auto special = tok.encode(g.text, tok.add_bos(), true);
        const auto plain = tok.encode(g.text, tok.add_bos(), false);
        if (special != g.ids_special || plain != g.ids_plain) {
            if (++n_bad <= 10) {
                ADD_FAILURE() << "text '" << g.text << "'\n  special: got " << ids_str(special) << "\n"
                              << "           want " << ids_str(g.ids_special) << "\n  plain:   got "
                              << ids_str(plain) << "\n           want " << ids_str(g.ids_plain);
            }
        }
    }
    EXPECT_EQ(n_bad, 0) << "of " << golden.size() << " strings";
}

TEST(TokenizerGolden, Stories260KMatchesSentencePiece) {
    Loaded m = load_stories();
    ASSERT_TRUE(m.tok);
    const Tokenizer &tok = *m.tok;
    EXPECT_TRUE(tok.is_spm());
    EXPECT_TRUE(tok.add_bos());
    const auto golden = read_golden("stories260k.golden");
    ASSERT_GE(golden.size(), 300u);
    int n_bad = 0;
    for (const Golden &g : golden) {
        // SentencePiece never parses control-token text.
        const auto ids = tok.encode(g.text, tok.add_bos(), false);
        if (ids != g.ids_plain && ++n_bad <= 10) {
            ADD_FAILURE() << "text '" << g.text << "'\n  got  " << ids_str(ids) << "\n  want " << ids_str(g.ids_plain);
        }
    }
    EXPECT_EQ(n_bad, 0) << "of " << golden.size() << " strings";
}

// ---------------------------------------------------------------------------
// Round trips and streaming over the corpus
// ---------------------------------------------------------------------------

TEST(TokenizerRoundTrip, DecodeOfEncodeIsIdentity) {
    Loaded a = load_smollm2(), b = load_stories();
    ASSERT_TRUE(a.tok && b.tok);
    const auto golden = read_golden("smollm2.golden");
    int n_checked_bpe = 0;
    for (const Golden &g : golden) {
        if (bpe_lossless(*a.tok, g.text)) {
            ++n_checked_bpe;
            EXPECT_EQ(a.tok->decode(a.tok->encode(g.text, false, false), false), g.text);
            EXPECT_EQ(a.tok->decode(a.tok->encode(g.text, false, true), false), g.text);
        }
        EXPECT_EQ(b.tok->decode(b.tok->encode(g.text, true, false), true), g.text);
    }
    // Only the strings with bytes outside SmolLM2's byte alphabet are excused.
    EXPECT_GE(n_checked_bpe, static_cast<int>(golden.size()) - 3);
}

TEST(TokenizerStream, ChunksAreValidAndConcatenateToDecode) {
    Loaded a = load_smollm2(), b = load_stories();
    ASSERT_TRUE(a.tok && b.tok);
    for (const Golden &g : read_golden("smollm2.golden")) {
        for (const Tokenizer *tok : {a.tok.get(), b.tok.get()}) {
            const auto ids = tok->encode(g.text, tok->add_bos(), true);
            for (bool skip : {true, false}) {
                // Decoding is lossy (and may be invalid UTF-8) only for text
                // with bytes outside SmolLM2's byte alphabet.
                EXPECT_EQ(stream_all(*tok, ids, skip), utf8_sanitize(tok->decode(ids, skip)))
                    << "text '" << g.text << "'";
            }
        }
    }
}

TEST(TokenizerStream, RandomIdsGiveValidChunks) {
    Loaded a = load_smollm2(), b = load_stories();
    ASSERT_TRUE(a.tok && b.tok);
    std::mt19937 rng(1234);
    for (const Tokenizer *tok : {a.tok.get(), b.tok.get()}) {
        std::uniform_int_distribution<int32_t> pick(-3, tok->n_vocab() + 3);
        for (int trial = 0; trial < 200; ++trial) {
            std::vector<int32_t> ids(1 + rng() % 40);
            for (auto &id : ids) id = pick(rng);
            for (bool skip : {true, false}) {
                EXPECT_EQ(stream_all(*tok, ids, skip), utf8_sanitize(tok->decode(ids, skip)));
            }
        }
    }
}

TEST(TokenizerStream, MultiByteCharacterSplitAcrossByteTokens) {
    Loaded m = load_stories();
    ASSERT_TRUE(m.tok);
    // 中 has no token in a 512-entry vocabulary: it becomes three <0xXX> tokens.
    const auto ids = m.tok->encode("中", false, false);
    ASSERT_GE(ids.size(), 3u);
    StreamDetokenizer sd(*m.tok);
    std::string got;
    for (size_t i = 0; i + 1 < ids.size(); ++i) got += sd.push(ids[i]);
    EXPECT_EQ(got.find("\xE4"), std::string::npos) << "half a character was emitted";
    got += sd.push(ids.back());
    got += sd.finish();
    EXPECT_EQ(got, " 中");
    // A truncated character at the end becomes U+FFFD.
    StreamDetokenizer sd2(*m.tok);
    std::string cut = sd2.push(ids[ids.size() - 3]);
    cut += sd2.push(ids[ids.size() - 2]);
    EXPECT_EQ(cut, "");
    EXPECT_EQ(sd2.finish(), "\xEF\xBF\xBD");
}

// ---------------------------------------------------------------------------
// Special tokens, ids, invalid input
// ---------------------------------------------------------------------------

TEST(TokenizerSpecial, ParseSpecialOnAndOff) {
    Loaded m = load_smollm2();
    ASSERT_TRUE(m.tok);
    const Tokenizer &tok = *m.tok;
    const int32_t im_start = tok.find_token("<|im_start|>"), im_end = tok.find_token("<|im_end|>");
    ASSERT_EQ(im_start, 1);
    ASSERT_EQ(im_end, 2);
    const std::string text = "<|im_start|>user\nHi there<|im_end|>\n";
    const auto on = tok.encode(text, false, true);
    ASSERT_GE(on.size(), 4u);
    EXPECT_EQ(on.front(), im_start);
    EXPECT_NE(std::find(on.begin(), on.end(), im_end), on.end());
    const auto off = tok.encode(text, false, false);
    for (int32_t id : off) EXPECT_FALSE(tok.is_control(id)) << "control token from plain text";
    EXPECT_GT(off.size(), on.size());
    EXPECT_EQ(tok.decode(on, false), text);
    EXPECT_EQ(tok.decode(on, true), "user\nHi there\n");

    Loaded s = load_stories();
    ASSERT_TRUE(s.tok);
    const auto sp_on = s.tok->encode("hi</s>", false, true);
    ASSERT_FALSE(sp_on.empty());
    EXPECT_EQ(sp_on.back(), s.tok->eos_id());
    const auto sp_off = s.tok->encode("hi</s>", false, false);
    EXPECT_NE(sp_off.back(), s.tok->eos_id());
}

TEST(TokenizerSpecial, Ids) {
    Loaded a = load_smollm2(), b = load_stories();
    ASSERT_TRUE(a.tok && b.tok);
    EXPECT_EQ(a.tok->n_vocab(), 49152);
    EXPECT_EQ(a.tok->bos_id(), 1);
    EXPECT_EQ(a.tok->eos_id(), 2);
    EXPECT_EQ(a.tok->eot_id(), 2);  // <|im_end|>
    EXPECT_FALSE(a.tok->add_bos());
    EXPECT_TRUE(a.tok->is_eog(2));
    EXPECT_TRUE(a.tok->is_eog(0));  // <|endoftext|>
    EXPECT_FALSE(a.tok->is_eog(1));
    EXPECT_FALSE(a.tok->is_eog(a.tok->find_token("Ġthe")));
    EXPECT_FALSE(a.tok->is_eog(-1));
    EXPECT_FALSE(a.tok->is_eog(a.tok->n_vocab()));
    EXPECT_EQ(a.tok->token_to_piece(a.tok->find_token("Ġthe")), " the");
    EXPECT_EQ(a.tok->token_to_piece(0), "<|endoftext|>");
    EXPECT_EQ(a.tok->find_token("no such token text"), -1);

    EXPECT_EQ(b.tok->n_vocab(), 512);
    EXPECT_EQ(b.tok->bos_id(), 1);
    EXPECT_EQ(b.tok->eos_id(), 2);
    EXPECT_TRUE(b.tok->is_eog(2));
    EXPECT_EQ(b.tok->token_to_piece(b.tok->find_token("<0x41>")), "A");
}

TEST(TokenizerInput, InvalidUtf8) {
    Loaded a = load_smollm2(), b = load_stories();
    ASSERT_TRUE(a.tok && b.tok);
    const std::string bad = "ok \xFF\xFE mid \xE4\xB8 end \xC0\xAF";
    // SPM keeps the bytes through byte fallback.
    EXPECT_EQ(b.tok->decode(b.tok->encode(bad, true, false), true), bad);
    // Byte-level BPE sees the sanitized text.
    EXPECT_EQ(a.tok->encode(bad, false, false), a.tok->encode(utf8_sanitize(bad), false, false));
}

TEST(TokenizerInput, LongRunsStayLinear) {
    Loaded a = load_smollm2(), b = load_stories();
    ASSERT_TRUE(a.tok && b.tok);
    // Long single pre-tokenizer pieces (a priority-queue merge keeps these cheap).
    const std::string run(20000, '!'), spaces(20000, ' ');
    for (const std::string &s : {run, spaces}) {
        EXPECT_TRUE(a.tok->decode(a.tok->encode(s, false, false), false) == s) << "SmolLM2, run of '" << s[0] << "'";
        EXPECT_TRUE(b.tok->decode(b.tok->encode(s, true, false), true) == s) << "stories, run of '" << s[0] << "'";
    }
}

// ---------------------------------------------------------------------------
// UTF-8 helpers
// ---------------------------------------------------------------------------

TEST(TokenizerUtf8, SanitizeMaximalSubparts) {
    const std::string r = "\xEF\xBF\xBD";
    EXPECT_EQ(utf8_sanitize("abc"), "abc");
    EXPECT_EQ(utf8_sanitize("\xE0\x80"), r + r);           // overlong lead: each byte alone
    EXPECT_EQ(utf8_sanitize("\xF0\x9F\x98"), r);           // truncated emoji: one U+FFFD
    EXPECT_EQ(utf8_sanitize("\xF0\x9F\x98" "A"), r + "A");
    EXPECT_EQ(utf8_sanitize("\xED\xA0\x80"), r + r + r);   // surrogate
    EXPECT_EQ(utf8_sanitize("\xF4\x90\x80\x80"), r + r + r + r);  // past U+10FFFF
    EXPECT_EQ(utf8_sanitize("\xC3\xA9\x80"), "\xC3\xA9" + r);
    EXPECT_TRUE(utf8_is_valid("\xF0\x9F\x98\x80"));
    EXPECT_FALSE(utf8_is_valid("\xC0\x80"));
}

TEST(TokenizerUtf8, StreamingSanitizeEqualsBatch) {
    std::mt19937 rng(99);
    const std::string pool[] = {"a", "\xC3", "\xA9", "\xE4", "\xB8", "\xAD", "\xF0", "\x9F", "\x98", "\x80",
                                "\xFF", "\xED", "\xA0", " ", "\xF4", "\x90"};
    for (int trial = 0; trial < 2000; ++trial) {
        std::string s;
        const int n = 1 + static_cast<int>(rng() % 24);
        for (int i = 0; i < n; ++i) s += pool[rng() % 16];
        std::string pending, out;
        for (size_t i = 0; i < s.size();) {
            const size_t take = 1 + rng() % 3;
            pending += s.substr(i, take);
            i += take;
            std::string chunk;
            pending.erase(0, utf8_sanitize_prefix(pending, false, &chunk));
            EXPECT_TRUE(utf8_is_valid(chunk));
            out += chunk;
        }
        utf8_sanitize_prefix(pending, true, &out);
        EXPECT_EQ(out, utf8_sanitize(s));
    }
}

TEST(TokenizerUtf8, Gpt2AlphabetIsABijection) {
    std::vector<bool> seen(512, false);
    for (int b = 0; b < 256; ++b) {
        const uint32_t cp = gpt2_byte_to_codepoint(static_cast<uint8_t>(b));
        ASSERT_LT(cp, 512u);
        EXPECT_FALSE(seen[cp]);
        seen[cp] = true;
        EXPECT_EQ(gpt2_codepoint_to_byte(cp), b);
    }
    EXPECT_EQ(gpt2_byte_to_codepoint(' '), 0x120u);  // 'Ġ'
    EXPECT_EQ(gpt2_byte_to_codepoint('\n'), 0x10Au);  // 'Ċ'
    EXPECT_EQ(gpt2_codepoint_to_byte(0x2581), -1);
}

// ---------------------------------------------------------------------------
// Pre-tokenizer splits vs HF tokenizers, for every regex family
// ---------------------------------------------------------------------------

TEST(TokenizerPretok, SplitsMatchHuggingFace) {
    std::ifstream in(std::string(SIEVE_TEST_DATA) + "/tokenizer/pretok.golden");
    ASSERT_TRUE(in.good()) << "missing pretok.golden; run eval/tokenizer/gen_golden.py";
    std::map<std::string, std::unique_ptr<PreTokenizer>> pts;
    std::map<std::string, int> n_lines;
    std::string line;
    int n_bad = 0;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        const size_t t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
        ASSERT_NE(t2, std::string::npos) << line;
        const std::string family = line.substr(0, t1);
        std::string text;
        for (size_t i = t1 + 1; i + 1 < t2; i += 2) text.push_back(static_cast<char>(std::stoi(line.substr(i, 2), nullptr, 16)));
        std::vector<size_t> want;
        std::istringstream ends(line.substr(t2 + 1));
        for (size_t e; ends >> e;) want.push_back(e);
        auto &pt = pts[family];
        if (!pt) {
            auto r = PreTokenizer::create(family);
            ASSERT_TRUE(r.ok()) << r.status().message();
            pt = std::move(r.value());
            ASSERT_EQ(pt->family(), family);
        }
        ++n_lines[family];
        std::vector<std::string_view> pieces;
        pt->split(text, &pieces);
        std::vector<size_t> got;
        for (std::string_view p : pieces) got.push_back(static_cast<size_t>(p.data() + p.size() - text.data()));
        if (got != want && ++n_bad <= 10) ADD_FAILURE() << family << ": text '" << text << "'";
    }
    EXPECT_EQ(n_bad, 0);
    for (const char *f : {"gpt2", "llama3", "qwen2", "smollm"}) EXPECT_GE(n_lines[f], 300) << f;
}

TEST(TokenizerPretok, UnknownNameFallsBackToGpt2) {
    auto r = PreTokenizer::create("some-future-model");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r.value()->family(), "gpt2");
    for (const char *alias : {"llama-bpe", "starcoder", "refact", "default"}) {
        auto a = PreTokenizer::create(alias);
        ASSERT_TRUE(a.ok());
        EXPECT_NE(a.value()->family(), "");
    }
}

// ---------------------------------------------------------------------------
// Hand-made vocabularies: behaviour and metadata validation
// ---------------------------------------------------------------------------

namespace {

// A small byte-level BPE vocabulary: a b c ab abc Ġ <|end|> (control).
struct TinyBpe {
    std::vector<std::string> tokens = {"a", "b", "c", "ab", "abc", "\xC4\xA0", "<|end|>"};
    std::vector<int32_t> types = {1, 1, 1, 1, 1, 1, 3};
    std::vector<std::string> merges = {"a b", "ab c"};
    std::string model = "gpt2";

    std::vector<uint8_t> bytes(const std::function<void(GgufWriter &)> &extra = nullptr, bool with_base = true) const {
        GgufWriter w;
        w.add_string("general.architecture", "llama");
        if (with_base) {
            w.add_string("tokenizer.ggml.model", model);
            w.add_string_array("tokenizer.ggml.tokens", tokens);
            w.add_i32_array("tokenizer.ggml.token_type", types);
            w.add_string_array("tokenizer.ggml.merges", merges);
            w.add_string("tokenizer.ggml.pre", "gpt2");
            w.add_u32("tokenizer.ggml.eos_token_id", 6);
        }
        if (extra) extra(w);
        return w.to_bytes();
    }
};

// Loads a tokenizer from bytes; returns its error message ("" on success).
std::string load_error(const std::vector<uint8_t> &bytes) {
    auto f = GgufFile::from_memory(bytes.data(), bytes.size());
    if (!f.ok()) return "gguf: " + f.status().message();
    auto t = Tokenizer::from_gguf(*f.value());
    return t.ok() ? "" : t.status().message();
}

}  // namespace

TEST(TokenizerTiny, BpeMergesByRankAndDropsUnknownBytes) {
    const TinyBpe v;
    const auto bytes = v.bytes();
    auto f = GgufFile::from_memory(bytes.data(), bytes.size());
    ASSERT_TRUE(f.ok()) << f.status().message();
    auto t = Tokenizer::from_gguf(*f.value());
    ASSERT_TRUE(t.ok()) << t.status().message();
    const Tokenizer &tok = *t.value();
    // "abc" -> a b c -> ab c -> abc; " ab" -> Ġ a b -> Ġ ab.
    EXPECT_EQ(tok.encode("abc ab", false, false), (std::vector<int32_t>{4, 5, 3}));
    // 'd' has no token: it is dropped before merging (HF BPE without an unk
    // token), so its neighbours still merge.
    EXPECT_EQ(tok.encode("adbc", false, false), (std::vector<int32_t>{4}));
    EXPECT_EQ(tok.encode("ba", false, false), (std::vector<int32_t>{1, 0}));
    EXPECT_EQ(tok.encode("c<|end|>", false, true), (std::vector<int32_t>{2, 6}));
    EXPECT_EQ(tok.encode("", false, true), std::vector<int32_t>{});
    EXPECT_TRUE(tok.is_eog(6));
    EXPECT_FALSE(tok.add_bos());
    EXPECT_EQ(tok.decode({4, 5, 3, 6}, true), "abc ab");
    EXPECT_EQ(tok.decode({4, 6}, false), "abc<|end|>");
}

TEST(TokenizerTiny, BadMetadataGivesClearErrors) {
    const TinyBpe v;
    ASSERT_EQ(load_error(v.bytes()), "");
    struct Case {
        const char *what;
        std::vector<uint8_t> bytes;
        const char *expect;  // substring of the error
    };
    TinyBpe wrong_model = v;
    wrong_model.model = "wordpiece";
    TinyBpe bad_merge = v;
    bad_merge.merges.push_back("a zz");
    TinyBpe no_space = v;
    no_space.merges.push_back("abc");
    TinyBpe bad_type = v;
    bad_type.types[2] = 9;
    TinyBpe short_types = v;
    short_types.types.pop_back();
    TinyBpe empty = v;
    empty.tokens.clear();
    empty.types.clear();
    empty.merges.clear();
    const std::vector<Case> cases = {
        {"no tokenizer at all", v.bytes(nullptr, false), "tokenizer.ggml.model"},
        {"unsupported model", wrong_model.bytes(), "wordpiece"},
        {"merge with unknown token", bad_merge.bytes(), "zz"},
        {"merge without separator", no_space.bytes(), "tokenizer.ggml.merges[2]"},
        {"token type out of range", bad_type.bytes(), "token_type[2]"},
        {"token types shorter than tokens", short_types.bytes(), "tokenizer.ggml.token_type"},
        {"empty vocabulary", empty.bytes(), "empty"},
        {"scores of the wrong length",
         v.bytes([](GgufWriter &w) { w.add_f32_array("tokenizer.ggml.scores", {0.5f, 1.5f}); }),
         "tokenizer.ggml.scores"},
        {"NaN score", v.bytes([](GgufWriter &w) {
             std::vector<float> s(7, 0.25f);
             s[3] = std::nanf("");
             w.add_f32_array("tokenizer.ggml.scores", s);
         }),
         "tokenizer.ggml.scores[3]"},
        {"bos id out of range", v.bytes([](GgufWriter &w) { w.add_u32("tokenizer.ggml.bos_token_id", 7); }),
         "bos_token_id"},
        {"negative unk id", v.bytes([](GgufWriter &w) { w.add_i32("tokenizer.ggml.unknown_token_id", -5); }),
         "unknown_token_id"},
        {"add_bos_token not a bool",
         v.bytes([](GgufWriter &w) { w.add_string("tokenizer.ggml.add_bos_token", "yes"); }), "add_bos_token"},
        {"add_bos without a bos id",
         v.bytes([](GgufWriter &w) { w.add_bool("tokenizer.ggml.add_bos_token", true); }), "bos_token_id"},
        {"tokens not strings",
         [] {
             GgufWriter w;
             w.add_string("tokenizer.ggml.model", "llama");
             w.add_i32_array("tokenizer.ggml.tokens", {1, 2, 3});
             return w.to_bytes();
         }(),
         "tokenizer.ggml.tokens"},
        {"token types not integers",
         [] {
             GgufWriter w;
             w.add_string("tokenizer.ggml.model", "llama");
             w.add_string_array("tokenizer.ggml.tokens", {"<unk>", "a"});
             w.add_f32_array("tokenizer.ggml.token_type", {1.0f, 1.0f});
             return w.to_bytes();
         }(),
         "tokenizer.ggml.token_type"},
        {"gpt2 without merges",
         [] {
             GgufWriter w;
             w.add_string("tokenizer.ggml.model", "gpt2");
             w.add_string_array("tokenizer.ggml.tokens", {"a", "b"});
             return w.to_bytes();
         }(),
         "tokenizer.ggml.merges"},
    };
    for (const Case &c : cases) {
        const std::string err = load_error(c.bytes);
        EXPECT_NE(err, "") << c.what << ": loaded without error";
        EXPECT_NE(err.find(c.expect), std::string::npos) << c.what << ": error '" << err << "' lacks '" << c.expect << "'";
    }
}

TEST(TokenizerTiny, SpmScoresDecideMergeOrder) {
    // "abc": a+b scores higher than b+c, so a b c -> ab c -> (no abc) -> ab, c.
    // With bc scored higher it becomes a, bc. Missing 'z' falls back to <0x7A>.
    auto build = [](float ab, float bc) {
        GgufWriter w;
        w.add_string("tokenizer.ggml.model", "llama");
        std::vector<std::string> toks = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "c", "ab", "bc", "<0x7A>"};
        w.add_string_array("tokenizer.ggml.tokens", toks);
        w.add_f32_array("tokenizer.ggml.scores", {0, 0, 0, -1, -2, -2, -2, ab, bc, 0});
        w.add_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1, 1, 1, 1, 6});
        w.add_bool("tokenizer.ggml.add_space_prefix", false);
        return w.to_bytes();
    };
    for (const auto &[ab, bc, want] : {std::tuple{-0.5f, -0.9f, std::vector<int32_t>{1, 7, 6, 9}},
                                       std::tuple{-0.9f, -0.5f, std::vector<int32_t>{1, 4, 8, 9}}}) {
        const auto bytes = build(ab, bc);
        auto f = GgufFile::from_memory(bytes.data(), bytes.size());
        ASSERT_TRUE(f.ok()) << f.status().message();
        auto t = Tokenizer::from_gguf(*f.value());
        ASSERT_TRUE(t.ok()) << t.status().message();
        EXPECT_TRUE(t.value()->add_bos());  // SPM default
        EXPECT_EQ(t.value()->encode("abcz", true, false), want);
        EXPECT_EQ(t.value()->decode(want, true), "abcz");
    }
}
