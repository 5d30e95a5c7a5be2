// VAttentionKv: the vAttention lane store on the CPU (Prabhu et al. 2024,
// "vAttention: Dynamic Memory Management for Serving LLMs without
// PagedAttention"). Every lane — one (sequence slot, layer, KV head, K or V) —
// is a virtual range reserved once for max_ctx rows; physical pages of the
// PagePool are mapped at its tail as it grows and unmapped as it shrinks.
// Kernels see a plain contiguous [rows, head_dim] array (f32, f16 or bf16) whose pointer
// never moves.
//
//   virtual:  base ─┬─ lane 0 [ p7 | p2 | p9 | PROT_NONE ............ ]  span bytes
//                   ├─ lane 1 [ p3 | PROT_NONE ...................... ]
//                   └─ lane i = ((seq * n_layer + layer) * n_head_kv + head) * 2 + (K=0 | V=1)
//   lane page j maps pool page pages[j] at base + i * span + j * page_bytes;
//   rows may straddle pages (row_bytes need not divide page_bytes).
//
// Beyond the KvCache contract:
//   * map-ahead: a lane short of pages maps what it needs plus headroom_pages
//     more; map_ahead(seq), called between steps, tops the headroom up so the
//     next steps' reserve() does no mmap at all (stats() counts both);
//   * deferred reclamation: clear(seq) keeps the slot's private pages mapped
//     for the next sequence placed in that slot; when the pool runs dry,
//     cached pages of other slots (idle slots first) are taken back;
//   * prefix sharing: share_prefix() maps src's pages into dst's lanes
//     (refcounted); any write goes through reserve()/prepare_write(), which
//     copies a shared page first (copy on write), so a write through one lane
//     never shows in another;
//   * per-lane rows: compact() packs kept rows to the front and unmaps the
//     freed tail at once, so lanes of one slot hold different row counts and
//     what a policy drops goes straight back to the pool. The slot's n_pos()
//     stays the next position; set_n_pos(seq, n) moves every lane's row count
//     by the same delta (for dense lanes: to n);
//   * row caps: a lane with a cap (set_lane_cap) never maps pages for rows
//     past it, not even as map-ahead headroom (a budgeted lane never grows);
//   * page accounting: pages_to_reserve() answers how many pool pages a
//     reservation needs, so the scheduler never repeats the page formula;
//   * prefix cache (prefix_cache.h, optional): dense slots publish their
//     blocks, a new slot maps the longest cached prefix of its tokens; pages
//     only the cache holds count as free and are evicted (LRU) when the pool
//     runs dry, after idle slots' cached pages and before running slots'
//     headroom.
//
// Not thread-safe: one thread (the engine's) calls it; kernels only read and
// write rows through the lane pointers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sieve/kv/kv_cache.h"
#include "sieve/kv/kv_space.h"
#include "sieve/kv/page_pool.h"
#include "sieve/kv/prefix_cache.h"

namespace sieve {

struct VAttentionKvOptions {
    KvShape shape;
    int64_t max_ctx = 0;          // rows a lane can ever hold (sizes its virtual range)
    PagePoolOptions pool;
    int64_t headroom_pages = 1;   // extra pages mapped ahead of a growing lane
    bool with_positions = false;  // keep an int32 position per row (moved by compact)
    // Rows per prefix-cache block; 0 = no prefix cache. Needs a row size that
    // divides the page size (page_bytes_for() picks such a page) and a block
    // that divides, or is a multiple of, the rows of a page
    // (prefix_block_check()).
    int64_t prefix_block_rows = 0;
};

// Counters of mapping work, for measuring what lands inside a step.
struct KvMapStats {
    int64_t n_map_calls = 0;          // mmap calls that mapped pool pages (any path)
    int64_t n_map_calls_reserve = 0;  // ... of them made inside reserve()/reserve_lane()
    int64_t n_unmap_calls = 0;        // tail re-reservations (PROT_NONE)
    int64_t n_pages_mapped = 0;
    int64_t n_pages_unmapped = 0;
    int64_t n_cow_pages = 0;          // pages copied on write
    int64_t n_reclaimed_pages = 0;    // cached pages taken back from other slots
    int64_t map_us = 0;               // time in mmap, all paths
    int64_t map_us_reserve = 0;       // ... inside reserve()/reserve_lane()
};

class VAttentionKv final : public KvCache, public KvSpace {
public:
    static Result<std::unique_ptr<VAttentionKv>> create(const VAttentionKvOptions &opt);
    ~VAttentionKv() override;
    VAttentionKv(const VAttentionKv &) = delete;
    VAttentionKv &operator=(const VAttentionKv &) = delete;

    // ---- KvCache ----
    const KvShape &shape() const override { return shape_; }
    // Maps pages so every lane can take (n_pos - n_pos(seq)) more rows and
    // un-shares pages those rows touch. Rewriting rows below a lane's n_rows
    // needs set_n_pos() (rollback) or prepare_write() first.
    Status reserve(int seq, int64_t n_pos) override;
    int64_t capacity(int seq) const override;
    void *k_data(int seq, int64_t layer, int64_t kv_head) override;
    void *v_data(int seq, int64_t layer, int64_t kv_head) override;
    int32_t *positions(int seq, int64_t layer, int64_t kv_head) override;
    const int32_t *positions(int seq, int64_t layer, int64_t kv_head) const override;
    int64_t n_pos(int seq) const override;
    int64_t n_rows(int seq, int64_t layer, int64_t kv_head) const override;
    void set_n_pos(int seq, int64_t n) override;
    // Forgets the slot; keeps its private pages mapped for the next sequence
    // in the slot (shared lanes are released at once).
    void clear(int seq) override;

    // Unmaps the pages past the last kept row at once (the pool sees them free).
    Status compact(int seq, int64_t layer, int64_t kv_head, const int32_t *keep_rows, int64_t n_keep) override;

    // ---- per lane: (seq, layer, kv head) = its K lane and V lane ----
    // Rows the lane can hold before it needs more pages.
    int64_t lane_capacity(int seq, int64_t layer, int64_t kv_head) const;
    // Makes rows [n_rows, n_rows) of the K and V lanes writable.
    // headroom = false maps exactly what the rows need (a swap-in, whose
    // page count the scheduler checked, must not let early lanes' headroom
    // starve later lanes).
    Status reserve_lane(int seq, int64_t layer, int64_t kv_head, int64_t n_rows, bool headroom = true);
    // Precondition: n <= lane_capacity. Does not change the slot's n_pos().
    void set_lane_rows(int seq, int64_t layer, int64_t kv_head, int64_t n);
    // Caps the lane at cap rows (0 = no cap, the default; clear(), release()
    // and share_prefix() into the slot remove it):
    // reserve() refuses rows past it with an error, map-ahead never maps
    // pages for them. Pages already mapped past the cap are unmapped.
    void set_lane_cap(int seq, int64_t layer, int64_t kv_head, int64_t cap);
    // Sets the slot's next position without touching its lanes (a swap-in
    // restores rows lane by lane, then the position).
    void set_slot_n_pos(int seq, int64_t n_pos);
    bool has_positions() const { return !positions_.empty(); }
    // Pool pages of one lane pair (K + V) holding n_rows rows.
    int64_t lane_pair_pages(int64_t n_rows) const {
        return pages_for_rows(n_rows, 0) + pages_for_rows(n_rows, 1);
    }
    int64_t lane_cap(int seq, int64_t layer, int64_t kv_head) const;

    // ---- sharing ----
    // dst (an empty slot, != src) gets rows [0, n_rows) of every lane of src
    // by mapping src's pages (no copy); n_pos(dst) = n_rows. Needs every
    // src lane to hold >= n_rows rows (dense up to there).
    Status share_prefix(int dst_seq, int src_seq, int64_t n_rows);
    // Copies every shared page of seq's lanes that holds rows >= from_row of
    // that lane, so the slot may rewrite them.
    Status prepare_write(int seq, int64_t from_row);

    // ---- memory ----
    // Tops up headroom of seq's lanes; call between steps (off the critical path).
    Status map_ahead(int seq);
    // clear() and return every page of the slot to the pool now.
    void release(int seq) override;
    // Returns every page no lane needs (idle slots' caches, headroom) to the
    // pool; the number of pages freed.
    int64_t trim();

    // ---- accounting (what the scheduler asks instead of counting pages itself) ----
    // Pool pages reserve(seq, n_pos) would still have to map (beyond pages
    // already mapped to the lanes, headroom included), not counting copies of
    // shared pages. 0 when the lanes already have the room.
    int64_t pages_to_reserve(int seq, int64_t n_pos) const override;
    int64_t seq_pages_for_rows(int64_t n_rows) const override {
        return shape_.n_layer * shape_.n_head_kv * lane_pair_pages(n_rows);
    }
    // Pool pages mapped to every lane of slot seq (a shared page once per lane).
    int64_t seq_mapped_pages(int seq) const override;
    int64_t n_free_pages() const override { return pool_->n_free() + pool_->n_cache_only(); }
    int64_t n_total_pages() const override { return pool_->n_pages(); }
    int64_t swap_bytes(int seq) const override;
    Status swap_out(int seq, KvSwapImage *out) override;
    int64_t swap_pages(const KvSwapImage &img) const override;
    Status swap_in(int seq, const KvSwapImage &img) override;
    // seq_pages_for_rows() for a store not created yet (sizing its pool).
    static int64_t seq_pages_for_rows(const KvShape &shape, int64_t page_bytes, int64_t n_rows);

    // ---- prefix cache ----
    PrefixHit prefix_lookup(const int32_t *tokens, int64_t n_tokens, int64_t n_max, uint64_t ns) override;
    Status prefix_attach(int seq, const int32_t *tokens, int64_t n_rows, uint64_t ns) override;
    void prefix_publish(int seq, const int32_t *tokens, int64_t n_rows, bool whole_pages_only, uint64_t ns) override;
    PrefixCacheStats prefix_stats() const override;
    // Drops every cached block (pages no lane maps return to the pool).
    void prefix_clear();
    // Whether blocks of block_rows rows fit lanes of this row size and page
    // size (empty) or why not.
    static std::string prefix_block_check(const KvShape &shape, int64_t page_bytes, int64_t block_rows);
    // The page size for lanes of `shape`: `requested` when it is > 0, else
    // the default, k_default_page_bytes where a page holds whole rows, and
    // otherwise prefix_page_bytes(): the smallest multiple of lcm(K row
    // bytes, V row bytes, 4 KiB) at or above it (quantized rows: q8_0 / q4_0
    // with head_dim 64 are 68 / 36 bytes, so 68 / 72 KiB pages of 1,024 /
    // 2,048 rows), so prefix-cache blocks never straddle pages. Rows whose
    // lcm exceeds 2 MiB keep the default (their rows straddle pages; prefix
    // caching is then off). K and V rows of different sizes whose common page
    // would exceed k_max_mixed_page_bytes (q8_0 K with q4_0 V: 612 KiB, so a
    // lane of a short sequence would map 612 KiB) get pages of whole K rows
    // instead, V rows straddling them and the prefix cache off; whoever wants
    // the cache with them asks for prefix_page_bytes() (the eval does).
    static constexpr int64_t k_default_page_bytes = int64_t{64} << 10;
    static constexpr int64_t k_max_mixed_page_bytes = int64_t{256} << 10;
    static int64_t page_bytes_for(const KvShape &shape, int64_t requested);
    // Pages holding whole K and V rows (prefix caching works), 0 when none
    // up to 2 MiB does.
    static int64_t prefix_page_bytes(const KvShape &shape);
    const PagePool &pool() const { return *pool_; }
    int64_t page_bytes() const { return pool_->page_bytes(); }
    int64_t row_bytes(int kv) const { return rb_[kv]; }  // kv: 0 = K lanes, 1 = V lanes
    int64_t max_ctx() const override { return max_ctx_; }
    int64_t mapped_pages() const { return n_mapped_; }  // lane pages, shared ones once per lane
    int64_t lane_mapped_bytes(int seq, int64_t layer, int64_t kv_head) const;  // K + V
    int64_t seq_mapped_bytes(int seq) const;
    int64_t layer_mapped_bytes(int64_t layer) const;
    const KvMapStats &stats() const { return stats_; }
    void reset_stats() { stats_ = KvMapStats(); }
    // Recounts pages, refcounts and totals from scratch against the pool.
    Status check_accounting() const;

private:
    struct Lane {
        std::vector<int32_t> pages;  // pool page mapped at lane page j
        int64_t rows = 0;
        int64_t cap = 0;             // rows the lane may hold; 0 = max_ctx
    };

    VAttentionKv() = default;
    void check_slot(int seq) const;
    size_t lane_index(int seq, int64_t layer, int64_t kv_head, int kv) const;
    char *lane_addr(size_t lane) const { return base_ + static_cast<int64_t>(lane) * span_; }
    // Lanes alternate K, V (lane_index): kind 0 = K, 1 = V, each with its row size.
    static int kind(size_t lane) { return static_cast<int>(lane & 1); }
    static int kind(int64_t lane_in_slot) { return static_cast<int>(lane_in_slot & 1); }
    int64_t pages_for_rows(int64_t rows, int kv) const;
    int64_t rows_in_pages(int64_t n_pages, int kv) const;
    int64_t lane_max_rows(const Lane &ln) const { return ln.cap > 0 ? std::min(ln.cap, max_ctx_) : max_ctx_; }

    Result<int32_t> alloc_page(int except_seq);
    int64_t reclaim(int64_t want, int except_seq);
    // Rows of a lane of slot seq that reclaim() must keep mapped.
    int64_t protected_rows(int seq, size_t lane) const;
    Status map_range(size_t lane, int64_t j0, int64_t n, bool in_reserve);
    Status grow_lane(size_t lane, int64_t need, int64_t target, int except_seq, bool in_reserve);
    void shrink_lane(size_t lane, int64_t keep_pages);
    Status unshare_rows(size_t lane, int64_t row_begin, int64_t row_end, int except_seq);
    // Shared pages (refcount > 1) of a lane among those holding rows
    // [row_begin, row_end): what unshare_rows() would copy.
    int64_t shared_pages(const Lane &ln, int kv, int64_t row_begin, int64_t row_end) const;
    // Every lane of the slot holds one row per position (never compacted).
    bool slot_dense(int seq) const;
    // The pool page to map as lane page j of lane `lane` for a hit of nb
    // blocks, or -1 when that page's blocks must be gathered into a fresh one.
    int32_t prefix_page_source(const std::vector<const int32_t *> &chain, int64_t nb, int64_t lane, int64_t j) const;
    int64_t rows_per_page(int kv) const { return pool_->page_bytes() / rb_[kv]; }
    // Grows the position arrays of seq's lanes for delta more rows.
    void grow_positions(int seq, int64_t delta);

    KvShape shape_;
    int64_t max_ctx_ = 0;
    int64_t rb_[2] = {0, 0};      // bytes of a K row, of a V row
    int64_t span_ = 0;            // bytes of one lane's virtual range
    int64_t headroom_ = 1;
    std::unique_ptr<PagePool> pool_;
    char *region_ = nullptr;      // whole reservation (unaligned)
    int64_t region_bytes_ = 0;
    char *base_ = nullptr;        // lanes start here, page aligned
    char *scratch_ = nullptr;     // one page of address space for copy on write
    std::vector<Lane> lanes_;
    // Per (seq, layer, kv head), only with_positions: the position of each row.
    std::vector<std::vector<int32_t>> positions_;
    std::vector<int64_t> n_pos_;  // per slot
    // Per slot: the n_pos of the last reserve() whose rows may not be
    // written yet. reclaim() never takes pages below it, so pages reserved for
    // one sequence in a step can't be taken by another sequence's reserve()
    // in the same step, before the forward pass writes them.
    std::vector<int64_t> reserved_to_;
    int64_t n_mapped_ = 0;
    KvMapStats stats_;
    // After pool_: destroyed first, giving its references back.
    std::unique_ptr<PrefixCache> prefix_;
    int64_t prefix_evicted_ = 0;
    // Per slot: blocks of it already offered to the prefix cache, and the
    // chain hash of the last one (publishing goes on from there; with none
    // yet, from the namespace's seed).
    struct Published {
        int64_t n_blocks = 0;
        uint64_t hash = 0;
    };
    std::vector<Published> published_;
};

}  // namespace sieve
