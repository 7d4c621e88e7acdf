// Per-sequence state of the hybrid model: a KV cache for each full-attention layer and the conv +
// recurrent state for each Gated DeltaNet layer, all fp32, allocated once at creation for a fixed
// context capacity (no allocation while decoding). The KV cache is addressed through a table of
// kernels::kKvBlock-position blocks (kernels::KvView); today a sequence's blocks are slices of
// one array per layer.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ops.h"
#include "model/config.h"

namespace qwen35::model {

class SequenceState {
 public:
  SequenceState(const ModelConfig& c, int64_t capacity);

  int64_t pos() const { return pos_; }          // tokens already consumed
  int64_t capacity() const { return capacity_; }
  void reset();

  // Layer-indexed accessors (the layer must be of the matching kind).
  kernels::KvView kv(int64_t layer) {
    const int64_t i = slot_[layer];
    return {k_blocks_[i].data(), v_blocks_[i].data(), capacity_, kv_row_};
  }
  float* conv_state(int64_t layer) { return conv_[slot_[layer]].data(); }
  float* delta_state(int64_t layer) { return delta_[slot_[layer]].data(); }

  size_t kv_bytes() const;
  size_t recurrent_bytes() const;

 private:
  friend class Model;
  int64_t pos_ = 0;
  int64_t capacity_ = 0;
  int64_t kv_row_ = 0;  // floats per position: n_kv_heads · head_dim
  std::vector<int64_t> slot_;  // layer -> index into kv_ or conv_/delta_
  std::vector<std::vector<float>> kv_;     // [2, n_blocks · kKvBlock, n_kv_heads, head_dim]
  std::vector<std::vector<float*>> k_blocks_, v_blocks_;  // [n_blocks] into kv_
  std::vector<std::vector<float>> conv_;   // [kernel-1, channels]
  std::vector<std::vector<float>> delta_;  // [n_v_heads, d_k, d_v]
};

}  // namespace qwen35::model
