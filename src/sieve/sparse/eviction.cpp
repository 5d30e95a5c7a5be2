#include "sieve/sparse/eviction.h"

#include <algorithm>
#include <cmath>

namespace sieve {

EvictionPolicy::EvictionPolicy(EvictionKind kind, const EvictionParams &p, std::string label)
    : kind_(kind), p_(p), label_(std::move(label)) {}

// Rows per lane before clamping to what the lane holds.
int64_t EvictionPolicy::layer_budget(int64_t n, int64_t layer, int64_t n_layer) const {
    if (layer < p_.full_layers) return n;
    int64_t b = p_.budget >= 0 ? p_.budget : static_cast<int64_t>(std::floor(p_.keep * static_cast<double>(n)));
    if (kind_ == EvictionKind::streaming && p_.recent >= 0 && p_.budget < 0) b = p_.sink + p_.recent;
    b = std::max<int64_t>(b, 1);
    if (kind_ == EvictionKind::pyramidkv) {
        // PyramidKV leaves a prompt within the mean budget uncompressed.
        if (b >= n) return n;
        const int64_t l = layer - p_.full_layers, nl = n_layer - p_.full_layers;
        b = std::max<int64_t>(1, sparse::pyramid_budget(b, std::min(p_.window, b), p_.beta, l, nl));
    }
    return b;
}

int64_t EvictionPolicy::kept_rows(int64_t n_prompt, int64_t layer, int64_t n_layer) const {
    return std::min(n_prompt, layer_budget(n_prompt, layer, n_layer));
}

bool EvictionPolicy::acts_after_decode() const {
    return kind_ == EvictionKind::streaming || kind_ == EvictionKind::h2o;
}

int64_t EvictionPolicy::decode_rows(int64_t n_prompt, int64_t n_gen, int64_t layer, int64_t n_layer) const {
    const int64_t kept = kept_rows(n_prompt, layer, n_layer);
    if (!acts_after_decode() || layer < p_.full_layers) return kept + n_gen;
    // A lane reaching budget + k_slide + 1 rows is evicted back to the budget
    // after that step (the last step of a request is not).
    return std::min(kept + n_gen, std::max(kept, layer_budget(n_prompt, layer, n_layer) + k_slide + 1));
}

std::unique_ptr<KvPolicyState> EvictionPolicy::make_state(const KvShape &shape, int64_t n_head,
                                                          int64_t max_rows) const {
    if (!uses_scores()) return nullptr;
    auto st = std::make_unique<KvPolicyState>();
    st->n_head = n_head;
    st->n_layer = shape.n_layer;
    st->max_rows = max_rows;
    return st;
}

int64_t EvictionPolicy::reusable_prefix(int64_t n_total) const {
    if (kind_ == EvictionKind::h2o) return 0;  // every prompt query's attention is accumulated
    if (!uses_scores()) return n_total;
    return std::max<int64_t>(0, n_total - p_.window);  // the observation window is computed
}

void EvictionPolicy::begin_prefill(KvPolicyState *st, int64_t n_total) const {
    if (!st) return;
    if (kind_ == EvictionKind::h2o) {
        // Every query's attention, over prefill and decode: rows up to the most a lane holds.
        st->sink.cap = std::max(st->max_rows, n_total);
        st->sink.from_pos = 0;
    } else {
        // The observation window: the last `window` queries of the prefill.
        st->sink.cap = n_total;
        st->sink.from_pos = std::max<int64_t>(0, n_total - p_.window);
    }
    st->acc.assign(static_cast<size_t>(st->n_layer * st->n_head * st->sink.cap), 0.0f);
    st->sink.acc = st->acc.data();
    st->scoring = true;
}

Status EvictionPolicy::evict_layer(const PolicyContext &ctx, int64_t layer, int64_t budget) const {
    KvCache &kv = *ctx.kv;
    const int64_t n_kv = kv.shape().n_head_kv, group = ctx.n_head / n_kv;
    KvPolicyState *st = ctx.state;
    std::vector<std::vector<int32_t>> lists(static_cast<size_t>(n_kv));
    std::vector<float> score, pooled, tmp;
    std::vector<const float *> heads(static_cast<size_t>(group));
    for (int64_t g = 0; g < n_kv; ++g) {
        const int64_t r = kv.n_rows(ctx.slot, layer, g);
        std::vector<int32_t> &list = lists[static_cast<size_t>(g)];
        const int64_t b = std::min(budget, r);
        if (kind_ == EvictionKind::streaming) {
            const int64_t sink = std::min(p_.sink, b);
            list = sparse::keep_rows(nullptr, r, b, sink, b - sink);
            continue;
        }
        if (!st || st->sink.cap < r)
            return Status::errorf("%s: no attention scores for %lld rows of layer %lld", label_.c_str(),
                                  static_cast<long long>(r), static_cast<long long>(layer));
        score.assign(static_cast<size_t>(r), 0.0f);
        if (kind_ == EvictionKind::h2o) {
            for (int64_t h = 0; h < group; ++h) heads[static_cast<size_t>(h)] = st->head_acc(layer, g * group + h);
            sparse::group_scores(heads.data(), group, r, p_.agg, score.data());
            const int64_t recent = p_.recent >= 0 ? std::min(p_.recent, b) : b / 2;
            list = sparse::keep_rows(score.data(), r, b, 0, recent);
        } else {
            // SnapKV: per query head, pool the scores of the keys before the
            // window, then combine the group (kvpress's order); the window is kept.
            const int64_t win = std::min(p_.window, r), n_cand = r - win;
            pooled.resize(static_cast<size_t>(group * std::max<int64_t>(n_cand, 1)));
            for (int64_t h = 0; h < group; ++h) {
                float *dst = pooled.data() + h * std::max<int64_t>(n_cand, 1);
                const auto pool_fn = p_.pooling == sparse::Pooling::avg ? sparse::avg_pool : sparse::max_pool;
                if (n_cand > 0) pool_fn(st->head_acc(layer, g * group + h), n_cand, p_.pool, dst);
                heads[static_cast<size_t>(h)] = dst;
            }
            if (n_cand > 0) sparse::group_scores(heads.data(), group, n_cand, p_.agg, score.data());
            list = sparse::keep_rows(score.data(), r, b, 0, std::min(win, b));
        }
    }
    std::vector<const int32_t *> ptrs;
    std::vector<int64_t> counts;
    for (const auto &l : lists) {
        ptrs.push_back(l.data());
        counts.push_back(static_cast<int64_t>(l.size()));
    }
    SIEVE_TRY(kv.compact_layer(ctx.slot, layer, ptrs.data(), counts.data()));
    // H2O keeps scoring the kept rows: move their sums with them.
    if (kind_ == EvictionKind::h2o) {
        for (int64_t g = 0; g < n_kv; ++g) {
            const std::vector<int32_t> &list = lists[static_cast<size_t>(g)];
            for (int64_t h = g * group; h < (g + 1) * group; ++h) {
                float *a = st->head_acc(layer, h);
                for (size_t i = 0; i < list.size(); ++i) a[i] = a[list[i]];  // list ascending: in place
                std::fill(a + list.size(), a + st->sink.cap, 0.0f);
            }
        }
    }
    return Status();
}

Status EvictionPolicy::after_prefill(const PolicyContext &ctx) const {
    const KvShape &shape = ctx.kv->shape();
    for (int64_t l = 0; l < shape.n_layer; ++l) {
        const int64_t b = kept_rows(ctx.n_prompt, l, shape.n_layer);
        bool over = false;
        for (int64_t g = 0; g < shape.n_head_kv; ++g) over = over || ctx.kv->n_rows(ctx.slot, l, g) > b;
        if (over) SIEVE_TRY(evict_layer(ctx, l, b));
    }
    // SnapKV's family scores once; H2O keeps adding every decode query.
    if (ctx.state && kind_ != EvictionKind::h2o) {
        ctx.state->scoring = false;
        ctx.state->acc.clear();
        ctx.state->acc.shrink_to_fit();
        ctx.state->sink.acc = nullptr;
        ctx.state->sink.cap = 0;
    }
    return Status();
}

Status EvictionPolicy::after_decode(const PolicyContext &ctx) const {
    if (!acts_after_decode()) return Status();
    const KvShape &shape = ctx.kv->shape();
    for (int64_t l = p_.full_layers; l < shape.n_layer; ++l) {
        const int64_t b = layer_budget(ctx.n_prompt, l, shape.n_layer);
        bool over = false;
        for (int64_t g = 0; g < shape.n_head_kv; ++g) over = over || ctx.kv->n_rows(ctx.slot, l, g) > b + k_slide;
        if (over) SIEVE_TRY(evict_layer(ctx, l, b));
    }
    return Status();
}

}  // namespace sieve
