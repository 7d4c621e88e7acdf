#include "model/vision.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace qwen35::model {

using core::error;
using core::Status;

namespace {

void grow(std::vector<float>& v, int64_t n) {
  if (v.size() < size_t(n)) v.resize(size_t(n));
}

}  // namespace

int64_t VisionTower::tokens(int64_t grid_t, int64_t grid_h, int64_t grid_w) const {
  const int64_t m = w_.config.merge;
  return grid_t * (grid_h / m) * (grid_w / m);
}

Status VisionTower::check_grid(int64_t grid_t, int64_t grid_h, int64_t grid_w) const {
  const int64_t m = w_.config.merge;
  std::string g = "(";
  g.append(std::to_string(grid_t)).append(", ").append(std::to_string(grid_h)).append(", ");
  g.append(std::to_string(grid_w)).append(")");
  if (grid_t < 1 || grid_h < m || grid_w < m)
    return error("[vision] patch grid " + g + ": t must be at least 1, h and w at least " + std::to_string(m));
  if (grid_h % m != 0 || grid_w % m != 0)
    return error("[vision] patch grid " + g + ": h and w must be multiples of the merge size " + std::to_string(m));
  if (grid_h > kMaxFrameRows || grid_w > kMaxFrameRows || grid_h * grid_w > kMaxFrameRows || grid_t > kMaxFrameRows)
    return error("[vision] patch grid " + g + ": more than " + std::to_string(kMaxFrameRows) + " patches in a frame");
  return Status();
}

// Bilinear interpolation of the grid_side² table at grid_h × grid_w points spaced evenly over
// it, corners on corners (the reference's linspace(0, side-1, n)), weights and sums in double;
// and the 2-D rotary angles: the first head_dim/4 frequencies turn with the row, the next
// head_dim/4 with the column, inv_freq_j = theta^(-2j / (head_dim/2)).
void VisionTower::position_tables(int64_t grid_h, int64_t grid_w, std::vector<float>* pos, std::vector<float>* cos,
                                  std::vector<float>* sin) const {
  const VisionConfig& c = w_.config;
  const int64_t n = grid_h * grid_w, H = c.hidden, m = c.merge, side = c.grid_side;
  const int64_t half = c.head_dim / 2, quarter = c.head_dim / 4;
  pos->assign(size_t(n * H), 0.0f);
  cos->assign(size_t(n * half), 0.0f);
  sin->assign(size_t(n * half), 0.0f);
  auto at = [&](int64_t i, int64_t count) { return count == 1 ? 0.0 : double(i) * double(side - 1) / double(count - 1); };
  std::vector<double> inv(static_cast<size_t>(quarter)), acc(static_cast<size_t>(H));
  for (int64_t j = 0; j < quarter; ++j) inv[size_t(j)] = std::pow(c.rope_theta, -double(2 * j) / double(half));
  int64_t row = 0;
  for (int64_t br = 0; br < grid_h / m; ++br)
    for (int64_t bc = 0; bc < grid_w / m; ++bc)
      for (int64_t dr = 0; dr < m; ++dr)
        for (int64_t dc = 0; dc < m; ++dc, ++row) {
          const int64_t r = br * m + dr, col = bc * m + dc;
          const double y = at(r, grid_h), x = at(col, grid_w);
          const int64_t y0 = int64_t(y), x0 = int64_t(x);
          const int64_t y1 = std::min(y0 + 1, side - 1), x1 = std::min(x0 + 1, side - 1);
          const double dy = y - double(y0), dx = x - double(x0);
          const int64_t idx[4] = {y0 * side + x0, y0 * side + x1, y1 * side + x0, y1 * side + x1};
          const double wt[4] = {(1 - dy) * (1 - dx), (1 - dy) * dx, dy * (1 - dx), dy * dx};
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int k = 0; k < 4; ++k) {
            const float* src = w_.pos.data() + idx[k] * H;
            for (int64_t e = 0; e < H; ++e) acc[size_t(e)] += wt[k] * double(src[e]);
          }
          for (int64_t e = 0; e < H; ++e) (*pos)[size_t(row * H + e)] = float(acc[size_t(e)]);
          for (int64_t i = 0; i < half; ++i) {
            const double ang = i < quarter ? double(r) * inv[size_t(i)] : double(col) * inv[size_t(i - quarter)];
            (*cos)[size_t(row * half + i)] = float(std::cos(ang));
            (*sin)[size_t(row * half + i)] = float(std::sin(ang));
          }
        }
}

Status VisionTower::encode(const kernels::Context& ctx, const float* rows, int64_t grid_t, int64_t grid_h,
                           int64_t grid_w, float* out) {
  QWEN35_RETURN_IF_ERROR(begin(rows, grid_t, grid_h, grid_w, out, &run_));
  advance(ctx, &run_, stages(run_));
  return Status();
}

Status VisionTower::begin(const float* rows, int64_t grid_t, int64_t grid_h, int64_t grid_w, float* out,
                          VisionRun* run) const {
  QWEN35_RETURN_IF_ERROR(check_grid(grid_t, grid_h, grid_w));
  if (rows == nullptr || out == nullptr) return error("[vision] encode: no rows or no output");
  run->rows = rows;
  run->grid_t = grid_t;
  run->grid_h = grid_h;
  run->grid_w = grid_w;
  run->out = out;
  run->frame = 0;
  run->stage = 0;
  return Status();
}

void VisionTower::tables(int64_t grid_h, int64_t grid_w) {
  if (grid_h == pos_h_ && grid_w == pos_w_) return;
  pos_h_ = pos_w_ = -1;  // unset while they are rebuilt (an allocation may fail)
  position_tables(grid_h, grid_w, &pos_, &cos_, &sin_);
  pos_h_ = grid_h;
  pos_w_ = grid_w;
}

bool VisionTower::advance(const kernels::Context& ctx, VisionRun* run, int64_t max_stages) {
  const VisionConfig& c = w_.config;
  const int64_t n = run->grid_h * run->grid_w, depth = int64_t(w_.blocks.size());
  const int64_t frame_tokens = tokens(1, run->grid_h, run->grid_w);
  tables(run->grid_h, run->grid_w);
  grow_scratch(n);
  grow(run->x, n * c.hidden);
  for (int64_t k = 0; k < std::max<int64_t>(1, max_stages) && !run->done(); ++k) {
    if (run->stage == 0) {
      embed(ctx, run->rows + run->frame * n * c.patch_dim(), n, run->x.data());
    } else if (run->stage <= depth) {
      block(ctx, w_.blocks[size_t(run->stage - 1)], n, run->x.data());
    } else {
      merge(ctx, run->x.data(), n, run->out + run->frame * frame_tokens * c.out_hidden);
      ++run->frame;
      run->stage = 0;
      continue;
    }
    ++run->stage;
  }
  return run->done();
}

double VisionTower::stage_flops(const VisionRun& run) const {
  const VisionConfig& c = w_.config;
  const double n = double(run.grid_h * run.grid_w), H = double(c.hidden);
  const int64_t depth = int64_t(w_.blocks.size());
  if (run.stage == 0) return 2 * n * double(c.patch_dim()) * H;
  if (run.stage <= depth)  // qkv, proj, fc1, fc2; scores and values over the frame
    return 2 * n * (4 * H * H + 2 * H * double(c.intermediate)) + 4 * n * n * H;
  const double tok = n / double(c.merge * c.merge), M = double(c.merged_dim());
  return 2 * tok * M * (M + double(c.out_hidden));
}

void VisionTower::grow_scratch(int64_t n) {
  const VisionConfig& c = w_.config;
  const int64_t H = c.hidden;
  grow(normed_, n * H);
  grow(qkv_, n * 3 * H);
  grow(attn_, n * H);
  grow(tmp_, n * H);
  grow(mlp_, n * c.intermediate);
  grow(merged_, n / (c.merge * c.merge) * c.merged_dim());
}

// Patch embedding (a Conv3d with kernel = stride is a matmul of the flattened patch) and the
// interpolated position rows.
void VisionTower::embed(const kernels::Context& ctx, const float* rows, int64_t n, float* x) {
  const int64_t H = w_.config.hidden;
  ops_.matmul(ctx, rows, n, w_.patch, x);
  ops_.add_bias(ctx, x, n, H, w_.patch_b.data());
  ops_.add_rows(ctx, pos_.data(), nullptr, n, H, x);
}

// The merger: LayerNorm per patch row, then merge² consecutive rows read as one row of M.
void VisionTower::merge(const kernels::Context& ctx, const float* x, int64_t n, float* out) {
  const VisionConfig& c = w_.config;
  const int64_t H = c.hidden, M = c.merged_dim(), tok = n / (c.merge * c.merge);
  ops_.layer_norm(ctx, x, n, H, w_.merger_norm_w.data(), w_.merger_norm_b.data(), float(c.eps), normed_.data());
  ops_.matmul(ctx, normed_.data(), tok, w_.merger_fc1, merged_.data());
  ops_.add_bias(ctx, merged_.data(), tok, M, w_.merger_fc1_b.data());
  ops_.gelu(ctx, merged_.data(), tok, M, /*tanh_form=*/false);
  ops_.matmul(ctx, merged_.data(), tok, w_.merger_fc2, out);
  ops_.add_bias(ctx, out, tok, c.out_hidden, w_.merger_fc2_b.data());
}

void VisionTower::block(const kernels::Context& ctx, const VisionBlockWeights& b, int64_t n, float* x) {
  const VisionConfig& c = w_.config;
  const int64_t H = c.hidden, I = c.intermediate;
  const float eps = float(c.eps);
  ops_.layer_norm(ctx, x, n, H, b.norm1_w.data(), b.norm1_b.data(), eps, normed_.data());
  ops_.matmul(ctx, normed_.data(), n, b.qkv, qkv_.data());
  ops_.add_bias(ctx, qkv_.data(), n, 3 * H, b.qkv_b.data());
  ops_.vision_attention(ctx, {c.n_heads, c.head_dim}, qkv_.data(), n, cos_.data(), sin_.data(), attn_.data());
  ops_.matmul(ctx, attn_.data(), n, b.proj, tmp_.data());
  ops_.add_bias(ctx, tmp_.data(), n, H, b.proj_b.data());
  ops_.add_rows(ctx, tmp_.data(), nullptr, n, H, x);
  ops_.layer_norm(ctx, x, n, H, b.norm2_w.data(), b.norm2_b.data(), eps, normed_.data());
  ops_.matmul(ctx, normed_.data(), n, b.fc1, mlp_.data());
  ops_.add_bias(ctx, mlp_.data(), n, I, b.fc1_b.data());
  ops_.gelu(ctx, mlp_.data(), n, I, c.tanh_gelu);
  ops_.matmul(ctx, mlp_.data(), n, b.fc2, tmp_.data());
  ops_.add_bias(ctx, tmp_.data(), n, H, b.fc2_b.data());
  ops_.add_rows(ctx, tmp_.data(), nullptr, n, H, x);
}

}  // namespace qwen35::model
