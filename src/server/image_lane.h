// The image lane (docs/design.md "Image admission"): the requests that carry images run here,
// on threads of their own, instead of on the HTTP workers (server.h). Decoding and resizing an
// image takes from milliseconds to seconds of one core; on the HTTP workers four image requests
// would leave a text request no worker. Here they wait for one of `threads` lane threads, in a
// queue of at most `queue` requests; a request that finds the queue full is refused at once
// (HTTP 429 with Retry-After), so neither threads nor memory pile up behind images. Lane threads
// run at nice +10: on busy cores the engine and the HTTP workers go first.
//
// Failures end the request, never the lane: a lane thread that cannot be started (a container's
// PID limit, an address-space limit) leaves the lane with those that did start, and with none a
// request is answered 503 (the next request tries again); an exception out of a job is caught
// (the server's job answers it as a 500 first). stop() lets the queued jobs run (the server
// answers them 503 while shutting down), releases a test gate, and joins the threads: it
// returns in every state.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "server/api_error.h"

namespace qwen35::server {

struct ImageLaneOptions {
  int threads = 2;  // image requests handled at once
  int queue = 8;    // image requests waiting beyond them; more get 429
  // Starts a thread that runs `fn` (std::thread by default); throws std::system_error when it
  // cannot, as std::thread does. Tests inject failures here.
  std::function<std::thread(std::function<void()>)> start_thread;
  // Tests only (the server sets it from QWEN35_TEST_IMAGE_GATE): each job waits until this file
  // exists, or the lane stops, so a test can hold every lane thread busy without timing.
  std::string gate_file;
};

inline constexpr int kMaxImageThreads = 64;

class ImageLane {
 public:
  explicit ImageLane(ImageLaneOptions opts);
  ~ImageLane();  // stop()
  ImageLane(const ImageLane&) = delete;
  ImageLane& operator=(const ImageLane&) = delete;

  // Queues `job` (nothing when queued). Errors: 429 when the queue is full, 503 when no lane
  // thread could be started or the lane is stopping; the job is then dropped unrun.
  std::optional<ApiError> submit(std::function<void()> job);
  void stop();

  struct Stats {
    int threads = 0;  // started
    int busy = 0;     // running a job
    int queued = 0;
    int64_t refused = 0;  // submits refused (queue full, no thread)
    int64_t failed = 0;   // jobs that threw
    std::string start_error;  // why the last thread that could not start did not
  };
  Stats stats() const;

 private:
  void run();
  bool start_threads();  // under mu_; true when at least one thread runs
  void wait_gate(std::unique_lock<std::mutex>& lock);

  const ImageLaneOptions opts_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // The test gate's own: a thread held there must not take a notify_one meant for an idle thread
  // (a job would then wait with a thread free).
  std::condition_variable gate_cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  bool stopping_ = false;
  Stats stats_;
};

}  // namespace qwen35::server
