// SentencePiece-style BPE over a GGUF "llama" vocabulary.
//
// 1. Spaces become U+2581 (the caller has already added the dummy prefix).
// 2. The text is cut into UTF-8 characters, one symbol each (a byte of
//    invalid UTF-8 is a symbol alone, so any input round-trips).
// 3. Repeatedly merge the adjacent pair whose concatenation is a token with
//    the highest score (ties: leftmost), as SentencePiece's BPE model does.
// 4. Each final symbol is its token; a symbol that is no token (a character
//    outside the vocabulary) falls back to one <0xXX> token per byte, or to
//    the unknown token when the vocabulary has no byte tokens.
#include <queue>

#include "sieve/tokenizer/tokenizer.h"
#include "sieve/tokenizer/unicode.h"

namespace sieve {

namespace {

struct Symbol {
    size_t off, len;  // bytes of the escaped text; len == 0 once merged away
    int prev, next;   // neighbours in the live list, -1 at the ends
};

struct Bigram {
    float score;
    int left, right;
    size_t len;  // the pair's byte length when queued: a stale entry no longer matches
};

struct BigramOrder {
    bool operator()(const Bigram &a, const Bigram &b) const {
        // priority_queue pops the largest: highest score, then smallest left.
        return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
};

std::string escape_spaces(std::string_view text) {
    std::string out;
    out.reserve(text.size() + text.size() / 4);
    for (char c : text) {
        if (c == ' ') {
            out += "\xE2\x96\x81";
        } else {
            out.push_back(c);
        }
    }
    return out;
}

}  // namespace

void Tokenizer::encode_spm(std::string_view raw, std::vector<int32_t> *out) const {
    if (raw.empty()) return;
    const std::string text = escape_spaces(raw);
    const std::string_view tv(text);

    std::vector<Symbol> syms;
    for (size_t off = 0; off < text.size();) {
        // An invalid byte is a symbol of its own and ends as a byte token.
        const size_t len = utf8_char_len(tv, off);
        const int i = static_cast<int>(syms.size());
        syms.push_back(Symbol{off, len, i - 1, -1});
        if (i > 0) syms[i - 1].next = i;
        off += len;
    }

    std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> agenda;
    auto try_add = [&](int left, int right) {
        if (left < 0 || right < 0) return;
        const size_t len = syms[left].len + syms[right].len;
        const int32_t id = find_token(tv.substr(syms[left].off, len));
        if (id < 0) return;
        agenda.push(Bigram{scores_[id], left, right, len});
    };
    for (size_t i = 1; i < syms.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));

    while (!agenda.empty()) {
        const Bigram bg = agenda.top();
        agenda.pop();
        Symbol &l = syms[bg.left];
        Symbol &r = syms[bg.right];
        if (l.len == 0 || r.len == 0 || l.next != bg.right || l.len + r.len != bg.len) continue;
        l.len += r.len;
        r.len = 0;
        l.next = r.next;
        if (r.next >= 0) syms[r.next].prev = bg.left;
        try_add(l.prev, bg.left);
        try_add(bg.left, l.next);
    }

    for (int i = 0; i >= 0 && !syms.empty(); i = syms[i].next) {
        const std::string_view piece = tv.substr(syms[i].off, syms[i].len);
        const int32_t id = find_token(piece);
        if (id >= 0) {
            out->push_back(id);
            continue;
        }
        for (char c : piece) {
            const int32_t b = byte_tokens_[static_cast<uint8_t>(c)];
            if (b >= 0) {
                out->push_back(b);
            } else if (unk_id_ >= 0) {
                out->push_back(unk_id_);
            }
        }
    }
}

}  // namespace sieve
