// A persistent thread pool. The calling thread takes part in every job, so a
// pool of n threads starts n-1 workers. Dispatch does not allocate: the job is
// a function pointer and a context pointer to the caller's lambda, which lives
// on the caller's stack until run() returns.
//
//   pool.run(n_tasks, [&](int64_t task, int thread) { ... });
//
// Tasks are handed out with an atomic counter (dynamic scheduling); a worker
// spins briefly after a job before it sleeps, so back-to-back jobs in a
// forward pass don't pay a wake-up each.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace sieve {

class ThreadPool {
public:
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool &) = delete;
    ThreadPool &operator=(const ThreadPool &) = delete;

    int n_threads() const { return n_threads_; }

    // Runs fn(task, thread) for task in [0, n_tasks); returns when all are done.
    // thread is in [0, n_threads()) and unique among concurrently running tasks,
    // so it can index per-thread scratch.
    template <class F>
    void run(int64_t n_tasks, F &&fn) {
        using Fn = std::remove_reference_t<F>;
        run_impl(n_tasks, [](void *ctx, int64_t task, int thread) { (*static_cast<Fn *>(ctx))(task, thread); },
                 static_cast<void *>(&fn));
    }

private:
    using Trampoline = void (*)(void *ctx, int64_t task, int thread);
    void run_impl(int64_t n_tasks, Trampoline fn, void *ctx);
    void worker_main(int thread);
    void drain(int thread);

    int n_threads_;
    std::vector<std::thread> workers_;
    // Current job; written by the caller before generation_ is bumped.
    Trampoline job_fn_ = nullptr;
    void *job_ctx_ = nullptr;
    int64_t job_n_ = 0;
    alignas(64) std::atomic<int64_t> next_task_{0};
    alignas(64) std::atomic<int> n_active_{0};
    alignas(64) std::atomic<uint32_t> generation_{0};
    std::atomic<bool> stop_{false};
};

}  // namespace sieve
