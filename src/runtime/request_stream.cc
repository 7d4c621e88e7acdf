#include "runtime/request_stream.h"

namespace qwen35::runtime {

bool RequestStream::next(StreamEvent* ev, std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  if (!cv_.wait_for(lk, timeout, [&] { return !events_.empty(); })) return false;
  *ev = std::move(events_.front());
  events_.pop_front();
  return true;
}

void RequestStream::push(StreamEvent ev) {
  std::function<void()> wake;
  {
    std::lock_guard lk(mu_);
    events_.push_back(std::move(ev));
    wake = waker_;
  }
  cv_.notify_one();
  if (wake) wake();
}

void RequestStream::set_waker(std::function<void()> waker) {
  std::lock_guard lk(mu_);
  waker_ = std::move(waker);
}

RequestTiming RequestStream::timing() const {
  std::lock_guard lk(mu_);
  return timing_;
}

void RequestStream::set_admitted(RequestTiming::Clock::time_point t, int64_t reused) {
  std::lock_guard lk(mu_);
  timing_.admitted = t;
  timing_.prompt_reused = reused;
}

void RequestStream::set_prompt_read(RequestTiming::Clock::time_point t) {
  std::lock_guard lk(mu_);
  timing_.prompt_read = t;
  timing_.prompt_done = true;
}

}  // namespace qwen35::runtime
