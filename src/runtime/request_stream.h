// A request's result stream: the engine thread produces its events, one consumer thread reads
// them (runtime/engine.h).
//
// Thread-safety: push/set_* from the engine thread, next/cancel/timing from any one consumer.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/sampler.h"

namespace qwen35::runtime {

// When a request's phases happened, for a closing line or metrics. Set by the engine thread;
// complete once the kDone event has been received.
struct RequestTiming {
  using Clock = std::chrono::steady_clock;
  Clock::time_point admitted;     // took a slot: prefill starts
  Clock::time_point prompt_read;  // the forward call that read the last prompt token returned
  bool prompt_done = false;       // prompt_read is set (false when cancelled during prefill)
  int64_t prompt_reused = 0;  // prompt tokens resumed from the prefix cache, not computed
  uint64_t admission = 0;     // the engine's admission counter when it first took a slot (1..)
  int64_t preemptions = 0;    // times it gave its slot back to resume later (runtime/stepper.h)
};

// One event of a request's result stream.
struct StreamEvent {
  enum Kind { kToken, kDone, kPrompt } kind = kToken;
  SampleResult sample;               // kToken: the sampled token (+ logprobs when asked)
  std::vector<SampleResult> prompt;  // kPrompt: prompt tokens 1.. of one prefill chunk, in order
  std::string finish_reason;         // kDone: "stop" (end-of-sequence id), "length", "cancelled",
                                     // "error"
  std::string error;                 // kDone with "error"
};

// The per-request queue the engine writes to. cancel() asks the engine to drop the request; it
// does so at the start of its next step and then closes the stream with "cancelled".
//
// Ending a stream never allocates on the engine thread: the kDone event moves into a slot of its
// own, and close() ends it from string literals when even building the event failed (an engine
// thread out of memory). next() returns the other events first, then the end; what is pushed
// after the end is dropped.
class RequestStream {
 public:
  // Blocks until an event is there or `timeout` passes; false on timeout.
  bool next(StreamEvent* ev, std::chrono::milliseconds timeout);
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  RequestTiming timing() const;

  // Called after each push, outside the stream's lock, on the pushing (engine) thread: how a
  // reader that does not block in next() learns there is something to read. Must not block.
  void set_waker(std::function<void()> waker);

  // Engine side. A push that fails to allocate throws with the stream unchanged (`ev` intact).
  void push(StreamEvent&& ev);
  // Ends the stream without allocating: its kDone event, made by the reader, has `reason` and
  // `error` (string literals; error may be null). Nothing when the stream has ended already.
  void close(const char* reason, const char* error) noexcept;
  void set_admitted(RequestTiming::Clock::time_point t, int64_t reused, uint64_t admission);
  void add_preemption();
  void set_prompt_read(RequestTiming::Clock::time_point t);
  void set_reused(int64_t reused);  // a fork took its whole prompt from another sequence
  explicit RequestStream(int64_t prompt_tokens) : prompt_tokens_(prompt_tokens) {}

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
  std::optional<StreamEvent> done_;        // the kDone event, once pushed
  const char* closed_reason_ = nullptr;     // close(): the end, as literals
  const char* closed_error_ = nullptr;
  bool end_read_ = false;                   // next() returned the end
  // Shared, so that a push copies a pointer, not the function (which may allocate).
  std::shared_ptr<const std::function<void()>> waker_;
  RequestTiming timing_;
  bool ended() const { return done_.has_value() || closed_reason_ != nullptr; }
  void wake(std::unique_lock<std::mutex>& lk) noexcept;
  std::atomic<bool> cancelled_{false};
  int64_t prompt_tokens_;
};

}  // namespace qwen35::runtime
