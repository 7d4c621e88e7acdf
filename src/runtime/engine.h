// The serving engine: one engine thread owns the model and every sequence state; other threads
// only submit requests, read the published stats and drain their result streams.
//
// The engine is a thread and a queue around a runtime::Stepper (runtime/stepper.h: the slots,
// states, pool and prefix cache, admission and the step). Continuous batching: each step runs
// one forward call over every running sequence: one decode
// row per generating sequence (or its verification rows, when it drafts), plus prefill chunks of
// sequences still reading their prompt, under a per-step token budget. Requests join the batch
// (a free slot takes the oldest queued request) and leave it (finished, cancelled) between
// steps. A request's life is a runtime::Sequence, through explicit phases (runtime/sequence.h).
//
// Exactness (docs/design.md §6): a prompt is always cut at absolute multiples of model::kDeltaChunk
// (and at its own end); the budget decides how many grid chunks run in a step, never where a
// chunk starts. So a request's rows are computed the same way whatever else runs, and its tokens
// and logprobs are bit-identical to a solo run (the model's kernels are batch invariant). A
// request resumed from the prefix cache starts from a state computed on the same grid, so it is
// bit-identical to a fresh one too.
//
// Sampling off the engine thread (runtime/sample_workers.h): a step never waits for a grammar's
// work; when every running request waits for a worker's sample, the engine thread sleeps until
// one is done (a worker sets wake_), a request comes, or kIdlePoll passes (cancellations).
//
// Locking: mu_ guards the submission queue and the stop flags only; the engine thread holds it
// to move the queue into its own list, never through admission (cache resumes, samplers) or a
// step. stats() reads a copy the engine thread publishes after admission and after every step,
// under pub_mu_, which is held only to copy it: neither submit() nor stats() waits for a step.
//
// Thread-safety: submit(), stats(), cache_log() and shutdown() may be called from any thread. A
// RequestStream is shared by the engine thread (producer) and one consumer thread.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/model.h"
#include "runtime/engine_options.h"
#include "runtime/generation_request.h"
#include "runtime/request_stream.h"
#include "runtime/stepper.h"

namespace qwen35::runtime {

enum class SubmitError { kNone, kQueueFull, kInvalid, kShuttingDown };

class Engine {
 public:
  Engine(model::Model& model, const EngineOptions& opts);
  ~Engine();  // cancels what is left and joins the engine thread

  // Queues a request. On failure returns null and sets *err (and *message).
  std::shared_ptr<RequestStream> submit(GenerationRequest req, SubmitError* err,
                                        std::string* message);
  // Queues a group (the choices of one API request) all or nothing: every request is validated
  // first, and the group is refused whole when it does not fit. kInvalid when it can never fit
  // (more requests than slots + queue places, a prompt over the context), kQueueFull when it
  // does not fit now. Returns one stream per request, or none on failure.
  std::vector<std::shared_ptr<RequestStream>> submit_group(std::vector<GenerationRequest> reqs,
                                                           SubmitError* err, std::string* message);
  // The most requests the engine holds at once: running (--parallel) + waiting (--max-queue).
  int64_t capacity() const { return int64_t(opts_.parallel) + opts_.max_queue; }

  // The counters as published after the engine's last admission or step; never waits for one.
  EngineStats stats() const;
  const EngineOptions& options() const { return opts_; }
  // Positions one sequence may reach: min(ctx, the KV pool); a prompt must be shorter. Fixed
  // once the engine is built, so any thread may read it.
  int64_t context() const { return stepper_.context(); }
  // What loading and saving the prefix cache (cache_dir) had to say, a line each.
  std::vector<std::string> cache_log() const;

  // Stops accepting requests; with `drain`, waits until running and queued requests finish,
  // else cancels them. Then stops the engine thread. Idempotent.
  void shutdown(bool drain);

 private:
  void loop();
  // Waits for work (after an idle pass, for a worker's sample too), moves the queue into
  // waiting_; false: stop now.
  bool take_queue(bool idle);
  void publish();     // the gauges and counters, for stats()
  void count_waiting();
  void count(const StepOutput& out);

  Stepper stepper_;
  const EngineOptions& opts_;  // stepper_'s, normalized

  // Engine thread only.
  std::deque<std::unique_ptr<Sequence>> waiting_;  // taken from the queue, not yet admitted
  size_t counted_waiting_ = 0;                     // waiting_'s size as queued_ last counted it
  EngineStats stats_;                              // the engine's own copy
  bool saved_ = false;

  // Guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> queue_;
  bool accepting_ = true, stop_ = false, drain_ = false;
  bool wake_ = false;  // a worker finished a sample
  uint64_t next_group_ = 0;  // each submit_group call's sequences share one (Sequence::group)
  // Requests held (queued, waiting or running): submit() adds, the engine thread takes away
  // before it closes their streams. capacity() bounds it.
  std::atomic<int64_t> held_{0};
  std::atomic<int64_t> queued_{0};  // of which queued or waiting (not yet admitted)

  mutable std::mutex pub_mu_;  // held only to copy published_ (and cache_log_)
  EngineStats published_;
  std::vector<std::string> cache_log_;
  std::thread thread_;
};

}  // namespace qwen35::runtime
