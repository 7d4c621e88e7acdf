// Per-sequence state of the hybrid model: a KV cache for each full-attention layer (rows in the
// pool's formats, fp32 by default) and the conv + recurrent state for each Gated DeltaNet layer
// (fp32). The KV cache is a table of blocks of
// kernels::kKvBlock positions (kernels::KvView) taken from a KvPool as the sequence grows; the
// conv and recurrent state are allocated once at creation. A state made without a pool owns one
// sized for its whole capacity, with every block taken up front (forward never runs out).
//
// MTP drafting (a state of a pool made for it, KvPool::mtp()): the state also holds the MTP
// head's cache, as one more attention layer of the same blocks, and the trunk's last hidden row.
// MTP row p (its inputs: the trunk's hidden state h_p and token p+1) lives at position p+1 of
// that cache, so a block of positions [b·64, (b+1)·64) holds rows that depend on tokens
// [0, (b+1)·64) alone and is shared by prefixes like the trunk's blocks; position 0 holds no row
// and is never read. Invariant: after pos() tokens, MTP rows 0..pos()-2 are cached (computed by
// Model::forward) and mtp_hidden() is h_{pos()-1}.
//
// Invariant: blocks cover at least positions [0, pos()); positions >= pos() are never read.
// Thread-safety: one user at a time; states sharing a pool must be used by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/ops.h"
#include "model/config.h"
#include "model/kv_pool.h"
#include "model/mirror.h"

namespace qwen35::model {

// The most rows one speculative verification takes (the drafted tokens + 1).
inline constexpr int64_t kMaxVerifyRows = 16;

class SequenceState {
 public:
  SequenceState(const ModelConfig& c, int64_t capacity, bool mtp = false,
                kernels::KvTypes types = {});                             // a private pool
  SequenceState(const ModelConfig& c, int64_t capacity, KvPool* pool);     // blocks on demand
  ~SequenceState();
  SequenceState(const SequenceState&) = delete;
  SequenceState& operator=(const SequenceState&) = delete;

  int64_t pos() const { return pos_; }  // tokens already consumed
  // Rows without explicit rotary positions (SequenceRows::positions: decode, drafts) turn at
  // KV position + rope_delta on every axis: after an image, whose tokens span fewer rotary
  // positions than KV rows, the delta is negative (docs/design.md "Images"). 0 after reset().
  int64_t rope_delta() const { return rope_delta_; }
  void set_rope_delta(int64_t d) { rope_delta_ = d; }
  int64_t capacity() const { return capacity_; }
  // pos 0, recurrent state cleared; the blocks go back to a shared pool (a private pool's stay).
  void reset();
  // Takes blocks until positions [0, positions) are covered; false when the pool runs out (the
  // blocks taken so far are kept).
  bool reserve(int64_t positions);
  int64_t blocks_held() const { return int64_t(blocks_.size()); }
  const std::vector<int32_t>& blocks() const { return blocks_; }

  // Layer-indexed accessors (the layer must be of the matching kind).
  kernels::KvView kv(int64_t layer) {
    const int64_t i = slot_[layer];
    return {k_blocks_[size_t(i)].data(), v_blocks_[size_t(i)].data(),
            blocks_held() * kernels::kKvBlock,  kv_row_,
            pool_->k_format(),                  pool_->v_format(),
            pool_->k_row_bytes(),               pool_->v_row_bytes()};
  }
  float* conv_state(int64_t layer) { return conv_[size_t(slot_[layer])].data(); }
  float* delta_state(int64_t layer) { return delta_[size_t(slot_[layer])].data(); }

  // MTP drafting: whether the state has the MTP head's cache (kv(n_layers) is it), and the
  // trunk's hidden state of the last position consumed [hidden] (see above).
  bool has_mtp() const { return pool_->mtp(); }
  float* mtp_hidden() { return mtp_hidden_.data(); }

  size_t kv_bytes() const;  // of the blocks held
  size_t recurrent_bytes() const;  // conv + recurrent state, and mtp_hidden()

  // Snapshots (the prefix cache): the conv + recurrent state of every Gated DeltaNet layer (and
  // mtp_hidden()) as one array of recurrent_bytes() / 4 floats, and back.
  void save_recurrent(float* out) const;
  // Where layer `layer`'s conv and recurrent state, and mtp_hidden(), lie in that array (floats).
  // Every Gated DeltaNet layer's conv (and recurrent) state has the same size.
  int64_t conv_offset(int64_t layer) const {
    return slot_[size_t(layer)] * int64_t(conv_[0].size());
  }
  int64_t delta_offset(int64_t layer) const {
    return int64_t(conv_.size() * conv_[0].size()) + slot_[size_t(layer)] * int64_t(delta_[0].size());
  }
  int64_t mtp_offset() const {
    return conv_.empty() ? 0 : int64_t(conv_.size() * (conv_[0].size() + delta_[0].size()));
  }
  void load_recurrent(const float* in);
  // On a state just reset (no position, no block): takes a reference to `blocks` (of this
  // state's pool, covering [0, pos)) as its first blocks and stands at `pos`.
  void adopt(std::span<const int32_t> blocks, int64_t pos);
  // On a state just reset, of the same pool as `src` (no verification pending on it): stands
  // where `src` stands, with the same bits. Its whole blocks are shared by reference, its last
  // partial block (which the two sequences will write differently) is copied into a block of
  // its own, and the recurrent state is copied. False when the pool has no block for the copy
  // (nothing is held then). The n choices of one prompt fork this way (runtime/sequence.h).
  bool fork_from(const SequenceState& src);
  KvPool* pool() const { return pool_; }

  // Device executors (model/mirror.h): the state's float buffers (conv and recurrent state of
  // every Gated DeltaNet layer, the verification records once prepared, the MTP rows), each
  // one region of host memory that a twin mirrors; and the mirror that says which side is
  // current. The methods above read and write through it.
  void regions(std::vector<std::span<float>>* out);
  // The buffers save_recurrent() lays end to end, in its order (the conv states, the recurrent
  // states, the MTP row), each one of regions().
  void recurrent_buffers(std::vector<std::span<const float>>* out) const;
  Mirror& mirror() { return mirror_; }
  const Mirror& mirror() const { return mirror_; }

  // Speculative verification (Model::forward with SequenceRows::verify, then Model::commit):
  // between the two the state stands past every verified row, and Model::commit puts it back
  // to exactly the rows kept. Nothing else may read or advance the state in between.
  bool verify_pending() const { return verify_rows_ > 0; }
  int64_t verify_rows() const { return verify_rows_; }
  // What Model::commit needs of one Gated DeltaNet layer to put the state back to any row of
  // the pending verification. Allocated at the first verification, never per step.
  struct VerifyRecord {
    std::vector<float> conv0;  // the conv state before the rows [kernel-1, channels]
    std::vector<float> qkv;    // the rows' conv inputs [rows, channels]
    std::vector<float> a, b;   // the rows' raw decay and β projections [rows, n_v_heads]
    std::vector<float> after;  // the recurrent state after every row [n_v_heads, d_k, d_v]
  };
  // Sizes the records for kMaxVerifyRows rows (once: later steps allocate nothing).
  void prepare_verify(const ModelConfig& c);
  VerifyRecord& verify_record(int64_t layer) { return verify_[size_t(slot_[size_t(layer)])]; }
  // MTP: the trunk's hidden rows of the pending verification [rows, hidden].
  float* verify_hidden() { return verify_hidden_.data(); }
  // The forward call fed `rows` more positions (a verification when `verify`: they stay
  // pending until end_verify).
  void advance(int64_t rows, bool verify) {
    pos_ += rows;
    if (verify) verify_rows_ = rows;
  }
  // Every verified row of layer `layer` kept: its recurrent state becomes the one recorded
  // after the last row.
  void keep_verified(int64_t layer) {
    std::swap(delta_[size_t(slot_[size_t(layer)])], verify_record(layer).after);
  }
  // Closes the pending verification with its first `rows` rows kept (the layers' states
  // already put back by Model::commit): pos() steps back and the blocks past it are given back.
  void end_verify(int64_t rows);
  // Gives back the KV blocks wholly past pos() (after a commit that kept fewer rows).
  void trim_blocks();
  // What a state's first verification allocates (its records, kept from then on).
  static size_t verify_bytes(const ModelConfig& c, bool mtp = false);

 private:
  void init(const ModelConfig& c, KvPool* pool);
  // Declared first, destroyed last: its twin is dropped after nothing can use it.
  Mirror mirror_;
  void release_blocks();
  std::vector<VerifyRecord> verify_;  // per Gated DeltaNet layer, as conv_ and delta_
  std::vector<float> verify_hidden_;  // MTP: the trunk's hidden rows verified [rows, hidden]
  int64_t verify_rows_ = 0;           // rows of the pending verification (0: none)
  std::vector<float> mtp_hidden_;     // MTP: h_{pos-1} [hidden]; empty without MTP

  int64_t pos_ = 0;
  int64_t rope_delta_ = 0;
  int64_t capacity_ = 0;
  int64_t kv_row_ = 0;  // floats per position: n_kv_heads · head_dim
  std::unique_ptr<KvPool> own_pool_;
  KvPool* pool_ = nullptr;
  std::vector<int64_t> slot_;          // layer -> attention index, or index into conv_/delta_
  std::vector<int32_t> blocks_;        // block ids, position order
  std::vector<std::vector<uint8_t*>> k_blocks_, v_blocks_;  // [attention layer][block]
  std::vector<std::vector<float>> conv_;   // [kernel-1, channels]
  std::vector<std::vector<float>> delta_;  // [n_v_heads, d_k, d_v]
};

}  // namespace qwen35::model
