// The Qwen3.5 vision tower's forward pass (docs/design.md, "Vision tower"): patch rows of one
// image in, one token row per merge × merge patches out, in the text model's hidden size.
//
//   x = rows · patchᵀ + b + pos          pos: the 48×48 table, bilinearly interpolated to the grid
//   per block: x += proj(attn(LN1(x)))   2-D rotary (row, column), bidirectional within a frame
//              x += fc2(gelu(fc1(LN2(x))))
//   merger:    y = fc2(gelu_erf(fc1(concat of 4 rows of LN(x))))
//
// Rows come in merge-block order (image/: block row, block column, then the 2×2 patches inside),
// so a token's four rows are consecutive. A frame (grid_t > 1: video) is attended on its own, as
// the reference model does. Every row's arithmetic depends only on its own image: encoding
// several images one call each gives each image the bits it gets alone.
//
// Exactness: the position table interpolation and the rotary angles are computed in double and
// rounded to float once (what both backends then use); the rest is the ops' arithmetic (the
// scalar reference and the CPU backend agree to the bound the tests state).
//
// Thread-safety: one caller at a time (the scratch below is the tower's).
#pragma once

#include <cstdint>
#include <vector>

#include "core/result.h"
#include "kernels/ops.h"
#include "model/vision_weights.h"

namespace qwen35::model {

// One image on its way through the tower, a stage at a time: per frame, the patch embedding,
// each block, then the merger. The engine runs an image over as many steps as its cost calls
// for, so that other requests keep their share of the machine (docs/design.md "Images"); the
// result has the bits of one encode() call (the same ops in the same order on the same rows).
// Between stages the frame's residual rows live here.
struct VisionRun {
  const float* rows = nullptr;  // [t·h·w, patch_dim]: must outlive the run
  int64_t grid_t = 0, grid_h = 0, grid_w = 0;
  float* out = nullptr;         // [tokens, out_hidden]
  int64_t frame = 0, stage = 0;  // the next stage: 0 the embedding, 1..depth a block, depth + 1 the merger
  std::vector<float> x;          // the frame's residual rows [h·w, hidden]
  bool done() const { return frame >= grid_t; }
};

class VisionTower {
 public:
  // The weights must outlive the tower.
  VisionTower(const VisionWeights& w, const kernels::Ops& ops) : w_(w), ops_(ops) {}

  const VisionConfig& config() const { return w_.config; }
  // Rows an image of grid (t, h, w) has, and the tokens it yields: t·(h/merge)·(w/merge).
  static int64_t rows(int64_t grid_t, int64_t grid_h, int64_t grid_w) { return grid_t * grid_h * grid_w; }
  int64_t tokens(int64_t grid_t, int64_t grid_h, int64_t grid_w) const;
  // The grid is positive, h and w are multiples of the merge size, and a frame has at most
  // kMaxFrameRows rows.
  core::Status check_grid(int64_t grid_t, int64_t grid_h, int64_t grid_w) const;
  static constexpr int64_t kMaxFrameRows = int64_t(1) << 16;

  // One image: rows [t·h·w, patch_dim] (frame-major, merge-block order) to out [tokens,
  // out_hidden]. Fails, writing nothing, on a bad grid. Matmuls follow ctx.int8_activations.
  core::Status encode(const kernels::Context& ctx, const float* rows, int64_t grid_t, int64_t grid_h,
                      int64_t grid_w, float* out);

  // The same as stages: begin() checks the grid (failing, changing nothing, like encode()) and
  // sets the run at its first stage; advance() runs at most `max_stages` (at least one) stages
  // and returns whether the image is done.
  core::Status begin(const float* rows, int64_t grid_t, int64_t grid_h, int64_t grid_w, float* out,
                     VisionRun* run) const;
  bool advance(const kernels::Context& ctx, VisionRun* run, int64_t max_stages);
  int64_t stages(const VisionRun& run) const { return run.grid_t * (int64_t(w_.blocks.size()) + 2); }
  // Multiply-adds × 2 of the run's next stage (matmuls and attention): the scheduler's cost.
  double stage_flops(const VisionRun& run) const;

  // The interpolated position rows [h·w, hidden] and rotary tables [h·w, head_dim/2] of a grid,
  // in merge-block row order (exposed for tests).
  void position_tables(int64_t grid_h, int64_t grid_w, std::vector<float>* pos, std::vector<float>* cos,
                       std::vector<float>* sin) const;

 private:
  void tables(int64_t grid_h, int64_t grid_w);  // pos_, cos_, sin_ for this grid
  void grow_scratch(int64_t n);
  void embed(const kernels::Context& ctx, const float* rows, int64_t n, float* x);
  void block(const kernels::Context& ctx, const VisionBlockWeights& b, int64_t n, float* x);
  void merge(const kernels::Context& ctx, const float* x, int64_t n, float* out);

  const VisionWeights& w_;
  const kernels::Ops& ops_;
  // Scratch, grown to the largest frame and reused.
  std::vector<float> normed_, qkv_, attn_, tmp_, mlp_, merged_;  // [n, ·] rows of one frame
  VisionRun run_;  // encode()'s (its residual rows stay allocated for the next image)
  std::vector<float> pos_, cos_, sin_;  // the tables of grid (pos_h_, pos_w_)
  int64_t pos_h_ = -1, pos_w_ = -1;
};

}  // namespace qwen35::model
