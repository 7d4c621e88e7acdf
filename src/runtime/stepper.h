// The engine's single-threaded core (runtime/engine.h): the slots and their sequence states,
// the KV pool and the prefix cache; admission and preemption, and the step itself (plan the rows,
// one forward call, advance each sequence by its phase). It has no thread and no lock: the
// Engine runs one on its engine thread, and `qwen35 bench` drives one directly, so what bench
// times is the path that serves.
//
// A step runs at most step_tokens rows, and its work is budgeted in multiply-adds × 2
// (step_budget()): every row costs its matmuls and its attention over the positions before it
// (model::RowCost), so a chunk deep in a long prompt is shorter than one at its start, and a
// step's work stays within the budget at any context (but for the one grid chunk the first
// prefilling sequence always gets).
//
// Images: the vision tower runs in the steps, on the engine's threads, when a prefilling
// sequence's next chunk needs an image whose rows are not known (Sequence::image_due). One image
// is in the tower at a time, oldest prompt first, as much of it a step as what the step's rows
// leave of the budget pays for: the tower's pieces (rows of a part of a block, model/vision.h)
// are weighed in the same unit (the first prefilling sequence gets one grain, a token's rows,
// whatever the budget, as it gets one chunk). So a step's tower work stays within its budget
// whatever the image's size, a large image is spread over steps like a long prompt, and the
// decode rows of the other sequences run in every one of them.
//
// A sample that would make the engine thread build a grammar's automaton goes to SampleWorkers
// (runtime/sample_workers.h): its sequence runs no row until the worker is done, and the other
// sequences' steps go on; before each forward call the workers are asked for the masks the
// step's samples will read. Steps take the finished samples first.
//
// KV blocks are taken as sequences grow, never promised ahead (docs/design.md "Admission and
// preemption"). A queued sequence takes a free slot when the free blocks cover what it needs to
// run its next step (its prompt, less what it shares with the prefix cache, the tokens it will
// replay, one row more) beside one block per running sequence; prefix-cache entries are evicted
// only for that deficit. The queue's order: preempted sequences first (oldest admission
// first), then requests round-robin by group (the n choices of one request count once), each
// group's sequences in their order. Before each forward call the step's rows must find their
// blocks: cache entries go first, then the youngest running sequence is preempted (its slot and
// blocks given back; it goes back to the queue and later resumes bit for bit), until they fit.
// A sequence alone never lacks blocks (the context is at most the pool), so ending with
// "length" at the context is the only limit.
//
// Thread-safety: none; one thread at a time (the workers touch only what a sequence handed
// them).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/engine_options.h"
#include "runtime/prefix_cache.h"
#include "runtime/sequence.h"

namespace qwen35::runtime {

// Runs f. An allocation failure inside it (std::bad_alloc, or std::length_error from a size
// past what a container can hold) comes back as the start of a request's error message, so that
// it ends that request rather than the engine thread; empty when f returned.
template <class F>
std::string out_of_memory(F&& f) {
  try {
    f();
  } catch (const std::bad_alloc&) {
    return "the server ran out of memory";
  } catch (const std::length_error&) {
    return "the server ran out of memory (a size past a container's limit)";
  }
  return {};
}

class Stepper {
 public:
  // `opts` as the engine takes them; options() gives them normalized (at least one slot, a
  // step budget of at least one grid chunk, the pool's size, the snapshot interval on the grid).
  Stepper(model::Model& model, const EngineOptions& opts);
  ~Stepper();
  Stepper(const Stepper&) = delete;
  Stepper& operator=(const Stepper&) = delete;

  const EngineOptions& options() const { return opts_; }
  // A step's budget of work, in multiply-adds × 2 (model::RowCost): step_tokens rows at a
  // context of step_tokens positions, each its matmuls and its attention over that many keys.
  // Prompts are cut into the longest grid chunks that fit what the decode rows leave of it and
  // of the step's step_tokens rows, and an image's tower pieces into what is left of the work;
  // so as a context grows its chunks shrink, down to the one grid chunk a step always gives the
  // first prefilling sequence.
  double step_budget() const { return budget_; }
  // Why `req` can never run here (empty, longer than the context or the pool, bad ids or
  // sampling, a drafter this engine lacks); false with *message.
  bool validate(const GenerationRequest& req, std::string* message) const;
  int64_t context() const;  // positions a sequence may reach: min(ctx, the pool)

  // Moves sequences (preempted ones first, then `waiting`'s, round-robin by group) into free
  // slots while the next one's blocks are free (see above), resuming each from the prefix
  // cache. One that runs out of memory on the way ends with an error (its kDone event into
  // *out, or its stream without `out`).
  void admit(std::deque<std::unique_ptr<Sequence>>* waiting, StepOutput* out = nullptr);
  // Closes cancelled sequences, waiting, preempted or running (their kDone events into *out).
  void drop_cancelled(std::deque<std::unique_ptr<Sequence>>* waiting, StepOutput* out);
  void cancel_running();  // asks every running or preempted sequence to stop (drop_cancelled)
  bool preempted() const { return !preempted_.empty(); }  // sequences queued again
  int64_t preemptions() const { return preemptions_; }
  // Ends every running sequence with the error `why` and frees its slot: the engine's last
  // resort when memory ran out where no narrower guard applies (the sequences' states may be
  // half-way through a change).
  void fail_running(StepOutput* out, std::string_view why) noexcept;
  bool running() const;
  // Called on a worker when it finished a sample (the engine's loop may be waiting for one).
  void set_wake(std::function<void()> wake) { workers_->set_wake(std::move(wake)); }
  // Blocks while every running sequence waits for a worker's sample (for a driver that has
  // nothing else to wait for; returns at once otherwise).
  void wait_for_sample();
  // Waits for the workers' running jobs and drops the rest (before what a wake refers to goes).
  void stop_workers() { workers_.reset(); }
  const Sequence* slot(size_t i) const { return slots_[i].get(); }

  // One step: a forward call over every running sequence's rows for this step, then each
  // sequence advanced (sampled, finished, its slot freed). Nothing when no sequence runs.
  // Running out of memory ends the rows' sequences with an error, never the thread: in the
  // forward call all of them, in a sequence's sampling that one.
  void step(StepOutput* out);

  // The gauges (slots, KV, prefix cache) and the totals (slots, blocks, state bytes).
  void gauges(EngineStats* s) const;
  PrefixCache* cache() const { return cache_.get(); }
  model::KvPool* pool() const { return pool_.get(); }  // the slots' KV blocks (and the cache's)
  int64_t recurrent_floats() const { return int64_t(states_[0]->recurrent_bytes() / 4); }
  // --cache-dir (runtime/stepper_cache.cc): the prefix cache loaded from, or saved to,
  // opts.cache_dir, a line per note in *log. Under a split (opts.cache_parts) the other ranks
  // load or save their parts of the same snapshots, and a snapshot that some rank could not
  // load is dropped on every rank. Returns the snapshots loaded (saved).
  int64_t load_cache(std::vector<std::string>* log);
  core::Result<int64_t> save_cache();

 private:
  bool pending_images_fit(const GenerationRequest& req, std::string* message) const;
  // The blocks `s` lacks to be admitted now (> 0: it waits, or cache entries go).
  int64_t kv_deficit(const Sequence& s) const;
  // The next sequence to admit: a preempted one (oldest first), else from *waiting, round-robin
  // by group. Returns its index in preempted_ (>= 0) or -(index in *waiting) - 1; null when
  // none waits.
  Sequence* next_to_admit(const std::deque<std::unique_ptr<Sequence>>& waiting, ptrdiff_t* at) const;
  // The blocks the planned rows lack beyond the free ones (<= 0: they fit).
  int64_t rows_short() const;
  // The running sequence to preempt: the latest admitted of those that can be (not waiting for
  // a worker, not a fork waiting for its leader), when at least two can. -1: none.
  int victim() const;
  void preempt(size_t slot);
  // Without a victim: drops planned rows, last first, until the rest fit (their sequences run
  // in a later step).
  void shed_rows();
  void plan();  // schedule(), and room for its rows (evictions, preemptions)
  void release(size_t slot);  // frees a finished sequence's slot; its blocks go back
  // The running sequence computing the prompt that a sequence with fork key `key` can fork
  // from (Sequence::fork_key): in prefill, itself no fork. -1: none.
  int leader_for(uint64_t key) const;
  // After slot `leader`'s prompt is read (`logits`: its last row): its forks take its state and
  // sample; those that finish give their slots back.
  void fork_followers(size_t leader, const float* logits, StepOutput* out);
  void resume_samples(StepOutput* out);  // emits what the workers sampled
  void schedule();
  // The drafts of the step's verifying sequences; when memory runs out drafting, they verify
  // no draft (drafts change the speed, never the tokens).
  void draft();
  void propose_drafts();
  // Plans tower work for a sequence's due image under *budget (the first prefilling sequence
  // gets one grain whatever it is): false when none fits. The image's run starts here when it
  // is new.
  bool plan_tower(const PromptImage& im, double* budget, bool first);
  void run_tower(StepOutput* out);  // the planned pieces, before the forward call
  // Ends with `why` every running sequence whose due image is the one in the tower.
  void fail_tower(StepOutput* out, const std::string& why);
  void drop_tower();  // the run in the tower given up (Model::end_image), if any
  bool tower_wanted();  // whether a running sequence's due image is the one in the tower
  bool advance(size_t row, const core::Status& st, StepOutput* out);
  // Slot i's state back to position 0 (and, under a split, the other ranks' too).
  void reset_state(size_t i);
  // Under a split (opts_.forward): records a state change for the other ranks (state_ops_).
  void record(model::StateOp op, const model::SequenceState* state = nullptr);

  model::Model& model_;
  EngineOptions opts_;
  std::unique_ptr<model::KvPool> pool_;
  std::unique_ptr<PrefixCache> cache_;  // null: off
  std::vector<std::unique_ptr<model::SequenceState>> states_;
  std::vector<std::unique_ptr<Sequence>> slots_;  // null: free
  std::vector<int> leader_;  // per slot: the slot whose prompt it waits to fork from; -1: none
  int64_t prompt_received_ = 0;  // prompt tokens of the admitted sequences
  uint64_t next_order_ = 0;                       // admission counter
  uint64_t last_group_ = 0;  // the group of the last sequence admitted from the queue
  // Preempted sequences, queued again ahead of the waiting ones. Its capacity is the slots',
  // so preempting allocates nothing.
  std::vector<std::unique_ptr<Sequence>> preempted_;
  int64_t preemptions_ = 0;
  std::unique_ptr<SampleWorkers> workers_;        // two threads per slot at most, as needed

  // Step scratch.
  std::vector<model::SequenceRows> rows_;
  std::vector<int> row_slot_;
  std::vector<size_t> row_logits_;  // first logits row of each batch row
  std::vector<float> logits_;
  std::vector<model::DraftRequest> draft_reqs_;  // the MTP head's requests of a step
  std::vector<int> draft_slots_;                 // and their slots
  bool mtp_ = false;  // MTP drafting: the states keep the head's cache (here, or on the last rank)
  // Under a split: the state changes since the last forward call, which the next one (or the
  // MTP drafts before it) carries.
  std::vector<model::StateOp> state_ops_;

  // The image in the vision tower, its output and its run; the pieces this step runs.
  struct TowerWork {
    std::shared_ptr<PendingImage> image;
    std::shared_ptr<std::vector<float>> out;
    model::VisionRun run;
  };
  std::unique_ptr<TowerWork> tower_;
  std::optional<model::VisionPlan> tower_plan_;  // set: the step runs it
  model::RowCost cost_;  // what rows cost (model_.row_cost())
  double budget_ = 0;    // step_budget()
};

}  // namespace qwen35::runtime
