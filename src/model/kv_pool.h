// The blocks of the full-attention KV cache: kernels::kKvBlock positions each, taken by
// sequences as they grow and shared by reference count (a cached prefix and every sequence
// resumed from it hold the same blocks). One block id covers that block's positions in every
// full-attention layer: K and V of attention layer i, block b, are at k(i, b) and v(i, b),
// [kKvBlock, n_kv_heads] rows of the pool's K and V formats (kernels/kv_format.h: fp32 by
// default; bf16, q8_0, q4_0, turbo4, turbo3, K and V each its own). A pool made for MTP drafting
// has one more layer, the last, for the MTP head's cache (model/state.h), in the same formats.
//
// Memory: the blocks are one anonymous mapping per layer and kind, reserved at creation and made
// resident by the kernel only as they are first written, so a pool sized for the worst case costs
// what the tokens in use cost. Sizes count the real bytes of the formats. A block handed out
// again is zeroed first (all-zero bytes decode to 0 in every format, and stale bytes could hold
// a NaN scale that a zero weight would not mask); a block never handed out is still the
// mapping's zero pages. Allocation and release take no system call and allocate nothing:
// decode never allocates.
//
// Thread-safety: none; one owner (the engine thread, or a single-threaded caller).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/result.h"
#include "kernels/kv_format.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/mirror.h"

namespace qwen35::model {

// OK, or one line naming the pair and the model's head_dim that cannot go together.
core::Status check_kv_types(const ModelConfig& c, kernels::KvTypes types);
// Bytes of K and V of one position in every full-attention layer (and the MTP head's with `mtp`).
size_t kv_bytes_per_token(const ModelConfig& c, kernels::KvTypes types, bool mtp = false);

class KvPool {
 public:
  // `types` must pass check_kv_types.
  KvPool(const ModelConfig& c, int64_t n_blocks, bool mtp = false, kernels::KvTypes types = {});
  ~KvPool();
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  // A block with reference count 1 (all-zero bytes), or -1 when none is free.
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
  int64_t block_floats() const { return values_; }  // values of K (or V) of one block and layer

  kernels::KvTypes types() const { return types_; }
  const kernels::KvFormat& k_format() const { return k_format_; }
  const kernels::KvFormat& v_format() const { return v_format_; }
  int64_t k_row_bytes() const { return k_row_; }  // bytes of K at one position of one layer
  int64_t v_row_bytes() const { return v_row_; }
  size_t k_block_bytes() const { return size_t(k_row_ * kernels::kKvBlock); }  // one layer
  size_t v_block_bytes() const { return size_t(v_row_ * kernels::kKvBlock); }

  uint8_t* k(int64_t attn_layer, int32_t block) const {
    return k_[size_t(attn_layer)] + size_t(block) * k_block_bytes();
  }
  uint8_t* v(int64_t attn_layer, int32_t block) const {
    return v_[size_t(attn_layer)] + size_t(block) * v_block_bytes();
  }
  // Device executors (model/mirror.h): the K and V memory of each layer, one region each
  // ([n_blocks, kKvBlock] rows), and the mirror that says which side is current. Code that reads
  // or writes blocks on the host (forks, cache files) goes through it. Zeroing a block handed out
  // again does not: a device reads no position a step has not written.
  void regions(std::vector<std::span<uint8_t>>* out) const;
  Mirror& mirror() const { return mirror_; }

  // The same as floats, for an fp32 pool (tests that write made-up rows).
  float* k_f32(int64_t attn_layer, int32_t block) const;
  float* v_f32(int64_t attn_layer, int32_t block) const;

 private:
  mutable Mirror mirror_;  // first: destroyed after the memory it mirrors is unmapped
  int64_t n_blocks_ = 0;
  bool mtp_ = false;
  int64_t values_ = 0;  // kKvBlock · n_kv_heads · head_dim
  kernels::KvTypes types_{};
  kernels::KvFormat k_format_{}, v_format_{};
  int64_t k_row_ = 0, v_row_ = 0;
  std::vector<uint8_t*> k_, v_;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;  // LIFO: a released block is the next one handed out
  std::vector<uint8_t> used_;  // whether a block was ever handed out (then zeroed when reused)
};

}  // namespace qwen35::model
