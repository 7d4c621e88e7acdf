// Gated full attention of one sequence on the device (kernels/ops.h Ops::attention): QK-norm and
// RoPE of the rows, their keys and values written into the sequence's paged cache, then the
// online-softmax attention over the cache, recorded as a few dispatches on the step's Recorder.
// An fp32 cache takes shaders/kv_write.comp and attention.comp; a cache of other KV formats
// (kernels/kv_format.h, the CPU's bytes) kv_encode.comp and attention_kv.comp, which read the
// rows in place.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kv_format.h"
#include "vulkan/recorder.h"

namespace qwen35::vulkan {

// A sequence's key/value cache in device pools of 64-position blocks: block b of the sequence is
// physical block table[b] of k_pool and v_pool ([blocks, 64, n_kv_heads, row bytes of the
// format], model/kv_pool.h's layout). The formats default to fp32 (unrotated); another format
// needs `books` (kv_books of the two formats) and head_dim ≤ 256.
struct DeviceKv {
  Binding k_pool, v_pool;
  Binding table;         // int32 [ceil(capacity / 64)]
  int64_t capacity = 0;  // positions the table covers
  kernels::KvFormat k_format{}, v_format{};
  Binding books;  // float [64]: kv_books(k_format, v_format)
  bool f32() const {
    return k_format.type == kernels::KvType::kF32 && v_format.type == kernels::KvType::kF32 &&
           !k_format.rotated && !v_format.rotated;
  }
};

// The formats' tables the shaders read: K's turbo codebook [16], V's [16], then K's and V's cell
// boundaries [16] each (float of the midpoint of neighbouring centroids); zeros for non-turbo.
std::vector<float> kv_books(const kernels::KvFormat& k, const kernels::KvFormat& v);

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
// first_key ≤ pos0, head_dim ≤ 256; the formats pass kernels::kv_format_check at head_dim).
void record_attention(Recorder& rec, const AttentionShape& s, const AttentionInputs& in, int64_t n,
                      int64_t pos0, const DeviceKv& kv, const Binding& out);

// Rows src [n, nkv, head_dim] encoded into `pool` (a cache of `format`, its block table `table`)
// at positions pos0..pos0+n-1: kernels::kv_encode_row's bytes (bf16, q8_0, q4_0, f32; turbo
// within the bound of docs/design.md "KV formats on the device"). `books`: kv_books with this
// format as K (is_v false) or V (is_v true).
void record_kv_encode(Recorder& rec, const kernels::KvFormat& format, const Binding& src,
                      int64_t n, int64_t nkv, int64_t pos0, const Binding& pool,
                      const Binding& table, const Binding& books, bool is_v);

}  // namespace qwen35::vulkan
