#include "sieve/sparse/quest.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "sieve/kernels/cpu/page_select.h"
#include "sieve/kv/page_summary.h"

namespace sieve {

QuestSelector::QuestSelector(const QuestParams &p, const KvShape &shape, int64_t n_head)
    : p_(p), n_layer_(shape.n_layer), n_head_kv_(shape.n_head_kv), n_head_(n_head), d_(shape.head_dim) {
    choices_.resize(static_cast<size_t>(n_layer_ * n_head_kv_));
    scratch_.resize(static_cast<size_t>(n_head_kv_));
    first_.resize(static_cast<size_t>(n_head_kv_ + 1));
    spans_.rows = nullptr;
    spans_.first = first_.data();
}

void QuestSelector::reset() {
    step_ = 0;
    for (Choice &c : choices_) c = Choice();
}

void QuestSelector::choose(int64_t layer, int64_t g, const float *q, KvCache &kv, int seq, int64_t n,
                           Choice &c, Scratch &w) const {
    const int64_t unit = p_.page, per_unit = unit / k_summary_rows, group = n_head_ / n_head_kv_;
    const int64_t n_units = (n + unit - 1) / unit, newest = n_units - 1;
    // Logical pages of the rows before the token's own: bounds from their
    // summaries, or (score=exact) scores from their keys.
    const int64_t n_rows = kv.n_rows(seq, layer, g), n_logical = summary_pages(n_rows);
    w.logical.resize(static_cast<size_t>(n_logical));
    const float scale = 1.0f / std::sqrt(static_cast<float>(d_));  // the attention's scale (model.cpp)
    // Exact scores of the lane's pages into out (every page, unless a.pages is set).
    const auto exact_args = [&](float *out) {
        cpu::PageExactArgs a;
        a.q = q + g * group * d_;
        a.group = group;
        a.d = d_;
        a.type = kv.shape().type.k;
        a.keys = kv.k_data(seq, layer, g);
        a.n_rows = n_rows;
        a.page_rows = k_summary_rows;
        a.agg = p_.agg;
        a.scale = scale;
        a.out = out;
        return a;
    };
    if (p_.exact) {
        cpu::page_scores_exact(exact_args(w.logical.data()));
    } else {
        cpu::PageScoreArgs a;
        a.q = q + g * group * d_;
        a.group = group;
        a.d = d_;
        a.summary = w.summary;
        a.n_pages = n_logical;
        a.agg = p_.agg;
        a.scale = scale;
        a.out = w.logical.data();
        cpu::quest_page_scores(a);
    }
    // Units before the newest: the max of their logical pages.
    w.unit_score.assign(static_cast<size_t>(std::max<int64_t>(newest, 0)), 0.0f);
    for (int64_t u = 0; u < newest; ++u) {
        float s = w.logical[static_cast<size_t>(u * per_unit)];
        for (int64_t j = 1; j < per_unit && u * per_unit + j < n_logical; ++j)
            s = std::max(s, w.logical[static_cast<size_t>(u * per_unit + j)]);
        w.unit_score[static_cast<size_t>(u)] = s;
    }
    // Forced units (sinks, recent rows), then the best of the rest.
    std::vector<char> &take = w.take;
    take.assign(static_cast<size_t>(std::max<int64_t>(newest, 0)), 0);
    int64_t n_take = 0;
    const auto force = [&](int64_t u) {
        if (u >= 0 && u < newest && !take[static_cast<size_t>(u)]) {
            take[static_cast<size_t>(u)] = 1;
            ++n_take;
        }
    };
    for (int64_t u = 0; u * unit < p_.sink && u < newest; ++u) force(u);
    for (int64_t u = std::max<int64_t>(0, (n - p_.recent) / unit); p_.recent > 0 && u < newest; ++u) force(u);
    const int64_t want = std::max<int64_t>(0, p_.budget / unit - 1);  // units besides the newest
    w.order.clear();
    for (int64_t u = 0; u < newest; ++u)
        if (!take[static_cast<size_t>(u)]) w.order.push_back(static_cast<int32_t>(u));
    const int64_t more =
        std::min<int64_t>(static_cast<int64_t>(w.order.size()), std::max<int64_t>(0, want - n_take));
    const auto better = [&](int32_t x, int32_t y) {
        const float sx = w.unit_score[static_cast<size_t>(x)], sy = w.unit_score[static_cast<size_t>(y)];
        return sx > sy || (sx == sy && x < y);
    };
    const int64_t n_cand =
        p_.exact || p_.refine <= 0.0
            ? 0
            : std::min<int64_t>(static_cast<int64_t>(w.order.size()),
                                static_cast<int64_t>(std::ceil(p_.refine * static_cast<double>(more))));
    if (n_cand > more) {
        // refine=: the bound's best n_cand units, re-scored from their keys.
        std::nth_element(w.order.begin(), w.order.begin() + n_cand, w.order.end(), better);
        w.order.resize(static_cast<size_t>(n_cand));
        std::sort(w.order.begin(), w.order.end());
        w.cand_pages.clear();
        for (int32_t u : w.order)
            for (int64_t j = 0; j < per_unit && u * per_unit + j < n_logical; ++j)
                w.cand_pages.push_back(static_cast<int32_t>(u * per_unit + j));
        w.cand_score.resize(w.cand_pages.size());
        cpu::PageExactArgs a = exact_args(w.cand_score.data());
        a.pages = w.cand_pages.data();
        a.n_list = static_cast<int64_t>(w.cand_pages.size());
        cpu::page_scores_exact(a);
        size_t i = 0;
        for (int32_t u : w.order) {
            float s = -INFINITY;
            for (; i < w.cand_pages.size() && w.cand_pages[i] / per_unit == u; ++i)
                s = std::max(s, w.cand_score[i]);
            w.unit_score[static_cast<size_t>(u)] = s;
        }
    }
    if (more > 0 && more < static_cast<int64_t>(w.order.size()))
        std::nth_element(w.order.begin(), w.order.begin() + more, w.order.end(), better);
    for (int64_t i = 0; i < more; ++i) take[static_cast<size_t>(w.order[static_cast<size_t>(i)])] = 1;
    c.units.clear();
    for (int64_t u = 0; u < newest; ++u)
        if (take[static_cast<size_t>(u)]) c.units.push_back(static_cast<int32_t>(u));
    c.tail_row = newest * unit;
    c.step = step_;
}

const cpu::RowSpans *QuestSelector::select(int64_t layer, const float *q, KvCache &kv, int seq,
                                           const int64_t *n_vis, ThreadPool *pool) {
    const auto t0 = std::chrono::steady_clock::now();
    if (layer == 0) {
        ++step_;
        ++stats_.n_steps;
    }
    if (layer < p_.full_layers) {
        for (int64_t g = 0; g < n_head_kv_; ++g) {
            stats_.rows_seen += n_vis[g];
            stats_.rows_read += n_vis[g];
        }
        return nullptr;
    }
    // Reselect every `interval` steps, and when the lane no longer holds the
    // rows the choice was made over (a rollback or compaction); the heads
    // that do choose at once, over the pool's threads.
    todo_.clear();
    for (int64_t g = 0; g < n_head_kv_; ++g) {
        const int64_t n = n_vis[g];
        const Choice &c = choices_[static_cast<size_t>(layer * n_head_kv_ + g)];
        if (n > p_.budget && (c.tail_row < 0 || step_ - c.step >= p_.interval || c.tail_row >= n))
            todo_.push_back(g);
    }
    // The summaries are updated here, on one thread: the store makes them
    // lazily (KvCache::k_summaries), and choose() only reads.
    if (!p_.exact)
        for (int64_t g : todo_) scratch_[static_cast<size_t>(g)].summary = kv.k_summaries(seq, layer, g);
    auto choose_todo = [&](int64_t i, int) {
        const int64_t g = todo_[static_cast<size_t>(i)];
        choose(layer, g, q, kv, seq, n_vis[g], choices_[static_cast<size_t>(layer * n_head_kv_ + g)],
               scratch_[static_cast<size_t>(g)]);
    };
    const int64_t n_todo = static_cast<int64_t>(todo_.size());
    if (pool && pool->n_threads() > 1 && n_todo > 1)
        pool->run(n_todo, choose_todo);
    else
        for (int64_t i = 0; i < n_todo; ++i) choose_todo(i, 0);
    stats_.n_selects += n_todo;
    rows_.clear();
    first_[0] = 0;
    bool any = false;
    for (int64_t g = 0; g < n_head_kv_; ++g) {
        const int64_t n = n_vis[g];
        Choice &c = choices_[static_cast<size_t>(layer * n_head_kv_ + g)];
        stats_.rows_seen += n;
        if (n <= p_.budget) {
            rows_.push_back(0);
            rows_.push_back(static_cast<int32_t>(n));
            first_[static_cast<size_t>(g + 1)] = first_[static_cast<size_t>(g)] + 1;
            stats_.rows_read += n;
            c = Choice();
            continue;
        }
        any = true;
        if (c.step != step_) ++stats_.n_reuses;
        const size_t s0 = rows_.size();
        for (int32_t u : c.units) {
            const int32_t b = static_cast<int32_t>(u * p_.page), e = static_cast<int32_t>((u + 1) * p_.page);
            if (rows_.size() > s0 && rows_.back() == b)
                rows_.back() = e;
            else {
                rows_.push_back(b);
                rows_.push_back(e);
            }
        }
        const int32_t tb = static_cast<int32_t>(c.tail_row), te = static_cast<int32_t>(n);
        if (rows_.size() > s0 && rows_.back() == tb)
            rows_.back() = te;
        else {
            rows_.push_back(tb);
            rows_.push_back(te);
        }
        int64_t read = 0;
        for (size_t i = s0; i < rows_.size(); i += 2) read += rows_[i + 1] - rows_[i];
        stats_.rows_read += read;
        first_[static_cast<size_t>(g + 1)] = first_[static_cast<size_t>(g)] + static_cast<int64_t>((rows_.size() - s0) / 2);
    }
    stats_.select_ns +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    if (!any) return nullptr;
    spans_.rows = rows_.data();
    spans_.first = first_.data();
    return &spans_;
}

std::unique_ptr<KvPolicyState> QuestPolicy::make_state(const KvShape &shape, int64_t n_head, int64_t max_rows) const {
    auto st = std::make_unique<KvPolicyState>();
    st->n_head = n_head;
    st->n_layer = shape.n_layer;
    st->max_rows = max_rows;
    st->selector = std::make_unique<QuestSelector>(p_, shape, n_head);
    return st;
}

void QuestPolicy::begin_prefill(KvPolicyState *state, int64_t n_total) const {
    if (state && state->selector) static_cast<QuestSelector *>(state->selector.get())->reset();
}

}  // namespace sieve
