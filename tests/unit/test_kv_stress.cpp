// Randomized stress test of the lane store against a shadow model: 100,000+
// grow / shrink / compact / share / write / clear / release / trim / cap /
// swap operations over several slots, layers and heads, with a pool small
// enough to run dry.
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
constexpr int64_t k_layer = 2, k_head = 2, k_dim = 6;  // 24-byte rows straddle 4 KiB pages
constexpr int64_t k_ctx = 400;
constexpr int k_ops = 100000;

struct Shadow {
    // [seq][layer][head][K|V] -> rows * k_dim floats
    std::vector<std::vector<float>> lanes = std::vector<std::vector<float>>(k_seq * k_layer * k_head * 2);
    std::vector<int64_t> n_tokens = std::vector<int64_t>(k_seq, 0);
    std::vector<float> &lane(int s, int64_t il, int64_t h, int kv) {
        return lanes[static_cast<size_t>(((s * k_layer + il) * k_head + h) * 2 + kv)];
    }
};

class Stress {
public:
    explicit Stress(uint32_t seed) : rng_(seed) {
        VAttentionKvOptions o;
        o.shape = KvShape{k_seq, k_layer, k_head, k_dim};
        o.max_ctx = k_ctx;
        o.pool.page_bytes = 4096;
        o.pool.budget_bytes = 40 * 4096;  // 32 lanes of up to 3 pages: often short
        o.headroom_pages = 1;
        auto r = VAttentionKv::create(o);
        SIEVE_CHECKF(r.ok(), "%s", r.status().message().c_str());
        kv_ = std::move(r.value());
    }

    float *lane_ptr(int s, int64_t il, int64_t h, int kv) { return kv ? kv_->v_lane(s, il, h) : kv_->k_lane(s, il, h); }
    float value() { return std::uniform_real_distribution<float>(-100.0f, 100.0f)(rng_) + 0.5f; }
    int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }

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
        for (int64_t il = 0; il < k_layer; ++il)
            for (int64_t h = 0; h < k_head; ++h)
                for (int kv = 0; kv < 2; ++kv) {
                    std::vector<float> &ref = sh_.lane(s, il, h, kv);
                    const int64_t rows = static_cast<int64_t>(ref.size()) / k_dim;
                    if (rows + (n1 - n0) > k_ctx) continue;  // compacted lanes past the end are not written
                    float *p = lane_ptr(s, il, h, kv);
                    for (int64_t i = rows * k_dim; i < (rows + n1 - n0) * k_dim; ++i) {
                        p[i] = value();
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
        for (int64_t il = 0; il < k_layer; ++il)
            for (int64_t h = 0; h < k_head; ++h)
                for (int kv = 0; kv < 2; ++kv) {
                    std::vector<float> &ref = sh_.lane(s, il, h, kv);
                    const int64_t rows = std::max<int64_t>(0, static_cast<int64_t>(ref.size()) / k_dim - delta);
                    ref.resize(static_cast<size_t>(rows * k_dim));
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
            for (int32_t r : keep) out.insert(out.end(), ref.begin() + r * k_dim, ref.begin() + (r + 1) * k_dim);
            ref = std::move(out);
        }
    }

    void share(int dst, int src) {
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
                    sh_.lane(dst, il, h, kv).assign(from.begin(), from.begin() + n * k_dim);
                }
        sh_.n_tokens[static_cast<size_t>(dst)] = n;
    }

    // Rewrites one random row of one lane (it may sit on a shared page).
    void write(int s) {
        const int64_t il = uniform(0, k_layer - 1), h = uniform(0, k_head - 1);
        const int kv = static_cast<int>(uniform(0, 1));
        std::vector<float> &ref = sh_.lane(s, il, h, kv);
        if (ref.empty()) return;
        const int64_t r = uniform(0, static_cast<int64_t>(ref.size()) / k_dim - 1);
        if (!kv_->prepare_write(s, r).ok()) {
            ++n_refused_;
            return;
        }
        float *p = lane_ptr(s, il, h, kv) + r * k_dim;
        for (int64_t c = 0; c < k_dim; ++c) ref[static_cast<size_t>(r * k_dim + c)] = p[c] = value();
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
        forget(s, true);
    }

    void forget(int s, bool now) {
        now ? kv_->release(s) : kv_->clear(s);
        sh_.n_tokens[static_cast<size_t>(s)] = 0;
        for (int64_t il = 0; il < k_layer; ++il)
            for (int64_t h = 0; h < k_head; ++h)
                for (int kv = 0; kv < 2; ++kv) sh_.lane(s, il, h, kv).clear();
    }

    void verify(int s) {
        ASSERT_EQ(kv_->n_pos(s), sh_.n_tokens[static_cast<size_t>(s)]);
        for (int64_t il = 0; il < k_layer; ++il)
            for (int64_t h = 0; h < k_head; ++h) {
                ASSERT_EQ(kv_->n_rows(s, il, h) * k_dim, static_cast<int64_t>(sh_.lane(s, il, h, 0).size()));
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
        int64_t counts[11] = {};
        for (op_ = 0; op_ < k_ops; ++op_) {
            const int s = static_cast<int>(uniform(0, k_seq - 1));
            const int kind = static_cast<int>(uniform(0, 99));
            int touched = s, also = -1;
            bool full = op_ % 64 == 0;
            if (kind < 30) {
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
        for (int64_t c : counts) EXPECT_GT(c, 1000);
        EXPECT_GT(n_refused_, 0) << "the pool never ran short: the test does not reach exhaustion";
        EXPECT_GT(kv_->stats().n_cow_pages, 0);
        EXPECT_GT(kv_->stats().n_reclaimed_pages, 0);
        EXPECT_GT(n_swapped_, 1000);
        for (int t = 0; t < k_seq; ++t) kv_->release(t);
        EXPECT_EQ(kv_->pool().n_free(), kv_->pool().n_pages());
        EXPECT_TRUE(kv_->check_accounting().ok());
    }

private:
    std::mt19937 rng_;
    std::unique_ptr<VAttentionKv> kv_;
    Shadow sh_;
    int64_t n_refused_ = 0;
    int64_t n_swapped_ = 0;
    int op_ = 0;
};

TEST(KvStress, RandomOperationsAgainstShadow) {
    Stress st(20240611u);
    ASSERT_NO_FATAL_FAILURE(st.run());
}

}  // namespace
}  // namespace sieve
