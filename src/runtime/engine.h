// The serving engine: one engine thread owns the model and every sequence state; other threads
// only submit requests, read the published stats and drain their result streams.
//
// Continuous batching: each step runs one forward call over every running sequence: one decode
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
#include "runtime/drafter.h"
#include "runtime/generation_request.h"
#include "runtime/prefix_cache.h"
#include "runtime/request_stream.h"
#include "runtime/sampler.h"

namespace qwen35::runtime {

class Sequence;
struct StepOutput;

struct EngineOptions {
  int parallel = 4;           // sequence slots (concurrently running requests)
  int64_t ctx = 4096;         // tokens per slot (prompt + generated)
  int max_queue = 64;         // waiting requests beyond the running ones; more are refused
  int64_t step_tokens = 256;  // per-step row budget (decode rows + prefill rows), >= kDeltaChunk
  // The KV pool, in blocks of kernels::kKvBlock positions shared by all slots (0: enough for
  // every slot at full context). Its memory becomes resident as blocks are first written. A
  // request is admitted when the blocks of its worst case, min(context, prompt + max_tokens),
  // are not promised to running requests; until then it waits. A pool smaller than ctx is the
  // context limit of every request.
  int64_t kv_blocks = 0;
  // The prefix cache (runtime/prefix_cache.h): its bound in bytes (0: off), and the interval
  // of its snapshots within long prompts (a multiple of kernels::kKvBlock) besides each
  // prompt's last grid boundary.
  int64_t cache_bytes = 0;
  int64_t cache_interval = 2048;
  // Persistence: the cache is loaded from cache_dir at construction and saved there at
  // shutdown, its files tagged with cache_fingerprint (the checkpoint and arithmetic mode).
  std::string cache_dir{};
  uint64_t cache_fingerprint = 0;
  // Speculative decoding for requests that do not choose (GenerationRequest::spec).
  SpecOptions spec{};
  // Tests only: called on the engine thread just before a request is resumed from the prefix
  // cache (a test blocks it there to show what does not wait for the engine thread).
  std::function<void()> before_resume{};
};

// A snapshot of the engine's counters, for /metrics and /health.
struct EngineStats {
  int64_t queued = 0, running = 0, slots = 0, slots_busy = 0;
  int64_t kv_tokens_used = 0, kv_tokens_total = 0;
  int64_t kv_blocks_used = 0, kv_blocks_total = 0;  // the KV pool
  int64_t state_bytes = 0;  // conv + recurrent state of all slots, and the KV pool when full
  int64_t steps = 0, prompt_tokens = 0, generated_tokens = 0;
  int64_t finished = 0, cancelled = 0;
  int64_t drafted_tokens = 0, accepted_tokens = 0;  // speculative decoding
  // Per draft position i (the (i+1)-th drafted token of a step): steps that drafted one there,
  // and steps whose draft there was accepted.
  std::array<int64_t, model::kMaxVerifyRows - 1> drafted_at{}, accepted_at{};
  PrefixCacheStats cache;
};

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
  // What loading and saving the prefix cache (cache_dir) had to say, a line each.
  std::vector<std::string> cache_log() const;

  // Stops accepting requests; with `drain`, waits until running and queued requests finish,
  // else cancels them. Then stops the engine thread. Idempotent.
  void shutdown(bool drain);

 private:
  void loop();
  bool take_queue();      // waits for work, moves the queue into waiting_; false: stop now
  void drop_cancelled(StepOutput* out);  // closes cancelled requests, queued or running
  void admit();           // moves waiting requests into free slots (engine thread, no lock)
  void publish();         // the gauges and counters, for stats()
  bool validate(const GenerationRequest& req, std::string* message) const;
  int64_t context() const;  // positions a sequence may reach: min(ctx, the pool)
  int64_t blocks_for(const GenerationRequest& r) const;  // its worst case, in KV blocks
  // KV promises (admission): whether `r` could ever be promised its worst case beside the
  // running requests, and how many blocks it lacks now (> 0: it waits, or cache entries go).
  bool promisable(const GenerationRequest& r) const;
  int64_t kv_deficit(const GenerationRequest& r) const;
  void release(size_t slot);  // frees a finished sequence's slot; its blocks go back
  // One step (engine_step.cc): plan the rows, run the forward call, advance every sequence.
  void step(StepOutput* out);
  void schedule();
  void draft();  // the MTP head's drafts for the step's verifying sequences (engine_step.cc)
  bool advance(size_t row, const core::Status& st, StepOutput* out);

  model::Model& model_;
  EngineOptions opts_;
  std::unique_ptr<model::KvPool> pool_;
  std::unique_ptr<PrefixCache> cache_;  // null: off
  std::vector<std::unique_ptr<model::SequenceState>> states_;

  // Engine thread only.
  std::vector<std::unique_ptr<Sequence>> slots_;  // null: free
  std::deque<std::unique_ptr<Sequence>> waiting_;  // taken from the queue, not yet admitted
  uint64_t next_order_ = 0;                        // admission counter
  EngineStats stats_;                              // the engine's own copy
  bool saved_ = false;

  // Guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> queue_;
  bool accepting_ = true, stop_ = false, drain_ = false;
  // Requests held (queued, waiting or running): submit() adds, the engine thread takes away
  // before it closes their streams. capacity() bounds it.
  std::atomic<int64_t> held_{0};
  std::atomic<int64_t> queued_{0};  // of which queued or waiting (not yet admitted)

  mutable std::mutex pub_mu_;  // held only to copy published_ (and cache_log_)
  EngineStats published_;
  std::vector<std::string> cache_log_;

  // Engine-thread scratch.
  std::vector<model::SequenceRows> rows_;
  std::vector<int> row_slot_;
  std::vector<size_t> row_logits_;  // first logits row of each batch row
  std::vector<float> logits_;
  std::vector<model::DraftRequest> draft_reqs_;  // the MTP head's requests of a step
  std::thread thread_;
};

}  // namespace qwen35::runtime
