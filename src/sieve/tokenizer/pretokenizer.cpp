#include "sieve/tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "sieve/core/log.h"
#include "sieve/tokenizer/unicode.h"

namespace sieve {

// ---------------------------------------------------------------------------
// The patterns, as their tokenizers write them, with one change: `\s` also
// takes U+0085 (NEL). Hugging Face tokenizers run these patterns with
// Oniguruma, whose Unicode `\s` includes NEL; PCRE2 10.42's UCP `\s` (tab, LF,
// VT, FF, CR and the Z categories) does not. Writing `[\s\x{85}]` keeps the
// splits identical under both engines.
// ---------------------------------------------------------------------------
namespace {

#define SIEVE_WS "\\s\\x{85}"

// GPT-2 (OpenAI's encoder.py) and HF tokenizers' ByteLevel pre-tokenizer with
// use_regex=true; HF appends the final `\s+` alternative.
constexpr const char k_re_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" SIEVE_WS "\\p{L}\\p{N}]+"
    "|[" SIEVE_WS "]+(?![^" SIEVE_WS "])|[" SIEVE_WS "]+";

// Llama 3's tokenizer.json Split pattern (tiktoken's cl100k family): numbers
// in groups of at most three digits, newlines kept apart from other space.
constexpr const char k_re_llama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
    "| ?[^" SIEVE_WS "\\p{L}\\p{N}]+[\\r\\n]*|[" SIEVE_WS "]*[\\r\\n]+"
    "|[" SIEVE_WS "]+(?![^" SIEVE_WS "])|[" SIEVE_WS "]+";

// Qwen2's tokenizer.json Split pattern: Llama 3's with single digits.
constexpr const char k_re_qwen2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
    "| ?[^" SIEVE_WS "\\p{L}\\p{N}]+[\\r\\n]*|[" SIEVE_WS "]*[\\r\\n]+"
    "|[" SIEVE_WS "]+(?![^" SIEVE_WS "])|[" SIEVE_WS "]+";

// HF's Digits(individual_digits=true): every numeric character alone. Rust's
// char::is_numeric is the Unicode N categories, i.e. \p{N}.
constexpr const char k_re_digit[] = "\\p{N}";

#undef SIEVE_WS

struct Family {
    const char *family;
    std::vector<const char *> names;     // tokenizer.ggml.pre values
    std::vector<const char *> patterns;  // stages, in order
};

std::vector<Family> families() {
    return {
        {"gpt2", {"default", "gpt2", "gpt-2", "olmo", "jais"}, {k_re_gpt2}},
        {"llama3", {"llama3", "llama-bpe", "llama-v3", "dbrx", "smaug-bpe"}, {k_re_llama3}},
        {"qwen2", {"qwen2", "deepseek-r1-qwen"}, {k_re_qwen2}},
        // SmolLM and StarCoder tokenizer.json: Sequence[Digits(individual_digits=true),
        // ByteLevel(add_prefix_space=false, use_regex=true)].
        {"smollm", {"smollm", "starcoder", "refact", "codeshell"}, {k_re_digit, k_re_gpt2}},
    };
}

}  // namespace

struct PreTokenizer::Stage {
    pcre2_code *code = nullptr;
    ~Stage() { pcre2_code_free(code); }
};

PreTokenizer::~PreTokenizer() = default;

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::create(std::string_view pre) {
    const std::vector<Family> all = families();
    const Family *chosen = nullptr;
    for (const Family &f : all) {
        for (const char *name : f.names) {
            if (pre == name) chosen = &f;
        }
    }
    if (chosen == nullptr) {
        SIEVE_LOG_WARN("tokenizer.ggml.pre '%.*s' is not known; using the GPT-2 pre-tokenizer, "
                       "so token ids may differ from the model's own tokenizer",
                       static_cast<int>(pre.size()), pre.data());
        chosen = &all[0];
    }
    std::unique_ptr<PreTokenizer> p(new PreTokenizer());
    p->family_ = chosen->family;
    for (const char *pattern : chosen->patterns) {
        int err = 0;
        PCRE2_SIZE err_off = 0;
        auto stage = std::make_unique<Stage>();
        stage->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                    PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
        if (stage->code == nullptr) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            return Status::errorf("pre-tokenizer '%s': regex does not compile at offset %zu: %s",
                                  chosen->family, static_cast<size_t>(err_off),
                                  reinterpret_cast<const char *>(msg));
        }
        // JIT is only a speed-up; without it pcre2_match interprets the pattern.
        (void)pcre2_jit_compile(stage->code, PCRE2_JIT_COMPLETE);
        p->stages_.push_back(std::move(stage));
    }
    return p;
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view> *pieces) const {
    pieces->clear();
    if (text.empty()) return;
    std::vector<std::string_view> cur{text}, next;
    for (const auto &stage : stages_) {
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(stage->code, nullptr);
        SIEVE_CHECK(md != nullptr);
        next.clear();
        for (std::string_view piece : cur) {
            const auto *subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
            size_t pos = 0, gap_start = 0;
            while (pos < piece.size()) {
                // The caller validated the UTF-8 once for the whole text.
                const int rc = pcre2_match(stage->code, subject, piece.size(), pos, PCRE2_NO_UTF_CHECK,
                                           md, nullptr);
                if (rc < 0) break;  // no further match (or a match-limit error): rest is a gap
                const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                const size_t m0 = ov[0], m1 = ov[1];
                if (m1 == m0) {
                    // None of the patterns can match empty; if one ever does, the
                    // character stays in the gap and the search moves past it.
                    pos = m0 + std::min(piece.size() - m0,
                                        static_cast<size_t>(utf8_seq_len(static_cast<uint8_t>(piece[m0]))));
                    continue;
                }
                if (m0 > gap_start) next.push_back(piece.substr(gap_start, m0 - gap_start));
                next.push_back(piece.substr(m0, m1 - m0));
                pos = gap_start = m1;
            }
            if (gap_start < piece.size()) next.push_back(piece.substr(gap_start));
        }
        pcre2_match_data_free(md);
        cur.swap(next);
    }
    *pieces = std::move(cur);
}

}  // namespace sieve
