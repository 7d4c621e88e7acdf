// SIMD kernels (Highway dynamic dispatch) of causal attention over a key/value cache. Tested
// against the scalar reference on every target.
#pragma once

#include <cstdint>
#include <vector>

namespace qwen35::kernels::cpu {

// Causal attention of one query row over cache positions 0..n_pos-1 (keys and values at
// k + j*stride, v + j*stride): o[hd] = softmax_j(q·k_j · scale) v_j, by an online softmax over
// blocks of 64 keys (one pass over the cache). s: 64 floats of scratch.
void attend(const float* q, const float* k, const float* v, int64_t stride, int64_t n_pos, int64_t hd,
            float scale, float* s, float* o);
// One key/value head of an fp32 block table (kernels/ops.h, KvView): key j of the head is the
// float at k_blocks[j / kKvBlock] + offset + (j % kKvBlock)·stride floats, its value likewise.
struct KvHead {
  const uint8_t* const* k_blocks;
  const uint8_t* const* v_blocks;
  int64_t offset;  // the head's first float within a position's row
  int64_t stride;  // floats per position
  int64_t first = 0;  // keys before it are not attended (their scores count as -inf)
};

// The block table of a contiguous cache of n_pos positions (position j at base + j·stride).
std::vector<const uint8_t*> contiguous_blocks(const float* base, int64_t n_pos, int64_t stride);

// The same for nq query rows against one cache head (the query heads that share a key/value
// head, at one or more positions): query i sees positions 0..n_pos[i]-1, and each 64-key block is
// read once for all of them. Each query's arithmetic is attend's: o[i] gets the same bits as
// alone, wherever the blocks lie. s: 64·nq floats of scratch, m: 2·nq floats.
void attend_many(const float* const* q, const int64_t* n_pos, int nq, const KvHead& kv, int64_t hd,
                 float scale, float* s, float* m, float* const* o);

}  // namespace qwen35::kernels::cpu
