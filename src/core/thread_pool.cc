#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace qwen35::core {

int ThreadPool::hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads <= 0 ? hardware_threads() : n_threads) {
  next_.store(n_threads_);  // no share is open before the first parallel_for
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this] { worker(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  cv_work_.notify_all();
  for (auto& t : threads_) t.join();
}

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// How long an idle worker spins before it sleeps.
constexpr auto kSpin = std::chrono::microseconds(300);

}  // namespace

void ThreadPool::run_share(int index) {
  const size_t n_chunks = (n_ + grain_ - 1) / grain_;
  const size_t per = n_chunks / size_t(n_threads_);
  const size_t extra = n_chunks % size_t(n_threads_);
  const size_t i = size_t(index);
  const size_t c0 = i * per + std::min(i, extra);
  const size_t c1 = c0 + per + (i < extra ? 1 : 0);
  const size_t b = std::min(n_, c0 * grain_), e = std::min(n_, c1 * grain_);
  if (b < e) (*fn_)(b, e, index);
}

void ThreadPool::worker() {
  uint64_t seen = 0;
  for (;;) {
    // Spin for new work, then sleep. The sleeping_ count and the generation are both sequentially
    // consistent, so a caller that bumps the generation either is seen here under the lock or sees
    // this thread asleep and notifies it.
    uint64_t g = generation_.load();
    if (g == seen && !stop_.load()) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; (g = generation_.load()) == seen && !stop_.load(); ++i) {
        cpu_relax();
        if ((i & 255) == 255 && std::chrono::steady_clock::now() - t0 > kSpin) break;
      }
    }
    if (g == seen && !stop_.load()) {
      std::unique_lock<std::mutex> lock(mu_);
      sleeping_.fetch_add(1);
      cv_work_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
      sleeping_.fetch_sub(1);
      g = generation_.load();
    }
    if (stop_.load()) return;
    seen = g;
    run_shares();
  }
}

void ThreadPool::run_shares() {
  // A claim that reads a reset counter (parallel_for's release store, or an RMW after it) sees
  // that job's fn_, n_ and grain_; a claim past the last share touches nothing.
  for (;;) {
    const int k = next_.fetch_add(1, std::memory_order_acq_rel);
    if (k >= n_threads_) return;
    run_share(k);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(size_t n, const RangeFn& fn, size_t grain) {
  if (n == 0) return;
  if (grain == 0) grain = 1;
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  fn_ = &fn;
  n_ = n;
  grain_ = grain;
  pending_.store(n_threads_);
  next_.store(0, std::memory_order_release);  // opens the shares to claims
  generation_.fetch_add(1);  // wakes the workers (sequentially consistent)
  if (sleeping_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_work_.notify_all();
  }
  run_shares();
  for (int i = 0; pending_.load(std::memory_order_acquire) != 0; ++i) {
    cpu_relax();
    if (i > 4096) std::this_thread::yield();
  }
  fn_ = nullptr;
}

}  // namespace qwen35::core
