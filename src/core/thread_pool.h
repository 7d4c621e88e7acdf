// A persistent thread pool (Highway 1.0.3 has none). The caller's thread takes part in the work.
// parallel_for splits [0, n) into one contiguous range (a share) per thread; kernels keep each
// output's reduction inside one item, so results never depend on the thread count. Shares are
// claimed, not assigned: whichever thread claims share k calls fn(begin_k, end_k, k), the same
// call whatever thread makes it, so a worker the OS has not scheduled (other processes on the
// cores) delays nobody: the caller and the running workers take its shares. Per-thread scratch is
// indexed by that k, and one share runs once at a time.
//
// Waking a sleeping thread costs tens of microseconds, and a decode step makes hundreds of calls,
// so idle workers first spin on an atomic generation counter for a while (kSpin, 300 µs) and only
// then sleep on the condition variable; the caller spins (then yields) for the workers to finish.
//
// Thread-safety: one caller at a time (the engine thread). Not reentrant.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>
#include <vector>

namespace qwen35::core {

class ThreadPool {
 public:
  // n_threads includes the calling thread; 0 means the number of hardware threads.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // fn(begin, end, share_index) over a static partition of [0, n) into size() shares of whole
  // chunks of `grain` items (the last chunk may be short). share_index < size(). Blocks until all
  // are done.
  // A non-owning reference to a callable (no heap allocation, unlike std::function); the callable
  // must outlive the parallel_for call, which blocks until the work is done.
  class RangeFn {
   public:
    template <typename F>
    RangeFn(const F& f)  // NOLINT: implicit from any callable
        : obj_(&f), call_([](const void* o, size_t b, size_t e, int t) { (*static_cast<const F*>(o))(b, e, t); }) {}
    void operator()(size_t b, size_t e, int t) const { call_(obj_, b, e, t); }

   private:
    const void* obj_;
    void (*call_)(const void*, size_t, size_t, int);
  };
  void parallel_for(size_t n, const RangeFn& fn, size_t grain = 1);

  static int hardware_threads();

 private:
  void worker();
  void run_share(int index);
  void run_shares();  // claims and runs shares until none is left

  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_work_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};  // shares not yet finished
  std::atomic<int> next_{0};     // the next share to claim; >= n_threads_ when none is left
  std::atomic<int> sleeping_{0};
  std::atomic<bool> stop_{false};
  // The job being run.
  const RangeFn* fn_ = nullptr;
  size_t n_ = 0;
  size_t grain_ = 1;
};

}  // namespace qwen35::core
