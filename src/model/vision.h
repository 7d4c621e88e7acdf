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
// The tower issues its ops to an Executor (model/executor.h): the CPU's runs them at once through
// kernels::Ops (the ctx overloads below make one), a device's records them, the run's buffers
// then being the executor's memory named by host address. The host writes only the position
// tables and reads only the output: it sends the patch rows and the tables' rows as a piece
// needs them and receives each piece's output tokens, readable after the executor's finish().
//
// Thread-safety: one caller at a time (the tile scratch below is the tower's); a run's state is
// its own, so runs of several images may take turns through one tower.
#pragma once

#include <compare>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/result.h"
#include "kernels/ops.h"
#include "model/executor.h"
#include "model/vision_weights.h"

namespace qwen35::model {

// Where an image's run stands: the next piece of work. Per frame the stages are 0 the patch
// embedding, 1..depth a block, depth + 1 the merger; a block has two parts (0: LN1, the qkv
// projection and the keys and values of its rows; 1: its rows as queries against all the
// frame's keys, the projection, LN2 and the MLP), the other stages one. `row`: the next patch
// row of the part (always < the frame's rows: a finished part moves the cursor to the next).
// Cursors order as the work does.
struct VisionCursor {
  int64_t frame = 0, stage = 0, part = 0, row = 0;
  auto operator<=>(const VisionCursor&) const = default;
};

// Floats that grow without being written: a grid's buffers are hundreds of MB (a 2800² image at
// width 768: about 665 MB), and a zero-filled std::vector would touch all of their pages in the
// image's first step; these pages are touched as the pieces first write their rows. Growing
// drops the contents. Every float of a run's buffers is written before it is read.
class RowBuffer {
 public:
  float* data() const { return p_.get(); }
  size_t size() const { return n_; }
  void grow(size_t n) {
    if (n <= n_) return;
    p_.reset();  // the old buffer goes first: the two are never held at once
    n_ = 0;
    p_ = std::make_unique_for_overwrite<float[]>(n);
    n_ = n;
  }

 private:
  std::unique_ptr<float[]> p_;
  size_t n_ = 0;
};

// One image on its way through the tower, a piece at a time (VisionTower::plan and advance):
// the engine spreads an image over as many steps as its cost calls for, so that other requests
// keep their share of the machine (docs/design.md "Images"). A piece is some rows of one part;
// every op of a part reads and writes its own rows alone, except the attention, which reads the
// keys and values of all the frame's rows (prepared once per block, in part 0). So the result
// has the bits of one encode() call whatever the pieces (the same ops in the same order on each
// row). Between pieces the frame's state lives here.
struct VisionRun {
  const float* rows = nullptr;  // [t·h·w, patch_dim]: must outlive the run
  int64_t grid_t = 0, grid_h = 0, grid_w = 0;
  float* out = nullptr;         // [tokens, out_hidden]
  VisionCursor at;              // the next piece
  RowBuffer x;                  // the frame's residual rows [h·w, hidden]
  RowBuffer qkv;                // the block's projections [h·w, 3·hidden] (part 0 writes them)
  RowBuffer kv;                 // its keys and values as the ops prepare them (Ops::vision_kv_rows)
  // The grid's position rows [h·w, hidden] and rotary tables [h·w, head_dim/2], rows
  // [0, table_rows) computed (by frame 0's embedding pieces; kept for a next image of the grid).
  RowBuffer pos, cos, sin;
  int64_t table_h = -1, table_w = -1, table_rows = 0;
  bool done() const { return at.frame >= grid_t; }
};

// The pieces from a run's cursor up to `end` that a budget pays for (VisionTower::plan).
struct VisionPlan {
  VisionCursor end;    // advance() up to here
  double flops = 0;    // their cost (multiply-adds × 2, VisionTower::row_flops)
  int64_t stages = 0;  // stages they finish
  bool empty(const VisionRun& run) const { return end == run.at; }
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
  // The same through an executor (its ops recorded or run; the output readable after its finish()).
  core::Status encode(Executor& ex, const float* rows, int64_t grid_t, int64_t grid_h, int64_t grid_w,
                      float* out);
  // encode()'s run (its buffers, which an executor may hold twins of).
  VisionRun& own_run() { return run_; }

  // The same in pieces: begin() checks the grid (failing, changing nothing, like encode()) and
  // sets the run at its first piece; plan() says how far a budget takes it; advance() runs it up
  // to a cursor (a plan's end, or further: at most the end) and returns whether the image is done.
  core::Status begin(const float* rows, int64_t grid_t, int64_t grid_h, int64_t grid_w, float* out,
                     VisionRun* run) const;
  bool advance(const kernels::Context& ctx, VisionRun* run, const VisionCursor& end);
  bool advance(Executor& ex, VisionRun* run, const VisionCursor& end);
  // The pieces from the run's cursor, in order, while their cost fits `budget` (multiply-adds ×
  // 2): each a whole number of grains (merge² rows, a token's), so a part may end part-way;
  // one grain at least when `at_least_one`. A function of the run's grid and cursor and of the
  // budget alone (the engine's plans are deterministic).
  VisionPlan plan(const VisionRun& run, double budget, bool at_least_one) const;
  // The cost of one row of the part at `c` of a frame of `n` rows: the multiply-adds × 2 of its
  // matmuls and, in a block's part 1, of its attention (scores and values over the n keys);
  // the embedding of frame 0 counts its position rows too.
  double row_flops(const VisionCursor& c, int64_t n) const;
  int64_t depth() const { return int64_t(w_.blocks.size()); }
  // Rows per op call inside a piece (the scratch below holds this many).
  static constexpr int64_t kTileRows = 512;

  // The interpolated position rows [h·w, hidden] and rotary tables [h·w, head_dim/2] of a grid,
  // in merge-block row order (exposed for tests).
  void position_tables(int64_t grid_h, int64_t grid_w, std::vector<float>* pos, std::vector<float>* cos,
                       std::vector<float>* sin) const;

 private:
  // Rows [r0, r1) of the grid's tables into pos/cos/sin (whole-grid arrays).
  void position_rows(int64_t grid_h, int64_t grid_w, int64_t r0, int64_t r1, float* pos, float* cos,
                     float* sin) const;
  VisionCursor next_part(const VisionCursor& c) const;  // the first row of the part after c's
  void grow_scratch(int64_t rows);
  void piece(Executor& ex, VisionRun* run, int64_t r0, int64_t r1);  // rows of run->at's part
  void embed(Executor& ex, VisionRun* run, int64_t r0, int64_t r1);
  void block_qkv(Executor& ex, const VisionBlockWeights& b, VisionRun* run, int64_t r0, int64_t r1);
  void block_rest(Executor& ex, const VisionBlockWeights& b, VisionRun* run, int64_t r0, int64_t r1);
  void merge(Executor& ex, VisionRun* run, int64_t r0, int64_t r1);

  const VisionWeights& w_;
  const kernels::Ops& ops_;
  // Scratch of one tile (kTileRows rows at most), reused: nothing in it outlives a call.
  std::vector<float> normed_, attn_, tmp_, mlp_, merged_;
  VisionRun run_;  // encode()'s (its buffers and tables stay for the next image)
};

}  // namespace qwen35::model
