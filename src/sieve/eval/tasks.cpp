// Task generators (see tasks.h for the table and the numbered pipeline).
#include "sieve/eval/tasks.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "sieve/eval/filler.h"

namespace sieve {
namespace {

constexpr int64_t k_min_tokens = 16;
constexpr int64_t k_max_tokens = int64_t{1} << 21;

// Seed streams: each purpose draws from its own generator, so adding a draw
// to one never shifts another.
enum Stream : uint64_t { s_content = 1, s_shuffle = 2, s_code = 3, s_ppl = 4 };

struct NeedleDraft {
    std::string text;
    double depth_asked;
};

// One candidate prompt before rendering and tokenization.
struct Draft {
    std::string body;           // the user message
    std::string answer_prefix;  // opens the assistant's reply
    std::string hay;            // the part of body the needles live in ("" if none)
    std::vector<NeedleDraft> needles;
    std::vector<std::string> answers;
};

// A task as the length search sees it: a body of n units (min_units or more)
// plus a knob in [0, max_fine(n)] that adds part of one more unit's worth.
struct Builder {
    int64_t min_units = 0;
    std::function<int64_t(int64_t n_units)> max_fine;
    std::function<Draft(int64_t n_units, int64_t n_fine)> draft;
};

std::string join_list(const std::vector<std::string> &items) {  // "a, b and c"
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += i + 1 == items.size() ? " and " : ", ";
        out += items[i];
    }
    return out;
}

// Distinct draws: calls make() until it yields something not drawn before.
template <class Make>
std::string draw_unique(std::unordered_set<std::string> *seen, Make make) {
    for (;;) {
        std::string s = make();
        if (seen->insert(s).second) return s;
    }
}

std::string draw_number(EvalRng *rng, std::unordered_set<std::string> *seen, int64_t lo, int64_t hi) {
    return draw_unique(seen, [&] { return std::to_string(rng->range(lo, hi)); });
}

// ---------------------------------------------------------------- filler haystacks

struct HaystackSpec {
    std::string intro, question, answer_prefix;
    std::vector<NeedleDraft> needles;  // chains must be listed in order, with non-decreasing depths
    std::vector<std::string> answers;
};

// Where needles go among units (sentences, functions) so that each sits at
// its depth of the text around it, counted in bytes: needle j goes before the
// unit whose preceding bytes, earlier needles included, come closest to
// depth_j * (all bytes - needle j's bytes). Needles are placed in depth order
// (stable, so a chain listed in order stays in order). Returns (boundary,
// needle index) pairs in placement order.
std::vector<std::pair<size_t, size_t>> place_needles(const std::vector<int64_t> &unit_bytes,
                                                     int64_t tail_bytes,
                                                     const std::vector<NeedleDraft> &needles) {
    std::vector<int64_t> before(unit_bytes.size() + 1, 0);  // bytes before boundary i
    for (size_t i = 0; i < unit_bytes.size(); ++i) before[i + 1] = before[i] + unit_bytes[i];
    int64_t total = before.back() + tail_bytes;
    std::vector<size_t> order(needles.size());
    for (size_t j = 0; j < needles.size(); ++j) {
        order[j] = j;
        total += static_cast<int64_t>(needles[j].text.size()) + 1;
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return needles[a].depth_asked < needles[b].depth_asked; });
    std::vector<std::pair<size_t, size_t>> out;
    size_t at = 0;
    int64_t placed = 0;  // bytes of needles already placed
    for (size_t j : order) {
        const int64_t len = static_cast<int64_t>(needles[j].text.size()) + 1;
        const double want =
            needles[j].depth_asked * static_cast<double>(total - len) - static_cast<double>(placed);
        size_t i = static_cast<size_t>(std::lower_bound(before.begin() + static_cast<std::ptrdiff_t>(at),
                                                        before.end(), static_cast<int64_t>(want)) -
                                       before.begin());
        if (i == before.size() ||
            (i > at && want - static_cast<double>(before[i - 1]) < static_cast<double>(before[i]) - want))
            --i;
        at = i;
        placed += len;
        out.push_back({i, j});
    }
    return out;
}

// Units are filler sentences; the knob is how much of the next sentence is kept.
Builder haystack_builder(HaystackSpec spec, uint64_t seed) {
    auto filler = std::make_shared<Filler>(seed);
    auto s = std::make_shared<const HaystackSpec>(std::move(spec));
    Builder b;
    b.max_fine = [filler](int64_t n) { return static_cast<int64_t>(filler->sentence(n).text.size()); };
    b.draft = [filler, s](int64_t n, int64_t f) {
        std::vector<int64_t> bytes;
        for (int64_t i = 0; i < n; ++i)
            bytes.push_back(static_cast<int64_t>(filler->sentence(static_cast<size_t>(i)).text.size()) + 1);
        std::vector<FillerInsert> inserts;
        for (auto [at, j] : place_needles(bytes, f, s->needles)) inserts.push_back({at, s->needles[j].text});
        Draft d;
        d.hay = filler->text(n, f, inserts);
        d.body = s->intro + "\n\n" + d.hay + "\n\n" + s->question;
        d.answer_prefix = s->answer_prefix;
        d.needles = s->needles;
        d.answers = s->answers;
        return d;
    };
    return b;
}

// Passkey retrieval (Mohtashami & Jaggi 2023, §4.2): one number in filler.
Builder passkey_builder(const TaskOptions &o) {
    EvalRng rng(eval_seed_mix(o.seed, s_content));
    const std::string key = std::to_string(rng.range(10000, 99999));
    HaystackSpec s;
    s.intro =
        "There is an important piece of information hidden inside a lot of irrelevant text. Find it and "
        "memorize it. I will quiz you about it.";
    s.needles = {{"The pass key is " + key + ". Remember it. " + key + " is the pass key.", o.depth}};
    s.question = "What is the pass key?";
    s.answer_prefix = "The pass key is";
    s.answers = {key};
    return haystack_builder(std::move(s), o.seed);
}

constexpr std::string_view k_key_adjectives[] = {
    "brave",  "calm",   "eager",   "fancy",  "gentle", "happy",   "jolly",   "kind",
    "lively", "nice",   "proud",   "silly",  "witty",  "zealous", "ancient", "bitter",
    "clever", "dizzy",  "elastic", "fierce", "grumpy", "hollow",  "icy",     "juicy",
    "lucky",  "mighty", "nervous", "odd",    "plain",  "rapid",   "shiny",   "tender",
};
constexpr std::string_view k_key_nouns[] = {
    "wrench", "harbor", "pillow",  "meadow", "rocket", "teacup", "falcon", "barrel", "cactus", "dolphin",
    "engine", "forest", "glacier", "hammer", "island", "jacket", "kitten", "ladder", "magnet", "needle",
    "orange", "parrot", "quarry",  "ribbon", "saddle", "tunnel", "violin", "walnut", "yogurt", "zipper",
};

std::string draw_niah_key(EvalRng *rng, std::unordered_set<std::string> *seen) {
    return draw_unique(seen, [&] {
        return std::string(rng->pick(k_key_adjectives)) + "-" + std::string(rng->pick(k_key_nouns));
    });
}

std::string niah_needle(const std::string &key, const std::string &value) {
    return "One of the special magic numbers for " + key + " is: " + value + ".";
}

// Multi-needle NIAH (RULER, Hsieh et al. 2024, §3.1 "Retrieval"): n_keys
// keys with n_values values each; the first n_asked keys are asked about.
// The first needle sits at o.depth, the others at random depths.
Builder niah_builder(const TaskOptions &o, int n_keys, int n_values, int n_asked) {
    EvalRng rng(eval_seed_mix(o.seed, s_content));
    std::unordered_set<std::string> seen_keys, seen_values;
    std::vector<std::string> keys;
    HaystackSpec s;
    for (int k = 0; k < n_keys; ++k) {
        keys.push_back(draw_niah_key(&rng, &seen_keys));
        for (int v = 0; v < n_values; ++v) {
            const std::string value = draw_number(&rng, &seen_values, 1000000, 9999999);
            const double depth = s.needles.empty() ? o.depth : rng.unit();
            s.needles.push_back({niah_needle(keys.back(), value), depth});
            if (k < n_asked) s.answers.push_back(value);
        }
    }
    s.intro =
        "Some special magic numbers are hidden within the following text. Make sure to memorize them. I will "
        "quiz you about the numbers afterwards.";
    const std::vector<std::string> asked(keys.begin(), keys.begin() + n_asked);
    const bool one = s.answers.size() == 1;
    s.question = std::string(one ? "What is the special magic number for "
                                 : "What are all the special magic numbers for ") +
                 join_list(asked) + " mentioned in the provided text?";
    s.answer_prefix = std::string(one ? "The special magic number for " : "The special magic numbers for ") +
                      join_list(asked) + " mentioned in the provided text " + (one ? "is" : "are");
    return haystack_builder(std::move(s), o.seed);
}

Builder niah_multikey_builder(const TaskOptions &o) {
    return niah_builder(o, o.n_needles, 1, 1);
}
Builder niah_multivalue_builder(const TaskOptions &o) {
    return niah_builder(o, 1, o.n_needles, 1);
}
Builder niah_multiquery_builder(const TaskOptions &o) {
    return niah_builder(o, o.n_needles, 1, o.n_needles);
}

// n sorted depths in [lo, 1), the first exactly lo when pin_first.
std::vector<double> sorted_depths(EvalRng *rng, int n, double lo, bool pin_first) {
    std::vector<double> d;
    for (int i = 0; i < n; ++i) d.push_back(pin_first && i == 0 ? lo : lo + (1.0 - lo) * rng->unit());
    std::sort(d.begin(), d.end());
    return d;
}

// Variable tracking (RULER §3.1 "Multi-hop tracing"): chains VAR A = 12345,
// VAR B = A, ... in filler; chain 0 is asked, its first line at o.depth.
Builder vt_builder(const TaskOptions &o) {
    EvalRng rng(eval_seed_mix(o.seed, s_content));
    std::unordered_set<std::string> seen_names, seen_values;
    HaystackSpec s;
    std::string asked_value;
    for (int c = 0; c < o.vt_chains; ++c) {
        const std::string value = draw_number(&rng, &seen_values, 10000, 99999);
        const std::vector<double> depths = sorted_depths(&rng, o.vt_hops + 1, c == 0 ? o.depth : 0.0, c == 0);
        std::string prev = value;
        for (int h = 0; h <= o.vt_hops; ++h) {
            std::string name = draw_unique(&seen_names, [&] {
                std::string w = eval_code_word(&rng, 5);
                for (char &ch : w) ch = static_cast<char>(ch - 'a' + 'A');
                return w;
            });
            s.needles.push_back({"VAR " + name + " = " + prev + ".", depths[h]});
            if (c == 0) s.answers.push_back(name);
            prev = std::move(name);
        }
        if (c == 0) asked_value = value;
    }
    s.intro = "Memorize and track the chain(s) of variable assignment hidden in the following text.";
    s.question = "Find all variables that are assigned the value " + asked_value + " in the text above.";
    s.answer_prefix = "According to the chain(s) of variable assignment in the text above, " +
                      std::to_string(o.vt_hops + 1) + " variables are assigned the value " + asked_value +
                      ", they are:";
    return haystack_builder(std::move(s), o.seed);
}

// ---------------------------------------------------------------- word lists

// A lazily grown list of distinct words, word i fixed by the seed.
struct WordPool {
    EvalRng rng;
    std::function<std::string(EvalRng *)> make;
    std::vector<std::string> words;
    std::unordered_set<std::string> seen;

    const std::string &at(size_t i) {
        while (words.size() <= i) words.push_back(draw_unique(&seen, [&] { return make(&rng); }));
        return words[i];
    }
};

// The n most frequent words, checked to be strictly more frequent than the
// rest, so the answer is unambiguous.
std::vector<std::string> top_words(const std::vector<std::string> &items, size_t n) {
    std::unordered_map<std::string, int64_t> counts;
    for (const std::string &w : items) ++counts[w];
    std::vector<std::pair<int64_t, std::string>> by_count;
    for (const auto &[w, c] : counts) by_count.push_back({-c, w});
    std::sort(by_count.begin(), by_count.end());
    SIEVE_CHECKF(by_count.size() > n && by_count[n - 1].first < by_count[n].first,
                 "top %zu words are not separated from the rest (%zu distinct)", n, by_count.size());
    std::vector<std::string> out;
    for (size_t i = 0; i < n; ++i) out.push_back(by_count[i].second);
    return out;
}

// A word-list task: units are items; the knob is one extra item, the first
// n_fine letters of a fresh word (it occurs once, so the answer is unchanged).
struct WordTask {
    std::string intro, question, answer_prefix;
    size_t n_top = 0;
    int word_len = 0;
    // The multiset of word indices for n items (into the pool).
    std::function<std::vector<size_t>(int64_t n)> layout;
    // Item i as written ("12. tomavi" or "qzkwe"), and what joins items.
    std::function<std::string(size_t i, const std::string &w)> item;
    std::function<std::string(size_t i)> separator;
};

Builder word_builder(WordTask task, WordPool pool, int64_t min_units, uint64_t seed) {
    auto t = std::make_shared<const WordTask>(std::move(task));
    auto p = std::make_shared<WordPool>(std::move(pool));
    Builder b;
    b.min_units = min_units;
    b.max_fine = [t](int64_t) { return static_cast<int64_t>(t->word_len); };
    b.draft = [t, p, seed](int64_t n, int64_t f) {
        std::vector<size_t> ids = t->layout(n);
        EvalRng rng(eval_seed_mix(eval_seed_mix(seed, s_shuffle), static_cast<uint64_t>(n)));
        rng.shuffle(&ids);
        const size_t fresh = *std::max_element(ids.begin(), ids.end()) + 1;
        std::vector<std::string> words;
        for (size_t id : ids) words.push_back(p->at(id));
        Draft d;
        d.answers = top_words(words, t->n_top);
        if (f > 0) words.push_back(p->at(fresh).substr(0, static_cast<size_t>(f)));
        std::string list;
        for (size_t i = 0; i < words.size(); ++i)
            list += (i > 0 ? t->separator(i) : "") + t->item(i, words[i]);
        d.body = t->intro + "\n\n" + list + "\n\n" + t->question;
        d.answer_prefix = t->answer_prefix;
        return d;
    };
    return b;
}

// Common words extraction (RULER §3.1 "Aggregation", cwe): 10 words occur c
// times each, the others u < c times; c grows with the list (30 at 1000
// items, RULER's default) so the common words stay ~30% of it.
Builder cwe_builder(const TaskOptions &o) {
    constexpr size_t n_common = 10;
    WordTask t;
    t.intro =
        "Below is a numbered list of words. In these words, some appear more often than others. Memorize the "
        "ones that appear most often.";
    t.question = "What are the 10 most common words in the above list?";
    t.answer_prefix = "The top 10 words that appear most often in the list are:";
    t.n_top = n_common;
    t.word_len = 6;
    t.layout = [](int64_t n) {
        const int64_t u = n >= 300 ? 3 : 1, c = std::max(u + 1, n * 3 / 100);
        const int64_t rest = n - static_cast<int64_t>(n_common) * c;
        std::vector<size_t> ids;
        for (size_t w = 0; w < n_common; ++w) ids.insert(ids.end(), static_cast<size_t>(c), w);
        for (int64_t i = 0; i < rest / u; ++i) ids.insert(ids.end(), static_cast<size_t>(u), n_common + i);
        for (int64_t i = 0; i < rest % u; ++i) ids.push_back(n_common + rest / u + i);
        return ids;
    };
    t.item = [](size_t i, const std::string &w) { return std::to_string(i + 1) + ". " + w; };
    t.separator = [](size_t) { return std::string("\n"); };
    WordPool pool{
        EvalRng(eval_seed_mix(o.seed, s_content)), [](EvalRng *r) { return eval_pseudo_word(r, 3); }, {}, {}};
    return word_builder(std::move(t), std::move(pool), 2 * n_common + 1, o.seed);
}

// Frequent words extraction (RULER §3.1 "Aggregation", fwe): coded words
// whose counts follow Zipf with alpha = 2 (count_k = floor(A / k^2), A = n/2);
// n >= 36 makes the 3rd count (2) exceed the 4th (1).
Builder fwe_builder(const TaskOptions &o) {
    WordTask t;
    t.intro =
        "Read the following coded text and track the frequency of each coded word. Find the three most "
        "frequently appeared coded words.";
    t.question = "What are the three most frequently appeared words in the above coded text?";
    t.answer_prefix = "According to the coded text above, the three most frequently appeared words are:";
    t.n_top = 3;
    t.word_len = 5;
    t.layout = [](int64_t n) {
        const int64_t a = n / 2;
        std::vector<size_t> ids;
        size_t rank = 0;
        for (int64_t c = a; c >= 2 && static_cast<int64_t>(ids.size()) + c <= n;
             c = a / ((rank + 1) * (rank + 1)))
            ids.insert(ids.end(), static_cast<size_t>(c), rank++);
        while (static_cast<int64_t>(ids.size()) < n) ids.push_back(rank++);
        return ids;
    };
    t.item = [](size_t, const std::string &w) { return w; };
    t.separator = [](size_t i) { return std::string(i % 12 == 0 ? "\n" : " "); };
    WordPool pool{
        EvalRng(eval_seed_mix(o.seed, s_content)), [](EvalRng *r) { return eval_code_word(r, 5); }, {}, {}};
    return word_builder(std::move(t), std::move(pool), 36, o.seed);
}

// ---------------------------------------------------------------- code

constexpr std::string_view k_params[] = {"items", "name",  "limit", "path", "size",   "flag",
                                         "data",  "index", "width", "mode", "parent", "options"};
constexpr std::string_view k_locals[] = {"total", "result", "buffer", "count",
                                         "scale", "offset", "parts",  "label"};
constexpr std::string_view k_comments[] = {
    "keep the old behaviour for existing callers",
    "cheap check first",
    "the cache may be stale here",
    "see the note in the module docstring",
    "this mirrors the reader",
    "avoid a copy of the input",
    "callers rely on this order",
    "not thread safe; the caller holds the lock",
};

std::string code_statement(EvalRng *rng, const std::vector<std::string> &params) {
    const std::string p = params[rng->below(params.size())], v = std::string(rng->pick(k_locals));
    const std::string k = std::to_string(rng->range(2, 97)), k2 = std::to_string(rng->range(2, 97));
    switch (rng->below(7)) {
        case 0:
            return "    " + v + " = " + p + " * " + k + " + " + k2 + "\n";
        case 1:
            return "    if " + p + ":\n        " + v + " = " + k + "\n";
        case 2:
            return "    for i in range(" + k + "):\n        " + v + " = i * " + k2 + "\n";
        case 3:
            return "    " + v + " = [" + p + "] * " + k + "\n";
        case 4:
            return "    # " + std::string(rng->pick(k_comments)) + "\n";
        case 5:
            return "    " + v + " = str(" + p + ").strip()\n";
        default:
            return "    " + v + " = {'" + eval_pseudo_word(rng, 2) + "': " + p + ", 'size': " + k + "}\n";
    }
}

// def func_<name>(params): 1-3 statements, then return <value>.
std::string code_function(EvalRng *rng, const std::string &name, const std::string &value) {
    std::vector<std::string> params;
    std::unordered_set<std::string> seen;
    const int64_t n_params = rng->range(1, 3);
    for (int64_t i = 0; i < n_params; ++i)
        params.push_back(draw_unique(&seen, [&] { return std::string(rng->pick(k_params)); }));
    std::string fn = "def " + name + "(";
    for (size_t i = 0; i < params.size(); ++i) fn += (i > 0 ? ", " : "") + params[i];
    fn += "):\n";
    const int64_t n_statements = rng->range(1, 3);
    for (int64_t i = 0; i < n_statements; ++i) fn += code_statement(rng, params);
    return fn + "    return " + value + "\n";
}

struct CodeState {
    EvalRng rng;
    std::unordered_set<std::string> names, values;
    std::vector<std::string> functions;  // distractors, lazily grown
    std::string target, target_name, target_value;
    std::string docstring_source;  // filler the docstring knob cuts from

    std::string make() {
        const std::string name = draw_unique(&names, [&] { return "func_" + eval_pseudo_word(&rng, 3); });
        return code_function(&rng, name, draw_number(&rng, &values, 10000, 99999));
    }
};

// Code retrieval: a Python module of generated functions; the asked one is
// placed before function round(depth * n). The knob is the module docstring.
Builder code_builder(const TaskOptions &o) {
    auto st = std::make_shared<CodeState>(
        CodeState{EvalRng(eval_seed_mix(o.seed, s_code)), {}, {}, {}, {}, {}, {}, {}});
    st->target_name = draw_unique(&st->names, [&] { return "func_" + eval_pseudo_word(&st->rng, 3); });
    st->target_value = draw_number(&st->rng, &st->values, 10000, 99999);
    st->target = code_function(&st->rng, st->target_name, st->target_value);
    Filler filler(o.seed);
    st->docstring_source = filler.text(8, 0, {});
    std::replace(st->docstring_source.begin(), st->docstring_source.end(), '\n', ' ');
    const double depth = o.depth;
    Builder b;
    b.max_fine = [st](int64_t) { return static_cast<int64_t>(st->docstring_source.size()); };
    b.draft = [st, depth](int64_t n, int64_t f) {
        while (static_cast<int64_t>(st->functions.size()) < n) st->functions.push_back(st->make());
        std::string code;
        if (f > 0) {
            std::string doc = st->docstring_source.substr(0, static_cast<size_t>(f));
            while (!doc.empty() && doc.back() == ' ') doc.pop_back();
            code = "\"\"\"" + doc + "\"\"\"\n\n\n";
        }
        std::vector<int64_t> bytes;
        for (int64_t i = 0; i < n; ++i)
            bytes.push_back(static_cast<int64_t>(st->functions[static_cast<size_t>(i)].size()) + 2);
        Draft d;
        d.needles = {{st->target, depth}};
        // The docstring is before every function: it counts as the first unit.
        bytes.insert(bytes.begin(), static_cast<int64_t>(code.size()));
        const size_t at = std::max<size_t>(1, place_needles(bytes, 0, d.needles)[0].first);
        for (int64_t i = 0; i <= n; ++i) {
            if (static_cast<size_t>(i) + 1 == at) code += st->target + "\n\n";
            if (i < n) code += st->functions[static_cast<size_t>(i)] + "\n\n";
        }
        d.hay = code;
        d.body =
            "Below is a Python module. Read it carefully: I will ask you what one of its functions "
            "returns.\n\n"
            "```python\n" +
            code + "```\n\nWhat value does the function " + st->target_name + " return?";
        d.answer_prefix = "The function " + st->target_name + " returns";
        d.answers = {st->target_value};
        return d;
    };
    return b;
}

// ---------------------------------------------------------------- rendering and length search

struct Rendered {
    std::string prompt;
    std::vector<int32_t> ids;
};

// Step 3 of tasks.h: the chat template (or raw text), the answer prefix,
// and tokenization as the server does it.
Result<Rendered> render(const Draft &d, const Tokenizer &tok, const ChatTemplate *tmpl) {
    Rendered r;
    if (tmpl != nullptr) {
        Result<std::string> chat = chat_render(*tmpl, {{"user", d.body}}, /*add_generation_prompt=*/true);
        if (!chat.ok()) return chat.status();
        r.prompt = *chat + d.answer_prefix;
    } else {
        r.prompt = d.body + "\n" + d.answer_prefix;
    }
    const std::string bos = tok.bos_id() >= 0 ? tok.token_to_piece(tok.bos_id()) : "";
    const bool add_bos = tok.add_bos() && !(bos.size() > 0 && r.prompt.starts_with(bos));
    r.ids = tok.encode(r.prompt, add_bos, /*parse_special=*/true);
    return r;
}

// Token counts of drafts, each (units, knob) rendered once.
class LengthProbe {
  public:
    LengthProbe(const Builder &b, const Tokenizer &tok, const ChatTemplate *tmpl)
        : b_(b), tok_(tok), tmpl_(tmpl) {}

    // Precondition: render() succeeded once (make_sample checks it); the
    // template only fails on the shape of the conversation, which is fixed.
    int64_t operator()(int64_t n, int64_t f) {
        auto it = counts_.find({n, f});
        if (it != counts_.end()) return it->second;
        Result<Rendered> r = render(b_.draft(n, f), tok_, tmpl_);
        SIEVE_CHECKF(r.ok(), "%s", r.status().message().c_str());
        const int64_t c = static_cast<int64_t>(r->ids.size());
        counts_[{n, f}] = c;
        return c;
    }

  private:
    const Builder &b_;
    const Tokenizer &tok_;
    const ChatTemplate *tmpl_;
    std::map<std::pair<int64_t, int64_t>, int64_t> counts_;
};

// Step 4 of tasks.h. Token counts grow with the units and (nearly) with the
// knob; SPM and BPE merges can make them dip by a token, so the end of the
// search compares its neighbours rather than trusting monotonicity.
Result<std::pair<int64_t, int64_t>> fit_length(const std::string &task, const Builder &b, int64_t target,
                                               int64_t n_min, LengthProbe *probe) {
    const int64_t tol = std::max<int64_t>(1, target / 100);
    if (n_min > target + tol)
        return Status::errorf(
            "task '%s' cannot be made %lld tokens long: its instructions and smallest body already take %lld "
            "tokens "
            "with this tokenizer and template; ask for at least %lld tokens",
            task.c_str(), static_cast<long long>(target), static_cast<long long>(n_min),
            static_cast<long long>(n_min + n_min / 99 + 1));
    if (n_min >= target) return std::pair<int64_t, int64_t>{b.min_units, 0};
    // 1. Units: bracket by doubling, then bisect; count(lo) <= target < count(hi).
    int64_t lo = b.min_units, hi = std::max<int64_t>(2 * lo, lo + 8);
    while ((*probe)(hi, 0) <= target) {
        lo = hi;
        hi *= 2;
        SIEVE_CHECKF(hi <= 4 * target + 64, "task '%s': %lld units stay under %lld tokens", task.c_str(),
                     static_cast<long long>(lo), static_cast<long long>(target));
    }
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        ((*probe)(mid, 0) <= target ? lo : hi) = mid;
    }
    // 2. The knob, within one unit: count(lo, flo) <= target < count(lo, fhi).
    const int64_t f_max = b.max_fine(lo);
    int64_t flo = 0, fhi = f_max + 1;
    if ((*probe)(lo, f_max) <= target) flo = f_max;
    while (fhi - flo > 1) {
        const int64_t mid = flo + (fhi - flo) / 2;
        ((*probe)(lo, mid) <= target ? flo : fhi) = mid;
    }
    // 3. The closest of the neighbours.
    std::pair<int64_t, int64_t> best{lo, flo};
    int64_t best_err = std::llabs((*probe)(lo, flo) - target);
    for (std::pair<int64_t, int64_t> c : {std::pair<int64_t, int64_t>{lo, flo + 1}, {lo + 1, 0}}) {
        if (c.second > f_max) continue;
        const int64_t err = std::llabs((*probe)(c.first, c.second) - target);
        if (err < best_err) {
            best = c;
            best_err = err;
        }
    }
    if (best_err > tol)
        return Status::errorf(
            "task '%s': the closest prompt to %lld tokens has %lld tokens, outside ±%lld; "
            "try a neighbouring length or seed",
            task.c_str(), static_cast<long long>(target),
            static_cast<long long>((*probe)(best.first, best.second)), static_cast<long long>(tol));
    return best;
}

// Step 5 of tasks.h: byte offsets of the tokens' pieces locate each needle.
Status locate_needles(const Draft &d, const Tokenizer &tok, const std::vector<int32_t> &ids,
                      std::vector<EvalNeedle> *out) {
    if (d.needles.empty()) return Status();
    std::string text;
    std::vector<size_t> starts;
    for (int32_t id : ids) {
        starts.push_back(text.size());
        text += tok.token_to_piece(id);
    }
    auto token_at = [&](size_t byte) {
        return static_cast<int64_t>(std::upper_bound(starts.begin(), starts.end(), byte) - starts.begin()) -
               1;
    };
    const size_t hay_at = text.find(d.hay);
    if (hay_at == std::string::npos)
        return Status::error(
            "the haystack is not in the text of the prompt's tokens; does the tokenizer "
            "change the text it encodes?");
    const int64_t t_begin = token_at(hay_at), t_end = token_at(hay_at + d.hay.size() - 1) + 1;
    for (const NeedleDraft &nd : d.needles) {
        const size_t at = text.find(nd.text, hay_at);
        if (at == std::string::npos || at + nd.text.size() > hay_at + d.hay.size())
            return Status::errorf("needle '%s' is not in the haystack's tokens", nd.text.c_str());
        // Depth: the haystack's other tokens before the needle, as a fraction of them all.
        const int64_t t = token_at(at), t_last = token_at(at + nd.text.size() - 1);
        const int64_t others = std::max<int64_t>(1, (t_end - t_begin) - (t_last - t + 1));
        out->push_back(
            {nd.text, nd.depth_asked, t,
             std::clamp(static_cast<double>(t - t_begin) / static_cast<double>(others), 0.0, 1.0)});
    }
    std::stable_sort(out->begin(), out->end(),
                     [](const EvalNeedle &a, const EvalNeedle &b) { return a.token < b.token; });
    return Status();
}

// ---------------------------------------------------------------- ppl

Result<std::string> python_stdlib_dir() {
    FILE *p =
        popen("python3 -c 'import sysconfig;print(sysconfig.get_paths()[\"stdlib\"])' 2>/dev/null", "r");
    if (p == nullptr)
        return Status::error("ppl: cannot run python3 to find its standard library; set ppl_dir");
    std::string out;
    char buf[512];
    while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
    const int rc = pclose(p);
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    if (rc != 0 || out.empty())
        return Status::error(
            "ppl: `python3 -c 'import sysconfig; ...'` did not print the standard library's "
            "folder (is python3 installed?); pass a folder of .py files as ppl_dir");
    return out;
}

Result<std::vector<std::filesystem::path>> py_files(const std::string &dir) {
    std::error_code ec;
    std::vector<std::filesystem::path> files;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        if (it->path().extension() == ".py" && it->is_regular_file(ec)) files.push_back(it->path());
    if (ec) return Status::errorf("ppl: cannot list '%s': %s", dir.c_str(), ec.message().c_str());
    if (files.empty())
        return Status::errorf("ppl: no .py files in '%s'; expected a Python source folder", dir.c_str());
    std::sort(files.begin(), files.end());
    return files;
}

// Real text no one here wrote: the .py files in name order, starting at a
// seeded file and wrapping around, cut to exactly opt.n_tokens tokens.
Result<EvalSample> make_ppl(const TaskOptions &opt, const Tokenizer &tok) {
    Result<std::string> dir = opt.ppl_dir.empty() ? python_stdlib_dir() : Result<std::string>(opt.ppl_dir);
    if (!dir.ok()) return dir.status();
    Result<std::vector<std::filesystem::path>> files = py_files(*dir);
    if (!files.ok()) return files.status();
    EvalRng rng(eval_seed_mix(opt.seed, s_ppl));
    const size_t start = rng.below(files->size());
    std::string text;
    std::vector<int32_t> ids;
    size_t want_bytes = static_cast<size_t>(opt.n_tokens) * 6 + 4096;  // code is 2-5 bytes a token
    for (size_t i = 0; i < files->size() && static_cast<int64_t>(ids.size()) < opt.n_tokens; ++i) {
        std::ifstream in((*files)[(start + i) % files->size()], std::ios::binary);
        std::ostringstream ss;
        ss << in.rdbuf();
        text += ss.str();
        if (!text.empty() && text.back() != '\n') text += '\n';
        if (text.size() < want_bytes && i + 1 < files->size()) continue;
        ids = tok.encode(text, tok.add_bos(), /*parse_special=*/false);
        want_bytes = text.size() * 2;
    }
    if (static_cast<int64_t>(ids.size()) < opt.n_tokens)
        return Status::errorf("ppl: the .py files in '%s' hold %zu tokens; asked for %lld", dir->c_str(),
                              ids.size(), static_cast<long long>(opt.n_tokens));
    EvalSample s;
    s.task = "ppl";
    s.n_tokens_target = opt.n_tokens;
    ids.resize(static_cast<size_t>(opt.n_tokens));
    s.prompt = tok.decode(ids, /*skip_special=*/true);
    s.prompt_ids = std::move(ids);
    return s;
}

// ---------------------------------------------------------------- entry points

struct TaskEntry {
    const char *name;
    Builder (*make)(const TaskOptions &);  // nullptr: ppl, which has no template or length search
};

constexpr TaskEntry k_tasks[] = {
    {"passkey", passkey_builder},
    {"niah_multikey", niah_multikey_builder},
    {"niah_multivalue", niah_multivalue_builder},
    {"niah_multiquery", niah_multiquery_builder},
    {"vt", vt_builder},
    {"cwe", cwe_builder},
    {"fwe", fwe_builder},
    {"code", code_builder},
    {"ppl", nullptr},
};

Status check_range(const char *what, int64_t v, int64_t lo, int64_t hi) {
    if (v >= lo && v <= hi) return Status();
    return Status::errorf("%s = %lld: expected %lld..%lld", what, static_cast<long long>(v),
                          static_cast<long long>(lo), static_cast<long long>(hi));
}

Status check_options(const TaskOptions &o) {
    SIEVE_TRY(check_range("n_tokens", o.n_tokens, k_min_tokens, k_max_tokens));
    if (!(o.depth >= 0.0 && o.depth <= 1.0))
        return Status::errorf(
            "depth = %g: expected a fraction in [0, 1] (0 = start of the haystack, 1 = end)", o.depth);
    SIEVE_TRY(check_range("n_needles", o.n_needles, 1, 64));
    SIEVE_TRY(check_range("vt_chains", o.vt_chains, 1, 16));
    SIEVE_TRY(check_range("vt_hops", o.vt_hops, 1, 32));
    return Status();
}

}  // namespace

std::vector<std::string> eval_task_names() {
    std::vector<std::string> names;
    for (const TaskEntry &t : k_tasks) names.push_back(t.name);
    return names;
}

Result<EvalSample> make_sample(const std::string &task, const TaskOptions &opt, const Tokenizer &tok,
                               const ChatTemplate *tmpl) {
    const TaskEntry *entry = nullptr;
    for (const TaskEntry &t : k_tasks)
        if (task == t.name) entry = &t;
    if (entry == nullptr) {
        std::string all;
        for (const std::string &n : eval_task_names()) all += (all.empty() ? "" : ", ") + n;
        return Status::errorf("unknown task '%s': expected one of %s", task.c_str(), all.c_str());
    }
    SIEVE_TRY(check_options(opt).with_context("task '" + task + "'"));
    // Each task draws from its own seed, so one seed gives unrelated samples
    // across tasks (not the same filler and the same first number in each).
    TaskOptions o = opt;
    uint64_t name_hash = 14695981039346656037ULL;  // FNV-1a
    for (char c : task) name_hash = (name_hash ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    o.seed = eval_seed_mix(opt.seed, name_hash);
    if (entry->make == nullptr) {
        Result<EvalSample> s = make_ppl(o, tok);
        if (s.ok()) s->seed = opt.seed;
        return s;
    }

    const Builder b = entry->make(o);
    Result<Rendered> smallest = render(b.draft(b.min_units, 0), tok, tmpl);
    if (!smallest.ok()) return smallest.status().with_context("task '" + task + "': chat template");
    LengthProbe probe(b, tok, tmpl);
    Result<std::pair<int64_t, int64_t>> fit =
        fit_length(task, b, opt.n_tokens, static_cast<int64_t>(smallest->ids.size()), &probe);
    if (!fit.ok()) return fit.status();

    const Draft d = b.draft(fit->first, fit->second);
    Result<Rendered> r = render(d, tok, tmpl);
    if (!r.ok()) return r.status();
    EvalSample s;
    s.task = task;
    s.n_tokens_target = opt.n_tokens;
    s.prompt = std::move(r->prompt);
    s.prompt_ids = std::move(r->ids);
    s.answers = d.answers;
    s.seed = opt.seed;
    SIEVE_TRY(locate_needles(d, tok, s.prompt_ids, &s.needles).with_context("task '" + task + "'"));
    return s;
}

bool score_answer(const EvalSample &sample, const std::string &output) {
    if (sample.answers.empty()) return false;
    for (const std::string &a : sample.answers)
        if (output.find(a) == std::string::npos) return false;
    return true;
}

double ruler_score(const EvalSample &sample, const std::string &output) {
    if (sample.answers.empty()) return 0.0;
    const auto lower = [](std::string s) {
        for (char &ch : s)
            if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
        return s;
    };
    const std::string out = lower(output);
    int64_t found = 0;
    for (const std::string &a : sample.answers) found += out.find(lower(a)) != std::string::npos ? 1 : 0;
    return static_cast<double>(found) / static_cast<double>(sample.answers.size());
}

}  // namespace sieve
