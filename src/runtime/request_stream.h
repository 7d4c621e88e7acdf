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
#include <mutex>
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

  // Engine side.
  void push(StreamEvent ev);
  void set_admitted(RequestTiming::Clock::time_point t, int64_t reused);
  void set_prompt_read(RequestTiming::Clock::time_point t);
  explicit RequestStream(int64_t prompt_tokens) : prompt_tokens_(prompt_tokens) {}

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
  std::function<void()> waker_;
  RequestTiming timing_;
  std::atomic<bool> cancelled_{false};
  int64_t prompt_tokens_;
};

}  // namespace qwen35::runtime
