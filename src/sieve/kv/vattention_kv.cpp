#include "sieve/kv/vattention_kv.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <numeric>
#include <utility>

#include "sieve/core/timer.h"
#include "sieve/kv/kv_swap.h"

namespace sieve {

namespace {

constexpr int k_reserve_flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

// Address space we are willing to reserve for lanes: half of a 47-bit user space.
constexpr int64_t k_max_reserve_bytes = int64_t{1} << 46;

Status mmap_error(const char *what, int64_t bytes) {
    const int err = errno;
    return Status::errorf("KV lanes: %s of %lld bytes failed: %s%s", what, static_cast<long long>(bytes),
                          std::strerror(err),
                          err == ENOMEM ? " (too many mappings? raise vm.max_map_count or use larger KV pages)"
                                        : "");
}

}  // namespace

Result<std::unique_ptr<VAttentionKv>> VAttentionKv::create(const VAttentionKvOptions &opt) {
    const KvShape &s = opt.shape;
    if (s.n_seq < 1 || s.n_layer < 1 || s.n_head_kv < 1 || s.head_dim < 1 || opt.max_ctx < 1 ||
        opt.headroom_pages < 0) {
        return Status::errorf("KV lanes: n_seq = %d, n_layer = %lld, n_head_kv = %lld, head_dim = %lld, max_ctx = "
                              "%lld, headroom = %lld; all must be >= 1 (headroom >= 0)",
                              s.n_seq, static_cast<long long>(s.n_layer), static_cast<long long>(s.n_head_kv),
                              static_cast<long long>(s.head_dim), static_cast<long long>(opt.max_ctx),
                              static_cast<long long>(opt.headroom_pages));
    }
    if (!cpu::row_type_fits(s.type, s.head_dim)) return row_type_error(s);
    auto pool = PagePool::create(opt.pool);
    if (!pool.ok()) return pool.status();
    std::unique_ptr<VAttentionKv> kv(new VAttentionKv());
    kv->shape_ = s;
    kv->max_ctx_ = opt.max_ctx;
    kv->headroom_ = opt.headroom_pages;
    kv->pool_ = std::move(pool.value());
    const int64_t pb = kv->pool_->page_bytes();
    kv->rb_[0] = s.k_row_bytes();
    kv->rb_[1] = s.v_row_bytes();
    // Every lane's virtual range fits the wider row (K and V types may differ).
    const int64_t wide_rb = std::max(kv->rb_[0], kv->rb_[1]);
    const int64_t n_lanes = static_cast<int64_t>(s.n_seq) * s.n_layer * s.n_head_kv * 2;
    int64_t lane_bytes = 0, total = 0;
    if (__builtin_mul_overflow(opt.max_ctx, wide_rb, &lane_bytes) || lane_bytes > k_max_reserve_bytes ||
        __builtin_mul_overflow((lane_bytes + pb - 1) / pb * pb, n_lanes, &total) ||
        total > k_max_reserve_bytes) {
        return Status::errorf(
            "KV lanes: %lld lanes of %lld rows x %lld bytes exceed the address space we reserve "
            "(%lld GiB); lower the context size or the number of sequences",
            static_cast<long long>(n_lanes), static_cast<long long>(opt.max_ctx),
            static_cast<long long>(wide_rb), static_cast<long long>(k_max_reserve_bytes >> 30));
    }
    kv->span_ = (lane_bytes + pb - 1) / pb * pb;
    // One reservation for every lane, a scratch page for copy on write, and
    // slack to align the base to the page size (huge pages need it).
    kv->region_bytes_ = total + 2 * pb;
    void *r = mmap(nullptr, static_cast<size_t>(kv->region_bytes_), PROT_NONE, k_reserve_flags, -1, 0);
    if (r == MAP_FAILED) return mmap_error("reserving the lane address space", kv->region_bytes_);
    kv->region_ = static_cast<char *>(r);
    const uintptr_t a = reinterpret_cast<uintptr_t>(kv->region_);
    kv->base_ = reinterpret_cast<char *>((a + static_cast<uintptr_t>(pb) - 1) / static_cast<uintptr_t>(pb) *
                                         static_cast<uintptr_t>(pb));
    kv->scratch_ = kv->base_ + total;
    kv->lanes_.resize(static_cast<size_t>(n_lanes));
    if (opt.with_positions) kv->positions_.resize(static_cast<size_t>(n_lanes / 2));
    kv->n_pos_.assign(static_cast<size_t>(s.n_seq), 0);
    kv->reserved_to_.assign(static_cast<size_t>(s.n_seq), 0);
    kv->published_.assign(static_cast<size_t>(s.n_seq), Published());
    if (opt.prefix_block_rows != 0) {
        const std::string why = prefix_block_check(s, pb, opt.prefix_block_rows);
        if (!why.empty()) return Status::errorf("KV prefix cache: %s", why.c_str());
        const int64_t rpp = kv->rows_per_page(0);  // as many blocks per page in V lanes (prefix_block_check)
        kv->prefix_ = std::make_unique<PrefixCache>(*kv->pool_, s.n_layer * s.n_head_kv * 2, opt.prefix_block_rows,
                                                    std::max<int64_t>(1, opt.prefix_block_rows / rpp));
    }
    return kv;
}

VAttentionKv::~VAttentionKv() {
    if (region_) munmap(region_, static_cast<size_t>(region_bytes_));
}

void VAttentionKv::check_slot(int seq) const {
    SIEVE_CHECKF(seq >= 0 && seq < shape_.n_seq, "KV slot %d out of [0, %d)", seq, shape_.n_seq);
}

size_t VAttentionKv::lane_index(int seq, int64_t layer, int64_t kv_head, int kv) const {
    check_slot(seq);
    SIEVE_CHECKF(layer >= 0 && layer < shape_.n_layer && kv_head >= 0 && kv_head < shape_.n_head_kv,
                 "KV lane (layer %lld, kv head %lld) out of [%lld, %lld)", static_cast<long long>(layer),
                 static_cast<long long>(kv_head), static_cast<long long>(shape_.n_layer),
                 static_cast<long long>(shape_.n_head_kv));
    return static_cast<size_t>(((static_cast<int64_t>(seq) * shape_.n_layer + layer) * shape_.n_head_kv + kv_head) *
                                   2 +
                               kv);
}

int64_t VAttentionKv::pages_for_rows(int64_t rows, int kv) const {
    const int64_t pb = pool_->page_bytes();
    return (rows * rb_[kv] + pb - 1) / pb;
}

int64_t VAttentionKv::seq_pages_for_rows(const KvShape &shape, int64_t page_bytes, int64_t n_rows) {
    const int64_t k = (n_rows * shape.k_row_bytes() + page_bytes - 1) / page_bytes;
    const int64_t v = (n_rows * shape.v_row_bytes() + page_bytes - 1) / page_bytes;
    return shape.n_layer * shape.n_head_kv * (k + v);
}

int64_t VAttentionKv::rows_in_pages(int64_t n_pages, int kv) const {
    return std::min(max_ctx_, n_pages * pool_->page_bytes() / rb_[kv]);
}

// ---------------------------------------------------------------------------
// Pages: allocation with on-demand reclamation, mapping, unmapping, copy on write
// ---------------------------------------------------------------------------

Result<int32_t> VAttentionKv::alloc_page(int except_seq) {
    if (pool_->n_free() == 0 && except_seq >= -1) reclaim(1, except_seq);
    return pool_->alloc();
}

// Unmaps pages no lane needs — beyond each lane's rows — from slots other than
// except_seq: idle slots first (deferred reclamation), then the prefix
// cache's blocks, then headroom of running ones. Stops once the pool has
// `want` free pages.
int64_t VAttentionKv::reclaim(int64_t want, int except_seq) {
    const int64_t lanes_per_seq = shape_.n_layer * shape_.n_head_kv * 2;
    const int64_t n0 = stats_.n_pages_unmapped;
    for (int pass = 0; pass < 2 && pool_->n_free() < want; ++pass) {
        // Between idle slots' pages and running slots' headroom: blocks only
        // the prefix cache holds, least recently used first.
        if (pass == 1 && prefix_) prefix_evicted_ += prefix_->evict(want);
        for (int seq = 0; seq < shape_.n_seq && pool_->n_free() < want; ++seq) {
            const bool idle = n_pos_[static_cast<size_t>(seq)] == 0 && reserved_to_[static_cast<size_t>(seq)] == 0;
            if (seq == except_seq || (pass == 0 && !idle)) continue;
            for (int64_t i = 0; i < lanes_per_seq && pool_->n_free() < want; ++i) {
                const size_t l = static_cast<size_t>(seq * lanes_per_seq + i);
                shrink_lane(l, pages_for_rows(protected_rows(seq, l), kind(l)));
            }
        }
    }
    const int64_t n = stats_.n_pages_unmapped - n0;
    stats_.n_reclaimed_pages += n;
    return n;
}

int64_t VAttentionKv::protected_rows(int seq, size_t lane) const {
    const size_t s = static_cast<size_t>(seq);
    return lanes_[lane].rows + std::max<int64_t>(0, reserved_to_[s] - n_pos_[s]);
}

// Maps lane pages [j0, j0 + n) (already in lane.pages) into the lane's range.
// Runs of consecutive pool pages go in one mmap (one VMA). On failure the
// pages from the failing run on are dropped from the lane and released.
Status VAttentionKv::map_range(size_t lane, int64_t j0, int64_t n, bool in_reserve) {
    Lane &ln = lanes_[lane];
    const int64_t pb = pool_->page_bytes();
    for (int64_t j = j0; j < j0 + n;) {
        int64_t run = 1;
        while (j + run < j0 + n && ln.pages[static_cast<size_t>(j + run)] == ln.pages[static_cast<size_t>(j)] + run)
            ++run;
        const int64_t t0 = time_us();
        void *r = mmap(lane_addr(lane) + j * pb, static_cast<size_t>(run * pb), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_FIXED | MAP_POPULATE, pool_->fd(),
                       pool_->file_offset(ln.pages[static_cast<size_t>(j)]));
        const int64_t dt = time_us() - t0;
        stats_.map_us += dt;
        ++stats_.n_map_calls;
        if (in_reserve) {
            stats_.map_us_reserve += dt;
            ++stats_.n_map_calls_reserve;
        }
        if (r == MAP_FAILED) {
            Status st = mmap_error("mapping KV pages", run * pb);
            // Put the reservation back from the failed run to the lane's end
            // and drop those pages.
            mmap(lane_addr(lane) + j * pb, (ln.pages.size() - static_cast<size_t>(j)) * static_cast<size_t>(pb),
                 PROT_NONE, k_reserve_flags | MAP_FIXED, -1, 0);
            for (size_t k = static_cast<size_t>(j); k < ln.pages.size(); ++k) pool_->release(ln.pages[k]);
            n_mapped_ -= static_cast<int64_t>(ln.pages.size()) - j;
            ln.pages.resize(static_cast<size_t>(j));
            return st;
        }
        stats_.n_pages_mapped += run;
        j += run;
    }
    return Status();
}

// Makes the lane hold at least need pages; when it must map, it maps up to
// target pages (headroom, best effort). except_seq's own pages are never
// reclaimed for it; except_seq < -1 means: do not reclaim at all.
Status VAttentionKv::grow_lane(size_t lane, int64_t need, int64_t target, int except_seq, bool in_reserve) {
    Lane &ln = lanes_[lane];
    const int64_t have = static_cast<int64_t>(ln.pages.size());
    if (need <= have) return Status();
    target = std::min(std::max(need, target), pages_for_rows(lane_max_rows(ln), kind(lane)));
    for (int64_t j = have; j < target; ++j) {
        auto p = alloc_page(except_seq);
        if (!p.ok()) {
            if (j >= need) break;  // headroom is best effort
            for (size_t k = static_cast<size_t>(have); k < ln.pages.size(); ++k) pool_->release(ln.pages[k]);
            ln.pages.resize(static_cast<size_t>(have));
            return p.status();
        }
        ln.pages.push_back(*p);
    }
    const int64_t added = static_cast<int64_t>(ln.pages.size()) - have;
    n_mapped_ += added;
    return map_range(lane, have, added, in_reserve);
}

// Unmaps lane pages [keep_pages, end) by re-reserving that address range, and
// drops the lane's references to them.
void VAttentionKv::shrink_lane(size_t lane, int64_t keep_pages) {
    Lane &ln = lanes_[lane];
    const int64_t have = static_cast<int64_t>(ln.pages.size());
    if (have <= keep_pages) return;
    const int64_t pb = pool_->page_bytes();
    void *r = mmap(lane_addr(lane) + keep_pages * pb, static_cast<size_t>((have - keep_pages) * pb), PROT_NONE,
                   k_reserve_flags | MAP_FIXED, -1, 0);
    // Replacing the tail of a lane with the reservation it came from only
    // merges mappings; a failure here means the address space is corrupt.
    SIEVE_CHECKF(r != MAP_FAILED, "re-reserving %lld KV pages failed: %s", static_cast<long long>(have - keep_pages),
                 std::strerror(errno));
    ++stats_.n_unmap_calls;
    stats_.n_pages_unmapped += have - keep_pages;
    // Last page first: the pool's free list is a stack, so these pages come
    // back in ascending order and a lane regrowing takes them as one run (one
    // mmap, one VMA).
    for (int64_t j = have - 1; j >= keep_pages; --j) pool_->release(ln.pages[static_cast<size_t>(j)]);
    ln.pages.resize(static_cast<size_t>(keep_pages));
    n_mapped_ -= have - keep_pages;
}

// Copy on write for lane pages [j0, j1): each page also mapped elsewhere
// (refcount > 1) is copied into a fresh page through the scratch window,
// which then replaces it in this lane only.
Status VAttentionKv::unshare_rows(size_t lane, int64_t row_begin, int64_t row_end, int except_seq) {
    Lane &ln = lanes_[lane];
    const int64_t pb = pool_->page_bytes();
    const int64_t j0 = row_begin * rb_[kind(lane)] / pb;
    const int64_t j1 =
        std::min<int64_t>(static_cast<int64_t>(ln.pages.size()), pages_for_rows(row_end, kind(lane)));
    for (int64_t j = j0; j < j1; ++j) {
        const int32_t old = ln.pages[static_cast<size_t>(j)];
        if (pool_->refcount(old) == 1) continue;
        auto p = alloc_page(except_seq);
        if (!p.ok()) {
            // No page to copy into, and only the prefix cache shares this one:
            // the cache gives it up (its blocks on the page are dropped) and
            // the lane writes in place. Cached pages never fail a request.
            if (prefix_ && pool_->cached(old) && pool_->refcount(old) == 2) {
                prefix_evicted_ += prefix_->drop_page(old);
                continue;
            }
            return p.status().with_context("copy on write of a shared KV page");
        }
        if (pool_->refcount(old) == 1) {  // reclaim dropped the other reference
            pool_->release(*p);
            continue;
        }
        char *dst = lane_addr(lane) + j * pb;
        void *r = mmap(scratch_, static_cast<size_t>(pb), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                       pool_->fd(), pool_->file_offset(*p));
        if (r != MAP_FAILED) {
            std::memcpy(scratch_, dst, static_cast<size_t>(pb));
            r = mmap(dst, static_cast<size_t>(pb), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE,
                     pool_->fd(), pool_->file_offset(*p));
        }
        if (r == MAP_FAILED) {
            Status st = mmap_error("copy on write of a shared KV page", pb);
            pool_->release(*p);
            return st;
        }
        ++stats_.n_map_calls;
        ++stats_.n_cow_pages;
        pool_->release(old);
        ln.pages[static_cast<size_t>(j)] = *p;
    }
    return Status();
}

// ---------------------------------------------------------------------------
// KvCache
// ---------------------------------------------------------------------------

Status VAttentionKv::reserve(int seq, int64_t n_pos) {
    check_slot(seq);
    SIEVE_CHECKF(n_pos >= 0, "reserve(%d, %lld)", seq, static_cast<long long>(n_pos));
    const int64_t delta = n_pos - n_pos_[static_cast<size_t>(seq)];
    if (delta <= 0) return Status();
    const int64_t lanes_per_seq = shape_.n_layer * shape_.n_head_kv * 2;
    for (int64_t i = 0; i < lanes_per_seq; ++i) {
        const Lane &ln = lanes_[static_cast<size_t>(seq * lanes_per_seq + i)];
        if (ln.rows + delta > lane_max_rows(ln)) {
            const int64_t head = i / 2 % shape_.n_head_kv, layer = i / 2 / shape_.n_head_kv;
            return Status::errorf("KV lanes: lane (slot %d, layer %lld, kv head %lld) needs %lld rows (position "
                                  "%lld), it holds at most %lld%s; shorten the prompt or raise the context size",
                                  seq, static_cast<long long>(layer), static_cast<long long>(head),
                                  static_cast<long long>(ln.rows + delta), static_cast<long long>(n_pos),
                                  static_cast<long long>(lane_max_rows(ln)), ln.cap > 0 ? " (its row cap)" : "");
        }
    }
    int64_t &reserved_to = reserved_to_[static_cast<size_t>(seq)];
    const int64_t reserved_before = reserved_to;
    reserved_to = std::max(reserved_to, n_pos);
    // Headroom only when the free pages cover every lane's need plus its
    // headroom: otherwise early lanes' headroom would starve later lanes' need.
    int64_t total_need = 0;
    for (int64_t i = 0; i < lanes_per_seq; ++i) {
        const Lane &ln = lanes_[static_cast<size_t>(seq * lanes_per_seq + i)];
        total_need += std::max<int64_t>(
            0, pages_for_rows(ln.rows + delta, kind(i)) - static_cast<int64_t>(ln.pages.size()));
        total_need += shared_pages(ln, kind(i), ln.rows, ln.rows + delta);  // copies on write
    }
    // What must be taken back (idle slots' pages, the prefix cache's, other
    // slots' headroom) is taken in one sweep here, not page by page as the
    // lanes grow.
    if (pool_->n_free() < total_need) reclaim(total_need, seq);
    const int64_t headroom = pool_->n_free() >= total_need + lanes_per_seq * headroom_ ? headroom_ : 0;
    for (int64_t i = 0; i < lanes_per_seq; ++i) {
        const size_t l = static_cast<size_t>(seq * lanes_per_seq + i);
        const int64_t rows = lanes_[l].rows;
        const int64_t need = pages_for_rows(rows + delta, kind(l));
        Status st = grow_lane(l, need, need + headroom, seq, true);
        if (st.ok()) st = unshare_rows(l, rows, rows + delta, seq);
        if (!st.ok()) {
            reserved_to = reserved_before;  // a failed reserve gives no rows: nothing to protect
            return st;
        }
    }
    grow_positions(seq, delta);
    return Status();
}

void VAttentionKv::grow_positions(int seq, int64_t delta) {
    if (positions_.empty()) return;
    const size_t n = static_cast<size_t>(shape_.n_layer * shape_.n_head_kv);
    for (size_t i = 0; i < n; ++i) {
        std::vector<int32_t> &p = positions_[static_cast<size_t>(seq) * n + i];
        const size_t want = static_cast<size_t>(lanes_[(static_cast<size_t>(seq) * n + i) * 2].rows + delta);
        if (p.size() < want) p.resize(want);
    }
}

int64_t VAttentionKv::pages_to_reserve(int seq, int64_t n_pos) const {
    check_slot(seq);
    const int64_t delta = n_pos - n_pos_[static_cast<size_t>(seq)];
    if (delta <= 0) return 0;
    const int64_t lanes_per_seq = shape_.n_layer * shape_.n_head_kv * 2;
    int64_t need = 0;
    for (int64_t i = 0; i < lanes_per_seq; ++i) {
        const Lane &ln = lanes_[static_cast<size_t>(seq * lanes_per_seq + i)];
        need += std::max<int64_t>(
            0, pages_for_rows(ln.rows + delta, kind(i)) - static_cast<int64_t>(ln.pages.size()));
        need += shared_pages(ln, kind(i), ln.rows, ln.rows + delta);
    }
    return need;
}

int64_t VAttentionKv::shared_pages(const Lane &ln, int kv, int64_t row_begin, int64_t row_end) const {
    const int64_t pb = pool_->page_bytes();
    const int64_t j0 = row_begin * rb_[kv] / pb;
    const int64_t j1 = std::min<int64_t>(static_cast<int64_t>(ln.pages.size()), pages_for_rows(row_end, kv));
    int64_t n = 0;
    for (int64_t j = j0; j < j1; ++j) n += pool_->refcount(ln.pages[static_cast<size_t>(j)]) > 1;
    return n;
}

int64_t VAttentionKv::swap_bytes(int seq) const { return kv_swap_bytes(*this, seq); }
Status VAttentionKv::swap_out(int seq, KvSwapImage *out) { return kv_swap_out(*this, seq, out); }
int64_t VAttentionKv::swap_pages(const KvSwapImage &img) const { return kv_swap_pages(*this, img); }
Status VAttentionKv::swap_in(int seq, const KvSwapImage &img) { return kv_swap_in(*this, seq, img); }

int64_t VAttentionKv::seq_mapped_pages(int seq) const {
    check_slot(seq);
    const int64_t lanes_per_seq = shape_.n_layer * shape_.n_head_kv * 2;
    int64_t n = 0;
    for (int64_t i = 0; i < lanes_per_seq; ++i)
        n += static_cast<int64_t>(lanes_[static_cast<size_t>(seq * lanes_per_seq + i)].pages.size());
    return n;
}

int64_t VAttentionKv::capacity(int seq) const {
    check_slot(seq);
    const int64_t lanes_per_seq = shape_.n_layer * shape_.n_head_kv * 2;
    int64_t room = max_ctx_;
    for (int64_t i = 0; i < lanes_per_seq; ++i) {
        const Lane &ln = lanes_[static_cast<size_t>(seq * lanes_per_seq + i)];
        room = std::min(
            room, std::min(rows_in_pages(static_cast<int64_t>(ln.pages.size()), kind(i)), lane_max_rows(ln)) -
                      ln.rows);
    }
    return n_pos_[static_cast<size_t>(seq)] + room;
}

void *VAttentionKv::k_data(int seq, int64_t layer, int64_t kv_head) {
    return lane_addr(lane_index(seq, layer, kv_head, 0));
}

void *VAttentionKv::v_data(int seq, int64_t layer, int64_t kv_head) {
    return lane_addr(lane_index(seq, layer, kv_head, 1));
}

int32_t *VAttentionKv::positions(int seq, int64_t layer, int64_t kv_head) {
    return const_cast<int32_t *>(std::as_const(*this).positions(seq, layer, kv_head));
}
const int32_t *VAttentionKv::positions(int seq, int64_t layer, int64_t kv_head) const {
    const size_t l = lane_index(seq, layer, kv_head, 0) / 2;
    return positions_.empty() ? nullptr : positions_[l].data();
}

int64_t VAttentionKv::n_pos(int seq) const {
    check_slot(seq);
    return n_pos_[static_cast<size_t>(seq)];
}

void VAttentionKv::set_n_pos(int seq, int64_t n) {
    SIEVE_CHECKF(n >= 0 && n <= capacity(seq), "set_n_pos(%d, %lld): capacity %lld", seq,
                 static_cast<long long>(n), static_cast<long long>(capacity(seq)));
    const int64_t delta = n - n_pos_[static_cast<size_t>(seq)];
    const int64_t lanes_per_seq = shape_.n_layer * shape_.n_head_kv * 2;
    for (int64_t i = 0; i < lanes_per_seq; ++i) {
        Lane &ln = lanes_[static_cast<size_t>(seq * lanes_per_seq + i)];
        ln.rows = std::max<int64_t>(0, ln.rows + delta);  // a compacted lane rolls back to empty at most
    }
    n_pos_[static_cast<size_t>(seq)] = n;
    if (delta < 0) summaries_roll_back(seq);
    // Rows rolled back below what was published may be rewritten with other
    // tokens: publish the chain again from its start (cached blocks are only
    // touched; the cache keeps its own copy of the old rows).
    Published &pub = published_[static_cast<size_t>(seq)];
    if (prefix_ && pub.n_blocks * prefix_->block_rows() > n) pub = Published();
}

void VAttentionKv::clear(int seq) {
    check_slot(seq);
    n_pos_[static_cast<size_t>(seq)] = 0;
    reserved_to_[static_cast<size_t>(seq)] = 0;
    published_[static_cast<size_t>(seq)] = Published();
    summaries_reset(seq);
    const int64_t lanes_per_seq = shape_.n_layer * shape_.n_head_kv * 2;
    for (int64_t i = 0; i < lanes_per_seq; ++i) {
        const size_t l = static_cast<size_t>(seq * lanes_per_seq + i);
        lanes_[l].rows = 0;
        lanes_[l].cap = 0;
        // A cached page that another slot also maps would be copied at the next
        // write anyway; giving the reference back now frees it sooner.
        const bool shared = std::any_of(lanes_[l].pages.begin(), lanes_[l].pages.end(),
                                        [&](int32_t p) { return pool_->refcount(p) > 1; });
        if (shared) shrink_lane(l, 0);
    }
}

// ---------------------------------------------------------------------------
// Per lane
// ---------------------------------------------------------------------------

int64_t VAttentionKv::n_rows(int seq, int64_t layer, int64_t kv_head) const {
    return lanes_[lane_index(seq, layer, kv_head, 0)].rows;
}

int64_t VAttentionKv::lane_capacity(int seq, int64_t layer, int64_t kv_head) const {
    const size_t lk = lane_index(seq, layer, kv_head, 0);
    return std::min({rows_in_pages(static_cast<int64_t>(lanes_[lk].pages.size()), 0),
                     rows_in_pages(static_cast<int64_t>(lanes_[lk + 1].pages.size()), 1),
                     lane_max_rows(lanes_[lk])});
}

Status VAttentionKv::reserve_lane(int seq, int64_t layer, int64_t kv_head, int64_t n_rows, bool headroom) {
    const size_t lk = lane_index(seq, layer, kv_head, 0);
    SIEVE_CHECKF(n_rows >= 0, "reserve_lane(%d, %lld, %lld, %lld)", seq, static_cast<long long>(layer),
                 static_cast<long long>(kv_head), static_cast<long long>(n_rows));
    if (n_rows > max_ctx_) {
        return Status::errorf("KV lanes: lane (slot %d, layer %lld, kv head %lld) needs %lld rows, holds at most %lld",
                              seq, static_cast<long long>(layer), static_cast<long long>(kv_head),
                              static_cast<long long>(n_rows), static_cast<long long>(max_ctx_));
    }
    if (n_rows > lane_max_rows(lanes_[lk])) {
        return Status::errorf("KV lanes: lane (slot %d, layer %lld, kv head %lld) needs %lld rows, its cap is %lld",
                              seq, static_cast<long long>(layer), static_cast<long long>(kv_head),
                              static_cast<long long>(n_rows), static_cast<long long>(lane_max_rows(lanes_[lk])));
    }
    for (size_t l = lk; l < lk + 2; ++l) {
        const int64_t rows = lanes_[l].rows;
        if (n_rows <= rows) continue;
        const int64_t need = pages_for_rows(n_rows, kind(l));
        SIEVE_TRY(grow_lane(l, need, need + (headroom ? headroom_ : 0), seq, true));
        SIEVE_TRY(unshare_rows(l, rows, n_rows, seq));
    }
    if (!positions_.empty() && positions_[lk / 2].size() < static_cast<size_t>(n_rows))
        positions_[lk / 2].resize(static_cast<size_t>(n_rows));
    return Status();
}

void VAttentionKv::set_lane_cap(int seq, int64_t layer, int64_t kv_head, int64_t cap) {
    const size_t lk = lane_index(seq, layer, kv_head, 0);
    SIEVE_CHECKF(cap >= 0 && (cap == 0 || cap >= lanes_[lk].rows), "set_lane_cap(%d, %lld, %lld, %lld): lane holds "
                 "%lld rows", seq, static_cast<long long>(layer), static_cast<long long>(kv_head),
                 static_cast<long long>(cap), static_cast<long long>(lanes_[lk].rows));
    for (size_t l = lk; l < lk + 2; ++l) {
        lanes_[l].cap = cap;
        shrink_lane(l, std::max(pages_for_rows(protected_rows(seq, l), kind(l)),
                                std::min<int64_t>(static_cast<int64_t>(lanes_[l].pages.size()),
                                                  pages_for_rows(lane_max_rows(lanes_[l]), kind(l)))));
    }
}

void VAttentionKv::set_slot_n_pos(int seq, int64_t n_pos) {
    check_slot(seq);
    SIEVE_CHECKF(n_pos >= 0, "set_slot_n_pos(%d, %lld)", seq, static_cast<long long>(n_pos));
    n_pos_[static_cast<size_t>(seq)] = n_pos;
}

int64_t VAttentionKv::lane_cap(int seq, int64_t layer, int64_t kv_head) const {
    return lanes_[lane_index(seq, layer, kv_head, 0)].cap;
}

void VAttentionKv::set_lane_rows(int seq, int64_t layer, int64_t kv_head, int64_t n) {
    const size_t lk = lane_index(seq, layer, kv_head, 0);
    SIEVE_CHECKF(n >= 0 && n <= lane_capacity(seq, layer, kv_head), "set_lane_rows(%d, %lld, %lld, %lld): "
                 "capacity %lld", seq, static_cast<long long>(layer), static_cast<long long>(kv_head),
                 static_cast<long long>(n), static_cast<long long>(lane_capacity(seq, layer, kv_head)));
    summaries_invalidate(seq, layer, kv_head, std::min(n, lanes_[lk].rows));
    lanes_[lk].rows = lanes_[lk + 1].rows = n;
}

Status VAttentionKv::compact(int seq, int64_t layer, int64_t kv_head, const int32_t *keep_rows, int64_t n_keep) {
    const size_t lk = lane_index(seq, layer, kv_head, 0);
    SIEVE_TRY(kv_check_keep_list(seq, layer, kv_head, lanes_[lk].rows, keep_rows, n_keep));
    int64_t i0 = 0;  // rows before i0 stay where they are
    while (i0 < n_keep && keep_rows[i0] == i0) ++i0;
    // Copy shared pages first (both lanes) so a failure leaves the rows untouched.
    for (size_t l = lk; l < lk + 2; ++l) SIEVE_TRY(unshare_rows(l, i0, n_keep, seq));
    for (size_t l = lk; l < lk + 2; ++l) {
        char *a = lane_addr(l);
        const int64_t rb = rb_[kind(l)];
        // keep_rows[i] > i for i >= i0, so each source row is read before any
        // later destination overwrites it.
        for (int64_t i = i0; i < n_keep; ++i)
            std::memcpy(a + i * rb, a + keep_rows[i] * rb, static_cast<size_t>(rb));
        lanes_[l].rows = n_keep;
        shrink_lane(l, pages_for_rows(n_keep, kind(l)));
    }
    if (!positions_.empty()) {
        int32_t *pos = positions_[lk / 2].data();
        for (int64_t i = i0; i < n_keep; ++i) pos[i] = pos[keep_rows[i]];
    }
    summaries_invalidate(seq, layer, kv_head, i0);
    return Status();
}

// ---------------------------------------------------------------------------
// Sharing
// ---------------------------------------------------------------------------

Status VAttentionKv::share_prefix(int dst_seq, int src_seq, int64_t n_rows) {
    check_slot(dst_seq);
    check_slot(src_seq);
    const int64_t lanes_per_seq = shape_.n_layer * shape_.n_head_kv * 2;
    const size_t d0 = static_cast<size_t>(dst_seq * lanes_per_seq), s0 = static_cast<size_t>(src_seq * lanes_per_seq);
    bool dst_empty = n_pos_[static_cast<size_t>(dst_seq)] == 0;
    int64_t src_rows = max_ctx_;
    for (int64_t i = 0; i < lanes_per_seq; ++i) {
        dst_empty = dst_empty && lanes_[d0 + static_cast<size_t>(i)].rows == 0;
        src_rows = std::min(src_rows, lanes_[s0 + static_cast<size_t>(i)].rows);
    }
    if (dst_seq == src_seq || !dst_empty || n_rows < 0 || n_rows > src_rows) {
        return Status::errorf("KV share_prefix(dst %d, src %d, %lld rows): needs two different slots, an empty "
                              "dst and n_rows <= %lld rows held by every src lane",
                              dst_seq, src_seq, static_cast<long long>(n_rows), static_cast<long long>(src_rows));
    }
    for (int64_t i = 0; i < lanes_per_seq; ++i) {
        const size_t ld = d0 + static_cast<size_t>(i), ls = s0 + static_cast<size_t>(i);
        const int64_t k = pages_for_rows(n_rows, kind(i));
        Lane &dst = lanes_[ld];
        // dst pages [0, k) are replaced by src's (mmap MAP_FIXED swaps them in
        // place); the old ones go back to the pool after the mapping.
        std::vector<int32_t> old(dst.pages.begin(), dst.pages.begin() + std::min<int64_t>(k, dst.pages.size()));
        if (static_cast<int64_t>(dst.pages.size()) < k) {
            n_mapped_ += k - static_cast<int64_t>(dst.pages.size());
            dst.pages.resize(static_cast<size_t>(k));
        }
        for (int64_t j = 0; j < k; ++j) {
            pool_->add_ref(lanes_[ls].pages[static_cast<size_t>(j)]);
            dst.pages[static_cast<size_t>(j)] = lanes_[ls].pages[static_cast<size_t>(j)];
        }
        Status st = map_range(ld, 0, k, false);
        for (int32_t p : old) pool_->release(p);
        if (!st.ok()) {
            release(dst_seq);
            return st;
        }
        dst.rows = n_rows;
        dst.cap = 0;  // a new sequence in the slot: caps belong to the one before
        if (!positions_.empty() && i % 2 == 0) {
            const std::vector<int32_t> &sp = positions_[ls / 2];
            positions_[ld / 2].assign(sp.begin(), sp.begin() + n_rows);
        }
    }
    n_pos_[static_cast<size_t>(dst_seq)] = n_rows;
    summaries_reset(dst_seq);
    return Status();
}

Status VAttentionKv::prepare_write(int seq, int64_t from_row) {
    check_slot(seq);
    // Rows from from_row on may change: blocks published past it no longer
    // describe this slot (the cache keeps its own copies), so publishing
    // starts over from the chain's beginning.
    Published &pub = published_[static_cast<size_t>(seq)];
    if (prefix_ && pub.n_blocks * prefix_->block_rows() > from_row) pub = Published();
    const int64_t lanes_per_seq = shape_.n_layer * shape_.n_head_kv * 2;
    for (int64_t i = 0; i < lanes_per_seq; ++i) {
        const size_t l = static_cast<size_t>(seq * lanes_per_seq + i);
        SIEVE_TRY(unshare_rows(l, from_row, max_ctx_, seq));
    }
    return Status();
}

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------

Status VAttentionKv::map_ahead(int seq) {
    check_slot(seq);
    if (n_pos_[static_cast<size_t>(seq)] == 0) return Status();  // idle: nothing is growing
    const int64_t lanes_per_seq = shape_.n_layer * shape_.n_head_kv * 2;
    for (int64_t i = 0; i < lanes_per_seq; ++i) {
        const size_t l = static_cast<size_t>(seq * lanes_per_seq + i);
        // The next row's page plus headroom. Headroom must not take running
        // slots' pages: never reclaim here.
        const int64_t have = static_cast<int64_t>(lanes_[l].pages.size());
        const int64_t limit = pages_for_rows(lane_max_rows(lanes_[l]), kind(l));
        const int64_t want = std::min(
            {pages_for_rows(std::min(lane_max_rows(lanes_[l]), lanes_[l].rows + 1), kind(l)) + headroom_,
             have + pool_->n_free(), limit});
        SIEVE_TRY(grow_lane(l, want, want, -2, false));
    }
    return Status();
}

void VAttentionKv::release(int seq) {
    clear(seq);
    const int64_t lanes_per_seq = shape_.n_layer * shape_.n_head_kv * 2;
    for (int64_t i = 0; i < lanes_per_seq; ++i) shrink_lane(static_cast<size_t>(seq * lanes_per_seq + i), 0);
}

int64_t VAttentionKv::trim() {
    const int64_t free0 = pool_->n_free();
    for (size_t l = 0; l < lanes_.size(); ++l) shrink_lane(l, pages_for_rows(lanes_[l].rows, kind(l)));
    return pool_->n_free() - free0;
}

// ---------------------------------------------------------------------------
// Accounting
// ---------------------------------------------------------------------------

int64_t VAttentionKv::lane_mapped_bytes(int seq, int64_t layer, int64_t kv_head) const {
    const size_t lk = lane_index(seq, layer, kv_head, 0);
    return static_cast<int64_t>(lanes_[lk].pages.size() + lanes_[lk + 1].pages.size()) * pool_->page_bytes();
}

int64_t VAttentionKv::seq_mapped_bytes(int seq) const {
    int64_t b = 0;
    for (int64_t il = 0; il < shape_.n_layer; ++il)
        for (int64_t h = 0; h < shape_.n_head_kv; ++h) b += lane_mapped_bytes(seq, il, h);
    return b;
}

int64_t VAttentionKv::layer_mapped_bytes(int64_t layer) const {
    int64_t b = 0;
    for (int seq = 0; seq < shape_.n_seq; ++seq)
        for (int64_t h = 0; h < shape_.n_head_kv; ++h) b += lane_mapped_bytes(seq, layer, h);
    return b;
}

Status VAttentionKv::check_accounting() const {
    SIEVE_TRY(pool_->check_accounting());
    std::vector<int32_t> uses(static_cast<size_t>(pool_->n_pages()), 0);
    int64_t n = 0;
    for (size_t l = 0; l < lanes_.size(); ++l) {
        const Lane &ln = lanes_[l];
        if (ln.rows < 0 || ln.rows > rows_in_pages(static_cast<int64_t>(ln.pages.size()), kind(l)) ||
            static_cast<int64_t>(ln.pages.size()) * pool_->page_bytes() > span_) {
            return Status::errorf("KV lane %zu: %lld rows in %zu pages (span %lld bytes)", l,
                                  static_cast<long long>(ln.rows), ln.pages.size(), static_cast<long long>(span_));
        }
        for (int32_t p : ln.pages) ++uses[static_cast<size_t>(p)];
        n += static_cast<int64_t>(ln.pages.size());
    }
    int64_t n_cached = 0;
    for (int32_t p = 0; p < pool_->n_pages(); ++p) n_cached += pool_->cached(p);
    if (n != n_mapped_ || n + n_cached != pool_->n_refs()) {
        return Status::errorf("KV lanes map %lld pages, running total %lld, pool refcounts %lld (%lld held by the "
                              "prefix cache)",
                              static_cast<long long>(n), static_cast<long long>(n_mapped_),
                              static_cast<long long>(pool_->n_refs()), static_cast<long long>(n_cached));
    }
    for (int32_t p = 0; p < pool_->n_pages(); ++p) {
        if (uses[static_cast<size_t>(p)] + (pool_->cached(p) ? 1 : 0) != pool_->refcount(p))
            return Status::errorf("KV page %d: mapped by %d lanes%s, refcount %d", p, uses[static_cast<size_t>(p)],
                                  pool_->cached(p) ? " and the prefix cache" : "", pool_->refcount(p));
    }
    if (prefix_) {
        std::string why;
        if (!prefix_->check(&why)) return Status::error(why);
        if (prefix_->n_pages_held() != n_cached)
            return Status::errorf("KV prefix cache holds %lld pages, the pool flags %lld",
                                  static_cast<long long>(prefix_->n_pages_held()), static_cast<long long>(n_cached));
    } else if (n_cached != 0) {
        return Status::errorf("KV pool flags %lld pages as cached, but the store has no prefix cache",
                              static_cast<long long>(n_cached));
    }
    for (int seq = 0; seq < shape_.n_seq; ++seq) {
        if (n_pos_[static_cast<size_t>(seq)] > capacity(seq))
            return Status::errorf("KV slot %d: n_pos %lld > capacity %lld", seq,
                                  static_cast<long long>(n_pos_[static_cast<size_t>(seq)]),
                                  static_cast<long long>(capacity(seq)));
    }
    return Status();
}

}  // namespace sieve
