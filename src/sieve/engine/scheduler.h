// The scheduler: which sequences run this step and how many tokens each gets.
// No prefill/decode phases (vLLM v1): a running sequence is given
// min(n_uncomputed, budget left) tokens, decode tokens first, then prefill
// chunks, up to max_batch_tokens.
//
// KV memory is counted in pool pages, but the scheduler never computes a
// page itself: it asks the store (KvSpace) what a reservation would cost and
// what a slot holds, so lanes of different lengths (sparse policies) are
// counted as what they really hold. The store is created without map-ahead
// headroom, so its answers are exact.
//
// The scheduler never lets the store's reserve() run the pool dry: it checks
// a reservation fits in the free pages before making it. The store's
// on-demand reclamation would otherwise take pages that an earlier reserve()
// of this same step mapped for another slot but the forward pass has not
// written yet (reclaim counts a lane's written rows, not its reservation).
// Finished, cancelled and preempted sequences release() their pages at once
// for the same reason: no slot keeps a cache the store could reclaim.
//
// Map-ahead (vAttention's "off the critical path"): after each step the
// engine calls map_ahead(), which reserves pages for the next few decode
// tokens of every decoding sequence, out of pages nobody else was promised.
// The reservation is real (held pages), so the accounting above stays exact,
// and a decode step's own reserve() finds its rows mapped: page-boundary
// mmaps happen between steps, not inside them.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "sieve/engine/sequence.h"
#include "sieve/kv/kv_space.h"

namespace sieve {

struct ScheduledSeq {
    Sequence *seq = nullptr;
    int64_t n_tokens = 0;       // tokens [n_computed, n_computed + n_tokens) run this step
    bool wants_logits = false;  // the step completes the sequence's uncomputed tokens
};

struct FailedSeq {
    SequencePtr seq;
    std::string error;
};

class Scheduler {
public:
    // swap_limit: host bytes preempted sequences' KV images may take.
    Scheduler(KvSpace &kv, int max_seqs, int64_t max_batch_tokens, int64_t swap_limit);

    void add_waiting(SequencePtr s) { waiting_.push_back(std::move(s)); }

    // One step's plan:
    //   1. admit waiting sequences (FIFO) while a slot is free and the pool has
    //      the pages of their uncomputed tokens plus one page per lane spare
    //      beyond what running prefills still need; a sequence starting from
    //      nothing first gets the longest cached prefix of its tokens mapped
    //      (prefix cache) and counts only the pages it still needs;
    //   2. decode tokens of running sequences, then prefill chunks, within the
    //      token budget; each reservation is made in the store right away;
    //   3. when the pool lacks pages for a reservation, preempt the newest
    //      running sequence and retry: its KV goes to a host image when the
    //      swap space has room (it resumes with n_computed unchanged), else its
    //      pages are released and n_computed = 0 (recompute); either way it
    //      goes to the front of the waiting queue.
    // Sequences that cannot run even alone come back in *failed.
    std::vector<ScheduledSeq> schedule(std::vector<FailedSeq> *failed);

    // Reserves rows for the next lookahead tokens of each decoding sequence
    // where free pages allow (never pages running prefills still need, never
    // a preemption). Returns the pages mapped.
    int64_t map_ahead(int64_t lookahead);

    // Takes a finished or cancelled sequence out and releases its pages and slot.
    SequencePtr remove_running(Sequence *s);
    // Takes a waiting sequence out (cancel); nullptr if none has this id.
    SequencePtr remove_waiting(uint64_t id);
    Sequence *find_running(uint64_t id) const;

    const std::vector<SequencePtr> &running() const { return running_; }
    const std::deque<SequencePtr> &waiting() const { return waiting_; }
    // Offers the KV of a sequence's prompt to the prefix cache
    // (KvSpace::prefix_publish; the store skips compacted lanes).
    void publish(const Sequence &s, bool whole_pages_only);
    int64_t n_preemptions() const { return n_preemptions_; }
    int64_t prefix_query_tokens() const { return prefix_query_tokens_; }
    int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }
    int64_t n_swap_out() const { return n_swap_out_; }
    int64_t n_swap_in() const { return n_swap_in_; }
    int64_t swap_used() const { return swap_used_; }
    int64_t swap_limit() const { return swap_limit_; }
    int64_t pages_used() const { return kv_.n_total_pages() - kv_.n_free_pages(); }
    int64_t pages_total() const { return kv_.n_total_pages(); }

private:
    // Pages the store must still map for s to reach position n_pos.
    int64_t pages_missing(const Sequence &s, int64_t n_pos) const;
    void admit();
    // Pages s needs to be admitted, after mapping what the prefix cache holds
    // of it into a slot (fresh and recomputed sequences).
    int64_t lookup_prefix(Sequence &s, PrefixHit *hit);
    // Maps a swapped sequence's image into its new slot; on failure falls
    // back to recomputing it.
    void resume(Sequence &s);
    // Drops a sequence's swap image (cancel, recompute), returning its bytes.
    void drop_image(Sequence &s);
    void preempt_newest(std::vector<ScheduledSeq> *plan, int64_t *budget);
    // Plans n tokens for s; preempts while the pool is short. False when s
    // itself was preempted or failed.
    bool place(Sequence *s, int64_t n, std::vector<ScheduledSeq> *plan, int64_t *budget,
               std::vector<FailedSeq> *failed);

    KvSpace &kv_;
    int64_t max_batch_tokens_;
    std::deque<SequencePtr> waiting_;
    std::vector<SequencePtr> running_;  // admission order: newest last
    std::vector<int> free_slots_;
    int64_t n_preemptions_ = 0;
    int64_t n_swap_out_ = 0, n_swap_in_ = 0;
    int64_t swap_used_ = 0;
    int64_t swap_limit_ = 0;
    int64_t prefix_query_tokens_ = 0, prefix_hit_tokens_ = 0;
};

}  // namespace sieve
