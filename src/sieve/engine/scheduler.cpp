#include "sieve/engine/scheduler.h"

#include <algorithm>

#include "sieve/core/log.h"

namespace sieve {

namespace {
// The prefix-cache namespace of a sequence's prompt KV (its policy's prefill).
uint64_t prefix_namespace(const Sequence &s) { return s.policy ? s.policy->prefix_namespace() : 0; }
}  // namespace


Scheduler::Scheduler(KvSpace &kv, int max_seqs, int64_t max_batch_tokens, int64_t swap_limit)
    : kv_(kv), max_batch_tokens_(max_batch_tokens), swap_limit_(swap_limit) {
    // Lowest slot first (popped from the back).
    for (int i = max_seqs - 1; i >= 0; --i) free_slots_.push_back(i);
}

int64_t Scheduler::pages_missing(const Sequence &s, int64_t n_pos) const {
    if (s.slot < 0) return kv_.seq_pages_for_rows(n_pos);
    return kv_.pages_to_reserve(s.slot, n_pos);
}

void Scheduler::drop_image(Sequence &s) {
    if (!s.swapped) return;
    swap_used_ -= s.swapped->n_bytes();
    s.swapped.reset();
}

void Scheduler::resume(Sequence &s) {
    Status st = kv_.swap_in(s.slot, *s.swapped);
    if (st.ok()) {
        ++n_swap_in_;
    } else {
        SIEVE_LOG_WARN("engine: swap-in of request %llu failed (%s); recomputing it",
                       static_cast<unsigned long long>(s.id), st.message().c_str());
        s.n_computed = 0;
        s.policy_applied = false;
        s.prefill_begun = false;
    }
    drop_image(s);
}

void Scheduler::admit() {
    // Pages not yet promised: running prefills will still map theirs.
    int64_t avail = kv_.n_free_pages();
    for (const SequencePtr &r : running_) avail -= pages_missing(*r, r->n_total());
    while (!waiting_.empty() && !free_slots_.empty()) {
        Sequence &s = *waiting_.front();
        // A swapped sequence needs the pages of what its lanes held; a fresh
        // or recomputed one its dense prompt (the peak, held while it is
        // prefilled; a policy compacts it right after, and later answers of
        // the store count what the lanes really keep), less what the prefix
        // cache supplies.
        PrefixHit hit;
        const int64_t need = s.swapped ? kv_.swap_pages(*s.swapped) : lookup_prefix(s, &hit);
        // One page per lane spare so running decodes can grow a little before
        // the newcomer forces a preemption. Alone, a sequence always fits:
        // submit() rejects prompt + max_tokens beyond the pool.
        const int64_t spare = kv_.seq_pages_for_rows(1);
        if (!running_.empty() && need + spare > avail) break;
        avail -= need;
        s.slot = free_slots_.back();
        free_slots_.pop_back();
        if (s.swapped) {
            resume(s);
        } else {
            s.prefill_begun = false;
            if (kv_.prefix_stats().enabled) prefix_query_tokens_ += s.n_total();
            if (hit.rows > 0) {
                Status st = kv_.prefix_attach(s.slot, s.tokens.data(), hit.rows, prefix_namespace(s));
                if (st.ok()) {
                    s.n_computed = hit.rows;
                    prefix_hit_tokens_ += hit.rows;
                    if (!s.prompt_counted) s.n_cached = std::min(hit.rows, s.n_prompt);
                } else {
                    SIEVE_LOG_WARN("engine: prefix cache hit of request %llu not mapped (%s); computing it",
                                   static_cast<unsigned long long>(s.id), st.message().c_str());
                }
            }
        }
        running_.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
    }
}

int64_t Scheduler::lookup_prefix(Sequence &s, PrefixHit *hit) {
    // At least the last token runs through the model (its logits are needed);
    // a policy that scores queries keeps those queries out of the hit.
    int64_t n_max = s.n_total() - 1;
    if (s.policy) n_max = std::min(n_max, s.policy->reusable_prefix(s.n_total()));
    *hit = kv_.prefix_lookup(s.tokens.data(), s.n_total(), n_max, prefix_namespace(s));
    return hit->pages_new + hit->pages_taken;
}

// Prompt rows only: a generated token's KV comes from the decode kernel, a
// prompt token's from the prefill kernel, and the two do not give the same
// bits. A later prompt that contains generated tokens (a chat history)
// computes them with the prefill kernel, so mapping decode-made rows would
// change its output against a run without the cache.
void Scheduler::publish(const Sequence &s, bool whole_pages_only) {
    if (s.slot >= 0)
        kv_.prefix_publish(s.slot, s.tokens.data(), std::min(s.n_computed, s.n_prompt), whole_pages_only,
                           prefix_namespace(s));
}

void Scheduler::preempt_newest(std::vector<ScheduledSeq> *plan, int64_t *budget) {
    SequencePtr victim = std::move(running_.back());
    running_.pop_back();
    auto it = std::find_if(plan->begin(), plan->end(), [&](const ScheduledSeq &p) { return p.seq == victim.get(); });
    if (it != plan->end()) {
        *budget += it->n_tokens;
        plan->erase(it);
    }
    SIEVE_LOG_DEBUG("engine: preempting request %llu (%lld of %lld tokens computed, slot %d)",
                    static_cast<unsigned long long>(victim->id), static_cast<long long>(victim->n_computed),
                    static_cast<long long>(victim->n_total()), victim->slot);
    // Swap when the image fits the swap space: on a CPU a swap is a memcpy at
    // memory bandwidth, far cheaper than re-running the prefill, and it is the
    // only way back for lanes a policy compacted. Otherwise recompute: the
    // prefill re-runs prompt + generated tokens densely and the policy acts
    // again at its end (for a compacted sequence that is a different KV than
    // it had; docs/architecture.md).
    const int64_t bytes = victim->n_computed > 0 ? kv_.swap_bytes(victim->slot) : 0;
    bool swapped = false;
    if (bytes > 0 && swap_used_ + bytes <= swap_limit_) {
        auto img = std::make_unique<KvSwapImage>();
        Status st = kv_.swap_out(victim->slot, img.get());
        if (st.ok()) {
            swap_used_ += img->n_bytes();
            victim->swapped = std::move(img);
            swapped = true;
            ++n_swap_out_;
        } else {
            SIEVE_LOG_WARN("engine: swap-out of request %llu failed (%s); it will be recomputed",
                           static_cast<unsigned long long>(victim->id), st.message().c_str());
        }
    }
    // Its dense KV stays cached: a recompute then maps most of it back.
    publish(*victim, /*whole_pages_only=*/false);
    kv_.release(victim->slot);
    free_slots_.push_back(victim->slot);
    victim->slot = -1;
    if (!swapped) {
        victim->n_computed = 0;
        victim->policy_applied = false;
    }
    waiting_.push_front(std::move(victim));
    ++n_preemptions_;
}

bool Scheduler::place(Sequence *s, int64_t n, std::vector<ScheduledSeq> *plan, int64_t *budget,
                      std::vector<FailedSeq> *failed) {
    const int64_t n_pos = s->n_computed + n;
    for (;;) {
        const int64_t need = pages_missing(*s, n_pos);
        std::string why;
        if (need <= kv_.n_free_pages()) {
            Status st = kv_.reserve(s->slot, n_pos);
            if (st.ok()) {
                plan->push_back({s, n, n_pos == s->n_total()});
                *budget -= n;
                return true;
            }
            why = st.message();  // mapping failed (e.g. the process's map count); free memory and retry
            SIEVE_LOG_WARN("engine: KV reserve for request %llu failed: %s", static_cast<unsigned long long>(s->id),
                           why.c_str());
        } else {
            why = strfmt("KV pool exhausted: request %llu needs %lld more pages to reach position %lld, %lld of %lld free",
                         static_cast<unsigned long long>(s->id), static_cast<long long>(need),
                         static_cast<long long>(n_pos), static_cast<long long>(kv_.n_free_pages()),
                         static_cast<long long>(kv_.n_total_pages()));
        }
        if (running_.size() == 1) {
            // Nothing left to preempt: this sequence cannot run even alone.
            failed->push_back({remove_running(s), why});
            return false;
        }
        const bool self = running_.back().get() == s;
        preempt_newest(plan, budget);
        if (self) return false;
    }
}

std::vector<ScheduledSeq> Scheduler::schedule(std::vector<FailedSeq> *failed) {
    admit();
    std::vector<ScheduledSeq> plan;
    int64_t budget = max_batch_tokens_;
    // Decode tokens first (one each), oldest sequence first. A failed place()
    // removed the sequence at i, which was the newest: nothing follows it.
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
        Sequence *s = running_[i].get();
        if (s->n_uncomputed() == 1 && !place(s, 1, &plan, &budget, failed)) break;
    }
    // Then prefill chunks with what is left of the budget.
    for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
        Sequence *s = running_[i].get();
        if (s->n_uncomputed() > 1 && !place(s, std::min(s->n_uncomputed(), budget), &plan, &budget, failed)) break;
    }
    return plan;
}

int64_t Scheduler::map_ahead(int64_t lookahead) {
    // Pages no running sequence is still owed (as in admit()).
    int64_t avail = kv_.n_free_pages();
    for (const SequencePtr &r : running_) avail -= pages_missing(*r, r->n_total());
    int64_t mapped = 0;
    for (const SequencePtr &r : running_) {
        if (r->n_uncomputed() != 1) continue;  // prefilling: its chunks map their own rows
        // Never past the last row the sequence can write: its final token is
        // emitted, not run through the model.
        const int64_t last = r->n_prompt + r->req.max_tokens - 1;
        const int64_t rows = std::max(r->n_total(), std::min({r->n_total() + lookahead, last, kv_.max_ctx()}));
        const int64_t need = pages_missing(*r, rows);
        if (need == 0 || need > avail) continue;
        // A failure here (e.g. the map count) is not fatal: the step's own
        // reserve() tries again and handles it.
        if (!kv_.reserve(r->slot, rows).ok()) continue;
        avail -= need;
        mapped += need;
    }
    return mapped;
}

SequencePtr Scheduler::remove_running(Sequence *s) {
    auto it = std::find_if(running_.begin(), running_.end(), [&](const SequencePtr &p) { return p.get() == s; });
    SIEVE_CHECK(it != running_.end());
    SequencePtr out = std::move(*it);
    running_.erase(it);
    publish(*out, /*whole_pages_only=*/false);
    kv_.release(out->slot);
    free_slots_.push_back(out->slot);
    out->slot = -1;
    return out;
}

SequencePtr Scheduler::remove_waiting(uint64_t id) {
    auto it = std::find_if(waiting_.begin(), waiting_.end(), [&](const SequencePtr &p) { return p->id == id; });
    if (it == waiting_.end()) return nullptr;
    SequencePtr out = std::move(*it);
    waiting_.erase(it);
    drop_image(*out);
    return out;
}

Sequence *Scheduler::find_running(uint64_t id) const {
    for (const SequencePtr &p : running_)
        if (p->id == id) return p.get();
    return nullptr;
}

}  // namespace sieve
