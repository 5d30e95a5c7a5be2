#include "sieve/sparse/lserve.h"

#include <algorithm>
#include <numeric>

#include "sieve/sparse/select.h"

namespace sieve {

LServePolicy::LServePolicy(const LServeParams &p, HeadProfile profile, std::string label)
    : p_(p), profile_(std::move(profile)), label_(std::move(label)) {
    const std::vector<char> st = head_profile_streaming(profile_, p_.static_frac);
    streaming_.assign(st.begin(), st.end());
    mask_.streaming = streaming_.data();
    mask_.sink = p_.sink;
    mask_.recent = p_.recent;
    // Two policies with the same streaming heads, sink and window prefill the
    // same KV: they share a namespace (FNV-1a over the three).
    uint64_t h = 0xcbf29ce484222325ull;
    const auto add = [&](uint64_t x) {
        for (int i = 0; i < 8; ++i, x >>= 8) h = (h ^ (x & 0xff)) * 0x100000001b3ull;
    };
    for (uint8_t x : streaming_) add(x);
    add(static_cast<uint64_t>(p_.sink));
    add(static_cast<uint64_t>(p_.recent));
    namespace_ = h | 1;  // never 0 (the dense namespace)
}

int64_t LServePolicy::n_streaming() const {
    return static_cast<int64_t>(std::count(streaming_.begin(), streaming_.end(), uint8_t{1}));
}

Status LServePolicy::check_model(const KvShape &shape, int64_t n_head) const {
    if (shape.n_layer != profile_.n_layer || shape.n_head_kv != profile_.n_head_kv)
        return Status::errorf("%s: the head profile '%s' is for %lld layers x %lld KV heads, the model has %lld x "
                              "%lld; make one for this model with `sieve calibrate`",
                              label_.c_str(), p_.profile_path.c_str(), static_cast<long long>(profile_.n_layer),
                              static_cast<long long>(profile_.n_head_kv), static_cast<long long>(shape.n_layer),
                              static_cast<long long>(shape.n_head_kv));
    return Status();
}

bool LServePolicy::layer_all_streaming(int64_t layer) const {
    for (int64_t g = 0; g < profile_.n_head_kv; ++g)
        if (!streaming(layer, g)) return false;
    return true;
}

std::unique_ptr<KvPolicyState> LServePolicy::make_state(const KvShape &shape, int64_t n_head, int64_t max_rows) const {
    auto st = std::make_unique<KvPolicyState>();
    st->n_head = n_head;
    st->n_layer = shape.n_layer;
    st->max_rows = max_rows;
    st->selector = std::make_unique<QuestSelector>(p_.quest, shape, n_head);
    return st;
}

void LServePolicy::begin_prefill(KvPolicyState *state, int64_t n_total) const {
    if (state && state->selector) static_cast<QuestSelector *>(state->selector.get())->reset();
}

Status LServePolicy::slide_layer(const PolicyContext &ctx, int64_t layer, int64_t limit) const {
    KvCache &kv = *ctx.kv;
    const int64_t n_kv = kv.shape().n_head_kv, keep = p_.sink + p_.recent;
    bool any = false;
    for (int64_t g = 0; g < n_kv; ++g) any = any || (streaming(layer, g) && kv.n_rows(ctx.slot, layer, g) > limit);
    if (!any) return Status();
    std::vector<std::vector<int32_t>> lists(static_cast<size_t>(n_kv));
    std::vector<const int32_t *> ptrs(static_cast<size_t>(n_kv));
    std::vector<int64_t> counts(static_cast<size_t>(n_kv));
    for (int64_t g = 0; g < n_kv; ++g) {
        const int64_t r = kv.n_rows(ctx.slot, layer, g);
        std::vector<int32_t> &l = lists[static_cast<size_t>(g)];
        if (streaming(layer, g) && r > limit) {
            l = sparse::keep_rows(nullptr, r, keep, std::min(p_.sink, keep), p_.recent);
        } else {
            l.resize(static_cast<size_t>(r));
            std::iota(l.begin(), l.end(), 0);  // kept whole: nothing moves
        }
        ptrs[static_cast<size_t>(g)] = l.data();
        counts[static_cast<size_t>(g)] = static_cast<int64_t>(l.size());
    }
    return kv.compact_layer(ctx.slot, layer, ptrs.data(), counts.data());
}

Status LServePolicy::after_prefill(const PolicyContext &ctx) const {
    for (int64_t l = 0; l < ctx.kv->shape().n_layer; ++l) SIEVE_TRY(slide_layer(ctx, l, p_.sink + p_.recent));
    return Status();
}

Status LServePolicy::after_decode(const PolicyContext &ctx) const {
    for (int64_t l = 0; l < ctx.kv->shape().n_layer; ++l)
        SIEVE_TRY(slide_layer(ctx, l, p_.sink + p_.recent + k_slide));
    return Status();
}

// Per layer the API counts one row count for every lane: the layer's
// largest (a dense head's) unless every head of the layer streams.
int64_t LServePolicy::kept_rows(int64_t n_prompt, int64_t layer, int64_t n_layer) const {
    if (layer < profile_.n_layer && layer_all_streaming(layer)) return std::min(n_prompt, p_.sink + p_.recent);
    return n_prompt;
}

int64_t LServePolicy::decode_rows(int64_t n_prompt, int64_t n_gen, int64_t layer, int64_t n_layer) const {
    if (layer < profile_.n_layer && layer_all_streaming(layer))
        return std::min(n_prompt + n_gen, p_.sink + p_.recent + k_slide + 1);
    return n_prompt + n_gen;
}

}  // namespace sieve
