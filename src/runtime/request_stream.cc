#include "runtime/request_stream.h"

namespace qwen35::runtime {

bool RequestStream::next(StreamEvent* ev, std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  const auto ready = [&] { return !events_.empty() || (ended() && !end_read_); };
  if (!cv_.wait_for(lk, timeout, ready)) return false;
  if (!events_.empty()) {
    *ev = std::move(events_.front());
    events_.pop_front();
    return true;
  }
  end_read_ = true;
  if (done_) {
    *ev = std::move(*done_);
  } else {
    *ev = StreamEvent{};
    ev->kind = StreamEvent::kDone;
    ev->finish_reason = closed_reason_;
    if (closed_error_) ev->error = closed_error_;
  }
  return true;
}

void RequestStream::push(StreamEvent&& ev) {
  std::unique_lock lk(mu_);
  if (ended()) return;
  if (ev.kind == StreamEvent::kDone)
    done_.emplace(std::move(ev));  // no allocation: the strings and vectors move
  else
    events_.push_back(std::move(ev));  // on failure, nothing changed (strong guarantee)
  wake(lk);
}

void RequestStream::close(const char* reason, const char* error) noexcept {
  std::unique_lock lk(mu_);
  if (ended()) return;
  closed_reason_ = reason;
  closed_error_ = error;
  wake(lk);
}

// Notifies next() and calls the waker outside the lock. A waker that throws (it posts to the
// reader's executor, which may allocate) is not the engine's failure: the reader is woken by
// its next event or its own deadline.
void RequestStream::wake(std::unique_lock<std::mutex>& lk) noexcept {
  std::shared_ptr<const std::function<void()>> w = waker_;
  lk.unlock();
  cv_.notify_one();
  if (!w) return;
  try {
    (*w)();
  } catch (...) {
  }
}

void RequestStream::set_waker(std::function<void()> waker) {
  auto w = std::make_shared<const std::function<void()>>(std::move(waker));
  std::lock_guard lk(mu_);
  waker_ = std::move(w);
}

RequestTiming RequestStream::timing() const {
  std::lock_guard lk(mu_);
  return timing_;
}

void RequestStream::set_admitted(RequestTiming::Clock::time_point t, int64_t reused,
                                 uint64_t admission) {
  std::lock_guard lk(mu_);
  timing_.admitted = t;
  timing_.prompt_reused = reused;
  timing_.admission = admission;
}

void RequestStream::add_preemption() {
  std::lock_guard lk(mu_);
  ++timing_.preemptions;
}

void RequestStream::set_reused(int64_t reused) {
  std::lock_guard lk(mu_);
  timing_.prompt_reused = reused;
}

void RequestStream::set_prompt_read(RequestTiming::Clock::time_point t) {
  std::lock_guard lk(mu_);
  timing_.prompt_read = t;
  timing_.prompt_done = true;
}

}  // namespace qwen35::runtime
