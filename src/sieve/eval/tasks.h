// Long-context task generators for `sieve eval`: seeded,
// deterministic samples whose prompts have an exact length in the model's own
// tokens, with the answers scored by exact string match.
//
// Tasks follow RULER (Hsieh et al. 2024, "RULER: What's the Real Context Size
// of Your Long-Context Language Models?") and the passkey test (Mohtashami &
// Jaggi 2023, "Landmark Attention", §4.2):
//
//   task             haystack                       asks for                          answers
//   passkey          filler + one pass key          the pass key                      1 number
//   niah_multikey    filler + n_needles key->value  the value of one key              1 number
//   niah_multivalue  filler + one key, n values     every value of that key           n numbers
//   niah_multiquery  filler + n_needles keys        the values of all of them         n numbers
//   vt               filler + vt_chains chains      every name bound to one value     vt_hops + 1 names
//                    VAR A = 12345, VAR B = A, ...
//   cwe              numbered list of words         the 10 most common words          10 words
//   fwe              coded words, Zipf(2) counts    the 3 most frequent words         3 words
//   code             Python module of functions     what a named function returns     1 number
//   ppl              Python stdlib source (real)    nothing: perplexity only          none
//
// How a prompt is made, for every task but ppl:
//   1. the task draws its content (needles, words, functions) from the seed;
//   2. it builds the user message from n units of body (filler sentences,
//      list items, functions) plus a character-level knob (part of one more
//      sentence, one more short word, a module docstring);
//   3. the message is rendered through the chat template (or left raw when
//      the model has none), the answer prefix appended ("The pass key is"),
//      and tokenized as the server does (BOS unless the text starts with it,
//      special tokens parsed);
//   4. a binary search over the units, then over the knob, finds the prompt
//      closest to the target length; it must land within ±1% (±1 token at
//      least) or make_sample returns an error;
//   5. needles are located in the token ids: the token holding each needle's
//      first byte, and its depth as a fraction of the haystack's tokens.
//      Needles are placed by bytes (tasks.cpp, place_needles), so the measured
//      depth is the asked one to within a sentence or a function.
// ppl instead cuts real text (the .py files of python3's standard library,
// sorted by name, starting at a seeded file) to exactly the target length,
// without any template.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sieve/core/status.h"
#include "sieve/tokenizer/chat_template.h"
#include "sieve/tokenizer/tokenizer.h"

namespace sieve {

struct TaskOptions {
    int64_t n_tokens = 4096;  // target prompt length in tokens, BOS and template included
    uint64_t seed = 0;        // with the task's name, fixes every byte of the sample
    // passkey, niah_*, code: where the asked needle sits in the haystack
    // (0 = first thing, 1 = last); the other needles go at seeded random depths.
    // vt: the depth of the asked chain's first assignment (the rest follow it).
    double depth = 0.5;
    int n_needles = 4;    // niah_multikey keys, niah_multivalue values, niah_multiquery keys
    int vt_chains = 3;    // chains in vt: one asked, the others distractors
    int vt_hops = 4;      // assignments after the first in each chain
    std::string ppl_dir;  // ppl: a folder of .py files; empty = ask python3 for its stdlib
};

struct EvalNeedle {
    std::string text;    // exactly as it appears in the prompt
    double depth_asked;  // where it was meant to go, 0..1
    int64_t token;       // index in prompt_ids of the token holding the needle's first byte
    double depth;        // measured: haystack tokens before it / haystack tokens not in it
};

struct EvalSample {
    std::string task;
    uint64_t seed = 0;  // with the task's name, fixes every byte of the sample
    int64_t n_tokens_target = 0;
    std::string prompt;                // what the model reads; ends with the answer prefix
    std::vector<int32_t> prompt_ids;   // prompt tokenized; size() is within ±1% of n_tokens_target
    std::vector<std::string> answers;  // all must appear in the output; empty for ppl
    std::vector<EvalNeedle> needles;   // in prompt order; empty for cwe, fwe, ppl
};

// The task names in the table above, in that order.
std::vector<std::string> eval_task_names();

// One sample. tmpl == nullptr: the model has no chat template and the prompt
// is the raw text. Errors name the bad option or the task and length that
// cannot be made (too short for the task's instructions, or ppl's text not found).
Result<EvalSample> make_sample(const std::string &task, const TaskOptions &opt, const Tokenizer &tok,
                               const ChatTemplate *tmpl);

// True when every expected answer appears verbatim in the output (the strict
// per-sample score: all or nothing, case-sensitive). A sample without answers
// (ppl) is never answered.
bool score_answer(const EvalSample &sample, const std::string &output);

// RULER's string_match_all for one sample: the fraction of expected answers
// found in the output, compared case-insensitively (ASCII), in [0, 1]; 0 for
// a sample without answers. Its mean over a cell is RULER's score, which
// gives partial credit where score_answer gives none.
double ruler_score(const EvalSample &sample, const std::string &output);

}  // namespace sieve
