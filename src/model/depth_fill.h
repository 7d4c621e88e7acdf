// A sequence state filled to a depth with pseudo-random contents instead of a prefill
// (`qwen35 bench --depth-fill random`): decode's cost at depth depends on the bytes it reads,
// not their values, and a real prefill of 32k tokens takes minutes (hours at the larger
// geometries).
//
// What it writes is what a prefill leaves, in bytes and layout: every KV row of every attention
// layer (the MTP head's too, where the state has it) for positions [0, depth), each head's row
// encoded by kernels::kv_encode_row in the pool's K and V formats (the write path of
// Ops::attention); the conv and recurrent state of every Gated DeltaNet layer; pos() = depth.
// The values are deterministic: depth_fill_row is a function of the seed and the row's
// coordinates alone, not of the thread count or the order of filling.
#pragma once

#include <cstdint>

#include "core/result.h"
#include "core/thread_pool.h"
#include "model/config.h"
#include "model/state.h"

namespace qwen35::model {

// The row written at (attention index `attn`, K when !value else V, position, KV head):
// head_dim values uniform in [-√3, √3) (RMS 1, like a normed key), into out[head_dim].
void depth_fill_row(uint64_t seed, int64_t attn, bool value, int64_t pos, int64_t head,
                    int64_t head_dim, float* out);

// Fills `state` (just reset: pos() 0, no blocks) to `depth` positions as above, with the
// recurrent state uniform in [-0.1, 0.1) (a bounded state, as gated decay keeps it). Rows are
// encoded in parallel on `pool` when given. An error names what is wrong: a state not at 0,
// depth past its capacity, or a KV pool without room for it.
core::Status fill_depth_random(const ModelConfig& c, SequenceState* state, int64_t depth,
                               uint64_t seed, core::ThreadPool* pool = nullptr);

}  // namespace qwen35::model
