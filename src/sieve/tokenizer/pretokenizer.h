// Regex pre-tokenizers for byte-level BPE vocabularies, chosen by the GGUF
// key `tokenizer.ggml.pre`.
//
// A pre-tokenizer is a list of stages. Each stage splits every piece the
// previous stage produced: each regex match becomes a piece and so does each
// run of text between matches (Hugging Face's "Isolated" split behaviour).
// A stage sees one piece as its whole subject, so a lookahead such as
// `\s+(?!\S)` never looks past the piece an earlier stage cut.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sieve/core/status.h"

namespace sieve {

class PreTokenizer {
public:
    // Compiles the stages for a `tokenizer.ggml.pre` value. An unknown value
    // falls back to GPT-2's pattern with a warning (llama.cpp does the same
    // for files written before the key existed).
    static Result<std::unique_ptr<PreTokenizer>> create(std::string_view pre);
    ~PreTokenizer();
    PreTokenizer(const PreTokenizer &) = delete;
    PreTokenizer &operator=(const PreTokenizer &) = delete;

    // text must be valid UTF-8. Pieces are views into text, in order, and
    // cover it exactly.
    void split(std::string_view text, std::vector<std::string_view> *pieces) const;

    const std::string &family() const { return family_; }

private:
    struct Stage;
    PreTokenizer() = default;
    std::string family_;
    std::vector<std::unique_ptr<Stage>> stages_;
};

}  // namespace sieve
