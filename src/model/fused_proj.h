// Qwen3-Next's fused Gated DeltaNet input projections. Its checkpoints (HF, MLX, and llama.cpp's
// older qwen3next files as ssm_in) store in_proj_qkvz and in_proj_ba with their rows interleaved
// per key head: key head g's group holds
//   in_proj_qkvz: [q (dk rows) | k (dk) | v (r·dv) | z (r·dv)],   in_proj_ba: [b (r) | a (r)],
// r = nv/nk value heads per key head, in HF's grouped order (value head g·r + j reads key head
// g). The forward reads Qwen3.5's layout — in_proj_qkv's rows all q, all k, then all v; in_proj_z,
// in_proj_b, in_proj_a one row (or dv rows) per value head — so the binders regroup the rows once
// at load into storage the weights own (the fused rows are not contiguous in the new order).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/ops.h"
#include "model/config.h"

namespace qwen35::model {

// The part of a fused tensor a table entry binds (model/tensor_table.h).
enum class Fused : uint8_t { kNone, kQkv, kZ, kB, kA };

// Rows of the fused tensor that `part` is cut from: 2·nk·dk + 2·nv·dv (qkvz) or 2·nv (ba).
int64_t fused_rows(const ModelConfig& c, Fused part);

// The fused tensor's rows that make up `part`, in the forward's order: runs {first, count}.
struct RowRun {
  int64_t first = 0, count = 0;
};
std::vector<RowRun> fused_part_runs(const ModelConfig& c, Fused part);

// Storage for regrouped matrices (ModelWeights::owned): each buffer stays where it is.
using OwnedBuffers = std::vector<std::unique_ptr<std::vector<uint8_t>>>;

// The rows `runs` of `m` (float, row-major MLX affine, or a ggml block type), in that order, as a
// matrix whose data (and scales and biases) are new buffers appended to `owned`.
kernels::Matrix gather_rows(const kernels::Matrix& m, const std::vector<RowRun>& runs, OwnedBuffers* owned);

}  // namespace qwen35::model
