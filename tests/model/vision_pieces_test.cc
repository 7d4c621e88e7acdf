// The vision tower cut into pieces (model/vision.h: VisionCursor, VisionTower::plan/advance):
// - an image's tokens have the bits of the uncut computation (every op over a whole frame at
//   once, the attention in one Ops::vision_attention call: the tower as it ran before it was
//   cut, written out again below) on every fixture's images, through a float tower and an
//   MLX-quantized one, in exact and fast modes, whatever the budgets of the pieces (down to one
//   grain at a time), with the runs of several images taking turns through one tower, and on a
//   frame larger than a tile;
// - plans are counted, not timed: from any cursor, a plan's work fits its budget (or is the one
//   grain the first sequence of a step gets), and the plans of an image add up to its whole
//   work, for images up to the largest frame the tower takes.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/thread_pool.h"
#include "formats/npy.h"
#include "model/vision.h"
#include "model/weights.h"
#include "test_util.h"
#include "vision_test_util.h"

namespace qwen35::model {
namespace {

namespace fs = std::filesystem;
using qwen35::testing::TempDir;
using namespace vision_testing;

// The tower as one whole-frame op call after another (the forward before the cut; the same
// order of ops as model/vision.h states).
void uncut_encode(const VisionWeights& w, const kernels::Ops& ops, const kernels::Context& ctx, const float* rows,
                  int64_t t, int64_t h, int64_t wd, float* out) {
  const VisionConfig& c = w.config;
  const int64_t n = h * wd, H = c.hidden, I = c.intermediate, M = c.merged_dim(), tok = n / (c.merge * c.merge);
  const float eps = float(c.eps);
  std::vector<float> pos, cos, sin;
  VisionTower(w, ops).position_tables(h, wd, &pos, &cos, &sin);
  std::vector<float> x(size_t(n * H)), normed(x.size()), qkv(size_t(n * 3 * H)), attn(x.size()), tmp(x.size());
  std::vector<float> mlp(size_t(n * I)), merged(size_t(tok * M));
  for (int64_t f = 0; f < t; ++f) {
    ops.matmul(ctx, rows + f * n * c.patch_dim(), n, w.patch, x.data());
    ops.add_bias(ctx, x.data(), n, H, w.patch_b.data());
    ops.add_rows(ctx, pos.data(), nullptr, n, H, x.data());
    for (const VisionBlockWeights& b : w.blocks) {
      ops.layer_norm(ctx, x.data(), n, H, b.norm1_w.data(), b.norm1_b.data(), eps, normed.data());
      ops.matmul(ctx, normed.data(), n, b.qkv, qkv.data());
      ops.add_bias(ctx, qkv.data(), n, 3 * H, b.qkv_b.data());
      ops.vision_attention(ctx, {c.n_heads, c.head_dim}, qkv.data(), n, cos.data(), sin.data(), attn.data());
      ops.matmul(ctx, attn.data(), n, b.proj, tmp.data());
      ops.add_bias(ctx, tmp.data(), n, H, b.proj_b.data());
      ops.add_rows(ctx, tmp.data(), nullptr, n, H, x.data());
      ops.layer_norm(ctx, x.data(), n, H, b.norm2_w.data(), b.norm2_b.data(), eps, normed.data());
      ops.matmul(ctx, normed.data(), n, b.fc1, mlp.data());
      ops.add_bias(ctx, mlp.data(), n, I, b.fc1_b.data());
      ops.gelu(ctx, mlp.data(), n, I, c.tanh_gelu);
      ops.matmul(ctx, mlp.data(), n, b.fc2, tmp.data());
      ops.add_bias(ctx, tmp.data(), n, H, b.fc2_b.data());
      ops.add_rows(ctx, tmp.data(), nullptr, n, H, x.data());
    }
    float* o = out + f * tok * c.out_hidden;
    ops.layer_norm(ctx, x.data(), n, H, w.merger_norm_w.data(), w.merger_norm_b.data(), eps, normed.data());
    ops.matmul(ctx, normed.data(), tok, w.merger_fc1, merged.data());
    ops.add_bias(ctx, merged.data(), tok, M, w.merger_fc1_b.data());
    ops.gelu(ctx, merged.data(), tok, M, false);
    ops.matmul(ctx, merged.data(), tok, w.merger_fc2, o);
    ops.add_bias(ctx, o, tok, c.out_hidden, w.merger_fc2_b.data());
  }
}

struct Image {
  std::string name;
  std::vector<float> rows;
  int64_t t, h, w;
};

// Every image of every fixture under tests/fixtures/vision/ (all take 1536-wide patch rows).
std::vector<Image> fixture_images() {
  std::vector<Image> out;
  for (const auto& e : fs::directory_iterator(vision_fixtures())) {
    const std::string dir = e.path().string();
    if (!fs::exists(dir + "/patches.npy") || !fs::exists(dir + "/grid.npy")) continue;
    const formats::NpyArray p = *formats::read_npy(dir + "/patches.npy"), g = *formats::read_npy(dir + "/grid.npy");
    const float* rows = p.data.data();
    for (size_t i = 0; i < g.ints.size(); i += 3) {
      Image im{e.path().filename().string() + "#" + std::to_string(i / 3), {}, g.ints[i], g.ints[i + 1], g.ints[i + 2]};
      const int64_t n = im.t * im.h * im.w * 1536;
      im.rows.assign(rows, rows + n);
      rows += n;
      out.push_back(std::move(im));
    }
  }
  std::sort(out.begin(), out.end(), [](const Image& a, const Image& b) { return a.name < b.name; });
  return out;
}

Image random_image(int64_t t, int64_t h, int64_t w, uint64_t seed) {
  core::Xoshiro256 rng(seed);
  Image im{"random " + std::to_string(h) + "x" + std::to_string(w), std::vector<float>(size_t(t * h * w * 1536)), t, h, w};
  for (float& v : im.rows) v = float(rng.uniform()) * 2 - 1;
  return im;
}

// A tower on the tiny text model: `preset`'s geometry at `depth` blocks, as HF bf16 or MLX bits.
std::unique_ptr<VisionWeights> synth_tower(const std::string& dir, const std::string& preset, int64_t depth,
                                           const std::string& format, int bits = 4) {
  tools::SynthOptions o;
  o.preset = "tiny";
  o.vision_preset = preset;
  o.vision_depth = depth;
  o.format = format;
  o.vision = "on";
  o.bits = bits;
  o.seed = 17;
  o.out_dir = dir;
  o.progress = false;
  auto r = tools::write_synthetic_checkpoint(o);
  EXPECT_TRUE(r.ok()) << r.message();
  auto w = load_vision_weights(dir);
  EXPECT_TRUE(w.ok()) << w.message();
  return w.ok() ? std::move(*w) : nullptr;
}

struct Cpu {
  explicit Cpu(bool fast) : pool(2), ws(kernels::cpu_ops().new_workspace()) {
    ctx.pool = &pool;
    ctx.workspace = ws.get();
    ctx.int8_activations = fast;
  }
  core::ThreadPool pool;
  std::unique_ptr<kernels::Workspace> ws;
  kernels::Context ctx;
};

std::vector<float> uncut(const VisionWeights& w, const kernels::Context& ctx, const Image& im) {
  std::vector<float> out(size_t(im.t * (im.h / 2) * (im.w / 2) * w.config.out_hidden));
  uncut_encode(w, kernels::cpu_ops(), ctx, im.rows.data(), im.t, im.h, im.w, out.data());
  return out;
}

// The images through one tower in pieces, their runs taking turns a plan each; each plan's
// budget is `rows` rows of a block's attention part (0: one grain at a time).
std::vector<std::vector<float>> in_pieces(VisionTower& tower, const kernels::Context& ctx,
                                          const std::vector<const Image*>& images, double rows) {
  std::vector<std::vector<float>> out(images.size());
  std::vector<VisionRun> runs(images.size());
  for (size_t i = 0; i < images.size(); ++i) {
    const Image& im = *images[i];
    out[i].resize(size_t(tower.tokens(im.t, im.h, im.w) * tower.config().out_hidden));
    EXPECT_TRUE(tower.begin(im.rows.data(), im.t, im.h, im.w, out[i].data(), &runs[i]).ok());
  }
  for (bool left = true; left;) {
    left = false;
    for (size_t i = 0; i < runs.size(); ++i) {
      VisionRun& r = runs[i];
      if (r.done()) continue;
      const double budget = rows * tower.row_flops({0, 1, 1, 0}, images[i]->h * images[i]->w);
      const VisionPlan p = tower.plan(r, budget, true);
      EXPECT_FALSE(p.empty(r));
      left = !tower.advance(ctx, &r, p.end) || left;
    }
  }
  return out;
}

void expect_uncut_bits(const VisionWeights& w, const std::vector<Image>& images, const std::string& what) {
  std::vector<const Image*> all;
  for (const Image& im : images) all.push_back(&im);
  for (bool fast : {false, true}) {
    Cpu cpu(fast);
    std::vector<std::vector<float>> want;
    for (const Image& im : images) want.push_back(uncut(w, cpu.ctx, im));
    VisionTower tower(w, kernels::cpu_ops());
    const std::string mode = what + (fast ? ", fast" : ", exact");
    for (size_t i = 0; i < images.size(); ++i) {
      std::vector<float> got(want[i].size());
      ASSERT_TRUE(tower.encode(cpu.ctx, images[i].rows.data(), images[i].t, images[i].h, images[i].w, got.data()).ok());
      EXPECT_EQ(got, want[i]) << mode << ": encode() of " << images[i].name;
    }
    for (double rows : {0.0, 2.5, 37.0}) {
      const auto got = in_pieces(tower, cpu.ctx, all, rows);
      for (size_t i = 0; i < images.size(); ++i)
        EXPECT_EQ(got[i], want[i]) << mode << ": " << images[i].name << " in pieces of " << rows << " rows' work";
    }
  }
}

TEST(VisionPieces, EveryFixtureImageHasTheUncutBits) {
  const std::vector<Image> images = fixture_images();
  ASSERT_GE(images.size(), 12u);
  TempDir hf, mlx;
  auto float_tower = synth_tower(hf.path(), "tiny", 0, "hf");
  auto quantized = synth_tower(mlx.path(), "0.8b", 1, "mlx");
  ASSERT_NE(float_tower, nullptr);
  ASSERT_NE(quantized, nullptr);
  ASSERT_EQ(quantized->blocks[0].qkv.type, kernels::WeightType::kAffine);
  expect_uncut_bits(*float_tower, images, "tiny bf16 tower");
  expect_uncut_bits(*quantized, images, "0.8B-wide MLX 4-bit tower");
}

// A frame of more rows than a tile (so encode() runs each part in several op calls too), and a
// video of three frames.
TEST(VisionPieces, LargeFramesAndVideosHaveTheUncutBits) {
  TempDir hf, mlx;
  auto float_tower = synth_tower(hf.path(), "tiny", 0, "hf");
  auto quantized = synth_tower(mlx.path(), "0.8b", 1, "mlx");
  ASSERT_NE(float_tower, nullptr);
  ASSERT_NE(quantized, nullptr);
  ASSERT_GT(36 * 40, 2 * VisionTower::kTileRows);
  expect_uncut_bits(*float_tower, {random_image(1, 36, 40, 3), random_image(3, 4, 6, 4)}, "tiny bf16 tower");
  expect_uncut_bits(*quantized, {random_image(1, 36, 40, 5)}, "0.8B-wide MLX 4-bit tower");
}

// From the start to the end of an image, plan after plan at one budget (the cursor moved by
// hand: no arithmetic runs): each plan's work is within the budget, or is one grain when the
// budget pays for none; each moves the cursor; together they are the image's whole work.
void walk(const VisionTower& tower, int64_t t, int64_t h, int64_t w, double budget) {
  const VisionConfig& c = tower.config();
  const int64_t n = h * w, grain = c.merge * c.merge, depth = int64_t(c.depth);
  double whole = 0;  // Σ over frames and parts of n rows × the part's row cost
  for (int64_t f = 0; f < t; ++f)
    for (int64_t s = 0; s < depth + 2; ++s)
      for (int64_t p = 0; p < (s >= 1 && s <= depth ? 2 : 1); ++p) whole += double(n) * tower.row_flops({f, s, p, 0}, n);
  std::vector<float> rows(1), out(1);
  VisionRun run;
  ASSERT_TRUE(tower.begin(rows.data(), t, h, w, out.data(), &run).ok());
  double sum = 0;
  int64_t plans = 0, stages = 0;
  while (!run.done()) {
    const VisionPlan p = tower.plan(run, budget, true);
    ASSERT_TRUE(run.at < p.end) << "a plan that does nothing";
    const double grain_cost = double(grain) * tower.row_flops(run.at, n);
    if (p.flops > budget) {  // only the grain a first sequence gets whatever the budget
      const bool part_ends = run.at.row + grain == n;  // then the cursor is at the next part
      ASSERT_EQ(p.end.row, part_ends ? 0 : run.at.row + grain);
      ASSERT_EQ(p.flops, grain_cost);
      ASSERT_TRUE(tower.plan(run, budget, false).empty(run));
    }
    const VisionPlan again = tower.plan(run, budget, true);
    ASSERT_EQ(again.end, p.end);  // a function of the cursor and the budget
    sum += p.flops;
    stages += p.stages;
    ++plans;
    run.at = p.end;
  }
  EXPECT_NEAR(sum, whole, 1e-9 * whole);
  EXPECT_EQ(stages, t * (depth + 2));
  EXPECT_GT(plans, 0);
}

TEST(VisionPieces, PlansFitTheirBudgetWhateverTheImage) {
  TempDir hf;
  auto w = synth_tower(hf.path(), "tiny", 0, "hf");
  ASSERT_NE(w, nullptr);
  const VisionTower tower(*w, kernels::cpu_ops());
  // A 2800² image's grid (176², 7,744 tokens), the largest frame, a video, the smallest image;
  // budgets from below one grain of attention to several blocks.
  for (auto [t, h, wd] : {std::tuple<int64_t, int64_t, int64_t>{1, 176, 176}, {1, 256, 256}, {3, 16, 24}, {1, 2, 2}}) {
    const double attention_row = tower.row_flops({0, 1, 1, 0}, h * wd);
    for (double rows : {0.5, 3.0, 100.0, 5000.0}) {
      SCOPED_TRACE(std::to_string(h) + "x" + std::to_string(wd) + " budget " + std::to_string(rows));
      walk(tower, t, h, wd, rows * attention_row);
    }
  }
}

}  // namespace
}  // namespace qwen35::model
