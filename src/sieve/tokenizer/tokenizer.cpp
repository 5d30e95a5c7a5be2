// Loading and validating tokenizer metadata, special-token splitting, decoding.
// The two encoders live in tokenizer_spm.cpp and tokenizer_bpe.cpp.
#include "sieve/tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "sieve/core/log.h"
#include "sieve/tokenizer/pretokenizer.h"
#include "sieve/tokenizer/unicode.h"

namespace sieve {

namespace {

constexpr const char k_spm_space[] = "\xE2\x96\x81";  // U+2581, SPM's visible space

// Optional special-token id: absent, -1 or UINT32_MAX (what converters write
// for "none") gives -1; anything else must name a token.
Status read_token_id(const GgufFile &f, const char *key, int32_t n_vocab, int32_t *out) {
    *out = -1;
    if (!f.has(key)) return Status();
    int64_t v = 0;
    SIEVE_TRY(f.get_int(key, &v));
    if (v == -1 || v == int64_t{UINT32_MAX}) return Status();
    if (v < 0 || v >= n_vocab) {
        return Status::errorf("%s: token id %lld is outside the vocabulary [0, %d)", key,
                              static_cast<long long>(v), n_vocab);
    }
    *out = static_cast<int32_t>(v);
    return Status();
}

Status read_bool(const GgufFile &f, const char *key, bool dflt, bool *out) {
    *out = dflt;
    if (!f.has(key)) return Status();
    return f.get_bool(key, out);
}

}  // namespace

// Builds a Tokenizer from metadata in stages; each stage returns a Status.
class TokenizerLoader {
public:
    TokenizerLoader(const GgufFile &f, Tokenizer *t) : f_(f), t_(*t) {}

    Status run() {
        SIEVE_TRY(read_model());
        SIEVE_TRY(read_vocab());
        SIEVE_TRY(read_special_ids());
        if (t_.spm_) {
            read_byte_tokens();
        } else {
            SIEVE_TRY(read_bpe());
        }
        build_pieces();
        build_special_list();
        return Status();
    }

private:
    Status read_model() {
        std::string model;
        SIEVE_TRY(f_.get_string("tokenizer.ggml.model", &model));
        if (model == "llama") {
            t_.spm_ = true;
        } else if (model == "gpt2") {
            t_.spm_ = false;
        } else {
            return Status::errorf("tokenizer.ggml.model: '%s' is not supported; expected 'llama' (SentencePiece) "
                                  "or 'gpt2' (byte-level BPE)", model.c_str());
        }
        return Status();
    }

    Status read_vocab() {
        std::vector<std::string_view> toks;
        SIEVE_TRY(f_.get_string_array("tokenizer.ggml.tokens", &toks));
        if (toks.empty()) return Status::error("tokenizer.ggml.tokens: the vocabulary is empty");
        if (toks.size() >= static_cast<size_t>(INT32_MAX)) {
            return Status::errorf("tokenizer.ggml.tokens: %zu tokens, more than token ids can address", toks.size());
        }
        const size_t n = toks.size();
        t_.tokens_.assign(toks.begin(), toks.end());

        t_.scores_.assign(n, 0.0f);
        if (f_.has("tokenizer.ggml.scores")) {
            SIEVE_TRY(f_.get_float_array("tokenizer.ggml.scores", &t_.scores_));
            if (t_.scores_.size() != n) {
                return Status::errorf("tokenizer.ggml.scores: %zu entries, expected one per token (%zu)",
                                      t_.scores_.size(), n);
            }
            for (size_t i = 0; i < n; ++i) {
                // Merges are ordered by score; NaN has no order.
                if (!std::isfinite(t_.scores_[i])) {
                    return Status::errorf("tokenizer.ggml.scores[%zu] = %g; expected a finite number", i,
                                          static_cast<double>(t_.scores_[i]));
                }
            }
        }
        t_.attrs_.assign(n, TokenAttr::normal);
        if (f_.has("tokenizer.ggml.token_type")) {
            std::vector<int64_t> types;
            SIEVE_TRY(f_.get_int_array("tokenizer.ggml.token_type", &types));
            if (types.size() != n) {
                return Status::errorf("tokenizer.ggml.token_type: %zu entries, expected one per token (%zu)",
                                      types.size(), n);
            }
            for (size_t i = 0; i < n; ++i) {
                if (types[i] < 0 || types[i] > 6) {
                    return Status::errorf("tokenizer.ggml.token_type[%zu] = %lld; expected 0..6 (normal=1, "
                                          "unknown=2, control=3, user_defined=4, unused=5, byte=6)",
                                          i, static_cast<long long>(types[i]));
                }
                t_.attrs_[i] = types[i] == 0 ? TokenAttr::normal : static_cast<TokenAttr>(types[i] - 1);
            }
        }
        // Some vocabularies repeat a text; the first id keeps it, as llama.cpp.
        t_.token_ids_.reserve(n);
        for (size_t i = 0; i < n; ++i) t_.token_ids_.emplace(t_.tokens_[i], static_cast<int32_t>(i));
        return Status();
    }

    Status read_special_ids() {
        const int32_t nv = t_.n_vocab();
        SIEVE_TRY(read_token_id(f_, "tokenizer.ggml.bos_token_id", nv, &t_.bos_id_));
        SIEVE_TRY(read_token_id(f_, "tokenizer.ggml.eos_token_id", nv, &t_.eos_id_));
        SIEVE_TRY(read_token_id(f_, "tokenizer.ggml.eot_token_id", nv, &t_.eot_id_));
        SIEVE_TRY(read_token_id(f_, "tokenizer.ggml.eom_token_id", nv, &t_.eom_id_));
        SIEVE_TRY(read_token_id(f_, "tokenizer.ggml.unknown_token_id", nv, &t_.unk_id_));
        int32_t pad = -1;
        SIEVE_TRY(read_token_id(f_, "tokenizer.ggml.padding_token_id", nv, &pad));
        // SPM vocabularies default to <s>=1, </s>=2, <unk>=0 (llama.cpp does
        // the same) when the file leaves them out.
        if (t_.spm_) {
            if (t_.bos_id_ < 0 && !f_.has("tokenizer.ggml.bos_token_id") && nv > 1) t_.bos_id_ = 1;
            if (t_.eos_id_ < 0 && !f_.has("tokenizer.ggml.eos_token_id") && nv > 2) t_.eos_id_ = 2;
            if (t_.unk_id_ < 0 && !f_.has("tokenizer.ggml.unknown_token_id")) t_.unk_id_ = 0;
        }
        SIEVE_TRY(read_bool(f_, "tokenizer.ggml.add_bos_token", t_.spm_, &t_.add_bos_));
        SIEVE_TRY(read_bool(f_, "tokenizer.ggml.add_space_prefix", t_.spm_, &t_.add_space_prefix_));
        if (t_.add_bos_ && t_.bos_id_ < 0) {
            return Status::error("tokenizer.ggml.add_bos_token is true but there is no bos_token_id");
        }

        // End-of-turn token when the file does not name one, in order of preference.
        static constexpr const char *k_eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                                      "<|endoftext|>", "<EOT>"};
        if (t_.eot_id_ < 0) {
            for (const char *text : k_eot_texts) {
                const int32_t id = t_.find_token(text);
                if (id >= 0 && t_.attrs_[id] != TokenAttr::normal) {
                    t_.eot_id_ = id;
                    break;
                }
            }
        }
        t_.eog_.assign(static_cast<size_t>(nv), false);
        for (int32_t id : {t_.eos_id_, t_.eot_id_, t_.eom_id_}) {
            if (id >= 0) t_.eog_[id] = true;
        }
        static constexpr const char *k_eog_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                                      "<|endoftext|>", "<|eom_id|>", "<EOT>", "<|end_of_text|>"};
        for (const char *text : k_eog_texts) {
            const int32_t id = t_.find_token(text);
            if (id >= 0 && t_.attrs_[id] != TokenAttr::normal) t_.eog_[id] = true;
        }
        return Status();
    }

    void read_byte_tokens() {
        std::fill(std::begin(t_.byte_tokens_), std::end(t_.byte_tokens_), -1);
        char name[8];
        for (int b = 0; b < 256; ++b) {
            std::snprintf(name, sizeof name, "<0x%02X>", b);
            t_.byte_tokens_[b] = t_.find_token(name);
        }
    }

    Status read_bpe() {
        std::string pre = "default";
        if (f_.has("tokenizer.ggml.pre")) SIEVE_TRY(f_.get_string("tokenizer.ggml.pre", &pre));
        auto pt = PreTokenizer::create(pre);
        if (!pt.ok()) return pt.status();
        t_.pre_ = std::move(pt.value());

        for (int b = 0; b < 256; ++b) {
            std::string ch;
            utf8_append(&ch, gpt2_byte_to_codepoint(static_cast<uint8_t>(b)));
            t_.gpt2_byte_tokens_[b] = t_.find_token(ch);
        }

        std::vector<std::string_view> merges;
        SIEVE_TRY(f_.get_string_array("tokenizer.ggml.merges", &merges));
        t_.merges_.reserve(merges.size());
        std::string joined;
        for (size_t rank = 0; rank < merges.size(); ++rank) {
            const std::string_view m = merges[rank];
            // Split at the first space after the first character: byte-level
            // tokens never hold a space, but a first symbol may be one byte long.
            const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
            if (sp == std::string_view::npos || sp + 1 >= m.size()) {
                return Status::errorf("tokenizer.ggml.merges[%zu] = '%.*s': expected two tokens separated by "
                                      "a space", rank, static_cast<int>(std::min<size_t>(m.size(), 64)), m.data());
            }
            const std::string_view left = m.substr(0, sp), right = m.substr(sp + 1);
            joined.assign(left);
            joined.append(right);
            const int32_t il = t_.find_token(left), ir = t_.find_token(right), im = t_.find_token(joined);
            if (il < 0 || ir < 0 || im < 0) {
                const std::string_view missing = il < 0 ? left : ir < 0 ? right : std::string_view(joined);
                return Status::errorf("tokenizer.ggml.merges[%zu] = '%.*s': token '%.*s' is not in the vocabulary",
                                      rank, static_cast<int>(std::min<size_t>(m.size(), 64)), m.data(),
                                      static_cast<int>(std::min<size_t>(missing.size(), 64)), missing.data());
            }
            const uint64_t key = (static_cast<uint64_t>(il) << 32) | static_cast<uint32_t>(ir);
            // A repeated pair keeps its first (best) rank.
            t_.merges_.emplace(key, Tokenizer::Merge{static_cast<int32_t>(rank), im});
        }
        return Status();
    }

    // What each token decodes to.
    void build_pieces() {
        const size_t n = t_.tokens_.size();
        t_.pieces_.resize(n);
        for (size_t i = 0; i < n; ++i) {
            const std::string &text = t_.tokens_[i];
            const TokenAttr a = t_.attrs_[i];
            std::string &piece = t_.pieces_[i];
            if (a == TokenAttr::control || a == TokenAttr::unknown) {
                piece = text;
            } else if (t_.spm_) {
                unsigned byte = 0;
                if (a == TokenAttr::byte && text.size() == 6 && std::sscanf(text.c_str(), "<0x%02X>", &byte) == 1) {
                    piece.assign(1, static_cast<char>(byte));
                } else {
                    piece = replace_all(text, k_spm_space, " ");
                }
            } else if (a == TokenAttr::user_defined) {
                piece = text;  // added tokens are stored as plain text, not byte-level
            } else {
                piece = gpt2_decode(text);
            }
        }
    }

    void build_special_list() {
        auto &list = t_.special_by_length_;
        for (int32_t i = 0; i < t_.n_vocab(); ++i) {
            const TokenAttr a = t_.attrs_[i];
            const bool special = a == TokenAttr::control || a == TokenAttr::unknown || a == TokenAttr::user_defined;
            if (special && !t_.tokens_[i].empty()) list.push_back(i);
        }
        std::stable_sort(list.begin(), list.end(), [&](int32_t a, int32_t b) {
            return t_.tokens_[a].size() > t_.tokens_[b].size();
        });
    }

    static std::string replace_all(const std::string &s, std::string_view from, std::string_view to) {
        std::string out;
        size_t i = 0;
        for (size_t j; (j = s.find(from, i)) != std::string::npos; i = j + from.size()) {
            out.append(s, i, j - i);
            out.append(to);
        }
        out.append(s, i, std::string::npos);
        return out;
    }

    // Byte-level text -> bytes. A character outside GPT-2's alphabet (only
    // in malformed vocabularies) is kept as its UTF-8, as HF's decoder does.
    static std::string gpt2_decode(std::string_view text) {
        std::string out;
        size_t pos = 0;
        while (pos < text.size()) {
            const size_t start = pos;
            uint32_t cp = 0;
            const int b = utf8_next(text, &pos, &cp) ? gpt2_codepoint_to_byte(cp) : -1;
            if (b >= 0) {
                out.push_back(static_cast<char>(b));
            } else {
                out.append(text.substr(start, pos - start));
            }
        }
        return out;
    }

    const GgufFile &f_;
    Tokenizer &t_;
};

Tokenizer::Tokenizer() {
    std::fill(std::begin(byte_tokens_), std::end(byte_tokens_), -1);
    std::fill(std::begin(gpt2_byte_tokens_), std::end(gpt2_byte_tokens_), -1);
}
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile &file) {
    std::unique_ptr<Tokenizer> t(new Tokenizer());
    TokenizerLoader loader(file, t.get());
    Status st = loader.run();
    if (!st.ok()) return st.with_context("tokenizer");
    return t;
}

std::string Tokenizer::pre_family() const { return pre_ ? pre_->family() : std::string(); }

bool Tokenizer::is_eog(int32_t id) const { return id >= 0 && id < n_vocab() && eog_[id]; }

bool Tokenizer::is_control(int32_t id) const {
    return id >= 0 && id < n_vocab() && attrs_[id] == TokenAttr::control;
}

TokenAttr Tokenizer::attr(int32_t id) const {
    return id >= 0 && id < n_vocab() ? attrs_[id] : TokenAttr::unused;
}

int32_t Tokenizer::find_token(std::string_view text) const {
    const auto it = token_ids_.find(text);
    return it == token_ids_.end() ? -1 : it->second;
}

std::string Tokenizer::token_to_piece(int32_t id) const {
    return id >= 0 && id < n_vocab() ? pieces_[id] : std::string();
}

// Cuts text at special tokens, longest first (so "<|im_end|>" wins over a
// shorter token it contains). Raw stretches between them stay text.
void Tokenizer::split_special(std::string_view text, bool parse_special, std::vector<Fragment> *out) const {
    out->assign(1, Fragment{text, -1});
    if (text.empty()) return;
    std::vector<Fragment> next;
    for (int32_t id : special_by_length_) {
        const TokenAttr a = attrs_[id];
        if (!parse_special && a != TokenAttr::user_defined) continue;
        const std::string &tok = tokens_[id];
        next.clear();
        for (const Fragment &fr : *out) {
            if (fr.token >= 0) {
                next.push_back(fr);
                continue;
            }
            size_t i = 0;
            for (size_t j; (j = fr.text.find(tok, i)) != std::string_view::npos; i = j + tok.size()) {
                if (j > i) next.push_back(Fragment{fr.text.substr(i, j - i), -1});
                next.push_back(Fragment{{}, id});
            }
            if (i < fr.text.size()) next.push_back(Fragment{fr.text.substr(i), -1});
        }
        out->swap(next);
    }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
    std::vector<int32_t> ids;
    if (add_bos && bos_id_ >= 0) ids.push_back(bos_id_);
    std::vector<Fragment> frags;
    split_special(text, parse_special, &frags);
    // SPM puts its dummy-prefix space at the start of the text and after each
    // special token (llama.cpp's behaviour, matching SentencePiece per piece).
    bool after_special = true;
    std::string buf;
    for (const Fragment &fr : frags) {
        if (fr.token >= 0) {
            ids.push_back(fr.token);
            after_special = true;
            continue;
        }
        if (fr.text.empty()) continue;  // empty input: no dummy-prefix token either
        if (spm_) {
            buf.clear();
            if (add_space_prefix_ && after_special) buf.push_back(' ');
            buf.append(fr.text);
            encode_spm(buf, &ids);
        } else if (utf8_is_valid(fr.text)) {
            encode_bpe(fr.text, &ids);
        } else {
            encode_bpe(utf8_sanitize(fr.text), &ids);
        }
        after_special = false;
    }
    return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t> &ids, bool skip_special) const {
    std::string out;
    const bool strip = spm_ && add_space_prefix_ && !ids.empty() && ids[0] == bos_id_ && bos_id_ >= 0;
    for (size_t i = 0; i < ids.size(); ++i) {
        const int32_t id = ids[i];
        if (id < 0 || id >= n_vocab()) continue;
        const TokenAttr a = attrs_[id];
        if (skip_special && (a == TokenAttr::control || a == TokenAttr::unknown)) continue;
        const std::string &p = pieces_[id];
        if (strip && i == 1 && !p.empty() && p[0] == ' ') {
            out.append(p, 1, std::string::npos);
        } else {
            out.append(p);
        }
    }
    return out;
}

// ---------------------------------------------------------------------------
// StreamDetokenizer
// ---------------------------------------------------------------------------

StreamDetokenizer::StreamDetokenizer(const Tokenizer &tok, bool skip_special)
    : tok_(tok), skip_special_(skip_special) {}

std::string StreamDetokenizer::push(int32_t id) {
    // Same rule as Tokenizer::decode: the token right after a leading BOS
    // loses the space SPM's dummy prefix put there.
    const bool strip = strip_space_;
    strip_space_ = first_ && tok_.is_spm() && tok_.add_space_prefix() && id == tok_.bos_id() && id >= 0;
    first_ = false;
    if (id < 0 || id >= tok_.n_vocab()) return {};
    const TokenAttr a = tok_.attr(id);
    if (skip_special_ && (a == TokenAttr::control || a == TokenAttr::unknown)) return {};
    std::string piece = tok_.token_to_piece(id);
    if (strip && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    pending_ += piece;
    std::string out;
    const size_t used = utf8_sanitize_prefix(pending_, false, &out);
    pending_.erase(0, used);
    return out;
}

std::string StreamDetokenizer::finish() {
    std::string out;
    utf8_sanitize_prefix(pending_, true, &out);
    pending_.clear();
    return out;
}

}  // namespace sieve
