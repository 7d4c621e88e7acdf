// The serving engine: one engine thread owns the model and every sequence state; other threads
// only submit requests and drain their result streams.
//
// Continuous batching: each step runs one forward call over every running sequence: one decode
// row per generating sequence, plus prefill chunks of sequences still reading their prompt, under
// a per-step token budget. Requests join the batch (a free slot takes the oldest queued request)
// and leave it (finished, cancelled) between steps.
//
// Exactness (docs/design.md §6): a prompt is always cut at absolute multiples of model::kDeltaChunk
// (and at its own end); the budget decides how many grid chunks run in a step, never where a
// chunk starts. So a request's rows are computed the same way whatever else runs, and its tokens
// and logprobs are bit-identical to a solo run (the model's kernels are batch invariant).
//
// Kept state (GenerationRequest::keep_state, off by default; the server never sets it): lets a
// terminal chat continue a conversation without recomputing it. Invariants:
//   - kept_[i] is empty unless slot i's last request had keep_state and ended without an error;
//     then states_[i] holds exactly the tokens kept_[i] lists (prompt and generated tokens
//     actually fed, in order; a request's last sampled token is never fed, so it is not listed),
//     and states_[i]->pos() == kept_[i].size().
//   - Admission to slot i resumes from kept_[i] only when the request has keep_state and its
//     prompt strictly extends kept_[i]; only the rest is prefilled. Anything else resets the
//     state. Either way kept_[i] is cleared: the admitted request owns the state.
// A resumed request computes its earlier generated tokens the way decoding did (one row each),
// not the way a fresh prefill would, so it continues the conversation's own state rather than
// reproducing a fresh run's bits; the exactness guarantees above concern requests without the
// flag, which never see kept state. A prefix cache of grid-aligned snapshots can replace this.
//
// Thread-safety: submit(), stats() and shutdown() may be called from any thread. A RequestStream
// is shared by the engine thread (producer) and one consumer thread.
#pragma once

#include <array>
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
#include <thread>
#include <vector>

#include "core/result.h"
#include "model/model.h"
#include "runtime/drafter.h"
#include "runtime/prefix_cache.h"
#include "runtime/sampler.h"

namespace qwen35::runtime {

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
};

struct GenerationRequest {
  std::vector<int32_t> prompt;  // non-empty
  SamplingParams sampling;
  int64_t max_tokens = -1;       // -1: until end of sequence or the context is full; 0: read
                                 // the prompt only ("length", nothing sampled)
  std::vector<int32_t> eos_ids;  // a sampled id in this list ends the request ("stop")
  int32_t prompt_logprobs = -1;  // >= 0: log-probabilities of the prompt tokens (+ N top ones)
  bool keep_state = false;       // resume from / leave behind the slot's kept state (see above)
  // Prompt positions worth a prefix-cache snapshot (at the 64-token boundary below each),
  // besides the prompt's last boundary: where other prompts are likely to part from this one.
  std::vector<int64_t> snapshot_hints;
  std::optional<SpecOptions> spec;  // speculative decoding (unset: EngineOptions::spec)
  // Tokens the output is expected to repeat (OpenAI's predicted outputs): prompt lookup drafts
  // from them too. They change the speed only, never the output.
  std::vector<int32_t> prediction;
};

// When a request's phases happened, for a closing line or metrics. Set by the engine thread;
// complete once the kDone event has been received.
struct RequestTiming {
  using Clock = std::chrono::steady_clock;
  Clock::time_point admitted;     // took a slot: prefill starts
  Clock::time_point prompt_read;  // the forward call that read the last prompt token returned
  bool prompt_done = false;       // prompt_read is set (false when cancelled during prefill)
  int64_t prompt_reused = 0;  // prompt tokens resumed (prefix cache, kept state), not computed
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

  EngineStats stats() const;
  const EngineOptions& options() const { return opts_; }
  // What loading and saving the prefix cache (cache_dir) had to say, a line each.
  std::vector<std::string> cache_log() const;

  // Stops accepting requests; with `drain`, waits until running and queued requests finish,
  // else cancels them. Then stops the engine thread. Idempotent.
  void shutdown(bool drain);

 private:
  struct Active;
  struct StepCounts {
    int64_t prompt = 0, generated = 0, done = 0, drafted = 0, accepted = 0;
    std::array<int64_t, model::kMaxVerifyRows - 1> drafted_at{}, accepted_at{};
  };
  void loop();
  bool validate(const GenerationRequest& req, std::string* message) const;
  bool admit_locked();
  void refresh_gauges_locked();
  void schedule();
  void draft();  // engine_spec.cc
  bool advance(size_t r, const core::Status& st, StepCounts* c);
  bool advance_verified(size_t r, StepCounts* c);
  bool emit(Active& a, SampleResult s, int64_t pos, StepCounts* c);
  void step();
  void finish(Active& a, const std::string& reason, const std::string& error = "");
  void finish_after_step(Active& a, const std::string& reason, const std::string& error = "");
  void start(size_t i, std::unique_ptr<Active> a);
  void release(size_t i, bool keep);
  int64_t context() const;  // positions a sequence may reach: min(ctx, the pool)
  int64_t snapshot_after(const Active& a, int64_t from = -1) const;
  int64_t blocks_for(const GenerationRequest& r) const;  // its worst case, in KV blocks
  bool fits_locked(const GenerationRequest& r, size_t slot);

  model::Model& model_;
  EngineOptions opts_;
  std::unique_ptr<model::KvPool> pool_;
  std::unique_ptr<PrefixCache> cache_;  // null: off
  std::vector<std::string> cache_log_;  // guarded by mu_
  bool saved_ = false;
  std::vector<std::unique_ptr<model::SequenceState>> states_;
  std::vector<std::unique_ptr<Active>> slots_;  // null: free
  std::vector<std::vector<int32_t>> kept_;      // per slot: tokens of the kept state (see above)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Pending {
    GenerationRequest req;
    std::shared_ptr<RequestStream> stream;
  };
  std::deque<Pending> queue_;
  bool accepting_ = true, stop_ = false, drain_ = false;
  EngineStats stats_;        // guarded by mu_
  uint64_t next_order_ = 0;  // admission counter, guarded by mu_

  // Engine-thread scratch.
  std::vector<model::SequenceRows> rows_;
  std::vector<int> row_slot_;
  std::vector<size_t> row_logits_;  // first logits row of each batch row
  std::vector<float> logits_;
  std::vector<int32_t> order_;  // scratch of prompt-logprob ranking
  std::vector<int32_t> draft_;  // scratch of drafted tokens
  std::vector<model::DraftRequest> draft_reqs_;  // the MTP head's requests of a step
  // kDone events of a step, pushed after the gauges are updated: a client that has its answer
  // and then reads stats() sees its slot and KV released.
  std::vector<std::pair<std::shared_ptr<RequestStream>, StreamEvent>> done_;
  std::thread thread_;
};

}  // namespace qwen35::runtime
