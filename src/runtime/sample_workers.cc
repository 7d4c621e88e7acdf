#include "runtime/sample_workers.h"

#include <algorithm>
#include <new>
#include <stdexcept>

namespace qwen35::runtime {

SampleWorkers::SampleWorkers(int threads, std::function<void()> wake)
    : max_threads_(std::max(1, threads)), wake_(std::move(wake)) {}

SampleWorkers::~SampleWorkers() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    jobs_.clear();
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void SampleWorkers::set_wake(std::function<void()> wake) {
  std::lock_guard lk(mu_);
  wake_ = std::move(wake);
}

// A thread is started only when no idle one can take the job, up to max_threads (the Stepper
// gives two per slot: a sequence has at most a sample and a prefetch in flight).
void SampleWorkers::submit(std::function<void()> job) {
  {
    std::lock_guard lk(mu_);
    jobs_.push_back(std::move(job));
    if (idle_ == 0 && int(threads_.size()) < max_threads_)
      threads_.emplace_back([this] { run(); });
  }
  cv_.notify_one();
}

void SampleWorkers::run() {
  std::unique_lock lk(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
    --idle_;
    if (stop_) return;
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lk.unlock();
    job();
    lk.lock();
  }
}

void SampleWorkers::sample(std::shared_ptr<DeferredSample> d) {
  submit([this, d = std::move(d)] {
    try {
      d->result = d->sampler->try_sample(d->logits.data(), grammar::Access::kBuild, &d->why);
    } catch (const std::bad_alloc&) {
      d->out_of_memory = true;
    } catch (const std::length_error&) {
      d->out_of_memory = true;
    }
    d->done.store(true, std::memory_order_release);
    std::function<void()> wake;
    {
      std::lock_guard lk(mu_);
      samples_done_.fetch_add(1, std::memory_order_release);
      wake = wake_;
    }
    done_cv_.notify_all();
    if (wake) wake();
  });
}

void SampleWorkers::prefetch(std::shared_ptr<grammar::Automaton> a,
                             std::vector<std::pair<int32_t, int64_t>> masks,
                             std::shared_ptr<std::atomic<bool>> busy) {
  if (masks.empty() || busy->exchange(true)) return;
  submit([a = std::move(a), masks = std::move(masks), busy = std::move(busy)] {
    // Only caches fill here: a failure (an exhausted automaton, memory) is the sample's to meet.
    // A session per mask, so that the engine thread's bounded sessions get the lock between.
    try {
      std::vector<uint64_t> words;
      for (const auto& [config, limit] : masks) {
        grammar::Automaton::Session s(*a, grammar::Access::kBuild);
        if (!s.has_mask(config, limit)) s.mask(config, limit, &words);
      }
    } catch (const std::exception&) {
    }
    busy->store(false);
  });
}

void SampleWorkers::wait_for_sample(int64_t seen) {
  std::unique_lock lk(mu_);
  done_cv_.wait(lk, [&] { return samples_done_.load(std::memory_order_acquire) != seen; });
}

}  // namespace qwen35::runtime
