// The blocks of the full-attention KV cache: kernels::kKvBlock positions each, taken by
// sequences as they grow and shared by reference count (a cached prefix and every sequence
// resumed from it hold the same blocks). One block id covers that block's positions in every
// full-attention layer: K and V of attention layer i, block b, are at k(i, b) and v(i, b),
// [kKvBlock, n_kv_heads, head_dim] fp32 each. A pool made for MTP drafting has one more layer,
// the last, for the MTP head's cache (model/state.h).
//
// Memory: the blocks are one anonymous mapping per layer and kind, reserved at creation and made
// resident by the kernel only as they are first written, so a pool sized for the worst case costs
// what the tokens in use cost. Allocation and release take no system call and allocate nothing:
// decode never allocates.
//
// Thread-safety: none; one owner (the engine thread, or a single-threaded caller).
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace qwen35::model {

class KvPool {
 public:
  KvPool(const ModelConfig& c, int64_t n_blocks, bool mtp = false);
  ~KvPool();
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  // A block with reference count 1, or -1 when none is free.
  int32_t allocate();
  void retain(int32_t block);
  void release(int32_t block);  // back to the free list at count 0
  int32_t refs(int32_t block) const { return refs_[size_t(block)]; }

  int64_t n_blocks() const { return n_blocks_; }
  int64_t free_blocks() const { return int64_t(free_.size()); }
  int64_t used_blocks() const { return n_blocks_ - free_blocks(); }
  size_t block_bytes() const;  // K + V of one block in every attention layer
  int64_t n_layers() const { return int64_t(k_.size()); }
  bool mtp() const { return mtp_; }  // the last layer is the MTP head's
  int64_t block_floats() const { return stride_; }  // K (or V) of one block in one layer

  float* k(int64_t attn_layer, int32_t block) const { return k_[size_t(attn_layer)] + block * stride_; }
  float* v(int64_t attn_layer, int32_t block) const { return v_[size_t(attn_layer)] + block * stride_; }

 private:
  int64_t n_blocks_ = 0;
  bool mtp_ = false;
  int64_t stride_ = 0;  // floats per block and layer: kKvBlock · n_kv_heads · head_dim
  std::vector<float*> k_, v_;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;  // LIFO: a released block is the next one handed out
};

}  // namespace qwen35::model
