// The step protocol of a model split by layers over MPI ranks (docs/design.md "Past one
// machine"). Rank 0 decides each step as one process would and runs the first layers; the step's
// plan (which sequences, their tokens, positions and flags) travels down the pipe with the hidden
// rows; each rank applies it to its own layers' part of each sequence's state (found by the id
// rank 0 gives the sequence) and passes the rows on; the last rank sends the logits back to rank
// 0. A sequence's state follows rank 0's from what a step says of it: standing at position 0, it
// starts afresh (the engine reuses a slot's state); after a speculative verification, the
// position rank 0 stands at says how many verified rows its commit kept, and the same commit
// is applied here. Every rank runs Model::forward_layers, the code one process runs, on the same rows: the
// split is bit-identical to one process.
//
// The prefix cache under a split: rank 0 keeps the tree and decides as one process; what it does
// to states besides forward calls (model/state_op.h: a node takes a state's KV block, a snapshot
// is taken or copied during a prompt's prefill, dropped, resumed; a state forks, resets) rides
// in the next step message, ahead of its records, and each rank repeats it on its own layers'
// part, its states sharing one pool as rank 0's do. So a node's block and snapshot on every
// rank are that rank's part of rank 0's, under rank 0's node id, and a resume there adopts the
// same blocks: *resumed == fresh* holds across the ranks as in one process.
//
// MTP drafting under a split: the MTP head and its cache are the last rank's (its states are
// made with the head's cache when the engine's kPool op says so, and its forward calls fill the
// cache and the trunk's last hidden row as one process's do). Rank 0 asks for a step's drafts
// with a draft message down the pipe (the state ops since the last step first, then per
// sequence the position rank 0 stands at, its rope delta, the sampled token and how many
// drafts); the last rank commits a pending verification as a step would, drafts with
// Model::draft and sends the tokens back. The drafts are one process's: the head's inputs are
// the same bits.
//
// Messages (tags kStep, kLogits, kDrafts): a step is a header, its state ops, one record per
// sequence (with the grid lines where its prefill copies the state, and `top_k`: the logits its
// sampling reads, model::SequenceRows::logits_top_k), then the hidden rows [rows, hidden] f32;
// the logits come back per row whole or as their top k (values and ids; rank 0 sets the rest to
// -inf, which the sampler never reaches: the row samples as the whole row would); serve
// --cache-dir adds two more, once at start and once at exit (dist/pipeline_cache.cc); all fields
// little-endian as the machines' own (the ranks run one binary, checked at start:
// cli/pipeline_setup.h).
//
// Micro-batches (set_microbatches): rank 0 cuts a step's sequences, each whole and in order, into
// up to M groups of about equal rows, each of at least R rows (fewer groups where they would be
// smaller: model::microbatch_starts), and sends each as a step message of its own as soon as its
// rows are through rank 0's layers, so that rank r runs micro-batch k+1 while rank r+1 runs k.
// The state ops ride with the first (they are applied before any record of the step); each
// message's logits come back as a message of their own, in order, and rank 0 joins them: the
// order Model::forward writes (sequence by sequence). A row's arithmetic never depends on the
// other rows (docs/design.md §6), so the logits are those of one message, bit for bit. The
// step path's sends are posted (Comm::post): a rank computes while its last rows travel.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/result.h"
#include "dist/comm.h"
#include "model/model.h"
#include "model/pipeline_plan.h"
#include "model/snapshot_file.h"
#include "model/state_op.h"

namespace qwen35::dist {

// What rank 0 says of one sequence of a step, beside its rows.
struct StepSequence {
  uint64_t id = 0;        // the sequence's name on every rank
  int64_t capacity = 0;   // the capacity a rank makes its state with at first sight
};

class PipelineStage {
 public:
  // `model` holds this rank's share of `plan` (model::keep_share).
  PipelineStage(Comm& comm, model::Model& model, const model::PipelinePlan& plan);

  int rank() const { return comm_.rank(); }
  const model::RankShare& share() const { return plan_.ranks[size_t(comm_.rank())]; }

  // Rank 0: one step through the pipeline, with Model::forward's contract: `batch` (rank 0's
  // states) through every layer, logits as forward writes them. seqs[i] names batch[i].
  // `ops`: the state changes since the last step, applied by the other ranks before it.
  core::Status step(std::span<const model::SequenceRows> batch, std::span<const StepSequence> seqs,
                    std::vector<float>* logits, std::span<const model::StateOp> ops = {});
  // Rank 0: Model::draft's contract for `reqs` (rank 0's states; seqs[i] names reqs[i]'s), the
  // head being the last rank's: greedy drafts among token ids below `draft_vocab` (0: all).
  // Rank 0's states take the KV blocks Model::draft would take, in its order, so that its pool
  // runs out where one process's does. `ops`: as step()'s, applied by every rank first.
  core::Status draft(std::span<const model::DraftRequest> reqs, std::span<const StepSequence> seqs,
                     int64_t draft_vocab, std::span<const model::StateOp> ops = {});
  // Rank 0: the other ranks release these sequences' states.
  core::Status drop(std::span<const uint64_t> ids);
  // Rank 0: ends the other ranks' serve().
  core::Status finish();
  // Ranks after 0: applies the steps rank 0 sends until its finish(). A step that fails here
  // leaves the ranks out of step: the job is ended (Comm::abort), naming the rank and the cause.
  core::Status serve();

  // Rank 0: the micro-batches a step is cut into: at most m (1 sends every step whole), each of
  // at least min_rows rows.
  void set_microbatches(int m, int64_t min_rows) {
    microbatches_ = m < 1 ? 1 : m;
    microbatch_rows_ = min_rows < 1 ? 1 : min_rows;
  }
  int microbatches() const { return microbatches_; }
  int64_t microbatch_rows() const { return microbatch_rows_; }

  // serve --cache-dir (dist/pipeline_cache.cc). Rank 0: the other ranks apply `ops`, then load
  // (save: false) or save their parts of the snapshots of `entries` (rank 0's prefix-cache
  // tree); returns, from every rank, the snapshots it could not load (or why its save failed).
  // Ranks after 0: their files' folder and fingerprint, set before serve().
  core::Result<std::vector<model::CacheVerdict>> cache_parts(std::span<const model::StateOp> ops,
                                                             std::span<const model::CacheEntry> entries, bool save);
  void set_cache_files(std::string dir, uint64_t fingerprint);

  // Bytes this rank sent in step messages and logits (for the benchmarks).
  uint64_t bytes_sent() const { return bytes_sent_; }
  // Rank 0: every logits row comes back whole, whatever the rows' logits_top_k (to measure
  // what the top-k return saves).
  void set_whole_logits(bool whole) { whole_logits_ = whole; }
  // Rank 0: bytes of the logits messages it received, and the steps (for the benchmarks).
  uint64_t logits_received() const { return logits_received_; }
  uint64_t steps() const { return steps_; }

 private:
  // Rank 0: a step message's header for these sequences (their states as they stand).
  std::vector<uint8_t> step_header(std::span<const model::SequenceRows> batch, std::span<const StepSequence> seqs,
                                   std::span<const model::StateOp> ops) const;
  core::Status forward_to_next(std::vector<uint8_t> msg);
  core::Status apply(const std::vector<uint8_t>& msg);
  core::Status apply_draft(const std::vector<uint8_t>& msg);
  // A sequence's state here brought to where rank 0's stands at `pos0` (a pending verification
  // committed to the rows rank 0 kept), or an error when it cannot be.
  core::Status catch_up(model::SequenceState* st, uint64_t id, int64_t pos0);
  core::Status apply_op(const model::StateOp& op);
  core::Status take_copy(const model::StateOp& op);
  core::Status resume(const model::StateOp& op);
  model::SequenceState* state(int64_t id, int64_t capacity);
  bool last() const { return comm_.rank() == comm_.size() - 1; }
  static bool cache_message(uint32_t op);
  core::Status serve_cache(const std::vector<uint8_t>& msg);
  std::string load_part(const model::CacheEntry& e, const std::map<uint64_t, const model::CacheEntry*>& by_id,
                        uint64_t recurrent_floats);
  std::string save_parts(std::span<const model::CacheEntry> entries);
  model::snapshot_file::Part file_part();
  uint64_t file_key() const;
  // The token ids of node `id`'s positions and its path's blocks, root first ("" or why not).
  std::string path_of(uint64_t id, const std::map<uint64_t, const model::CacheEntry*>& by_id,
                      std::vector<int32_t>* tokens, std::vector<uint64_t>* nodes);

  Comm& comm_;
  model::Model& model_;
  model::PipelinePlan plan_;
  // Ranks after 0: the engine's states' pool (model::StateOp::kPool; others have their own), the
  // states by id, the prefix-cache nodes' blocks and parents and their snapshots by node id,
  // and each state's copies from its last step's prefill by position.
  std::unique_ptr<model::KvPool> pool_;
  uint64_t pool_states_ = 0;  // states 0..pool_states_-1 (the engine's slots) use it
  int64_t pool_capacity_ = 0;
  std::map<uint64_t, std::unique_ptr<model::SequenceState>> states_;
  struct Node {
    uint64_t parent = 0;
    int32_t block = -1;
  };
  std::map<uint64_t, Node> nodes_;
  std::map<uint64_t, std::vector<float>> snapshots_;
  std::map<uint64_t, std::map<int64_t, std::vector<float>>> captured_;
  std::vector<float> hidden_, logits_;
  std::vector<std::vector<int32_t>> drafts_;  // the last rank: a draft message's tokens
  uint64_t bytes_sent_ = 0;
  uint64_t logits_received_ = 0;  // rank 0
  bool whole_logits_ = false;     // rank 0
  uint64_t steps_ = 0;  // rank 0: steps sent
  int microbatches_ = 1;  // rank 0
  int64_t microbatch_rows_ = 1;
  std::string cache_dir_;  // ranks after 0: where their parts of the snapshot files are
  uint64_t cache_fingerprint_ = 0;
  bool cache_mtp_ = false;  // the engine's pool (its kPool op) is MTP drafting's
};

}  // namespace qwen35::dist
