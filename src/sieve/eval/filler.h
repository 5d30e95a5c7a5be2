// Filler text and seeded randomness for the long-context task generators
// (eval/tasks.h).
//
// Filler is the "haystack" that needles hide in. It must read like ordinary
// prose, not one sentence repeated (a repeated sentence is trivially
// compressible, which flatters a KV policy that keeps only a few rows), so it
// comes from a small grammar of our own: sentence templates filled from word
// lists of people, objects, places, verbs and time phrases, grouped into
// paragraphs of 3-7 sentences. No sentence occurs twice in one Filler, and the
// text has no digits, so numbers hidden in it are the only numbers there.
//
// Everything is a pure function of the seed. The random helpers below are our
// own on top of std::mt19937_64 (whose output the C++ standard fixes), because
// std::uniform_int_distribution and std::shuffle differ between standard
// libraries: the same seed gives the same bytes with libstdc++ and libc++.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

namespace sieve {

// splitmix64 of (seed, stream): independent seeds for separate purposes
// (filler, needles, shuffles) drawn from one user seed.
uint64_t eval_seed_mix(uint64_t seed, uint64_t stream);

class EvalRng {
  public:
    explicit EvalRng(uint64_t seed) : gen_(seed) {}

    uint64_t next() { return gen_(); }
    // Uniform in [0, n); n > 0. Rejection sampling, so no modulo bias.
    uint64_t below(uint64_t n);
    // Uniform in [lo, hi], both inclusive; lo <= hi.
    int64_t range(int64_t lo, int64_t hi);
    // Uniform in [0, 1) with 53 random bits.
    double unit();

    template <class T, size_t N>
    const T &pick(const T (&list)[N]) {
        return list[below(N)];
    }
    template <class T>
    void shuffle(std::vector<T> *v) {  // Fisher-Yates
        for (size_t i = v->size(); i > 1; --i) std::swap((*v)[i - 1], (*v)[below(i)]);
    }

  private:
    std::mt19937_64 gen_;
};

// A pronounceable made-up word of n_syllables consonant-vowel syllables
// ("tomavi"): 2 * n_syllables lowercase letters.
std::string eval_pseudo_word(EvalRng *rng, int n_syllables);
// n_letters random lowercase letters ("qzkwe"), RULER's "coded words".
std::string eval_code_word(EvalRng *rng, int n_letters);

struct FillerSentence {
    std::string text;     // one sentence, capitalised, ending in . ? or !
    bool ends_paragraph;  // a blank line follows it
};

// Text placed between filler sentences (a needle): it reads as a sentence of
// its own, before filler sentence `before`.
struct FillerInsert {
    size_t before;  // 0 = at the start, n_sentences = after the last whole sentence
    std::string text;
};

// An endless, deterministic sequence of distinct filler sentences; sentence i
// is the same whatever else is asked for, so a haystack can grow or shrink by
// one sentence while the rest stays put (the length search relies on this).
class Filler {
  public:
    explicit Filler(uint64_t seed);

    const FillerSentence &sentence(size_t i);  // generates up to i on first use

    // Sentences [0, n_sentences) with the inserts at their places, then the
    // first n_partial_chars of sentence n_sentences (trailing spaces dropped):
    // the character-level knob that lets a prompt hit an exact token count.
    // Sentences in a paragraph are joined by a space, paragraphs by a blank line.
    // Inserts must be sorted by `before` (stable order is kept among equals).
    std::string text(size_t n_sentences, size_t n_partial_chars, const std::vector<FillerInsert> &inserts);

  private:
    std::string make_sentence();

    EvalRng rng_;
    std::vector<FillerSentence> sentences_;
    std::unordered_set<std::string> seen_;
    int left_in_paragraph_ = 0;
};

}  // namespace sieve
