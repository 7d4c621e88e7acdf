// One request inside the engine (runtime/engine.h), through explicit phases:
//
//   queued ──admit──▶ prefill ──last prompt chunk──▶ decode | verify ──▶ finished
//     ▲                                                      │
//     └────────────────────── preempt ◀──────────────────────┘
//   (re-admitted: prefill ──▶ replay ──▶ decode | verify, where it was)
//
// - queued: submitted (or preempted), waiting for a slot and for the KV blocks of its next step.
// - prefill: holds a slot's SequenceState (resumed from the prefix cache where it can be) and
//   reads its prompt in chunks cut on the absolute kDeltaChunk grid.
// - decode: one row a step (its last sampled token); verify: the same, with the tokens its
//   drafter proposes after it (runtime/drafter.h), kept while they equal what is sampled.
//   A sample the engine thread hands to a worker (a grammar's slow work) leaves the sequence
//   waiting: it runs no row until the sample comes back, then goes on where it was.
// - finished: its stream has (or is about to get) its kDone event; the slot is freed.
// - preempted (runtime/stepper.h): the KV pool ran dry and this sequence gave its slot and
//   blocks back. It keeps everything of its own (sampler, drafter, the tokens it emitted) and,
//   re-admitted, computes its prompt again (resumed from the prefix cache where it can be,
//   sampling nothing from it), then *replays* the tokens it had fed as verification rows (each
//   row as a one-token decode step computes it, §6), then goes on decoding where it stopped:
//   the same states, so the same tokens and logprobs as a run never preempted.
//
// A Sequence owns what is its own: the request, its stream, its sampler (penalties, grammar
// state, reasoning budget, draw positions), its drafter's context and draft length, and its
// snapshot policy (where the prefix cache records its prompt). The engine owns the slots, the
// states and the pool, and decides what runs in a step.
//
// Thread-safety: constructed by the submitting thread; from admission on, touched by the engine
// thread only.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "model/model.h"
#include "model/state.h"
#include "runtime/drafter.h"
#include "runtime/generation_request.h"
#include "runtime/prefix_cache.h"
#include "runtime/prompt_layout.h"
#include "runtime/request_stream.h"
#include "runtime/sample_workers.h"
#include "runtime/sampler.h"

namespace qwen35::runtime {

enum class Phase { kQueued, kPrefill, kReplay, kDecode, kVerify, kFinished };
const char* phase_name(Phase p);

// What one step's rows produced: the counters for the engine's stats, and the kDone events,
// pushed only after the stats are published (a client that has its answer and then reads
// stats() sees its slot and KV released).
struct StepOutput {
  int64_t steps = 0, prompt = 0, generated = 0, done = 0, cancelled = 0;
  int64_t resumed = 0;  // samples taken from the workers
  int64_t drafted = 0, accepted = 0;
  int64_t tower_stages = 0, images = 0;  // vision tower stages finished; images it finished
  double tower_flops = 0;  // the tower's work in the step (multiply-adds × 2, VisionTower::row_flops)
  // The step's planned work in the same units: its rows' (model::RowCost) and the tower's.
  // Within Stepper::step_budget() but for the first prefilling sequence's one grid chunk (or
  // one grain of the tower) that every step gives it, and for decode rows beyond the budget.
  double work_flops = 0;
  std::array<int64_t, model::kMaxVerifyRows - 1> drafted_at{}, accepted_at{};
  std::vector<std::pair<std::shared_ptr<RequestStream>, StreamEvent>> finished;
  // Streams ended in place (RequestStream::close) because their kDone event could not be made:
  // finished too, for the engine's count of the requests it holds.
  int64_t closed = 0;
  // Where the steps' time went: planning the rows (the drafters included), the forward call,
  // and advancing the sequences (sampling included). For bench; the engine does not read them.
  double plan_s = 0, forward_s = 0, advance_s = 0, tower_s = 0;
};

// What the engine fixes for every sequence.
struct SequenceLimits {
  int64_t context = 0;         // positions a sequence may reach: min(ctx, the pool)
  int64_t vocab = 0;
  int64_t hidden = 0;          // the model's width: an image row's floats
  int64_t cache_interval = 0;  // snapshot interval in long prompts; 0: no prefix cache
  // Where a sample goes that would make the engine thread build a grammar's automaton (null:
  // it is built on the spot).
  SampleWorkers* workers = nullptr;
};

class Sequence {
 public:
  Sequence(GenerationRequest req, std::shared_ptr<RequestStream> stream, const SpecOptions& spec);

  Phase phase() const { return phase_; }
  const GenerationRequest& request() const { return req_; }
  const std::shared_ptr<RequestStream>& stream() const { return stream_; }
  bool cancelled() const { return stream_->cancelled(); }
  model::SequenceState* state() const { return state_; }
  uint64_t order() const { return order_; }  // admission order: older prompts prefill first
  const SpecOptions& spec() const { return spec_; }
  int64_t prompt_size() const { return int64_t(req_.prompt.size()); }
  int64_t prefilled() const { return prefilled_; }

  // queued → prefill, into a slot's `state` (just reset): resumes from the longest prefix of
  // the prompt in `cache` (null: none), after calling `before_resume` (a test's hook; may be
  // empty), and builds the sampler and the drafter's context. A preempted sequence keeps its
  // sampler, drafter and order (`order` is unused), and a request for prompt logprobs computes
  // its prompt again without the cache (what it has sent is not sent twice).
  void start(model::SequenceState* state, PrefixCache* cache, const SequenceLimits& lim,
             uint64_t order, const std::function<void()>& before_resume);
  bool started() const { return started_; }  // admitted once (preempted since, when queued)

  // The positions it must hold to run its next step once admitted: its prompt, the tokens it
  // will replay, and one more (its first sample's row).
  int64_t kv_need() const { return prompt_size() + replay_end_ + 1; }
  // The prompt as the prefix cache keys it (its images' tokens by their hashes once started).
  std::span<const int32_t> prompt_key() const { return cache_key(); }
  // A running sequence (not waiting for a worker, not a fork waiting for its leader) gives its
  // state back: with `cache`, its computed prompt on the grid goes there first (an ordinary
  // snapshot; nothing when memory runs out for it). It is queued again, started().
  void preempt(PrefixCache* cache) noexcept;
  // The request these choices belong to (Engine::submit_group): admission is fair by group.
  uint64_t group() const { return group_; }
  void set_group(uint64_t g) { group_ = g; }

  // prefill: the image the next chunk needs before it can run, when the vision tower has not
  // made its rows yet (null otherwise). Images whose rows are known are bound to their tokens
  // here; images that the prefix cache holds the prompt past are never needed.
  const PromptImage* image_due();
  // prefill: the prompt's next chunk, cut on the grid, the longest of at most `rows` tokens
  // whose work (`cost`: their matmuls and their attention over every position before them)
  // fits `budget` (multiply-adds × 2; the step's first prefilling sequence takes one grid chunk
  // whatever the budget), ending where a snapshot is due and before the first token of an
  // image not bound yet. Empty when the budget allows nothing, or an image is due.
  std::span<const int32_t> next_chunk(int64_t rows, double budget, const model::RowCost& cost, bool first) const;
  // The rotary positions and input rows of a prompt chunk `rows` (from next_chunk) when the
  // prompt has images; nothing otherwise.
  void chunk_inputs(model::SequenceRows* rows) const;
  // With the prefix cache: asks the forward call of that chunk for copies of the state at the
  // grid lines inside it that the cache lacks (after_chunk makes them provisional snapshots).
  // The last of them go into device memory (PrefixCache::device_buffers) while the cache's
  // device budget has room.
  void chunk_captures(model::SequenceRows* rows, PrefixCache* cache);
  // After the forward call that fed the chunk: prompt logprobs (`all` holds a logits row per
  // chunk token) or the last row's logits in `last`; snapshots into `cache`; and, once the
  // prompt is read, the first sample. Returns true when the sequence finished.
  bool after_chunk(int64_t rows, const float* logits, bool all, PrefixCache* cache,
                   StepOutput* out);

  // Forks (the n choices of a prompt, identical prompts of one batch). Sequences with the same
  // nonzero key() read the same prompt (Engine::submit_group gives it); one of them computes it
  // (the leader) while the others, admitted beside it, wait in prefill without rows. Once the
  // leader has read its prompt, each of them takes its state (KV blocks shared, the partial
  // block and the recurrent state copied: model::SequenceState::fork_from) and samples its first
  // token from the leader's last logits row with its own sampler; so every choice has the bits
  // it would have computing the prompt alone. 0: no fork.
  uint64_t fork_key() const { return fork_key_; }
  void set_fork_key(uint64_t key) { fork_key_ = key; }
  // prefill, nothing computed yet: takes `leader`'s state (its prompt read; the same prompt) and
  // samples from `logits`, the row of its last prompt token. False when the pool had no block
  // for the copy (the sequence computes its prompt itself); *done when it finished.
  bool fork_from(const Sequence& leader, const float* logits, StepOutput* out, bool* done);
  // replay: the tokens to feed this step, as verification rows (at most kMaxVerifyRows);
  // after_replay once they are fed (the caller commits every row).
  std::span<const int32_t> replay_rows() const;
  void after_replay(int64_t rows);
  // decode: the row fed this step is the last sampled token.
  const int32_t* next_token() const { return &next_token_; }
  // Waiting for a worker to sample its last row (the grammar needed more than the engine
  // thread builds): no row runs, no draft is made, until resume().
  bool waiting() const { return deferred_ != nullptr; }
  bool sample_ready() const {
    return deferred_ && deferred_->done.load(std::memory_order_acquire);
  }
  // Emits the worker's sample (sample_ready()); true when the sequence finished.
  bool resume(StepOutput* out);
  // Before this step's forward call: asks the workers for the masks its samples will read.
  void prefetch_masks();
  // After a decode row: samples from its logits; true when the sequence finished.
  bool after_decode(const float* logits, StepOutput* out);
  // k > 0 when what this sequence reads of a logits row is a function of its k largest logits
  // alone (ranked by value, then id: sampler_stages.h ranks_before), so that a row holding those
  // and -inf elsewhere samples the same token (model::SequenceRows::logits_top_k): greedy (k 1)
  // or top-k sampling, with no stage before the cut that reads the others (penalties, a
  // grammar's mask) and no log-probabilities (the normalizer is over the whole row). 0: whole
  // rows. Forks that sample from this sequence's last prompt row are the caller's to consider.
  int32_t logits_top_k() const;

  // verify: how many tokens to draft this step: no more than plain decoding could still emit
  // (max_tokens, the context) and than its acceptance so far pays for (DraftLength).
  int64_t draft_budget();
  // The rows of this step's verification: the sampled token, then the drafts (grammar-checked).
  void set_verify_rows(std::span<const int32_t> drafts);
  std::vector<int32_t>& drafts() { return drafts_; }  // the MTP head writes its drafts here
  const std::vector<int32_t>& lookup_context() const { return context_; }
  const std::vector<int32_t>& verify_rows() const { return verify_; }
  // After the verification's forward call (`logits`: a row per verified token): samples row
  // by row while the drafted token equals the one sampled. Returns the rows to keep; *done
  // when the sequence finished.
  int64_t after_verify(const float* logits, StepOutput* out, bool* done);

  // → finished: the kDone event goes into out->finished (pushed after the step) or, without
  // `out`, straight to the stream. Never throws: when memory runs out making the event, the
  // stream is closed in place with `reason` (and the error that memory ran out, where there was
  // an error to tell), counted in out->closed. `reason` is a string literal.
  void finish(const char* reason, StepOutput* out, std::string_view error = {}) noexcept;

 private:
  // The first position after `from` where the prefix cache takes a snapshot of the prompt:
  // each multiple of the interval, the prompt's last grid boundary (the longest prefix a
  // request for the same prompt can resume from), the request's hints and its branch point
  // (where it parts from a cached path between snapshots). -1: none.
  int64_t snapshot_after(int64_t from) const;
  // The prompt is read (`last`: its last row's logits): the first sample, or the end for
  // max_tokens 0. True when the sequence finished.
  bool prompt_read(const float* last, StepOutput* out);
  // Samples from `logits` (the state consumed `fed` tokens) and emits the token; true when the
  // request ends (emit's reasons, or a grammar whose automaton may grow no more: an error).
  // With workers, the engine thread samples only what the automaton has built (Access::
  // kBounded); else the row goes to a worker and the sequence waits (waiting()).
  bool sample(const float* logits, int64_t fed, StepOutput* out);
  // Sends token s, sampled after the state consumed `fed` tokens; true when it ends the
  // request (an end-of-sequence id, max_tokens, or a full context).
  bool emit(SampleResult s, int64_t fed, StepOutput* out);

  // The prompt's tokens as the prefix cache keys them (its images' tokens by their hashes).
  std::span<const int32_t> cache_key() const;
  // Where the prompt's bound rows end: the first token of the first image not bound yet.
  int64_t bound_end() const;

  GenerationRequest req_;
  std::unique_ptr<PromptLayout> layout_;  // a prompt with images: positions, rows, cache key
  size_t next_image_ = 0;  // layout_->images[next_image_ ..] are not bound yet
  std::vector<std::shared_ptr<const std::vector<float>>> bound_;  // the rows layout_ points into
  std::shared_ptr<RequestStream> stream_;
  SpecOptions spec_;
  Phase phase_ = Phase::kQueued;
  SequenceLimits lim_;
  model::SequenceState* state_ = nullptr;
  std::shared_ptr<Sampler> sampler_;  // shared with a worker while one samples for it
  std::shared_ptr<DeferredSample> deferred_;  // the worker's sample (waiting())
  std::shared_ptr<std::atomic<bool>> prefetching_ = std::make_shared<std::atomic<bool>>(false);
  uint64_t order_ = 0;
  int64_t prefilled_ = 0;    // prompt tokens consumed
  int64_t branch_ = 0;       // a branch-point snapshot is due here (PrefixCache::matched); 0: none
  std::vector<model::StateCapture> captures_;   // of the chunk in flight (chunk_captures)
  // Their states: in host memory (`out`), in order, and in device memory (`device`), in order.
  std::vector<std::vector<float>> capture_bufs_;
  std::vector<std::shared_ptr<model::SnapshotStore::Snapshot>> capture_dev_;
  // after_chunk: the chunk's copies (keep_copies), and the state at its end when that is a grid
  // line without a snapshot, into the cache as provisional snapshots.
  void keep_captures(PrefixCache* cache, int64_t start);
  void keep_copies(PrefixCache* cache);
  uint64_t fork_key_ = 0;
  uint64_t group_ = 0;
  bool started_ = false;     // admitted once
  bool prompt_done_ = false;  // its prompt was read and the first token sampled, once
  // Preemption: every token emitted, in order (the last one not yet fed while decoding); after
  // a re-admission, out_[0, replay_end_) are fed again, out_[replayed_] next.
  std::vector<int32_t> out_;
  int64_t replay_end_ = 0, replayed_ = 0;
  int64_t lp_sent_ = 0;      // prompt logprobs sent for prompt positions [1, lp_sent_]
  // The prompt was computed again after a preemption: replay, or decode where it stopped.
  void prompt_again();
  int64_t generated_ = 0;    // tokens sampled and sent
  int32_t next_token_ = -1;  // sampled, not yet fed
  std::vector<int32_t> context_;  // lookup only: the prediction, the prompt, every sampled token
  std::vector<int32_t> verify_;   // the rows of a verification: next_token, then the drafts
  std::vector<int32_t> drafts_;   // scratch: this step's drafts
  DraftLength draft_length_;      // how many to draft next (acceptance so far)
};

}  // namespace qwen35::runtime
