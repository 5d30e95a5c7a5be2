// VAttentionKv's prefix cache: which page sizes let prompt blocks be
// shared, looking up and attaching a cached prefix (pages mapped into the
// new sequence's lanes, or copied where a page is shared with rows past
// the hit), and publishing a finished prompt's blocks. The lanes, pages and
// accounting these build on are in vattention_kv.cpp.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <numeric>
#include <string>
#include <vector>

#include "sieve/kv/vattention_kv.h"

namespace sieve {
// ---------------------------------------------------------------------------
// Prefix cache
// ---------------------------------------------------------------------------

std::string VAttentionKv::prefix_block_check(const KvShape &shape, int64_t page_bytes, int64_t block_rows) {
    if (block_rows < 1)
        return strfmt("a block of %lld rows; expected >= 1", static_cast<long long>(block_rows));
    int64_t ppb[2] = {0, 0};
    for (int kv = 0; kv < 2; ++kv) {
        const int64_t rb = shape.row_bytes(kv);
        if (rb < 1 || page_bytes % rb != 0)
            return strfmt(
                "%s rows of %lld bytes do not divide %lld-byte pages, so blocks would straddle pages",
                kv ? "V" : "K", static_cast<long long>(rb), static_cast<long long>(page_bytes));
        const int64_t rpp = page_bytes / rb;
        if (rpp % block_rows != 0 && block_rows % rpp != 0)
            return strfmt(
                "blocks of %lld rows neither divide nor are a multiple of the %lld %s rows of a page",
                static_cast<long long>(block_rows), static_cast<long long>(rpp), kv ? "V" : "K");
        ppb[kv] = std::max<int64_t>(1, block_rows / rpp);
    }
    // A cached block holds the same number of pages in every lane.
    if (ppb[0] != ppb[1])
        return strfmt("blocks of %lld rows span %lld K pages but %lld V pages; use smaller blocks",
                      static_cast<long long>(block_rows), static_cast<long long>(ppb[0]),
                      static_cast<long long>(ppb[1]));
    return std::string();
}

namespace {

// The smallest multiple of lcm(row bytes..., 4 KiB) from 64 KiB up, or 0
// when that lcm exceeds 2 MiB.
int64_t whole_rows_page(std::initializer_list<int64_t> row_bytes) {
    int64_t lcm = 4096;
    for (int64_t rb : row_bytes) {
        if (rb < 1) return 0;
        lcm = lcm / std::gcd(lcm, rb) * rb;
        if (lcm > (int64_t{2} << 20)) return 0;
    }
    return (VAttentionKv::k_default_page_bytes + lcm - 1) / lcm * lcm;
}

}  // namespace

int64_t VAttentionKv::prefix_page_bytes(const KvShape &shape) {
    return whole_rows_page({shape.k_row_bytes(), shape.v_row_bytes()});
}

int64_t VAttentionKv::page_bytes_for(const KvShape &shape, int64_t requested) {
    if (requested > 0) return requested;
    const int64_t both = prefix_page_bytes(shape);
    if (both > 0 && (shape.k_row_bytes() == shape.v_row_bytes() || both <= k_max_mixed_page_bytes))
        return both;
    // K and V rows whose common page is coarse (q8_0 with q4_0: 612 KiB, the
    // least a lane maps however short): pages of whole K rows; V rows straddle
    // them and the prefix cache is off unless prefix_page_bytes() is asked for.
    const int64_t k_only = whole_rows_page({shape.k_row_bytes()});
    return k_only > 0 ? k_only : k_default_page_bytes;
}

bool VAttentionKv::slot_dense(int seq) const {
    const int64_t lanes_per_seq = shape_.n_layer * shape_.n_head_kv * 2;
    const int64_t n = n_pos_[static_cast<size_t>(seq)];
    for (int64_t i = 0; i < lanes_per_seq; ++i)
        if (lanes_[static_cast<size_t>(seq * lanes_per_seq + i)].rows != n) return false;
    return true;
}

// The source of lane page j of a hit of nb blocks, for lane i: the pool page
// to map, or -1 when the page's blocks come from different pool pages (blocks
// of one page can be published by different sequences, each from its own
// copy) and must be gathered into a fresh page.
int32_t VAttentionKv::prefix_page_source(const std::vector<const int32_t *> &chain, int64_t nb, int64_t lane,
                                         int64_t j) const {
    const int64_t ppb = prefix_->pages_per_block();
    if (ppb > 1) return chain[static_cast<size_t>(j / ppb)][lane * ppb + j % ppb];  // whole pages per block
    const int64_t per_page = rows_per_page(kind(lane)) / prefix_->block_rows();
    const int64_t k0 = j * per_page, k1 = std::min(nb, k0 + per_page);
    const int32_t lead = chain[static_cast<size_t>(k0)][lane];
    for (int64_t k = k0 + 1; k < k1; ++k)
        if (chain[static_cast<size_t>(k)][lane] != lead) return -1;
    return lead;
}

PrefixHit VAttentionKv::prefix_lookup(const int32_t *tokens, int64_t n_tokens, int64_t n_max, uint64_t ns) {
    PrefixHit hit;
    const int64_t lanes_per_seq = shape_.n_layer * shape_.n_head_kv * 2;
    hit.pages_new = seq_pages_for_rows(n_tokens);
    if (!prefix_) return hit;
    const int64_t b = prefix_->block_rows();
    static thread_local std::vector<const int32_t *> chain;
    const int64_t nb =
        prefix_->match(tokens, std::max<int64_t>(0, std::min(n_max, n_tokens)) / b, &chain, false, ns);
    hit.rows = nb * b;
    if (nb == 0) return hit;
    // A page mapped from the cache costs nothing new when the hit covers it
    // whole; the page the hit ends inside is copied at the first write, and
    // a gathered page is a fresh one: both count as new. Mapped cache-only
    // pages stop counting as free.
    for (int64_t i = 0; i < lanes_per_seq; ++i) {
        const int64_t whole = hit.rows / rows_per_page(kind(i)), n_pages = pages_for_rows(hit.rows, kind(i));
        for (int64_t j = 0; j < n_pages; ++j) {
            const int32_t src = prefix_page_source(chain, nb, i, j);
            if (src < 0) {
                ++hit.pages_copied;
                continue;
            }
            hit.pages_new -= j < whole;
            hit.pages_taken += pool_->refcount(src) == 1;
        }
    }
    return hit;
}

Status VAttentionKv::prefix_attach(int seq, const int32_t *tokens, int64_t n_rows, uint64_t ns) {
    check_slot(seq);
    const int64_t lanes_per_seq = shape_.n_layer * shape_.n_head_kv * 2;
    if (!prefix_) return Status::error("KV prefix cache: this store has none");
    const int64_t b = prefix_->block_rows();
    bool empty = n_pos_[static_cast<size_t>(seq)] == 0;
    for (int64_t i = 0; i < lanes_per_seq; ++i)
        empty = empty && lanes_[static_cast<size_t>(seq * lanes_per_seq + i)].rows == 0;
    if (!empty || n_rows < b || n_rows % b != 0 || n_rows > max_ctx_) {
        return Status::errorf(
            "KV prefix_attach(slot %d, %lld rows): needs an empty slot and whole blocks of %lld "
            "rows within the context of %lld",
            seq, static_cast<long long>(n_rows), static_cast<long long>(b), static_cast<long long>(max_ctx_));
    }
    const int64_t nb = n_rows / b;
    std::vector<const int32_t *> chain;
    if (prefix_->match(tokens, nb, &chain, /*touch=*/true, ns) != nb)
        return Status::errorf("KV prefix_attach(slot %d): the cache no longer holds %lld rows of this prefix",
                              seq, static_cast<long long>(n_rows));
    std::vector<int64_t> gathered;
    for (int64_t i = 0; i < lanes_per_seq; ++i) {
        const size_t l = static_cast<size_t>(seq * lanes_per_seq + i);
        const int64_t rpp = rows_per_page(kind(l)), rb = rb_[kind(l)];
        const int64_t k = pages_for_rows(n_rows, kind(l));
        Lane &ln = lanes_[l];
        // Lane pages [0, k) are replaced in place (mmap MAP_FIXED); the old
        // ones (a previous sequence's cached pages) go back after the mapping.
        std::vector<int32_t> old(ln.pages.begin(), ln.pages.begin() + std::min<int64_t>(k, ln.pages.size()));
        std::vector<int32_t> fresh(static_cast<size_t>(k), -1);
        gathered.clear();
        for (int64_t j = 0; j < k; ++j) {
            if (prefix_page_source(chain, nb, i, j) >= 0) continue;
            auto pg = alloc_page(seq);
            if (!pg.ok()) {
                for (int32_t p : fresh)
                    if (p >= 0) pool_->release(p);
                release(seq);
                return pg.status().with_context("KV prefix_attach");
            }
            fresh[static_cast<size_t>(j)] = *pg;
            gathered.push_back(j);
        }
        if (static_cast<int64_t>(ln.pages.size()) < k) {
            n_mapped_ += k - static_cast<int64_t>(ln.pages.size());
            ln.pages.resize(static_cast<size_t>(k));
        }
        for (int64_t j = 0; j < k; ++j) {
            int32_t pg = fresh[static_cast<size_t>(j)];
            if (pg < 0) {
                pg = prefix_page_source(chain, nb, i, j);
                pool_->add_ref(pg);
            }
            ln.pages[static_cast<size_t>(j)] = pg;
        }
        Status st = map_range(l, 0, k, false);
        for (int32_t p : old) pool_->release(p);
        if (!st.ok()) {
            release(seq);
            return st.with_context("KV prefix_attach");
        }
        // A gathered page: each block's rows from the page its entry holds.
        for (int64_t j : gathered) {
            for (int64_t kb = j * rpp / b; kb < std::min(nb, (j + 1) * rpp / b); ++kb) {
                const int64_t off = (kb * b % rpp) * rb, n = b * rb;
                const int32_t src = chain[static_cast<size_t>(kb)][i];
                char *dst = lane_addr(l) + kb * b * rb;
                for (int64_t done = 0; done < n;) {
                    const ssize_t r = pread(pool_->fd(), dst + done, static_cast<size_t>(n - done),
                                            pool_->file_offset(src) + off + done);
                    if (r <= 0) {
                        if (r < 0 && errno == EINTR) continue;
                        Status e = Status::errorf("KV prefix_attach: reading cached page %d failed: %s", src,
                                                  r < 0 ? std::strerror(errno) : "end of file");
                        release(seq);
                        return e;
                    }
                    done += r;
                }
            }
        }
        ln.rows = n_rows;
        ln.cap = 0;
    }
    summaries_reset(seq);
    if (!positions_.empty()) {
        const size_t n = static_cast<size_t>(shape_.n_layer * shape_.n_head_kv);
        for (size_t i = 0; i < n; ++i) {
            std::vector<int32_t> &p = positions_[static_cast<size_t>(seq) * n + i];
            p.resize(std::max(p.size(), static_cast<size_t>(n_rows)));
            for (int64_t r = 0; r < n_rows; ++r) p[static_cast<size_t>(r)] = static_cast<int32_t>(r);
        }
    }
    n_pos_[static_cast<size_t>(seq)] = n_rows;
    // The attached blocks are cached already: publishing goes on after them.
    Published &pub = published_[static_cast<size_t>(seq)];
    pub = Published();
    pub.hash = PrefixCache::chain_seed(ns);
    for (int64_t j = 0; j < nb; ++j) pub.hash = PrefixCache::chain_hash(pub.hash, tokens + j * b, b);
    pub.n_blocks = nb;
    return Status();
}

void VAttentionKv::prefix_publish(int seq, const int32_t *tokens, int64_t n_rows, bool whole_pages_only,
                                  uint64_t ns) {
    check_slot(seq);
    if (!prefix_ || !slot_dense(seq)) return;
    const int64_t b = prefix_->block_rows(), ppb = prefix_->pages_per_block();
    const int64_t rpp[2] = {rows_per_page(0), rows_per_page(1)};
    int64_t n = std::min(n_rows, n_pos_[static_cast<size_t>(seq)]);
    if (whole_pages_only) {  // whole pages of K and of V lanes
        const int64_t both = rpp[0] / std::gcd(rpp[0], rpp[1]) * rpp[1];
        n = n / both * both;
    }
    const int64_t nb = n / b;
    Published &pub = published_[static_cast<size_t>(seq)];
    if (pub.n_blocks == 0) pub.hash = PrefixCache::chain_seed(ns);
    const int64_t lanes_per_seq = shape_.n_layer * shape_.n_head_kv * 2;
    std::vector<int32_t> pages(static_cast<size_t>(lanes_per_seq * ppb));
    const uint64_t now = pub.n_blocks < nb ? prefix_->tick() : 0;
    for (int64_t k = pub.n_blocks; k < nb; ++k) {
        const int32_t *t = tokens + k * b;
        const uint64_t h = PrefixCache::chain_hash(pub.hash, t, b);
        for (int64_t i = 0; i < lanes_per_seq; ++i) {
            const Lane &ln = lanes_[static_cast<size_t>(seq * lanes_per_seq + i)];
            for (int64_t p = 0; p < ppb; ++p)
                pages[static_cast<size_t>(i * ppb + p)] =
                    ln.pages[static_cast<size_t>(ppb == 1 ? k * b / rpp[kind(i)] : k * ppb + p)];
        }
        // A hash taken by other tokens (a collision) ends the chain here:
        // blocks after it could never be found anyway.
        if (!prefix_->insert(pub.hash, h, k, t, pages.data(), now)) return;
        pub.hash = h;
        pub.n_blocks = k + 1;
    }
}

PrefixCacheStats VAttentionKv::prefix_stats() const {
    PrefixCacheStats st;
    if (!prefix_) return st;
    st.enabled = true;
    st.block_rows = prefix_->block_rows();
    st.n_blocks = prefix_->n_blocks();
    st.n_pages_held = prefix_->n_pages_held();
    st.n_pages_only = pool_->n_cache_only();
    st.n_blocks_evicted = prefix_evicted_;
    return st;
}

void VAttentionKv::prefix_clear() {
    if (prefix_) prefix_->clear();
}

}  // namespace sieve
