// Filler grammar: word lists and sentence templates (see filler.h). The lists
// avoid the words the tasks ask about (key, number, value, variable, function,
// return) and contain no digits.
#include "sieve/eval/filler.h"

#include <cctype>
#include <string_view>

#include "sieve/core/status.h"

namespace sieve {

uint64_t eval_seed_mix(uint64_t seed, uint64_t stream) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (stream + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t EvalRng::below(uint64_t n) {
    SIEVE_CHECK(n > 0);
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;  // largest multiple of n
    uint64_t x = gen_();
    while (x >= limit) x = gen_();
    return x % n;
}

int64_t EvalRng::range(int64_t lo, int64_t hi) {
    SIEVE_CHECKF(lo <= hi, "range [%lld, %lld]", static_cast<long long>(lo), static_cast<long long>(hi));
    return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1));
}

double EvalRng::unit() {
    return static_cast<double>(gen_() >> 11) * 0x1.0p-53;
}

std::string eval_pseudo_word(EvalRng *rng, int n_syllables) {
    static constexpr std::string_view consonants = "bdfgklmnprstvz";
    static constexpr std::string_view vowels = "aeiou";
    std::string w;
    for (int i = 0; i < n_syllables; ++i) {
        w += consonants[rng->below(consonants.size())];
        w += vowels[rng->below(vowels.size())];
    }
    return w;
}

std::string eval_code_word(EvalRng *rng, int n_letters) {
    std::string w;
    for (int i = 0; i < n_letters; ++i) w += static_cast<char>('a' + rng->below(26));
    return w;
}

namespace {

// ---------------------------------------------------------------- word lists

constexpr std::string_view k_people[] = {
    "the baker",
    "an old fisherman",
    "the young teacher",
    "my neighbour",
    "the captain",
    "a quiet clerk",
    "the gardener",
    "the shepherd",
    "a travelling merchant",
    "the librarian",
    "the blacksmith",
    "a tired nurse",
    "the mayor",
    "the farmer's daughter",
    "a curious child",
    "the potter",
    "the weaver",
    "an engineer",
    "the ferryman",
    "a retired sailor",
    "the innkeeper",
    "the painter",
    "a young doctor",
    "the carpenter",
    "the miller",
    "my grandmother",
    "the postman",
    "a stranger",
    "the cook",
    "the schoolmaster",
    "Marta",
    "Tomas",
    "Elena",
    "Oskar",
    "Ines",
    "Bruno",
    "Lena",
    "Hugo",
    "Clara",
    "Felix",
    "Nadia",
    "Pavel",
    "Rosa",
    "Victor",
    "Alma",
    "Jonas",
    "Greta",
    "Milo",
    "Sofia",
    "Anton",
};
constexpr std::string_view k_adjectives[] = {
    "quiet",   "narrow",   "golden",   "crooked",  "bright", "heavy",   "ancient", "muddy",    "gentle",
    "patient", "broken",   "silver",   "dusty",    "warm",   "cold",    "hidden",  "wooden",   "empty",
    "crowded", "faded",    "polished", "tall",     "steep",  "pale",    "noisy",   "careful",  "lonely",
    "sturdy",  "fragrant", "rusty",    "enormous", "tiny",   "elegant", "shabby",  "cheerful", "damp",
};
constexpr std::string_view k_objects[] = {
    "basket",       "lantern",      "letter",      "map",         "kettle",      "violin",
    "ledger",       "blanket",      "bicycle",     "compass",     "umbrella",    "loaf of bread",
    "jar of honey", "box of nails", "wool scarf",  "clock",       "rope",        "ladder",
    "notebook",     "mirror",       "cart",        "fishing net", "teapot",      "bell",
    "painting",     "candle",       "wheelbarrow", "hat",         "telescope",   "sack of flour",
    "saddle",       "accordion",    "oil lamp",    "sketchbook",  "rowing boat", "quilt",
};
constexpr std::string_view k_plurals[] = {
    "apples",        "old coins",    "wild flowers", "clay pots",    "spare buttons", "fresh eggs",
    "wool blankets", "river stones", "paper kites",  "copper pans",  "postcards",     "seed packets",
    "glass bottles", "tin soldiers", "pine cones",   "garden tools", "silk ribbons",  "dried herbs",
};
constexpr std::string_view k_containers[] = {
    "a wooden chest", "the cellar",    "a canvas bag", "the attic",         "an old trunk",
    "the back room",  "a biscuit tin", "the pantry",   "a leather satchel", "the shed",
};
constexpr std::string_view k_places[] = {
    "the harbour",    "the market square", "the old mill",
    "the orchard",    "the train station", "the library",
    "the bakery",     "the bridge",        "the hill above the village",
    "the riverbank",  "the lighthouse",    "the school",
    "the town hall",  "the forest path",   "the village well",
    "the barn",       "the chapel",        "the meadow",
    "the workshop",   "the quay",          "the inn",
    "the vineyard",   "the post office",   "the crossroads",
    "the greenhouse",
};
constexpr std::string_view k_prepositions[] = {"near",  "behind", "beside", "across from", "at",
                                               "below", "past",   "around", "outside",     "not far from"};
constexpr std::string_view k_towns[] = {
    "Ashford", "Bellmoor",  "Carrow",      "Dunmere",   "Eastwick",  "Fallowby",  "Greystone",
    "Harlow",  "Ivybridge", "Kestrel Bay", "Larkhill",  "Millbrook", "Northgate", "Oakhurst",
    "Pennick", "Redcliff",  "Saltmarsh",   "Thornbury", "Wexley",    "Yarrow",
};

struct Verb {
    std::string_view base, past, participle;
};
constexpr Verb k_transitive[] = {
    {"carry", "carried", "carried"},    {"repair", "repaired", "repaired"},
    {"paint", "painted", "painted"},    {"find", "found", "found"},
    {"sell", "sold", "sold"},           {"buy", "bought", "bought"},
    {"bring", "brought", "brought"},    {"hide", "hid", "hidden"},
    {"borrow", "borrowed", "borrowed"}, {"clean", "cleaned", "cleaned"},
    {"wrap", "wrapped", "wrapped"},     {"open", "opened", "opened"},
    {"polish", "polished", "polished"}, {"deliver", "delivered", "delivered"},
    {"mend", "mended", "mended"},       {"lose", "lost", "lost"},
    {"fill", "filled", "filled"},       {"drop", "dropped", "dropped"},
    {"sketch", "sketched", "sketched"}, {"weigh", "weighed", "weighed"},
    {"lift", "lifted", "lifted"},       {"examine", "examined", "examined"},
    {"take", "took", "taken"},          {"steal", "stole", "stolen"},
};
constexpr std::string_view k_intransitive[] = {
    "walked", "waited",   "sang",    "rested",   "wandered", "laughed", "worked", "hurried",
    "slept",  "listened", "arrived", "lingered", "paused",   "sat",     "stood",  "danced",
};
constexpr std::string_view k_adverbs[] = {"slowly",  "quietly", "carefully", "cheerfully",
                                          "early",   "late",    "patiently", "silently",
                                          "eagerly", "briefly", "happily",   "alone"};
constexpr std::string_view k_times[] = {
    "in the morning",
    "late that evening",
    "on a rainy afternoon",
    "every spring",
    "before sunrise",
    "after the long winter",
    "on market day",
    "during the storm",
    "at noon",
    "last autumn",
    "once a week",
    "just after supper",
    "on the first warm day",
    "in the middle of the night",
};
constexpr std::string_view k_nature[] = {"the wind",  "the rain", "the fog",  "the snow",
                                         "the river", "the sea",  "the sun",  "the clouds",
                                         "the tide",  "the mist", "the frost"};
constexpr std::string_view k_nature_verbs[] = {"rose",    "fell",      "drifted", "settled",  "moved",
                                               "shifted", "glittered", "thinned", "lingered", "gathered"};
constexpr std::string_view k_feelings[] = {"was glad",     "felt uneasy",    "seemed pleased",
                                           "grew curious", "was surprised",  "felt proud",
                                           "was worried",  "looked relieved"};
constexpr std::string_view k_reasons[] = {
    "because the roads were closed",    "since nobody else would",
    "because it was market day",        "as the weather was fine",
    "for reasons no one could explain", "because the old one had worn out",
    "to please an old friend",          "after a long argument",
    "on the advice of the mayor",
};
// Openings of the templates that start the same way, so that no opening
// dominates the text.
constexpr std::string_view k_nobody[] = {"Nobody", "No one", "Hardly anyone", "Not a single person"};
constexpr std::string_view k_some_people[] = {"Some people", "A few old folk", "The children",
                                              "Most shopkeepers"};
constexpr std::string_view k_when[] = {"When", "Just as", "By the time", "Soon after"};
constexpr std::string_view k_it_was[] = {"It was", "It felt", "It had grown", "The air was"};
constexpr std::string_view k_had_anyone[] = {"Had anyone seen", "Did anybody see", "Who watched",
                                             "Why did nobody see"};
constexpr std::string_view k_what_a[] = {"What a day it was", "What a fuss there was", "How people talked",
                                         "What a surprise it was"};
constexpr std::string_view k_road[] = {"The road to", "The path to", "The way back from", "The lane out of"};
constexpr std::string_view k_foods[] = {"fresh bread", "roasted chestnuts", "onion soup",    "apple pie",
                                        "smoked fish", "cinnamon buns",     "strong coffee", "plum jam"};

std::string cap(std::string s) {
    if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
    return s;
}

std::string with_article(std::string_view phrase) {
    const bool vowel = std::string_view("aeiou").find(phrase[0]) != std::string_view::npos;
    return std::string(vowel ? "an " : "a ") + std::string(phrase);
}

// "a rusty lantern" or "the lantern": an object phrase.
std::string object(EvalRng *rng) {
    const std::string noun(rng->pick(k_objects));
    switch (rng->below(3)) {
        case 0:
            return with_article(noun);
        case 1:
            return with_article(std::string(rng->pick(k_adjectives)) + " " + noun);
        default:
            return "the " + std::string(rng->pick(k_adjectives)) + " " + noun;
    }
}

std::string person(EvalRng *rng) {
    return std::string(rng->pick(k_people));
}

std::string where(EvalRng *rng) {
    return std::string(rng->pick(k_prepositions)) + " " + std::string(rng->pick(k_places));
}

// ---------------------------------------------------------------- templates

std::string sentence_from_template(EvalRng *rng, uint64_t which) {
    const std::string s = person(rng), s2 = person(rng), o = object(rng), w = where(rng);
    const std::string time(rng->pick(k_times)), town(rng->pick(k_towns)), adj(rng->pick(k_adjectives));
    const Verb &v = rng->pick(k_transitive);
    const std::string vi(rng->pick(k_intransitive)), adv(rng->pick(k_adverbs));
    switch (which) {
        case 0:
            return cap(time) + ", " + s + " " + std::string(v.past) + " " + o + " " + w + ".";
        case 1:
            return cap(s) + " " + vi + " " + adv + " " + w + " while " + s2 + " " + std::string(v.past) +
                   " " + o + ".";
        case 2:
            return std::string(rng->pick(k_nobody)) + " in " + town + " could remember why " + s + " had " +
                   std::string(v.participle) + " " + o + ".";
        case 3:
            return cap(std::string(rng->pick(k_nature))) + " " + std::string(rng->pick(k_nature_verbs)) +
                   " over " + std::string(rng->pick(k_places)) + ", and " + s + " " +
                   std::string(rng->pick(k_feelings)) + ".";
        case 4:
            return std::string(rng->pick(k_when)) + " " + s + " " + vi + " " + w + ", " + s2 +
                   " was already there with " + o + ".";
        case 5:
            return cap(s) + " kept " + std::string(rng->pick(k_plurals)) + " in " +
                   std::string(rng->pick(k_containers)) + " " + std::string(rng->pick(k_reasons)) + ".";
        case 6:
            return std::string(rng->pick(k_some_people)) + " in " + town + " say that " + s + " once " +
                   std::string(v.past) + " " + o + " " + std::string(rng->pick(k_reasons)) +
                   "; others are not so sure.";
        case 7:
            return cap(s) + " asked " + s2 + " whether " + o + " was " + adj + " enough.";
        case 8:
            return std::string(rng->pick(k_it_was)) + " " + adj + " " + w + " " + time + ", so " + s + " " +
                   vi + " " + adv + ".";
        case 9:
            return cap(time) + ", the smell of " + std::string(rng->pick(k_foods)) + " drifted from " +
                   std::string(rng->pick(k_places)) + " and " + s + " " + std::string(rng->pick(k_feelings)) +
                   ".";
        case 10:
            return std::string(rng->pick(k_had_anyone)) + " " + s + " " + std::string(v.base) + " " + o +
                   " " + w + "?";
        case 11:
            return cap(s) + " and " + s2 + " " + std::string(v.past) + " " + o + " together, then " + vi +
                   " " + adv + ".";
        case 12:
            return "In " + town + ", " + std::string(rng->pick(k_plurals)) + " were " + adj + " and cheap " +
                   time + ".";
        case 13:
            return std::string(rng->pick(k_what_a)) + " when " + s + " " + std::string(v.past) + " " + o +
                   " in " + town + "!";
        case 14:
            return cap(s) + " said that " + std::string(rng->pick(k_nature)) + " " +
                   std::string(rng->pick(k_nature_verbs)) + " " + adv + " " + w + " " + time + ".";
        default:
            return std::string(rng->pick(k_road)) + " " + town + " was " + adj + ", but " + s + " " + vi +
                   " there " + time + " " + std::string(rng->pick(k_reasons)) + ".";
    }
}

constexpr uint64_t k_n_templates = 16;

}  // namespace

Filler::Filler(uint64_t seed) : rng_(eval_seed_mix(seed, 0x6669)) {}

std::string Filler::make_sentence() {
    // The grammar has millions of sentences, so a collision is rare; drawing
    // again keeps the sequence deterministic and free of repeats.
    for (;;) {
        std::string s = sentence_from_template(&rng_, rng_.below(k_n_templates));
        if (seen_.insert(s).second) return s;
    }
}

const FillerSentence &Filler::sentence(size_t i) {
    while (sentences_.size() <= i) {
        if (left_in_paragraph_ == 0) left_in_paragraph_ = static_cast<int>(rng_.range(3, 7));
        std::string s = make_sentence();
        --left_in_paragraph_;
        sentences_.push_back({std::move(s), left_in_paragraph_ == 0});
    }
    return sentences_[i];
}

std::string Filler::text(size_t n_sentences, size_t n_partial_chars,
                         const std::vector<FillerInsert> &inserts) {
    std::string out;
    bool paragraph_end = false;  // the last thing written ended a paragraph
    auto append = [&](std::string_view piece, bool ends_paragraph) {
        if (!out.empty()) out += paragraph_end ? "\n\n" : " ";
        out += piece;
        paragraph_end = ends_paragraph;
    };
    size_t k = 0;  // next insert
    for (size_t i = 0; i <= n_sentences; ++i) {
        for (; k < inserts.size() && inserts[k].before == i; ++k) append(inserts[k].text, false);
        if (i == n_sentences) break;
        const FillerSentence &s = sentence(i);
        append(s.text, s.ends_paragraph);
    }
    SIEVE_CHECKF(k == inserts.size(), "insert %zu is at %zu, past the %zu sentences or out of order", k,
                 inserts[k].before, n_sentences);
    if (n_partial_chars > 0) {
        std::string part = sentence(n_sentences).text.substr(0, n_partial_chars);
        while (!part.empty() && part.back() == ' ') part.pop_back();
        if (!part.empty()) append(part, false);
    }
    return out;
}

}  // namespace sieve
