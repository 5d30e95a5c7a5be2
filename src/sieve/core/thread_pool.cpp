#include "sieve/core/thread_pool.h"

#include <immintrin.h>

#include "sieve/core/status.h"

namespace sieve {

namespace {
// How long an idle worker spins before sleeping: long enough to cover the gap
// between two kernels of one forward pass, short enough not to burn a core
// between requests.
constexpr int k_spin_iters = 1 << 16;
// How long the caller spins waiting for stragglers before it yields.
constexpr int k_wait_spin_iters = 1 << 12;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
    workers_.reserve(static_cast<size_t>(n_threads_ - 1));
    for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_main(t); });
}

ThreadPool::~ThreadPool() {
    stop_.store(true);
    generation_.fetch_add(1);
    generation_.notify_all();
    for (auto &w : workers_) w.join();
}

void ThreadPool::drain(int thread) {
    for (;;) {
        int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
        if (task >= job_n_) break;
        job_fn_(job_ctx_, task, thread);
    }
}

void ThreadPool::run_impl(int64_t n_tasks, Trampoline fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (n_threads_ == 1 || n_tasks == 1) {
        for (int64_t i = 0; i < n_tasks; ++i) fn(ctx, i, 0);
        return;
    }
    job_fn_ = fn;
    job_ctx_ = ctx;
    job_n_ = n_tasks;
    next_task_.store(0, std::memory_order_relaxed);
    n_active_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    drain(0);
    // Wait for the workers to finish their last task. Spin first (the common
    // case is a worker one task behind); past that, a worker has probably been
    // descheduled by another process, so give the core back instead of
    // burning the time slice it needs.
    for (int spins = 0; n_active_.load(std::memory_order_acquire) != 0; ++spins) {
        if (spins < k_wait_spin_iters) {
            _mm_pause();
        } else {
            std::this_thread::yield();
        }
    }
}

void ThreadPool::worker_main(int thread) {
    // Start from the generation at construction (0), not a fresh load: a job
    // posted before this thread first runs must still be seen as new.
    uint32_t seen = 0;
    for (;;) {
        uint32_t gen = seen;
        for (int i = 0; i < k_spin_iters; ++i) {
            gen = generation_.load(std::memory_order_acquire);
            if (gen != seen) break;
            _mm_pause();
        }
        if (gen == seen) {
            generation_.wait(seen, std::memory_order_acquire);
            gen = generation_.load(std::memory_order_acquire);
        }
        seen = gen;
        if (stop_.load()) return;
        drain(thread);
        n_active_.fetch_sub(1, std::memory_order_release);
    }
}

}  // namespace sieve
