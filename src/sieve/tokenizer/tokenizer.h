// Tokenizers built from GGUF metadata (tokenizer.ggml.*):
//   "llama" -> SentencePiece-style BPE (SPM): spaces become U+2581, an optional
//              leading U+2581, bigram merges by score over UTF-8 characters,
//              byte fallback to <0xXX> tokens, unknown id last;
//   "gpt2"  -> byte-level BPE: a regex pre-tokenizer (tokenizer.ggml.pre),
//              GPT-2's byte <-> code point alphabet, merges by rank.
// The rules follow llama.cpp (special-token splitting, SPM dummy prefix, BOS
// defaults); the ids are checked against the models' own tokenizers: golden
// ids from Hugging Face `tokenizers` (SmolLM2) and `sentencepiece`
// (stories260K) in tests/unit/test_tokenizer.cpp.
//
// The metadata is untrusted: from_gguf validates types, lengths and ids and
// returns a Status naming the key. A Tokenizer is immutable after loading and
// safe to use from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sieve/core/status.h"
#include "sieve/gguf/gguf.h"

namespace sieve {

// GGUF tokenizer.ggml.token_type values 1..6 in this order (0, "undefined",
// is read as normal).
enum class TokenAttr : uint8_t { normal, unknown, control, user_defined, unused, byte };

class PreTokenizer;

class Tokenizer {
public:
    static Result<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile &file);
    ~Tokenizer();
    Tokenizer(const Tokenizer &) = delete;
    Tokenizer &operator=(const Tokenizer &) = delete;

    // parse_special: text spelling a control (or unknown-type) token becomes
    // that token, as llama.cpp's parse_special. User-defined tokens are always
    // matched, as llama.cpp and Hugging Face do for non-special added tokens.
    // Matching is longest token first. Invalid UTF-8 is kept byte for byte by
    // SPM (byte fallback); byte-level BPE sees it as U+FFFD.
    std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;
    // Concatenated token bytes. skip_special drops control and unknown-type
    // tokens. For SPM vocabularies with add_space_prefix, the space that
    // encoding put in front of the text is removed when ids start with BOS.
    // Ids out of range produce nothing. The result may be invalid UTF-8 when
    // the ids cut a character; see utf8_sanitize and StreamDetokenizer.
    std::string decode(const std::vector<int32_t> &ids, bool skip_special) const;
    // The bytes this token stands for (control tokens: their text; "" for
    // ids out of range).
    std::string token_to_piece(int32_t id) const;

    int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
    int32_t bos_id() const { return bos_id_; }
    int32_t eos_id() const { return eos_id_; }
    int32_t eot_id() const { return eot_id_; }  // -1 if none
    int32_t unk_id() const { return unk_id_; }
    bool add_bos() const { return add_bos_; }
    bool add_space_prefix() const { return add_space_prefix_; }
    bool is_spm() const { return spm_; }
    // The pre-tokenizer family in use ("gpt2", "llama3", "qwen2", "smollm"); "" for SPM.
    std::string pre_family() const;
    // End of generation: eos, eot, eom and tokens such as <|im_end|>,
    // <|eot_id|>, <|endoftext|> when the vocabulary has them.
    bool is_eog(int32_t id) const;
    bool is_control(int32_t id) const;
    TokenAttr attr(int32_t id) const;
    // Exact token text (as stored in the vocabulary) -> id, -1 if none.
    int32_t find_token(std::string_view text) const;

private:
    friend class TokenizerLoader;
    Tokenizer();

    struct Fragment {
        std::string_view text;  // raw text, or empty when token >= 0
        int32_t token = -1;
    };
    void split_special(std::string_view text, bool parse_special, std::vector<Fragment> *out) const;
    void encode_spm(std::string_view text, std::vector<int32_t> *out) const;
    void encode_bpe(std::string_view text, std::vector<int32_t> *out) const;
    void bpe_word(std::string_view word, std::vector<int32_t> *out) const;

    bool spm_ = true;
    std::vector<std::string> tokens_;   // vocabulary text as stored
    std::vector<float> scores_;         // SPM merge priority (higher first)
    std::vector<TokenAttr> attrs_;
    std::vector<std::string> pieces_;   // decoded bytes per token
    std::unordered_map<std::string_view, int32_t> token_ids_;  // views into tokens_
    std::vector<int32_t> special_by_length_;  // control/unknown/user-defined, longest text first
    std::vector<bool> eog_;

    // SPM: <0xXX> token per byte (-1 if missing).
    int32_t byte_tokens_[256];
    // BPE: token of each byte's GPT-2 code point (-1 if the vocabulary lacks
    // it: that byte is then dropped, as HF's BPE does without an unk token).
    int32_t gpt2_byte_tokens_[256];
    // BPE merges: (left id << 32 | right id) -> rank and merged id.
    struct Merge {
        int32_t rank;
        int32_t id;
    };
    std::unordered_map<uint64_t, Merge> merges_;
    std::unique_ptr<PreTokenizer> pre_;

    int32_t bos_id_ = -1, eos_id_ = -1, eot_id_ = -1, eom_id_ = -1, unk_id_ = -1;
    bool add_bos_ = false;
    bool add_space_prefix_ = true;
};

// Streaming detokenization: pushes ids one at a time and hands back only
// complete, valid UTF-8. Bytes that can never form a valid character become
// U+FFFD as soon as that is certain; an incomplete tail waits for the next
// token. Concatenating every push() and finish() gives
// utf8_sanitize(tok.decode(ids, skip_special)).
class StreamDetokenizer {
public:
    explicit StreamDetokenizer(const Tokenizer &tok, bool skip_special = true);
    std::string push(int32_t id);  // complete UTF-8 text that is now safe to emit
    std::string finish();          // whatever is left (invalid trailing bytes become U+FFFD)

private:
    const Tokenizer &tok_;
    bool skip_special_;
    bool first_ = true;       // no id pushed yet
    bool strip_space_ = false;  // next text piece loses one leading space (SPM after BOS)
    std::string pending_;     // bytes not yet emitted (an incomplete character)
};

}  // namespace sieve
