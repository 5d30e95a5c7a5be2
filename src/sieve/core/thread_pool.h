// A persistent thread pool. The calling thread takes part in every job, so a
// pool of n threads starts n-1 workers. Dispatch does not allocate: the job is
// a function pointer and a context pointer to the caller's lambda, which lives
// on the caller's stack until run() returns.
//
//   pool.run(n_tasks, [&](int64_t task, int thread) { ... });
//
// Tasks are claimed from one atomic word that packs (job generation, next
// task). The caller waits for *tasks* to finish, not for workers to check in:
// a worker that is asleep or descheduled when a job is posted costs nothing,
// since the caller simply runs the tasks itself, and a late worker cannot claim
// a task of a job that has moved on (its generation no longer matches).
// Workers spin on the word between the kernels of a forward pass and sleep on
// a futex only after a long idle spell; the caller pays a wake-up syscall only
// when some worker is actually asleep.
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
    // so it can index per-thread scratch. n_tasks < 2^31.
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
    // Claims and runs tasks of generation gen until none are left; returns
    // how many it ran.
    int64_t drain(uint32_t gen, int thread);

    int n_threads_;
    std::vector<std::thread> workers_;
    // Current job; written by the caller before the generation is published in
    // claim_. Atomics so a late worker's read of a newer job is well defined
    // (it then fails to claim, see drain()).
    std::atomic<Trampoline> job_fn_{nullptr};
    std::atomic<void *> job_ctx_{nullptr};
    std::atomic<int64_t> job_n_{0};
    uint32_t gen_ = 0;  // caller only
    // (generation << 32) | next task index
    alignas(64) std::atomic<uint64_t> claim_{0};
    alignas(64) std::atomic<int64_t> n_done_{0};
    alignas(64) std::atomic<int> n_sleeping_{0};
    std::atomic<uint32_t> wake_{0};
    std::atomic<bool> stop_{false};
};

}  // namespace sieve
