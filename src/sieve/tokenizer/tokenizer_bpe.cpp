// Byte-level BPE over a GGUF "gpt2" vocabulary.
//
// 1. The pre-tokenizer cuts the text into words (regex stages, pretokenizer.h).
// 2. Each byte of a word becomes the token of its GPT-2 code point. A byte the
//    vocabulary lacks is dropped: Hugging Face's BPE does so when the model has
//    no unk token (SmolLM2's vocabulary lacks 21 such bytes, e.g. 0xF5-0xFF).
// 3. Repeatedly merge the adjacent pair with the lowest merge rank (ties:
//    leftmost), as HF tokenizers' BPE::merge_word.
#include <queue>

#include "sieve/tokenizer/pretokenizer.h"
#include "sieve/tokenizer/tokenizer.h"

namespace sieve {

namespace {

struct Sym {
    int32_t id;
    int prev, next;  // neighbours in the live list, -1 at the ends
    bool live;
};

struct Pair {
    int32_t rank;
    int left, right;
    int32_t left_id, right_id;  // ids when queued: a stale entry no longer matches
};

struct PairOrder {
    bool operator()(const Pair &a, const Pair &b) const {
        // priority_queue pops the largest: lowest rank, then smallest left.
        return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
};

}  // namespace

void Tokenizer::bpe_word(std::string_view word, std::vector<int32_t> *out) const {
    std::vector<Sym> syms;
    syms.reserve(word.size());
    for (char c : word) {
        const int32_t id = gpt2_byte_tokens_[static_cast<uint8_t>(c)];
        if (id < 0) continue;
        const int i = static_cast<int>(syms.size());
        syms.push_back(Sym{id, i - 1, -1, true});
        if (i > 0) syms[i - 1].next = i;
    }
    if (syms.size() == 1) {
        out->push_back(syms[0].id);
        return;
    }

    std::priority_queue<Pair, std::vector<Pair>, PairOrder> agenda;
    auto try_add = [&](int left, int right) {
        if (left < 0 || right < 0) return;
        const uint64_t key = (static_cast<uint64_t>(syms[left].id) << 32) | static_cast<uint32_t>(syms[right].id);
        const auto it = merges_.find(key);
        if (it == merges_.end()) return;
        agenda.push(Pair{it->second.rank, left, right, syms[left].id, syms[right].id});
    };
    for (size_t i = 1; i < syms.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));

    while (!agenda.empty()) {
        const Pair p = agenda.top();
        agenda.pop();
        Sym &l = syms[p.left];
        Sym &r = syms[p.right];
        if (!l.live || !r.live || l.next != p.right || l.id != p.left_id || r.id != p.right_id) continue;
        const uint64_t key = (static_cast<uint64_t>(l.id) << 32) | static_cast<uint32_t>(r.id);
        l.id = merges_.find(key)->second.id;
        r.live = false;
        l.next = r.next;
        if (r.next >= 0) syms[r.next].prev = p.left;
        try_add(l.prev, p.left);
        try_add(p.left, l.next);
    }
    for (int i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next) out->push_back(syms[i].id);
}

void Tokenizer::encode_bpe(std::string_view text, std::vector<int32_t> *out) const {
    std::vector<std::string_view> words;
    pre_->split(text, &words);
    for (std::string_view w : words) bpe_word(w, out);
}

}  // namespace sieve
