// Randomized stress test of the lane store against a shadow model: 100,000+
// grow / shrink / compact / share / write / clear / release / trim / cap /
// swap operations over several slots, layers and heads, with a pool small
// enough to run dry. A second run adds the prefix cache: slots publish their
// blocks and new slots map cached prefixes, with cache pages evicted under
// pressure. There every row's values are a function of the token prefix that
// leads to it (as a model's KV is), so a cached block mapped into another
// slot must show exactly the values that slot would have computed.
// After every operation the accounting is recounted from scratch and the
// touched slots' rows are compared with the shadow copy; every 64 operations
// (and after every write to a possibly shared page) all slots are compared,
// which proves a write through one lane never shows in another.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "sieve/kv/vattention_kv.h"

namespace sieve {
namespace {

constexpr int k_seq = 4;
constexpr int64_t k_layer = 2, k_head = 2;
constexpr int64_t k_ctx = 400;
constexpr int k_ops = 100000;
constexpr int k_docs = 3;  // token sequences slots follow, so prefixes repeat

struct Shadow {
    // [seq][layer][head][K|V] -> rows * dim floats
    std::vector<std::vector<float>> lanes = std::vector<std::vector<float>>(k_seq * k_layer * k_head * 2);
    std::vector<int64_t> n_tokens = std::vector<int64_t>(k_seq, 0);
    // Prefix mode: each slot's tokens, the hash of the prefix ending at each
    // row, and the document it still follows (-1: diverged).
    std::vector<std::vector<int32_t>> tokens = std::vector<std::vector<int32_t>>(k_seq);
    std::vector<std::vector<uint64_t>> row_hash = std::vector<std::vector<uint64_t>>(k_seq);
    std::vector<int> doc = std::vector<int>(k_seq, -1);
    std::vector<float> &lane(int s, int64_t il, int64_t h, int kv) {
        return lanes[static_cast<size_t>(((s * k_layer + il) * k_head + h) * 2 + kv)];
    }
};

class Stress {
public:
    // dim 6: 24-byte rows straddle 4 KiB pages. prefix_block > 0 (needs rows
    // that divide the page) turns the prefix cache on.
    Stress(uint32_t seed, int64_t dim, int64_t prefix_block) : rng_(seed), dim_(dim), prefix_(prefix_block > 0) {
        VAttentionKvOptions o;
        o.shape = KvShape{k_seq, k_layer, k_head, dim};
        o.max_ctx = k_ctx;
        o.pool.page_bytes = 4096;
        // Without the cache: 32 lanes of up to 3 pages, often short. With it:
        // room for about 1.75 full slots.
        const int64_t lane_pages = (k_ctx * dim * 4 + 4095) / 4096;
        o.pool.budget_bytes = (prefix_ ? k_layer * k_head * 2 * lane_pages * 7 / 4 : 40) * 4096;
        o.headroom_pages = 1;
        o.prefix_block_rows = prefix_block;
        auto r = VAttentionKv::create(o);
        SIEVE_CHECKF(r.ok(), "%s", r.status().message().c_str());
        kv_ = std::move(r.value());
        if (prefix_)
            for (auto &d : docs_)
                for (int64_t i = 0; i < k_ctx; ++i) d.push_back(static_cast<int32_t>(uniform(0, 999)));
    }

    float *lane_ptr(int s, int64_t il, int64_t h, int kv) { return kv ? kv_->v_lane(s, il, h) : kv_->k_lane(s, il, h); }
    float value() { return std::uniform_real_distribution<float>(-100.0f, 100.0f)(rng_) + 0.5f; }
    int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }

    // Prefix mode: the value of column c of the row that ends prefix hash h,
    // in lane (il, head, kv): a function of the tokens up to it, never 0.
    static float row_value(uint64_t h, int64_t il, int64_t head, int kv, int64_t c) {
        uint64_t x = h + static_cast<uint64_t>(((il * k_head + head) * 2 + kv) * 64 + c) * 0x9e3779b97f4a7c15ull;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        x ^= x >> 31;
        return static_cast<float>(static_cast<double>(x >> 40) / static_cast<double>(1ull << 24) * 200.0 - 100.0) + 0.5f;
    }
    // Appends one token to slot s's shadow token list (following its
    // document most of the time) and returns the new row's prefix hash.
    uint64_t push_token(int s) {
        std::vector<int32_t> &t = sh_.tokens[static_cast<size_t>(s)];
        int &d = sh_.doc[static_cast<size_t>(s)];
        if (d >= 0 && uniform(0, 99) < 3) d = -1;
        const int32_t tok = d >= 0 ? docs_[static_cast<size_t>(d)][t.size()] : static_cast<int32_t>(uniform(0, 999));
        std::vector<uint64_t> &rh = sh_.row_hash[static_cast<size_t>(s)];
        rh.push_back(PrefixCache::chain_hash(rh.empty() ? PrefixCache::k_seed : rh.back(), &tok, 1));
        t.push_back(tok);
        return rh.back();
    }
    bool dense(int s) const {
        for (int64_t il = 0; il < k_layer; ++il)
            for (int64_t h = 0; h < k_head; ++h)
                if (kv_->n_rows(s, il, h) != sh_.n_tokens[static_cast<size_t>(s)]) return false;
        return true;
    }

    // Appends rows to every lane of slot s through the KvCache contract.
    void grow(int s, int64_t add) {
        const int64_t n0 = sh_.n_tokens[static_cast<size_t>(s)], n1 = std::min(k_ctx, n0 + add);
        Status st = kv_->reserve(s, n1);
        if (!st.ok()) {
            ++n_refused_;
            SIEVE_CHECKF(st.message().find("exhausted") != std::string::npos ||
                             st.message().find("row cap") != std::string::npos,
                         "%s", st.message().c_str());
            return;
        }
        std::vector<uint64_t> hs;
        if (prefix_)
            for (int64_t i = n0; i < n1; ++i) hs.push_back(push_token(s));
        for (int64_t il = 0; il < k_layer; ++il)
            for (int64_t h = 0; h < k_head; ++h)
                for (int kv = 0; kv < 2; ++kv) {
                    std::vector<float> &ref = sh_.lane(s, il, h, kv);
                    const int64_t rows = static_cast<int64_t>(ref.size()) / dim_;
                    if (rows + (n1 - n0) > k_ctx) continue;  // compacted lanes past the end are not written
                    float *p = lane_ptr(s, il, h, kv);
                    for (int64_t i = rows * dim_; i < (rows + n1 - n0) * dim_; ++i) {
                        p[i] = prefix_ ? row_value(hs[static_cast<size_t>(i / dim_ - rows)], il, h, kv, i % dim_)
                                       : value();
                        ref.push_back(p[i]);
                    }
                }
        kv_->set_n_pos(s, n1);
        sh_.n_tokens[static_cast<size_t>(s)] = n1;
    }

    void shrink(int s, int64_t by) {
        const int64_t n1 = std::max<int64_t>(0, sh_.n_tokens[static_cast<size_t>(s)] - by);
        const int64_t delta = sh_.n_tokens[static_cast<size_t>(s)] - n1;
        kv_->set_n_pos(s, n1);
        sh_.n_tokens[static_cast<size_t>(s)] = n1;
        sh_.tokens[static_cast<size_t>(s)].resize(std::min(sh_.tokens[static_cast<size_t>(s)].size(), static_cast<size_t>(n1)));
        sh_.row_hash[static_cast<size_t>(s)].resize(sh_.tokens[static_cast<size_t>(s)].size());
        for (int64_t il = 0; il < k_layer; ++il)
            for (int64_t h = 0; h < k_head; ++h)
                for (int kv = 0; kv < 2; ++kv) {
                    std::vector<float> &ref = sh_.lane(s, il, h, kv);
                    const int64_t rows = std::max<int64_t>(0, static_cast<int64_t>(ref.size()) / dim_ - delta);
                    ref.resize(static_cast<size_t>(rows * dim_));
                }
    }

    void compact(int s) {
        const int64_t il = uniform(0, k_layer - 1), h = uniform(0, k_head - 1);
        const int64_t rows = kv_->n_rows(s, il, h);
        std::vector<int32_t> keep;
        const int64_t pct = uniform(0, 100);
        for (int32_t r = 0; r < rows; ++r)
            if (uniform(0, 99) < pct) keep.push_back(r);
        Status st = kv_->compact(s, il, h, keep.data(), static_cast<int64_t>(keep.size()));
        if (!st.ok()) {  // copy on write of a shared page may find the pool empty
            ++n_refused_;
            return;
        }
        for (int kv = 0; kv < 2; ++kv) {
            std::vector<float> &ref = sh_.lane(s, il, h, kv);
            std::vector<float> out;
            for (int32_t r : keep) out.insert(out.end(), ref.begin() + r * dim_, ref.begin() + (r + 1) * dim_);
            ref = std::move(out);
        }
    }

    void share(int dst, int src) {
        // Prefix mode: a compacted source would give dst rows that are not
        // the function of dst's tokens the cache relies on (the engine never
        // shares such lanes).
        if (prefix_ && !dense(src)) return;
        int64_t min_rows = k_ctx;
        for (int64_t il = 0; il < k_layer; ++il)
            for (int64_t h = 0; h < k_head; ++h) min_rows = std::min(min_rows, kv_->n_rows(src, il, h));
        const int64_t n = uniform(0, min_rows);
        Status st = kv_->share_prefix(dst, src, n);
        if (!st.ok()) {
            SIEVE_CHECKF(sh_.n_tokens[static_cast<size_t>(dst)] != 0, "share refused: %s", st.message().c_str());
            return;
        }
        for (int64_t il = 0; il < k_layer; ++il)
            for (int64_t h = 0; h < k_head; ++h)
                for (int kv = 0; kv < 2; ++kv) {
                    const std::vector<float> &from = sh_.lane(src, il, h, kv);
                    sh_.lane(dst, il, h, kv).assign(from.begin(), from.begin() + n * dim_);
                }
        sh_.n_tokens[static_cast<size_t>(dst)] = n;
        copy_tokens(dst, src, n);
    }

    void copy_tokens(int dst, int src, int64_t n) {
        const size_t d = static_cast<size_t>(dst), s = static_cast<size_t>(src), m = static_cast<size_t>(n);
        sh_.tokens[d].assign(sh_.tokens[s].begin(), sh_.tokens[s].begin() + std::min(m, sh_.tokens[s].size()));
        sh_.row_hash[d].assign(sh_.row_hash[s].begin(), sh_.row_hash[s].begin() + static_cast<long>(sh_.tokens[d].size()));
        sh_.doc[d] = sh_.doc[s];
    }

    // Prefix mode: the token at a random row changes, so every row from it on
    // is rewritten in every lane (a real divergence, through copy on write:
    // the cache keeps the old values under the old tokens).
    void diverge(int s) {
        const int64_t n = sh_.n_tokens[static_cast<size_t>(s)];
        if (n == 0 || !dense(s)) return;
        const int64_t r = uniform(0, n - 1);
        if (!kv_->prepare_write(s, r).ok()) {
            ++n_refused_;
            return;
        }
        std::vector<int32_t> &t = sh_.tokens[static_cast<size_t>(s)];
        std::vector<uint64_t> &rh = sh_.row_hash[static_cast<size_t>(s)];
        t[static_cast<size_t>(r)] = static_cast<int32_t>(uniform(1000, 1999));
        for (int64_t i = r; i < n; ++i)
            rh[static_cast<size_t>(i)] = PrefixCache::chain_hash(i == 0 ? PrefixCache::k_seed : rh[static_cast<size_t>(i - 1)],
                                                                  &t[static_cast<size_t>(i)], 1);
        sh_.doc[static_cast<size_t>(s)] = -1;
        for (int64_t il = 0; il < k_layer; ++il)
            for (int64_t h = 0; h < k_head; ++h)
                for (int kv = 0; kv < 2; ++kv) {
                    std::vector<float> &ref = sh_.lane(s, il, h, kv);
                    float *p = lane_ptr(s, il, h, kv);
                    for (int64_t i = r * dim_; i < n * dim_; ++i)
                        ref[static_cast<size_t>(i)] = p[i] = row_value(rh[static_cast<size_t>(i / dim_)], il, h, kv, i % dim_);
                }
    }

    // Offers slot s to the prefix cache.
    void publish(int s) {
        const std::vector<int32_t> &t = sh_.tokens[static_cast<size_t>(s)];
        kv_->prefix_publish(s, t.data(), static_cast<int64_t>(t.size()), uniform(0, 1) == 0, 0);
    }

    // Releases slot s and starts it again on a document prefix (or another
    // slot's tokens) through the prefix cache: the mapped rows must be what
    // the slot would have computed, and the pages taken what lookup said.
    void attach(int s) {
        forget(s, true);
        std::vector<int32_t> toks;
        const int other = static_cast<int>(uniform(0, k_seq - 1));
        if (uniform(0, 2) == 0 && other != s && !sh_.tokens[static_cast<size_t>(other)].empty()) {
            toks = sh_.tokens[static_cast<size_t>(other)];
        } else {
            const std::vector<int32_t> &d = docs_[static_cast<size_t>(uniform(0, k_docs - 1))];
            toks.assign(d.begin(), d.begin() + uniform(1, k_ctx));
        }
        const int64_t n = static_cast<int64_t>(toks.size());
        const int64_t free0 = kv_->n_free_pages();
        const PrefixHit hit = kv_->prefix_lookup(toks.data(), n, uniform(0, n), 0);
        if (hit.rows == 0) return;
        ASSERT_TRUE(kv_->prefix_attach(s, toks.data(), hit.rows, 0).ok());
        ++n_attached_;
        ASSERT_EQ(kv_->n_free_pages(), free0 - hit.pages_taken - hit.pages_copied);
        n_gathered_ += hit.pages_copied;
        // Growing to n maps the rest and copies the page the hit ends inside.
        if (n > hit.rows) {
            ASSERT_EQ(kv_->pages_to_reserve(s, n), hit.pages_new - hit.pages_copied);
        }
        std::vector<int32_t> &t = sh_.tokens[static_cast<size_t>(s)];
        std::vector<uint64_t> &rh = sh_.row_hash[static_cast<size_t>(s)];
        t.assign(toks.begin(), toks.begin() + hit.rows);
        for (int64_t i = 0; i < hit.rows; ++i)
            rh.push_back(PrefixCache::chain_hash(i == 0 ? PrefixCache::k_seed : rh.back(), &t[static_cast<size_t>(i)], 1));
        sh_.doc[static_cast<size_t>(s)] = -1;
        sh_.n_tokens[static_cast<size_t>(s)] = hit.rows;
        for (int64_t il = 0; il < k_layer; ++il)
            for (int64_t h = 0; h < k_head; ++h)
                for (int kv = 0; kv < 2; ++kv) {
                    std::vector<float> &ref = sh_.lane(s, il, h, kv);
                    for (int64_t i = 0; i < hit.rows * dim_; ++i)
                        ref.push_back(row_value(rh[static_cast<size_t>(i / dim_)], il, h, kv, i % dim_));
                }
    }

    // Rewrites one random row of one lane (it may sit on a shared page).
    void write(int s) {
        const int64_t il = uniform(0, k_layer - 1), h = uniform(0, k_head - 1);
        const int kv = static_cast<int>(uniform(0, 1));
        std::vector<float> &ref = sh_.lane(s, il, h, kv);
        if (ref.empty()) return;
        const int64_t r = uniform(0, static_cast<int64_t>(ref.size()) / dim_ - 1);
        if (!kv_->prepare_write(s, r).ok()) {
            ++n_refused_;
            return;
        }
        float *p = lane_ptr(s, il, h, kv) + r * dim_;
        for (int64_t c = 0; c < dim_; ++c) ref[static_cast<size_t>(r * dim_ + c)] = p[c] = value();
    }

    // Caps a random lane at a random row count >= its rows, or lifts its cap.
    void cap(int s) {
        const int64_t il = uniform(0, k_layer - 1), h = uniform(0, k_head - 1);
        const int64_t rows = kv_->n_rows(s, il, h);
        kv_->set_lane_cap(s, il, h, uniform(0, 2) == 0 ? 0 : uniform(std::max<int64_t>(rows, 1), k_ctx));
    }

    // Swaps slot s out to host memory, releases it, and maps the image into a
    // random empty slot (maybe s again). When the pool cannot take it back the
    // sequence is gone, as a failed resume would recompute it.
    void swap(int s) {
        if (sh_.n_tokens[static_cast<size_t>(s)] == 0) return;
        KvSwapImage img;
        ASSERT_TRUE(kv_->swap_out(s, &img).ok());
        ASSERT_EQ(img.n_bytes(), kv_->swap_bytes(s));
        kv_->release(s);
        std::vector<int> empty;
        for (int t = 0; t < k_seq; ++t)
            if (t == s || sh_.n_tokens[static_cast<size_t>(t)] == 0) empty.push_back(t);
        const int dst = empty[static_cast<size_t>(uniform(0, static_cast<int64_t>(empty.size()) - 1))];
        if (dst != s) forget(dst, true);
        const int64_t need = kv_->swap_pages(img);
        Status st = kv_->swap_in(dst, img);
        if (!st.ok()) {
            ++n_refused_;
            ASSERT_GT(need, kv_->pool().n_free()) << st.message();
            forget(s, true);
            forget(dst, true);
            return;
        }
        ++n_swapped_;
        if (dst == s) return;
        for (int64_t il = 0; il < k_layer; ++il)
            for (int64_t h = 0; h < k_head; ++h)
                for (int kv = 0; kv < 2; ++kv) sh_.lane(dst, il, h, kv) = std::move(sh_.lane(s, il, h, kv));
        sh_.n_tokens[static_cast<size_t>(dst)] = sh_.n_tokens[static_cast<size_t>(s)];
        copy_tokens(dst, s, sh_.n_tokens[static_cast<size_t>(s)]);
        forget(s, true);
    }

    void forget(int s, bool now) {
        now ? kv_->release(s) : kv_->clear(s);
        sh_.n_tokens[static_cast<size_t>(s)] = 0;
        sh_.tokens[static_cast<size_t>(s)].clear();
        sh_.row_hash[static_cast<size_t>(s)].clear();
        if (prefix_) sh_.doc[static_cast<size_t>(s)] = static_cast<int>(uniform(0, k_docs - 1));
        for (int64_t il = 0; il < k_layer; ++il)
            for (int64_t h = 0; h < k_head; ++h)
                for (int kv = 0; kv < 2; ++kv) sh_.lane(s, il, h, kv).clear();
    }

    void verify(int s) {
        ASSERT_EQ(kv_->n_pos(s), sh_.n_tokens[static_cast<size_t>(s)]);
        for (int64_t il = 0; il < k_layer; ++il)
            for (int64_t h = 0; h < k_head; ++h) {
                ASSERT_EQ(kv_->n_rows(s, il, h) * dim_, static_cast<int64_t>(sh_.lane(s, il, h, 0).size()));
                for (int kv = 0; kv < 2; ++kv) {
                    const std::vector<float> &ref = sh_.lane(s, il, h, kv);
                    if (ref.empty()) continue;
                    ASSERT_EQ(std::memcmp(lane_ptr(s, il, h, kv), ref.data(), ref.size() * sizeof(float)), 0)
                        << "slot " << s << " layer " << il << " head " << h << (kv ? " V" : " K") << " after op "
                        << op_;
                }
            }
    }

    void run() {
        int64_t counts[13] = {};
        for (op_ = 0; op_ < k_ops; ++op_) {
            const int s = static_cast<int>(uniform(0, k_seq - 1));
            int kind = static_cast<int>(uniform(0, 99));
            int touched = s, also = -1;
            bool full = op_ % 64 == 0;
            // Prefix mode: writes are divergences (rows follow tokens), and a
            // fifth of the operations publish or attach.
            if (prefix_ && kind >= 48 && kind < 54) kind = 62;  // fewer compactions: more dense slots
            if (prefix_ && kind >= 62 && kind < 78) {
                const int sub = static_cast<int>(uniform(0, 15));
                if (sub < 4) {
                    diverge(s), full = true, ++counts[4];
                } else if (sub < 10) {
                    publish(s), ++counts[11];
                } else {
                    ASSERT_NO_FATAL_FAILURE(attach(s));
                    full = true;
                    ++counts[12];
                }
                kind = -1;
            }
            if (kind < 0) {
            } else if (kind < 30) {
                grow(s, uniform(1, 40)), ++counts[0];
            } else if (kind < 42) {
                shrink(s, uniform(1, 60)), ++counts[1];
            } else if (kind < 54) {
                compact(s), ++counts[2];
            } else if (kind < 62) {
                const int src = static_cast<int>(uniform(0, k_seq - 1));
                if (src != s && sh_.n_tokens[static_cast<size_t>(s)] != 0 && uniform(0, 1)) forget(s, false);
                if (src != s) share(s, src), also = src, ++counts[3];
            } else if (kind < 78) {
                write(s), full = true, ++counts[4];
            } else if (kind < 86) {
                forget(s, false), ++counts[5];
            } else if (kind < 89) {
                forget(s, true), ++counts[6];
            } else if (kind < 91) {
                kv_->trim(), ++counts[7];
            } else if (kind < 94) {
                cap(s), ++counts[9];
            } else if (kind < 97) {
                ASSERT_NO_FATAL_FAILURE(swap(s));
                full = true;
                ++counts[10];
            } else {
                ASSERT_TRUE(kv_->map_ahead(s).ok());
                ++counts[8];
            }
            Status acc = kv_->check_accounting();
            ASSERT_TRUE(acc.ok()) << acc.message() << " after op " << op_;
            if (full) {
                for (int t = 0; t < k_seq; ++t) ASSERT_NO_FATAL_FAILURE(verify(t));
            } else {
                ASSERT_NO_FATAL_FAILURE(verify(touched));
                if (also >= 0) {
                    ASSERT_NO_FATAL_FAILURE(verify(also));
                }
            }
        }
        for (int i = 0; i < 13; ++i) {
            if (i < 11 || prefix_) {
                EXPECT_GT(counts[i], prefix_ ? 500 : 1000) << "operation kind " << i;
            }
        }
        EXPECT_GT(n_refused_, 0) << "the pool never ran short: the test does not reach exhaustion";
        EXPECT_GT(kv_->stats().n_cow_pages, 0);
        EXPECT_GT(kv_->stats().n_reclaimed_pages, 0);
        EXPECT_GT(n_swapped_, 1000);
        for (int t = 0; t < k_seq; ++t) kv_->release(t);
        EXPECT_TRUE(kv_->check_accounting().ok());
        if (prefix_) {
            const PrefixCacheStats ps = kv_->prefix_stats();
            EXPECT_GT(n_attached_, 500) << "prefix hits mapped";
            if (ps.block_rows < 4096 / (dim_ * 4)) {
                EXPECT_GT(n_gathered_, 0) << "no attach ever gathered a page from blocks of several copies";
            }
            EXPECT_GT(ps.n_blocks_evicted, 0) << "the cache was never evicted under pressure";
            // Idle: every page is free or only cached, and counted free.
            EXPECT_EQ(kv_->n_free_pages(), kv_->pool().n_pages());
            EXPECT_EQ(ps.n_pages_only, ps.n_pages_held);
            kv_->prefix_clear();
        }
        EXPECT_EQ(kv_->pool().n_free(), kv_->pool().n_pages());
        EXPECT_TRUE(kv_->check_accounting().ok());
    }

private:
    std::mt19937 rng_;
    int64_t dim_;
    bool prefix_;
    std::vector<std::vector<int32_t>> docs_ = std::vector<std::vector<int32_t>>(k_docs);
    std::unique_ptr<VAttentionKv> kv_;
    Shadow sh_;
    int64_t n_attached_ = 0;
    int64_t n_gathered_ = 0;  // pages an attach assembled from blocks of several cached pages
    int64_t n_refused_ = 0;
    int64_t n_swapped_ = 0;
    int op_ = 0;
};

TEST(KvStress, RandomOperationsAgainstShadow) {
    Stress st(20240611u, 6, 0);
    ASSERT_NO_FATAL_FAILURE(st.run());
}

// 8-float rows, 128 a page: blocks of 16 rows share pages. 32-float rows,
// 32 a page: blocks of 64 rows span two pages of a lane.
TEST(KvStress, PrefixCacheAgainstShadow) {
    for (const auto &[dim, block] : {std::pair<int64_t, int64_t>{8, 16}, {32, 64}}) {
        SCOPED_TRACE("dim " + std::to_string(dim) + ", prefix block " + std::to_string(block));
        Stress st(20261202u + static_cast<uint32_t>(block), dim, block);
        ASSERT_NO_FATAL_FAILURE(st.run());
    }
}

}  // namespace
}  // namespace sieve
