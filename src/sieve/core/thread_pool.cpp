#include "sieve/core/thread_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "sieve/core/status.h"

namespace sieve {

namespace {
// A spin-wait hint: the core gives its pipeline to its sibling hyperthread
// and saves power while the loop polls.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

// How long an idle worker spins before sleeping: long enough to cover the gap
// between two kernels of one forward pass (and between decode steps), short
// enough not to burn a core between requests.
constexpr int k_spin_iters = 1 << 17;
// How long the caller spins waiting for stragglers before it yields.
constexpr int k_wait_spin_iters = 1 << 12;

constexpr uint32_t gen_of(uint64_t c) { return static_cast<uint32_t>(c >> 32); }
constexpr int64_t idx_of(uint64_t c) { return static_cast<int64_t>(c & 0xffffffffu); }
// Task index of a generation whose job is being written: nothing to claim yet.
constexpr int64_t k_closed = 0xffffffff;
constexpr uint64_t pack(uint32_t gen, int64_t idx) { return (static_cast<uint64_t>(gen) << 32) | static_cast<uint64_t>(idx); }
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
    workers_.reserve(static_cast<size_t>(n_threads_ - 1));
    for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_main(t); });
}

ThreadPool::~ThreadPool() {
    stop_.store(true);
    wake_.fetch_add(1);
    wake_.notify_all();
    for (auto &w : workers_) w.join();
}

int64_t ThreadPool::drain(uint32_t gen, int thread) {
    int64_t n_ran = 0;
    uint64_t c = claim_.load(std::memory_order_acquire);
    for (;;) {
        if (gen_of(c) != gen || idx_of(c) == k_closed) break;
        // Read the job, then claim. The caller closes the word (a new
        // generation, index k_closed) BEFORE it rewrites the job, so if the
        // claim below succeeds the word still held generation gen, the job was
        // not yet being replaced, and what we read is gen's job. (Reading the
        // job after a close and then claiming the old word's next index was a
        // hang: the stale task was counted in the next job's n_done_.)
        const Trampoline fn = job_fn_.load(std::memory_order_acquire);
        void *ctx = job_ctx_.load(std::memory_order_acquire);
        const int64_t n = job_n_.load(std::memory_order_acquire);
        if (idx_of(c) >= n) break;
        if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
        fn(ctx, idx_of(c), thread);
        ++n_ran;
        c = claim_.load(std::memory_order_acquire);
    }
    return n_ran;
}

void ThreadPool::run_impl(int64_t n_tasks, Trampoline fn, void *ctx) {
    if (n_tasks <= 0) return;
    SIEVE_CHECKF(n_tasks < (int64_t{1} << 31), "ThreadPool::run: %lld tasks", static_cast<long long>(n_tasks));
    if (n_threads_ == 1 || n_tasks == 1) {
        for (int64_t i = 0; i < n_tasks; ++i) fn(ctx, i, 0);
        return;
    }
    const uint32_t gen = ++gen_;
    // 1. close: any claim a late worker attempts on the previous word fails;
    // 2. write the job; 3. open generation gen at task 0.
    claim_.store(pack(gen, k_closed), std::memory_order_seq_cst);
    job_fn_.store(fn, std::memory_order_release);
    job_ctx_.store(ctx, std::memory_order_release);
    job_n_.store(n_tasks, std::memory_order_release);
    n_done_.store(0, std::memory_order_relaxed);
    claim_.store(pack(gen, 0), std::memory_order_seq_cst);
    if (n_sleeping_.load(std::memory_order_seq_cst) > 0) {
        wake_.fetch_add(1, std::memory_order_seq_cst);
        wake_.notify_all();
    }
    const int64_t mine = drain(gen, 0);
    // Wait for the tasks workers claimed. Spin first (the common case is a
    // worker one task behind); past that, a worker has probably been
    // descheduled by another process, so give the core back instead of
    // burning the time slice it needs.
    const int64_t others = n_tasks - mine;
    for (int spins = 0;; ++spins) {
        const int64_t done = n_done_.load(std::memory_order_acquire);
        if (done == others) break;
        SIEVE_CHECKF(done < others, "thread pool: %lld tasks reported done, workers claimed %lld",
                     static_cast<long long>(done), static_cast<long long>(others));
        if (spins < k_wait_spin_iters) {
            cpu_relax();
        } else {
            std::this_thread::yield();
        }
    }
}

void ThreadPool::worker_main(int thread) {
    uint32_t seen = 0;  // the last generation this worker drained
    for (;;) {
        uint32_t gen = seen;
        for (int i = 0; i < k_spin_iters && gen == seen; ++i) {
            const uint64_t c = claim_.load(std::memory_order_acquire);
            gen = idx_of(c) == k_closed ? seen : gen_of(c);  // a job being written is not new yet
            if (gen == seen) cpu_relax();
        }
        if (gen == seen) {
            // Sleep. Announce it first, then re-check the word: a caller that
            // published after our check sees n_sleeping_ > 0 and bumps wake_.
            const uint32_t w = wake_.load(std::memory_order_seq_cst);
            n_sleeping_.fetch_add(1, std::memory_order_seq_cst);
            gen = gen_of(claim_.load(std::memory_order_seq_cst));
            if (gen == seen && !stop_.load()) wake_.wait(w, std::memory_order_seq_cst);
            n_sleeping_.fetch_sub(1, std::memory_order_seq_cst);
            if (stop_.load()) return;
            continue;
        }
        if (stop_.load()) return;
        seen = gen;
        const int64_t n_ran = drain(gen, thread);
        if (n_ran > 0) n_done_.fetch_add(n_ran, std::memory_order_release);
    }
}

}  // namespace sieve
