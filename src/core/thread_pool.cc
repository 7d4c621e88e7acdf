#include "core/thread_pool.h"

#include <algorithm>

namespace qwen35::core {

int ThreadPool::hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads <= 0 ? hardware_threads() : n_threads) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (auto& t : threads_) t.join();
}

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

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_work_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_share(index);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) cv_done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(size_t n, const RangeFn& fn, size_t grain) {
  if (n == 0) return;
  if (grain == 0) grain = 1;
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    grain_ = grain;
    pending_ = n_threads_ - 1;
    ++generation_;
  }
  cv_work_.notify_all();
  run_share(0);
  std::unique_lock<std::mutex> lock(mu_);
  cv_done_.wait(lock, [&] { return pending_ == 0; });
  fn_ = nullptr;
}

}  // namespace qwen35::core
