// Task generators (src/sieve/eval): determinism, exact token lengths, needles
// where they say, answers that the prompt really supports, and errors. The
// oracles are independent of the generator: lengths are re-measured by
// encoding the prompt again, needles are found by walking token pieces, and
// cwe / fwe / vt answers are recomputed by parsing the prompt.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "sieve/eval/filler.h"
#include "sieve/eval/tasks.h"
#include "sieve/gguf/gguf.h"
#include "sieve/tokenizer/tokenizer.h"

using namespace sieve;

namespace {

class EvalTasks : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        const std::string path = std::string(SIEVE_TEST_MODELS) + "/stories260K.gguf";
        auto f = GgufFile::open(path);
        ASSERT_TRUE(f.ok()) << path << ": " << f.status().message() << " (committed under tests/data/models)";
        file_ = std::move(f.value()).release();
        auto t = Tokenizer::from_gguf(*file_);
        ASSERT_TRUE(t.ok()) << t.status().message();
        tok_ = std::move(t.value()).release();
    }
    static void TearDownTestSuite() {
        delete tok_;
        delete file_;
    }

    static ChatTemplate chatml() {
        ChatTemplate t;
        t.format = ChatFormat::chatml;
        return t;
    }

    static EvalSample make(const std::string &task, int64_t n_tokens, uint64_t seed, double depth = 0.5,
                           bool chat = false) {
        TaskOptions o;
        o.n_tokens = n_tokens;
        o.seed = seed;
        o.depth = depth;
        const ChatTemplate t = chatml();
        Result<EvalSample> s = make_sample(task, o, *tok_, chat ? &t : nullptr);
        EXPECT_TRUE(s.ok()) << task << " @" << n_tokens << ": " << s.status().message();
        return s.ok() ? s.value() : EvalSample{};
    }

    static GgufFile *file_;
    static Tokenizer *tok_;
};
GgufFile *EvalTasks::file_ = nullptr;
Tokenizer *EvalTasks::tok_ = nullptr;

std::vector<std::string> generated_tasks() {  // all but ppl, which reads files
    std::vector<std::string> names = eval_task_names();
    names.erase(std::remove(names.begin(), names.end(), "ppl"), names.end());
    return names;
}

std::vector<std::string> needle_tasks() {
    return {"passkey", "niah_multikey", "niah_multivalue", "niah_multiquery", "vt", "code"};
}

int64_t tolerance(int64_t n) {
    return std::max<int64_t>(1, n / 100);
}

size_t count_of(const std::string &hay, const std::string &needle) {
    size_t n = 0;
    for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
    return n;
}

// The text between the task's instruction and its question: the part after
// the first blank line and before the last one, in the user message.
std::string body_block(const std::string &prompt) {
    const size_t a = prompt.find("\n\n"), b = prompt.rfind("\n\n");
    return a != std::string::npos && b > a ? prompt.substr(a + 2, b - a - 2) : "";
}

std::map<std::string, int> word_counts(const std::vector<std::string> &words) {
    std::map<std::string, int> c;
    for (const std::string &w : words) ++c[w];
    return c;
}

// Every answer occurs more often than every word that is not an answer.
void expect_top(const std::map<std::string, int> &counts, const std::vector<std::string> &answers) {
    const std::set<std::string> ans(answers.begin(), answers.end());
    int min_ans = 1 << 30, max_other = 0;
    for (const auto &[w, c] : counts) {
        if (ans.count(w))
            min_ans = std::min(min_ans, c);
        else
            max_other = std::max(max_other, c);
    }
    for (const std::string &a : answers) EXPECT_TRUE(counts.count(a)) << a << " is not in the list";
    EXPECT_GT(min_ans, max_other);
}

}  // namespace

TEST(EvalRng, IsUniformAndFixedBySeed) {
    EvalRng a(42), b(42), c(43);
    std::vector<int> hist(10);
    bool differs = false;
    for (int i = 0; i < 20000; ++i) {
        const uint64_t x = a.below(10);
        ASSERT_EQ(x, b.below(10));
        differs |= x != c.below(10);
        ++hist[x];
    }
    EXPECT_TRUE(differs);
    for (int h : hist) EXPECT_NEAR(h, 2000, 200);
    for (int i = 0; i < 1000; ++i) {
        const int64_t r = a.range(-3, 3);
        EXPECT_GE(r, -3);
        EXPECT_LE(r, 3);
        const double u = a.unit();
        EXPECT_GE(u, 0.0);
        EXPECT_LT(u, 1.0);
    }
    // mt19937_64's output is fixed by the standard; our helpers on top of it
    // must be too (first value of std::mt19937_64 with the default seed).
    EXPECT_EQ(EvalRng(5489).next(), 14514284786278117030ULL);
}

TEST(Filler, IsVariedAndHasNoDigits) {
    Filler f(3);
    std::set<std::string> seen;
    std::map<std::string, int> openings;  // first two words
    const int n = 3000;
    int n_paragraphs = 0;
    for (int i = 0; i < n; ++i) {
        const FillerSentence &s = f.sentence(static_cast<size_t>(i));
        EXPECT_TRUE(seen.insert(s.text).second) << "repeated: " << s.text;
        EXPECT_TRUE(std::none_of(s.text.begin(), s.text.end(), [](char c) { return std::isdigit(c); }))
            << s.text;
        EXPECT_TRUE(std::isupper(static_cast<unsigned char>(s.text[0]))) << s.text;
        EXPECT_NE(std::string(".?!").find(s.text.back()), std::string::npos) << s.text;
        std::istringstream in(s.text);
        std::string w1, w2;
        in >> w1 >> w2;
        ++openings[w1 + " " + w2];
        n_paragraphs += s.ends_paragraph;
    }
    // No sentence shape dominates: the commonest opening is a few % at most.
    int most = 0;
    for (const auto &[k, c] : openings) most = std::max(most, c);
    EXPECT_LT(most, n * 5 / 100) << "the commonest two-word opening";
    EXPECT_GT(openings.size(), 200u);
    EXPECT_GT(n_paragraphs, n / 8);
    EXPECT_LT(n_paragraphs, n / 2);
    // Sentence i does not depend on what was asked before.
    Filler g(3);
    EXPECT_EQ(g.sentence(100).text, f.sentence(100).text);
    EXPECT_NE(Filler(4).sentence(0).text, f.sentence(0).text);
}

TEST(Filler, TextPlacesInsertsBetweenSentences) {
    Filler f(9);
    const std::string t = f.text(4, 10, {{0, "FIRST."}, {2, "MIDDLE."}, {4, "LAST."}});
    EXPECT_EQ(t.rfind("FIRST. ", 0), 0u) << t;
    EXPECT_NE(t.find(f.sentence(1).text + (f.sentence(1).ends_paragraph ? "\n\n" : " ") + "MIDDLE. " +
                     f.sentence(2).text),
              std::string::npos)
        << t;
    std::string partial = f.sentence(4).text.substr(0, 10);
    while (partial.back() == ' ') partial.pop_back();
    EXPECT_TRUE(t.ends_with("LAST. " + partial)) << t;
}

TEST_F(EvalTasks, SameSeedSameSampleOtherSeedOtherSample) {
    for (const std::string &task : generated_tasks()) {
        for (bool chat : {false, true}) {
            const EvalSample a = make(task, 600, 11, 0.3, chat), b = make(task, 600, 11, 0.3, chat);
            const EvalSample c = make(task, 600, 12, 0.3, chat);
            EXPECT_EQ(a.prompt, b.prompt) << task;
            EXPECT_EQ(a.prompt_ids, b.prompt_ids) << task;
            EXPECT_EQ(a.answers, b.answers) << task;
            ASSERT_EQ(a.needles.size(), b.needles.size()) << task;
            for (size_t i = 0; i < a.needles.size(); ++i)
                EXPECT_EQ(a.needles[i].token, b.needles[i].token) << task;
            EXPECT_NE(a.prompt, c.prompt) << task;
            EXPECT_NE(a.answers, c.answers) << task;
            EXPECT_EQ(a.task, task);
            EXPECT_EQ(a.seed, 11u);
        }
    }
}

TEST_F(EvalTasks, EveryTaskHitsItsTokenLength) {
    const ChatTemplate t = chatml();
    for (const std::string &task : generated_tasks()) {
        // stories260K's 512-token vocabulary makes the instructions long: vt
        // needs ~500 tokens, cwe ~360; 256 is checked where it fits.
        for (int64_t n : {256, 512, 1000, 3000}) {
            if (n == 256 && task != "passkey") continue;
            for (bool chat : {false, true}) {
                const EvalSample s = make(task, n, static_cast<uint64_t>(n) + 5, 0.5, chat);
                EXPECT_EQ(s.n_tokens_target, n);
                EXPECT_LE(std::llabs(static_cast<long long>(s.prompt_ids.size()) - n), tolerance(n))
                    << task << " @" << n << (chat ? " chat" : " raw") << ": " << s.prompt_ids.size();
                // The ids are the prompt's own tokenization, as the server makes it.
                EXPECT_EQ(s.prompt_ids, tok_->encode(s.prompt, tok_->add_bos(), true)) << task;
                EXPECT_EQ(s.prompt.rfind("<|im_start|>user\n", 0) == 0, chat) << task;
                EXPECT_FALSE(s.answers.empty()) << task;
            }
        }
    }
}

// Each needle occurs once in the text of the prompt's token pieces, starting
// inside the token it reports; needles are listed in prompt order.
void expect_needles_at_their_tokens(const EvalSample &s, const Tokenizer &tok) {
    std::vector<size_t> starts;
    std::string text;
    for (int32_t id : s.prompt_ids) {
        starts.push_back(text.size());
        text += tok.token_to_piece(id);
    }
    starts.push_back(text.size());
    int64_t prev = -1;
    for (const EvalNeedle &n : s.needles) {
        ASSERT_GE(n.token, 0);
        ASSERT_LT(n.token, static_cast<int64_t>(s.prompt_ids.size()));
        EXPECT_GE(n.token, prev) << "needles are listed in prompt order";
        prev = n.token;
        const size_t at = text.find(n.text);
        ASSERT_NE(at, std::string::npos) << n.text;
        EXPECT_EQ(count_of(text, n.text), 1u) << n.text;
        EXPECT_GE(at, starts[static_cast<size_t>(n.token)]) << n.text;
        EXPECT_LT(at, starts[static_cast<size_t>(n.token) + 1]) << n.text;
        EXPECT_GE(n.depth, 0.0);
        EXPECT_LE(n.depth, 1.0);
    }
}

TEST_F(EvalTasks, NeedlesAreAtTheTokensAndDepthsTheyReport) {
    for (const std::string &task : needle_tasks()) {
        for (double depth : {0.0, 0.25, 0.5, 0.75, 1.0}) {
            const EvalSample s = make(task, 3000, 21, depth, true);
            ASSERT_FALSE(s.needles.empty()) << task;
            expect_needles_at_their_tokens(s, *tok_);
            // The asked needle: vt's asked chain may put all its lines at
            // depth 1, and only the last of them can be last.
            std::vector<const EvalNeedle *> asked;
            for (const EvalNeedle &n : s.needles)
                if (n.depth_asked == depth) asked.push_back(&n);
            ASSERT_FALSE(asked.empty()) << task << ": no needle at the asked depth " << depth;
            const EvalNeedle &n = depth < 1.0 ? *asked.front() : *asked.back();
            // A filler sentence is ~1% of this haystack, a function ~3%; at
            // depth 1 the part-sentence that trims the length still follows.
            EXPECT_NEAR(n.depth, depth, task == "code" ? 0.05 : 0.03) << task << " depth " << depth;
            const double in_prompt = static_cast<double>(n.token) / static_cast<double>(s.prompt_ids.size());
            if (depth == 0.0) {
                EXPECT_LT(in_prompt, 0.1) << task;
            }
            if (depth == 1.0) {
                EXPECT_GT(in_prompt, 0.85) << task;
            }
        }
    }
}

TEST_F(EvalTasks, AnswersComeFromTheNeedles) {
    for (const std::string &task : needle_tasks()) {
        for (uint64_t seed : {1, 2, 3}) {
            const EvalSample s = make(task, 1000, seed, 0.4);
            const std::string question = s.prompt.substr(s.prompt.rfind("\n\n"));
            for (const std::string &a : s.answers) {
                const bool in_needle =
                    std::any_of(s.needles.begin(), s.needles.end(),
                                [&](const EvalNeedle &n) { return n.text.find(a) != std::string::npos; });
                EXPECT_TRUE(in_needle) << task << ": answer " << a;
                EXPECT_EQ(question.find(a), std::string::npos)
                    << task << ": the question gives the answer away";
            }
        }
    }
    const EvalSample pk = make("passkey", 1000, 5);
    ASSERT_EQ(pk.answers.size(), 1u);
    EXPECT_EQ(count_of(pk.prompt, pk.answers[0]), 2u);  // "The pass key is N. ... N is the pass key."
    const EvalSample mk = make("niah_multikey", 1000, 5);
    EXPECT_EQ(mk.needles.size(), 4u);
    EXPECT_EQ(mk.answers.size(), 1u);
    const EvalSample mv = make("niah_multivalue", 1000, 5), mq = make("niah_multiquery", 1000, 5);
    EXPECT_EQ(mv.answers.size(), 4u);
    EXPECT_EQ(mq.answers.size(), 4u);
    const EvalSample code = make("code", 1000, 5);
    for (const EvalSample *s : {&mk, &mv, &mq, &code})
        for (const std::string &a : s->answers) EXPECT_EQ(count_of(s->prompt, a), 1u) << s->task << " " << a;
    // The asked key is in the question, and it is the key of the answer's needle.
    for (const EvalNeedle &n : mk.needles) {
        const size_t k = n.text.find(" for ") + 5;
        const std::string key = n.text.substr(k, n.text.find(" is: ") - k);
        const bool asked = mk.prompt.find("number for " + key + " mentioned") != std::string::npos;
        EXPECT_EQ(asked, n.text.find(mk.answers[0]) != std::string::npos) << n.text;
    }
    ASSERT_EQ(code.needles.size(), 1u);
    EXPECT_TRUE(code.needles[0].text.starts_with("def func_"));
    EXPECT_TRUE(code.needles[0].text.ends_with("    return " + code.answers[0] + "\n"));
    const std::string name = code.needles[0].text.substr(4, code.needles[0].text.find('(') - 4);
    EXPECT_NE(code.prompt.find("What value does the function " + name + " return?"), std::string::npos);
}

TEST_F(EvalTasks, VariableTrackingAnswersFollowTheChains) {
    for (uint64_t seed : {1, 2, 3, 4}) {
        const EvalSample s = make("vt", 1500, seed, 0.2);
        ASSERT_EQ(s.needles.size(), 15u);  // 3 chains of 1 + 4 hops
        // Replay the assignments in prompt order; each right-hand name must exist already.
        std::map<std::string, std::string> value_of;
        for (const EvalNeedle &n : s.needles) {
            std::istringstream in(n.text);
            std::string var, name, eq, rhs;
            in >> var >> name >> eq >> rhs;
            ASSERT_EQ(var, "VAR");
            rhs.pop_back();  // '.'
            if (std::isdigit(static_cast<unsigned char>(rhs[0]))) {
                value_of[name] = rhs;
            } else {
                ASSERT_TRUE(value_of.count(rhs)) << rhs << " used before it is assigned";
                value_of[name] = value_of[rhs];
            }
        }
        const std::string asked = s.prompt.substr(s.prompt.rfind("assigned the value ") + 19, 5);
        std::vector<std::string> bound;
        for (const auto &[name, v] : value_of)
            if (v == asked) bound.push_back(name);
        std::vector<std::string> answers = s.answers;
        std::sort(answers.begin(), answers.end());
        EXPECT_EQ(bound, answers);
    }
}

TEST_F(EvalTasks, WordTaskAnswersAreTheMostFrequentWords) {
    for (int64_t n : {512, 1000, 3000}) {
        const EvalSample cwe = make("cwe", n, 8, 0.5, true);
        std::vector<std::string> items;
        std::istringstream lines(body_block(cwe.prompt));
        int expect_index = 1;
        for (std::string line; std::getline(lines, line);) {
            const size_t dot = line.find(". ");
            ASSERT_NE(dot, std::string::npos) << line;
            EXPECT_EQ(std::stoi(line.substr(0, dot)), expect_index++);
            items.push_back(line.substr(dot + 2));
        }
        EXPECT_EQ(cwe.answers.size(), 10u);
        expect_top(word_counts(items), cwe.answers);

        const EvalSample fwe = make("fwe", n, 8, 0.5, true);
        std::vector<std::string> words;
        std::istringstream in(body_block(fwe.prompt));
        for (std::string w; in >> w;) words.push_back(w);
        EXPECT_EQ(fwe.answers.size(), 3u);
        expect_top(word_counts(words), fwe.answers);
    }
}

TEST_F(EvalTasks, ScoreNeedsEveryAnswerVerbatim) {
    const EvalSample s = make("niah_multivalue", 800, 4);
    ASSERT_EQ(s.answers.size(), 4u);
    std::string all;
    for (const std::string &a : s.answers) all += a + ", ";
    EXPECT_TRUE(score_answer(s, " " + all + "that is all."));
    std::string missing = all;
    missing.erase(missing.find(s.answers[2]), s.answers[2].size());
    EXPECT_FALSE(score_answer(s, missing));
    EXPECT_FALSE(score_answer(s, ""));
    const EvalSample pk = make("passkey", 400, 4);
    EXPECT_TRUE(score_answer(pk, " " + pk.answers[0] + "."));
    EXPECT_FALSE(score_answer(pk, " " + pk.answers[0].substr(1) + "."));
    EvalSample none;
    EXPECT_FALSE(score_answer(none, "anything"));
}

// RULER's string_match_all: the fraction of answers found, case-insensitively.
TEST_F(EvalTasks, RulerScoreGivesPartialCreditCaseInsensitively) {
    const EvalSample s = make("niah_multivalue", 800, 4);
    ASSERT_EQ(s.answers.size(), 4u);
    std::string all;
    for (const std::string &a : s.answers) all += a + ", ";
    EXPECT_DOUBLE_EQ(ruler_score(s, all), 1.0);
    std::string three = all;
    three.erase(three.find(s.answers[1]), s.answers[1].size());
    EXPECT_DOUBLE_EQ(ruler_score(s, three), 0.75);
    EXPECT_FALSE(score_answer(s, three));
    EXPECT_DOUBLE_EQ(ruler_score(s, "no numbers here"), 0.0);
    // cwe's answers are words: the strict score wants them verbatim, RULER any case.
    const EvalSample cwe = make("cwe", 1200, 5);
    ASSERT_GE(cwe.answers.size(), 2u);
    std::string upper = cwe.answers[0] + " " + cwe.answers[1];
    for (char &ch : upper)
        if (ch >= 'a' && ch <= 'z') ch = static_cast<char>(ch - 'a' + 'A');
    EXPECT_DOUBLE_EQ(ruler_score(cwe, upper), 2.0 / static_cast<double>(cwe.answers.size()));
    EXPECT_DOUBLE_EQ(ruler_score(cwe, cwe.answers[0]), 1.0 / static_cast<double>(cwe.answers.size()));
    EvalSample none;
    EXPECT_DOUBLE_EQ(ruler_score(none, "anything"), 0.0);
}

TEST_F(EvalTasks, BadInputsAreErrorsThatSayWhatIsExpected) {
    auto err = [&](const std::string &task, TaskOptions o) {
        Result<EvalSample> r = make_sample(task, o, *tok_, nullptr);
        EXPECT_FALSE(r.ok()) << task;
        return r.status().message();
    };
    std::string m = err("needle", TaskOptions{});
    EXPECT_NE(m.find("unknown task 'needle'"), std::string::npos) << m;
    EXPECT_NE(m.find("passkey, niah_multikey"), std::string::npos) << m;
    TaskOptions o;
    o.n_tokens = 5;
    m = err("passkey", o);
    EXPECT_NE(m.find("n_tokens = 5: expected 16.."), std::string::npos) << m;
    o = TaskOptions{};
    o.depth = 1.5;
    m = err("vt", o);
    EXPECT_NE(m.find("depth = 1.5"), std::string::npos) << m;
    o = TaskOptions{};
    o.n_needles = 0;
    EXPECT_NE(err("niah_multikey", o).find("n_needles = 0"), std::string::npos);
    o = TaskOptions{};
    o.n_tokens = 40;  // shorter than the instructions
    for (const std::string &task : generated_tasks()) {
        m = err(task, o);
        EXPECT_NE(m.find("cannot be made 40 tokens long"), std::string::npos) << m;
        EXPECT_NE(m.find("ask for at least"), std::string::npos) << m;
    }
    o = TaskOptions{};
    o.ppl_dir = "/nonexistent/sieve-eval";
    m = err("ppl", o);
    EXPECT_NE(m.find("/nonexistent/sieve-eval"), std::string::npos) << m;
}

TEST_F(EvalTasks, PplIsRealPythonSourceCutToTheExactLength) {
    TaskOptions o;
    o.n_tokens = 3000;
    o.seed = 1;
    Result<EvalSample> a = make_sample("ppl", o, *tok_, nullptr);
    if (!a.ok() && a.status().message().find("python3") != std::string::npos)
        GTEST_SKIP() << "python3's standard library was not found: " << a.status().message();
    ASSERT_TRUE(a.ok()) << a.status().message();
    EXPECT_EQ(a->prompt_ids.size(), 3000u);
    EXPECT_TRUE(a->answers.empty());
    EXPECT_TRUE(a->prompt.find("def ") != std::string::npos ||
                a->prompt.find("import ") != std::string::npos);
    EXPECT_FALSE(score_answer(*a, a->prompt));
    Result<EvalSample> b = make_sample("ppl", o, *tok_, nullptr);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(a->prompt_ids, b->prompt_ids);
    o.seed = 2;
    Result<EvalSample> c = make_sample("ppl", o, *tok_, nullptr);
    ASSERT_TRUE(c.ok());
    EXPECT_NE(a->prompt_ids, c->prompt_ids);
}

TEST_F(EvalTasks, PplReadsAGivenFolderInNameOrder) {
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / "sieve_eval_ppl_test";
    std::filesystem::create_directories(dir);
    const std::string a = "def alpha():\n    return 'first file, read first when the seed starts there'\n";
    const std::string b = "def beta():\n    return 'second file'\n";
    std::ofstream(dir / "b.py") << b;
    std::ofstream(dir / "a.py") << a;
    std::ofstream(dir / "notes.txt") << "not python";
    TaskOptions o;
    o.ppl_dir = dir.string();
    o.n_tokens = 30;
    std::set<std::string> starts;
    for (uint64_t seed = 0; seed < 8; ++seed) {
        o.seed = seed;
        Result<EvalSample> s = make_sample("ppl", o, *tok_, nullptr);
        ASSERT_TRUE(s.ok()) << s.status().message();
        EXPECT_EQ(s->prompt_ids.size(), 30u);
        EXPECT_TRUE((a + b).starts_with(s->prompt) || (b + a).starts_with(s->prompt)) << s->prompt;
        starts.insert(s->prompt.substr(0, 8));
    }
    EXPECT_EQ(starts.size(), 2u) << "seeds start at either file";
    o.n_tokens = 5000;
    Result<EvalSample> r = make_sample("ppl", o, *tok_, nullptr);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("asked for 5000"), std::string::npos) << r.status().message();
    std::filesystem::remove_all(dir);
}
