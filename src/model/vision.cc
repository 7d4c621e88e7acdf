#include "model/vision.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "model/cpu_executor.h"

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
// head_dim/4 with the column, inv_freq_j = theta^(-2j / (head_dim/2)). Each row's values depend
// on its own index alone.
void VisionTower::position_rows(int64_t grid_h, int64_t grid_w, int64_t r0, int64_t r1, float* pos, float* cos,
                                float* sin) const {
  const VisionConfig& c = w_.config;
  const int64_t H = c.hidden, m = c.merge, side = c.grid_side;
  const int64_t half = c.head_dim / 2, quarter = c.head_dim / 4, block_cols = grid_w / m;
  auto at = [&](int64_t i, int64_t count) { return count == 1 ? 0.0 : double(i) * double(side - 1) / double(count - 1); };
  std::vector<double> inv(static_cast<size_t>(quarter)), acc(static_cast<size_t>(H));
  for (int64_t j = 0; j < quarter; ++j) inv[size_t(j)] = std::pow(c.rope_theta, -double(2 * j) / double(half));
  for (int64_t row = r0; row < r1; ++row) {
    // Merge-block order: block row, block column, then the m × m patches inside.
    const int64_t block = row / (m * m), inside = row % (m * m);
    const int64_t r = block / block_cols * m + inside / m, col = block % block_cols * m + inside % m;
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
    for (int64_t e = 0; e < H; ++e) pos[row * H + e] = float(acc[size_t(e)]);
    for (int64_t i = 0; i < half; ++i) {
      const double ang = i < quarter ? double(r) * inv[size_t(i)] : double(col) * inv[size_t(i - quarter)];
      cos[row * half + i] = float(std::cos(ang));
      sin[row * half + i] = float(std::sin(ang));
    }
  }
}

void VisionTower::position_tables(int64_t grid_h, int64_t grid_w, std::vector<float>* pos, std::vector<float>* cos,
                                  std::vector<float>* sin) const {
  const VisionConfig& c = w_.config;
  const int64_t n = grid_h * grid_w;
  pos->assign(size_t(n * c.hidden), 0.0f);
  cos->assign(size_t(n * c.head_dim / 2), 0.0f);
  sin->assign(size_t(n * c.head_dim / 2), 0.0f);
  position_rows(grid_h, grid_w, 0, n, pos->data(), cos->data(), sin->data());
}

Status VisionTower::encode(const kernels::Context& ctx, const float* rows, int64_t grid_t, int64_t grid_h,
                           int64_t grid_w, float* out) {
  CpuExecutor ex(ops_, ctx);
  return encode(ex, rows, grid_t, grid_h, grid_w, out);
}

Status VisionTower::encode(Executor& ex, const float* rows, int64_t grid_t, int64_t grid_h, int64_t grid_w,
                           float* out) {
  QWEN35_RETURN_IF_ERROR(begin(rows, grid_t, grid_h, grid_w, out, &run_));
  advance(ex, &run_, VisionCursor{grid_t, 0, 0, 0});
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
  run->at = VisionCursor{};
  if (run->table_h != grid_h || run->table_w != grid_w) {  // another grid: its tables are to make
    run->table_h = grid_h;
    run->table_w = grid_w;
    run->table_rows = 0;
  }
  return Status();
}

// Buffers grow here rather than in begin(), so that running out of memory is the run's failure.
bool VisionTower::advance(const kernels::Context& ctx, VisionRun* run, const VisionCursor& end) {
  CpuExecutor ex(ops_, ctx);
  return advance(ex, run, end);
}

bool VisionTower::advance(Executor& ex, VisionRun* run, const VisionCursor& end) {
  const VisionConfig& c = w_.config;
  const int64_t n = run->grid_h * run->grid_w;
  run->x.grow(size_t(n * c.hidden));
  run->qkv.grow(size_t(n * 3 * c.hidden));
  run->kv.grow(ex.vision_kv_floats({c.n_heads, c.head_dim}, n));
  if (run->pos.size() < size_t(n * c.hidden) || run->cos.size() < size_t(n * c.head_dim / 2))
    run->table_rows = 0;  // the tables' buffers grow and lose their rows
  run->pos.grow(size_t(n * c.hidden));
  run->cos.grow(size_t(n * c.head_dim / 2));
  run->sin.grow(size_t(n * c.head_dim / 2));
  while (!run->done() && run->at < end) {
    const VisionCursor at = run->at;
    const bool last = end.frame == at.frame && end.stage == at.stage && end.part == at.part;
    const int64_t stop = last ? end.row : n;
    const int64_t tile = std::max<int64_t>(1, kTileRows / (c.merge * c.merge)) * c.merge * c.merge;
    grow_scratch(std::min(tile, stop - at.row));
    for (int64_t r0 = at.row; r0 < stop; r0 += tile) piece(ex, run, r0, std::min(stop, r0 + tile));
    if (stop == n) run->at = next_part(at);
    else run->at.row = stop;
  }
  return run->done();
}

void VisionTower::grow_scratch(int64_t rows) {
  const VisionConfig& c = w_.config;
  const int64_t H = c.hidden;
  grow(normed_, rows * H);
  grow(attn_, rows * H);
  grow(tmp_, rows * H);
  grow(mlp_, rows * c.intermediate);
  grow(merged_, rows / (c.merge * c.merge) * c.merged_dim());
}

// Rows [r0, r1) (a tile) of the part at run->at.
void VisionTower::piece(Executor& ex, VisionRun* run, int64_t r0, int64_t r1) {
  const VisionCursor& at = run->at;
  if (at.stage == 0) embed(ex, run, r0, r1);
  else if (at.stage > depth()) merge(ex, run, r0, r1);
  else if (at.part == 0) block_qkv(ex, w_.blocks[size_t(at.stage - 1)], run, r0, r1);
  else block_rest(ex, w_.blocks[size_t(at.stage - 1)], run, r0, r1);
}

// Patch embedding (a Conv3d with kernel = stride is a matmul of the flattened patch) and the
// interpolated position rows (made here, for the rows that frame 0 reaches first). The host's
// rows (the patches and the tables' rows of this piece) go to the executor here: every later
// part of the frame reads the tables of its rows, which this part of the frame has sent.
void VisionTower::embed(Executor& ex, VisionRun* run, int64_t r0, int64_t r1) {
  const VisionConfig& c = w_.config;
  const int64_t H = c.hidden, n = run->grid_h * run->grid_w, k = r1 - r0, half = c.head_dim / 2;
  if (run->table_rows < r1) {
    position_rows(run->grid_h, run->grid_w, run->table_rows, r1, run->pos.data(), run->cos.data(), run->sin.data());
    run->table_rows = r1;
  }
  const float* patches = run->rows + (run->at.frame * n + r0) * c.patch_dim();
  ex.send(patches, k * c.patch_dim());
  ex.send(run->pos.data() + r0 * H, k * H);
  ex.send(run->cos.data() + r0 * half, k * half);
  ex.send(run->sin.data() + r0 * half, k * half);
  float* x = run->x.data() + r0 * H;
  ex.matmul(patches, k, w_.patch, x);
  ex.add_bias(x, k, H, w_.patch_b.data());
  ex.add_rows(run->pos.data() + r0 * H, nullptr, k, H, x);
}

// A block's part 0: LN1, the qkv projection, and these rows' keys and values prepared for the
// attention of part 1 (which reads them all).
void VisionTower::block_qkv(Executor& ex, const VisionBlockWeights& b, VisionRun* run, int64_t r0, int64_t r1) {
  const VisionConfig& c = w_.config;
  const int64_t H = c.hidden, n = run->grid_h * run->grid_w, k = r1 - r0;
  float* qkv = run->qkv.data() + r0 * 3 * H;
  ex.layer_norm(run->x.data() + r0 * H, k, H, b.norm1_w.data(), b.norm1_b.data(), float(c.eps), normed_.data());
  ex.matmul(normed_.data(), k, b.qkv, qkv);
  ex.add_bias(qkv, k, 3 * H, b.qkv_b.data());
  ex.vision_kv_rows({c.n_heads, c.head_dim}, run->qkv.data(), n, run->cos.data(), run->sin.data(), r0, r1,
                    run->kv.data());
}

// A block's part 1: these rows' attention over all the frame's keys, the projection and the MLP,
// each added to the rows' residual.
void VisionTower::block_rest(Executor& ex, const VisionBlockWeights& b, VisionRun* run, int64_t r0, int64_t r1) {
  const VisionConfig& c = w_.config;
  const int64_t H = c.hidden, I = c.intermediate, n = run->grid_h * run->grid_w, k = r1 - r0;
  const float eps = float(c.eps);
  float* x = run->x.data() + r0 * H;
  ex.vision_attend_rows({c.n_heads, c.head_dim}, run->qkv.data(), n, run->cos.data(), run->sin.data(),
                        run->kv.data(), r0, r1, attn_.data());
  ex.matmul(attn_.data(), k, b.proj, tmp_.data());
  ex.add_bias(tmp_.data(), k, H, b.proj_b.data());
  ex.add_rows(tmp_.data(), nullptr, k, H, x);
  ex.layer_norm(x, k, H, b.norm2_w.data(), b.norm2_b.data(), eps, normed_.data());
  ex.matmul(normed_.data(), k, b.fc1, mlp_.data());
  ex.add_bias(mlp_.data(), k, I, b.fc1_b.data());
  ex.gelu(mlp_.data(), k, I, c.tanh_gelu);
  ex.matmul(mlp_.data(), k, b.fc2, tmp_.data());
  ex.add_bias(tmp_.data(), k, H, b.fc2_b.data());
  ex.add_rows(tmp_.data(), nullptr, k, H, x);
}

// The merger: LayerNorm per patch row, then merge² consecutive rows read as one row of M
// (r0 and r1 are whole tokens). The output tokens go back to the host.
void VisionTower::merge(Executor& ex, VisionRun* run, int64_t r0, int64_t r1) {
  const VisionConfig& c = w_.config;
  const int64_t H = c.hidden, M = c.merged_dim(), mm = c.merge * c.merge, tok = (r1 - r0) / mm;
  const int64_t frame_tokens = tokens(1, run->grid_h, run->grid_w);
  float* out = run->out + (run->at.frame * frame_tokens + r0 / mm) * c.out_hidden;
  ex.layer_norm(run->x.data() + r0 * H, r1 - r0, H, w_.merger_norm_w.data(), w_.merger_norm_b.data(), float(c.eps),
                normed_.data());
  ex.matmul(normed_.data(), tok, w_.merger_fc1, merged_.data());
  ex.add_bias(merged_.data(), tok, M, w_.merger_fc1_b.data());
  ex.gelu(merged_.data(), tok, M, /*tanh_form=*/false);
  ex.matmul(merged_.data(), tok, w_.merger_fc2, out);
  ex.add_bias(out, tok, c.out_hidden, w_.merger_fc2_b.data());
  ex.receive(out, tok * c.out_hidden);
}

}  // namespace qwen35::model
