// Causal attention over a compressed KV cache (kernels/kv_format.h): the kv_attention primitives
// (scores and values read straight from the stored rows) under an online softmax over the
// cache's 64-position blocks. The fp32 cache keeps its own kernel (attention.h).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kv_format.h"

namespace qwen35::kernels::cpu {

// One key/value head of a compressed block table (kernels/ops.h, KvView): K row j of the head is
// at k_blocks[j / kKvBlock] + k_offset + (j % kKvBlock)·k_stride bytes, its V row likewise.
struct KvHeadRows {
  const uint8_t* const* k_blocks;
  const uint8_t* const* v_blocks;
  int64_t k_offset, v_offset;  // the head's first byte within a position's row
  int64_t k_stride, v_stride;  // bytes per position
  KvFormat k_format, v_format;
  int64_t first = 0;  // rows before it are never read (not even weighted by 0)
};

// What one thread reuses between calls (kept in its workspace: steady state allocates nothing).
struct KvAttendScratch {
  std::vector<PreparedQuery> queries;
  std::vector<float> scores, stats;
};

// nq query rows (QK-normed and rotary-embedded, fp32) against one cache head: query i sees rows
// [first, n_pos[i]). o[i][head_dim] = softmax_j(q_i·k̂_j·scale)·v̂_j. Query i's float operations
// and their order are fixed by the query and its rows alone: per 64-row block, its scores
// (kv_scores_many: a lone query's bits), the block's maximum, the rescale of the running sum and
// of o[i] by e^(old − new) when it grows, e^(s − max) in row order added to the sum, kv_values
// over the rows; at the end kv_values_finish (un-rotation) and o[i] · (1/sum). So o[i] has the
// same bits whatever the other queries, their number or the thread.
void attend_kv_many(const float* const* q, const int64_t* n_pos, int nq, const KvHeadRows& kv,
                    float scale, KvAttendScratch* scratch, float* const* o);

}  // namespace qwen35::kernels::cpu
