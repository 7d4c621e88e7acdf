// Gated full attention of one sequence on the device (kernels/ops.h Ops::attention, fp32 cache):
// QK-norm and RoPE of the rows, their keys and values written into the sequence's paged cache,
// then the online-softmax attention over the cache (shaders/attention.comp), recorded as a few
// dispatches on the step's Recorder.
#pragma once

#include <cstdint>

#include "vulkan/recorder.h"

namespace qwen35::vulkan {

// A sequence's fp32 key/value cache in device pools of 64-position blocks: block b of the
// sequence is physical block table[b] of k_pool and v_pool ([blocks, 64, n_kv_heads·head_dim]).
struct DeviceKv {
  Binding k_pool, v_pool;
  Binding table;         // int32 [ceil(capacity / 64)]
  int64_t capacity = 0;  // positions the table covers
};

struct AttentionShape {
  int64_t n_heads, n_kv_heads, head_dim, rotary_dim;
  float eps;
  int64_t first_key = 0;
  bool gated = true;  // query rows carry the output gate: [n, n_heads, 2·head_dim]
};

// The rows' inputs and the op's scratch.
struct AttentionInputs {
  Binding qg, k, v;        // [n, nh, q_row], [n, nkv, hd], [n, nkv, hd]
  Binding q_norm, k_norm;  // [hd] each (1+w folded)
  Binding positions;       // int32 [n, 3]: the rows' rotary positions (text: pos0 + t on each axis)
  const Binding* pair_axis = nullptr;  // uint32 [rotary_dim/2], or null
  Binding rope_table;                  // vulkan/ops.h rope_table
  int64_t rope_rows = 0;
  Binding q_tmp, k_tmp;  // scratch: [n·nh·hd], [n·nkv·hd] floats
};

// out [n, nh·hd]; appends the rows' keys and values at positions pos0.. (pos0 + n ≤ capacity,
// first_key ≤ pos0, head_dim ≤ 256).
void record_attention(Recorder& rec, const AttentionShape& s, const AttentionInputs& in, int64_t n,
                      int64_t pos0, const DeviceKv& kv, const Binding& out);

}  // namespace qwen35::vulkan
