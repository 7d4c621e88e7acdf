// How far a budget takes an image's run through the vision tower (model/vision.h: VisionCursor,
// VisionTower::plan): the cost of a row of each part, and the pieces a budget pays for. The
// engine plans a step's tower work with it (runtime/stepper.h), so all of it is a function of
// the run's grid and cursor and of the budget: the same plans on every run and machine.
#include <algorithm>
#include <cmath>

#include "model/vision.h"

namespace qwen35::model {

VisionCursor VisionTower::next_part(const VisionCursor& c) const {
  const int64_t parts = c.stage >= 1 && c.stage <= depth() ? 2 : 1;
  if (c.part + 1 < parts) return {c.frame, c.stage, c.part + 1, 0};
  if (c.stage + 1 < depth() + 2) return {c.frame, c.stage + 1, 0, 0};
  return {c.frame + 1, 0, 0, 0};
}

// Multiply-adds × 2. The position rows (frame 0's embedding) are weighed as 8 flops per width
// element (four taps, in double) and 20 per rotary angle; the norms, biases, GELUs and the
// keys' preparation (a few flops per element) are left out.
double VisionTower::row_flops(const VisionCursor& c, int64_t n) const {
  const VisionConfig& v = w_.config;
  const double H = double(v.hidden), I = double(v.intermediate);
  if (c.stage == 0)
    return 2 * double(v.patch_dim()) * H + (c.frame == 0 ? 8 * H + 20 * double(v.head_dim) : 0);
  if (c.stage > depth()) {  // a merged token's MLP, shared by its merge² rows
    const double M = double(v.merged_dim());
    return 2 * M * (M + double(v.out_hidden)) / double(v.merge * v.merge);
  }
  if (c.part == 0) return 2 * H * 3 * H;  // qkv
  // Scores and values against all n keys, then proj, fc1 and fc2.
  return 4 * double(n) * H + 2 * H * H + 4 * H * I;
}

VisionPlan VisionTower::plan(const VisionRun& run, double budget, bool at_least_one) const {
  const int64_t n = run.grid_h * run.grid_w, grain = w_.config.merge * w_.config.merge;
  VisionPlan p;
  p.end = run.at;
  double left = std::max(0.0, budget);
  while (p.end.frame < run.grid_t) {
    const VisionCursor c = p.end;
    const int64_t rows_left = n - c.row;  // a multiple of the grain, as n and c.row are
    const double per_row = row_flops(c, n);
    const double fits = std::floor(left / per_row);  // per_row > 0
    int64_t take = fits >= double(rows_left) ? rows_left : int64_t(fits) / grain * grain;
    if (take == 0 && at_least_one && p.end == run.at) take = grain;
    if (take == 0) break;
    p.flops += double(take) * per_row;
    left = std::max(0.0, left - double(take) * per_row);
    if (take < rows_left) {
      p.end.row += take;
      break;
    }
    p.end = next_part(c);
    if (p.end.stage != c.stage || p.end.frame != c.frame) ++p.stages;
  }
  return p;
}

}  // namespace qwen35::model
