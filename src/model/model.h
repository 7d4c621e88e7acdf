// The Qwen3.5 hybrid forward pass. One call takes rows from several sequences at different
// positions (prefill chunks and decode tokens mixed) and returns logits for the rows asked for.
//
// Exactness (docs/design.md §6): every row's arithmetic is independent of the other rows in the call.
// Gated DeltaNet rows of a sequence are cut on a grid fixed to absolute positions (multiples of
// kDeltaChunk): a piece of more than one row runs the chunked (UT) form, a single row the
// recurrent form. So a batch of sequences gives each sequence the bits it gets alone.
//
// The math of every op is in kernels/ref/ref_ops.cc (the scalar reference); this file composes
// them, issuing each op to an executor (model/executor.h: the CPU runs it at once). Thread-safety: one caller at a time per Model. Models with their own thread pools (or none)
// may run forward passes at the same time: the kernels keep no state, each Model owns its
// workspace and activations.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "model/activations.h"
#include "model/executor.h"
#include "model/state.h"
#include "model/vision.h"
#include "model/weights.h"

namespace qwen35::model {

inline constexpr int64_t kDeltaChunk = 64;

// What rows of a sequence cost a forward call, in multiply-adds × 2: each row its matmuls
// (`token`: Model::token_flops) and its attention over the keys before it and itself (`key` per
// key: scores and values in every full-attention layer, 4·n_heads·head_dim each). The engine
// weighs a step's work with it (runtime/stepper.h), so a long context's chunk counts what its
// attention costs. Norms, the delta rule's state and the head's logits are left out: a few flops
// per element, or the same per row at any context.
struct RowCost {
  double token = 0, key = 0;
  // n rows at KV positions [pos0, pos0 + n): row p reads p + 1 keys.
  double rows(int64_t pos0, int64_t n) const {
    const double dn = double(n);
    return dn * token + key * (dn * double(pos0) + dn * (dn + 1) / 2);
  }
};

// A copy of a sequence's recurrent state as it stands inside a prompt chunk (the prefix cache's
// provisional snapshots, runtime/prefix_cache.h): after the first `pos` positions, in
// SequenceState::save_recurrent's layout (recurrent_bytes() / 4 floats at `out`). pos lies on
// the kDeltaChunk grid strictly inside a chunk that starts on the grid (as prompt chunks do). Chunks are cut into pieces on that grid
// anyway, so the state there is the one a chunk ending at pos leaves: the same bits, for the
// cost of a copy. The copy goes to host memory `out`, or (with `device`, `out` null) into a
// snapshot in the executor's memory (SnapshotStore::make of recurrent_bytes(); a device copy
// inside the step, nothing over the bus).
struct StateCapture {
  int64_t pos = 0;
  float* out = nullptr;
  SnapshotStore::Snapshot* device = nullptr;
};

// The rows of one sequence in a forward call: tokens at positions state->pos() onward.
struct SequenceRows {
  SequenceState* state = nullptr;
  std::span<const int32_t> tokens;
  bool all_logits = false;  // logits for every row (else only for the last row)
  // Speculative verification: the rows (at most kMaxVerifyRows) are computed as that many
  // one-token decode steps would compute them (the recurrent form of the delta rule row by
  // row), with logits for every row, so each row has the bits of plain decoding. The state is
  // left pending: commit() keeps the first rows and puts the state back to exactly there.
  bool verify = false;
  // Images (docs/design.md "Images"): the rows' rotary positions [n, 3] (temporal, height,
  // width); empty: KV position + the state's rope_delta() on every axis. And the rows' input
  // vectors: n entries, each a row of [hidden] floats in place of its token's embedding (an
  // image's merged tower rows), or null for the token's own; empty: every row's token.
  std::span<const int64_t> positions{};
  std::span<const float* const> embeddings{};
  // Prompt chunks only (not verify): copies of the state at grid lines inside the chunk, in
  // increasing position.
  std::span<const StateCapture> captures{};
  // Under a pipeline split (dist/pipeline.h): k > 0 when sampling reads only the k largest logits
  // of each of these rows' logits rows (runtime::Sequence::logits_top_k); the last rank then
  // returns those alone and rank 0 sets the others to -inf. Model::forward passes it to its
  // executor (Executor::receive_logits): a device may return those alone too, the rest of the
  // row -inf; the CPU's rows are whole. 0: whole rows.
  int32_t logits_top_k = 0;
};

// One sequence's MTP drafting request (Model::draft).
struct DraftRequest {
  SequenceState* state = nullptr;  // with the MTP head's cache, no verification pending
  int32_t token = 0;               // the token sampled last, not yet fed
  int64_t k = 0;                   // drafts wanted (the rows verified after them: k + 1)
  std::vector<int32_t>* out = nullptr;  // receives up to k drafted tokens
};

// Why `w` has no usable MTP head, in one line; "" when it has one.
std::string mtp_unusable(const ModelWeights& w);

class Model {
 public:
  Model(std::unique_ptr<ModelWeights> weights, const kernels::Ops& ops, core::ThreadPool* pool);
  ~Model();

  const ModelConfig& config() const { return w_->config; }
  const ModelWeights& weights() const { return *w_; }
  const kernels::Ops& ops() const { return ops_; }  // the backend (runtime::ImageEncoder's too)
  // Where the forward's ops run (model/executor.h): a CpuExecutor over ops() by default. Puts `ex`
  // in its place and returns the one before (a device executor, or a test's wrapper around the
  // CPU's). Not during a call.
  std::unique_ptr<Executor> replace_executor(std::unique_ptr<Executor> ex);
  // A CPU executor over ops() in this model's context (thread pool, workspace, mode), as the
  // default one; it must not outlive the model.
  std::unique_ptr<Executor> cpu_executor();
  // Where the prefix cache may keep snapshots in the executor's memory (Executor::snapshot_store;
  // null on the CPU).
  SnapshotStore* snapshot_store() { return ex_->snapshot_store(); }

  // A state with its own blocks for `capacity` positions (and the MTP head's cache when MTP
  // drafting is on).
  std::unique_ptr<SequenceState> new_state(int64_t capacity) const;
  // A state whose KV blocks come from `pool` as it grows (the pool outlives the state).
  std::unique_ptr<SequenceState> new_state(int64_t capacity, KvPool* pool) const;
  // A pool for new_state(capacity, pool); with `mtp` (MTP drafting on), with the MTP head's
  // layer, so that its states keep the head's cache.
  std::unique_ptr<KvPool> new_pool(int64_t n_blocks, bool mtp = false) const;
  // The KV cache formats of the states and pools made from now on (K and V types; f32, the
  // exact mode's, by default). Fails, changing nothing, on a pair this model's head_dim cannot
  // take (one line naming both).
  core::Status set_kv_types(kernels::KvTypes types);
  kernels::KvTypes kv_types() const { return kv_types_; }

  // MTP drafting (model/mtp.cc): allows states with the MTP head's cache (new_state(capacity)
  // from now on, and states of an MTP pool), which forward() fills as it goes and draft() drafts
  // from. Fails, changing nothing, when the checkpoint has no usable MTP head.
  core::Status enable_mtp();
  bool mtp_enabled() const { return mtp_on_; }

  // Greedy drafts for each request, recursively: the first from the MTP row of position
  // pos()-1 (the trunk's last hidden state and `token`), each next one from the head's own
  // output (after its final norm) and the draft before it. Row-wise batched over the requests,
  // one MTP pass per draft position. Proposes fewer than k where the state's capacity or its
  // pool runs out. The head's cache rows written at positions >= pos() are scratch, never read
  // before forward() writes them. With `logits`, receives the head's logits of every drafted
  // row [rows, draft_vocab()], by draft position, then request.
  core::Status draft(std::span<const DraftRequest> reqs, std::vector<float>* logits = nullptr);
  // The head's draft vocabulary: drafts are the argmax over token ids [0, n) only (0 or n >=
  // vocab: all). BPE ids rise with merge order, so the first ids are roughly the most frequent
  // tokens; scoring n of them costs n/vocab of the head, which dominates a draft's cost for
  // large vocabularies. Drafts only change the speed, never the output.
  void set_draft_vocab(int64_t n);
  int64_t draft_vocab() const { return draft_head().rows; }

  // Fast mode: quantized matmuls take int8-quantized activations (kernels/ops.h). Off by
  // default (the exact mode). Matrices of the ggml block types (GGUF) are multiplied in their
  // backend's int8 form (Ops::int8_form, model/int8_forms.cc), built when fast mode is turned on
  // and dropped when it is turned off.
  void set_fast_activations(bool on);

  // Runs the rows; writes logits [n_logit_rows, vocab] in row order (all rows of a sequence with
  // all_logits, else its last row). Advances each state. Fails without touching any state on bad
  // input (token id out of range, context full, empty rows).
  core::Status forward(std::span<const SequenceRows> batch, std::vector<float>* logits);
  // One stage of a model split by layers (docs/design.md "Past one machine"): forward() over the
  // trunk layers [first, end) only, which the weights must hold (ModelWeights::held_first/end).
  // first == 0 starts from the rows' embeddings (and image rows); else from `hidden`, the rows
  // after layer first-1 [n_rows, hidden]. end == n_layers ends as forward() does (final norm,
  // head, MTP rows) into `logits`; else leaves the rows after layer end-1 in `hidden`. Each
  // state advances as in forward(); it holds the sequence's state of these layers. forward() is
  // this over every layer, so a split run does the same arithmetic on every row as one process.
  core::Status forward_layers(std::span<const SequenceRows> batch, int64_t first, int64_t end,
                              std::vector<float>* hidden, std::vector<float>* logits);

  // The vision tower (model/vision.h): one image's patch rows [t·h·w, patch_dim] to its tokens
  // [t·(h/2)·(w/2), hidden], with this model's thread pool, workspace and mode (fast mode changes
  // only affine matrices). Fails, writing nothing, when the weights have no usable tower
  // (weights().vision_problem) or the grid is bad. One caller at a time, like forward(); it
  // touches no sequence state.
  core::Status encode_image(const float* rows, int64_t grid_t, int64_t grid_h, int64_t grid_w, float* out);
  bool has_vision() const { return w_->vision != nullptr; }
  // The same in pieces (model/vision.h VisionRun), so that the engine can spread an image over
  // steps: begin_image fails as encode_image does; plan_image says how far a budget of
  // multiply-adds × 2 takes the run (VisionTower::plan); advance_image runs it up to a cursor
  // and returns whether the image is done. The tower's ops go to the model's executor (model/
  // executor.h), each advance_image a step of its own there: a device's records the pieces and
  // submits them before it returns (an error: the device failed, and the run is to be dropped).
  // end_image: a run given up before it is done (its memory on the executor freed).
  core::Status begin_image(const float* rows, int64_t grid_t, int64_t grid_h, int64_t grid_w, float* out,
                           VisionRun* run);
  VisionPlan plan_image(const VisionRun& run, double budget, bool at_least_one) const;
  core::Result<bool> advance_image(VisionRun* run, const VisionCursor& end);
  void end_image(VisionRun* run);
  int64_t image_stages_per_frame() const { return w_->vision ? int64_t(w_->vision->blocks.size()) + 2 : 0; }
  // Multiply-adds × 2 of one prompt token through the trunk's matmuls (MoE: its active experts;
  // no head, no attention scores): the unit in which the engine weighs an image's stages.
  double token_flops() const;
  RowCost row_cost() const;  // token_flops() and the attention's flops per key

  // Ends the pending verification of `state`: keeps its first `rows` rows (1 ≤ rows ≤ the rows
  // verified), as if only those had been decoded, bit for bit. Keeping all of them costs nothing;
  // fewer replays the recurrence of the kept rows from the saved conv inputs and projections
  // (no weight matmul). The KV rows past the kept ones are dropped with the blocks they alone
  // filled.
  void commit(SequenceState* state, int64_t rows);

 private:
  // The rows [row0, row0 + n) of the call that belong to one sequence, starting at position pos0.
  struct Span {
    SequenceState* state;
    int64_t row0, n, pos0;
    bool verify;
    const int64_t* positions = nullptr;  // [n, 3], or null (SequenceRows::positions)
    std::span<const StateCapture> captures{};
  };
  core::Status validate(std::span<const SequenceRows> batch, int64_t* n_tokens, int64_t* n_logit_rows);
  // forward_layers' end on the last stage: the final norm and head into `logits`, the MTP rows.
  void head_rows(std::span<const SequenceRows> batch, int64_t n, int64_t n_logits, std::vector<float>* logits);
  // Layer l: a trunk layer, or for l == n_layers the MTP head's (with its cache).
  const LayerWeights& layer(int64_t l) const;
  // The MTP head over rows already described by spans_ (state, row0, n, pos0 = the cache
  // position of the first row): tokens [m] (token p+1 of each row p), hidden [m, hidden] (h_p).
  // Writes the rows to the head's cache; with `out`, also runs the rest of the layer and its
  // final norm into out [m, hidden].
  void mtp_rows(int64_t m, const int32_t* tokens, const float* hidden, float* out);
  // After the trunk in forward(): the MTP rows that this call's tokens complete (hidden: the
  // trunk's rows after the final norm, [n, hidden]; tokens: act_.tokens).
  void mtp_after_forward(const float* hidden);
  // Token mixers and MLPs: read in [n, hidden], write out [n, hidden].
  void deltanet_layer(int64_t layer, const float* in, int64_t n, float* out);
  void capture_deltanet(int64_t layer, const Span& sp, const StateCapture& cap, const float* qkv);
  // `count` floats at src into a capture's copy from float `at`: to the host, or on the device.
  void capture_part(const StateCapture& cap, const float* src, int64_t count, int64_t at);
  void attention_layer(int64_t layer, const float* in, int64_t n, float* out);
  void mlp_layer(int64_t layer, const float* in, int64_t n, float* out);
  void moe_layer(int64_t layer, const float* in, int64_t n, float* out);

  std::unique_ptr<ModelWeights> w_;
  const kernels::Ops& ops_;
  std::unique_ptr<kernels::Workspace> workspace_;  // the kernels' scratch, this model's alone
  kernels::Context ctx_;
  // Where the forward's ops run (model/executor.h); the CPU executor reads ctx_ at every op.
  std::unique_ptr<Executor> ex_;
  Activations act_;
  std::vector<Span> spans_;  // of the current call
  std::vector<int32_t> top_k_;  // per logits row of the current call: SequenceRows::logits_top_k
  bool mtp_on_ = false;
  kernels::KvTypes kv_types_{};
  // The draft vocabulary (0: the whole head). The draft head is taken from the head in use at
  // each draft, so fast mode swapping the head for its int8 form needs no re-slicing.
  int64_t draft_rows_ = 0;
  kernels::Matrix draft_head() const;  // rows [0, draft vocabulary) of the head in use
  // Fast mode's int8 forms, and the matrices of w_ they stand in for (restored when it ends).
  std::vector<std::unique_ptr<kernels::Int8Form>> int8_forms_;
  std::vector<std::pair<kernels::Matrix*, kernels::Matrix>> replaced_;
  // MTP scratch: row inputs and outputs (grow to the largest call, then reused).
  std::vector<int32_t> mtp_tokens_;
  std::vector<float> mtp_in_, mtp_out_, mtp_cat_, hidden_, draft_logits_;
  std::vector<int64_t> draft_prev_;
  std::vector<Span> trunk_spans_;
  std::vector<int64_t> rope_pos_;  // a span's rotary positions when its state has a rope delta
  // The rotary positions of a span's rows for the attention kernel: its own, the KV positions
  // moved by the state's rope delta, or null (the KV positions themselves).
  const int64_t* rope_positions(const Span& sp);
  std::unique_ptr<VisionTower> vision_;  // made at the first image
  void forget_run(const VisionRun& run);
};

}  // namespace qwen35::model
