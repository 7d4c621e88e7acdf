// SIMD kernels (Highway dynamic dispatch) of the vision tower's bidirectional attention
// (Ops::vision_attention): every query row of one image against all its rows, by an online
// softmax over blocks of kVisionKeyBlock keys. Tested against the scalar reference on every target.
#pragma once

#include <cstdint>

namespace qwen35::kernels::cpu {

// Keys per block of the online softmax, and query rows per work item (one head; each item streams
// the head's keys and values once, so larger items mean less memory traffic per flop).
inline constexpr int64_t kVisionKeyBlock = 64;
inline constexpr int64_t kVisionQueryBlock = 128;

// The keys and values of one image, laid out for the kernel by vision_prepare_rows:
//   kt [n_heads, blocks, head_dim, kVisionKeyBlock]: rotated keys, each block transposed (key j's
//      dim c at c·kVisionKeyBlock + j), zero past row n;
//   v  [n_heads, n, v_stride]: values, each row zero-padded to v_stride floats.
struct VisionKv {
  int64_t n, n_heads, head_dim, v_stride;
  float* kt;
  float* v;
  int64_t blocks() const { return (n + kVisionKeyBlock - 1) / kVisionKeyBlock; }
  size_t kt_floats() const { return size_t(n_heads * blocks() * head_dim * kVisionKeyBlock); }
  size_t v_floats() const { return size_t(n_heads * n * v_stride); }
};

// head_dim rounded up to whole vectors of the running SIMD target (VisionKv::v_stride).
int64_t vision_value_stride(int64_t head_dim);
// Floats of per-thread scratch vision_attend_rows needs.
int64_t vision_scratch_floats(int64_t head_dim, int64_t v_stride);

// Rows [r0, r1) of the padded range [0, blocks·kVisionKeyBlock) into kv: row t < n's keys rotated
// by cos/sin [n, head_dim/2] (rotate-half), its values copied; rows ≥ n zero. Disjoint row ranges
// may run on different threads.
void vision_prepare_rows(const float* qkv, const float* cos, const float* sin, const VisionKv& kv,
                         int64_t r0, int64_t r1);

// Query rows [q0, q1) (at most kVisionQueryBlock) of head h against all n keys:
// out[t − out_row0, h·head_dim + ·] (row stride n_heads·head_dim; `out` holds rows from
// out_row0 ≤ q0) = softmax(q_t·kᵀ/√head_dim)·v with q_t rotated like the keys. Each row's
// arithmetic, and its order, is fixed by the row alone (scores one FMA chain over the head's
// dims; blocks of keys in order; values one FMA per key in order): the same bits whichever rows
// share the call.
void vision_attend_rows(const VisionKv& kv, const float* qkv, const float* cos, const float* sin,
                        int64_t h, int64_t q0, int64_t q1, float* scratch, float* out, int64_t out_row0 = 0);

}  // namespace qwen35::kernels::cpu
