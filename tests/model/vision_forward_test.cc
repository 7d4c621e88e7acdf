// The vision tower's forward pass against the float64 reference of tools/fixtures/vision_ref.py
// on every case under tests/fixtures/vision/ (the reference's seeded checkpoints, and towers
// `qwen35 synth` writes again from case.json's arguments), with the scalar reference ops and the
// CPU backend; through the model, end to end on the image prompt fixture; bad grids; the
// position tables.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "formats/npy.h"
#include "model/model.h"
#include "model/mrope.h"
#include "model/vision.h"
#include "model/weights.h"
#include "test_util.h"
#include "vision_test_util.h"

namespace qwen35::model {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using qwen35::testing::TempDir;
using namespace vision_testing;

struct Fixture {
  std::string name;
  std::string ckpt;  // the checkpoint directory ("" when it cannot be had)
  formats::NpyArray patches, grid, merged;
};

// The case's checkpoint: committed, or written again by `qwen35 synth` with case.json's arguments.
std::string case_checkpoint(const json& c, const std::string& scratch) {
  const json& ck = c["checkpoint"];
  if (ck.value("committed", false)) return qwen35::testing::source_dir() + "/" + ck["path"].get<std::string>();
  if (!ck.contains("synth")) return "";
  const auto r = qwen35::testing::run_qwen35(ck["synth"].get<std::string>() + " --out " + scratch);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return scratch;
}

class VisionForward : public ::testing::Test {
 protected:
  // Encodes each image of the case one call at a time (through one tower, so its scratch is
  // reused across images of different grids) and returns the tokens of all of them.
  static std::vector<float> encode_all(VisionTower& tower, const kernels::Context& ctx, const Fixture& f) {
    const VisionConfig& c = tower.config();
    std::vector<float> out;
    const float* rows = f.patches.data.data();
    for (size_t i = 0; i < f.grid.ints.size(); i += 3) {
      const int64_t t = f.grid.ints[i], h = f.grid.ints[i + 1], w = f.grid.ints[i + 2];
      const size_t at = out.size();
      out.resize(at + size_t(tower.tokens(t, h, w) * c.out_hidden));
      const core::Status st = tower.encode(ctx, rows, t, h, w, out.data() + at);
      EXPECT_TRUE(st.ok()) << st.message();
      rows += VisionTower::rows(t, h, w) * c.patch_dim();
    }
    return out;
  }
  // The same images through begin/plan/advance, each plan's budget `k` rows of a block's
  // attention part (0: one grain), the runs of all the case's images taken in turns through one
  // tower (so each piece finds the tile scratch left by another image's run).
  static std::vector<float> encode_staged(VisionTower& tower, const kernels::Context& ctx, const Fixture& f, double k) {
    const VisionConfig& c = tower.config();
    std::vector<float> out;
    std::vector<size_t> at;
    const float* rows = f.patches.data.data();
    for (size_t i = 0; i < f.grid.ints.size(); i += 3) {
      const int64_t t = f.grid.ints[i], h = f.grid.ints[i + 1], w = f.grid.ints[i + 2];
      at.push_back(out.size());
      out.resize(out.size() + size_t(tower.tokens(t, h, w) * c.out_hidden));
    }
    std::vector<VisionRun> runs(at.size());
    for (size_t i = 0, j = 0; i < f.grid.ints.size(); i += 3, ++j) {
      const int64_t t = f.grid.ints[i], h = f.grid.ints[i + 1], w = f.grid.ints[i + 2];
      EXPECT_TRUE(tower.begin(rows, t, h, w, out.data() + at[j], &runs[j]).ok());
      rows += VisionTower::rows(t, h, w) * c.patch_dim();
    }
    for (bool left = true; left;) {
      left = false;
      for (VisionRun& r : runs) {
        if (r.done()) continue;
        const double budget = k * tower.row_flops({0, 1, 1, 0}, r.grid_h * r.grid_w);
        left = !tower.advance(ctx, &r, tower.plan(r, budget, true).end) || left;
      }
    }
    return out;
  }
  static double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
    return m;
  }
};

TEST_F(VisionForward, MatchesTheFloat64ReferenceOnEveryCase) {
  int ran = 0;
  for (const auto& e : fs::directory_iterator(vision_fixtures())) {
    const std::string dir = e.path().string();
    if (!fs::exists(dir + "/merged.npy")) continue;
    // A case, or the end-to-end prompt case (its checkpoint, with a text model, in ckpt/).
    json c;
    if (fs::exists(dir + "/case.json")) c = json::parse(std::ifstream(dir + "/case.json"));
    else if (fs::exists(dir + "/ckpt/config.json"))
      c = {{"checkpoint", {{"committed", true}, {"path", "tests/fixtures/vision/" + e.path().filename().string() + "/ckpt"}}}};
    else
      continue;
    TempDir scratch;
    Fixture f;
    f.name = e.path().filename().string();
    f.ckpt = case_checkpoint(c, scratch.path());
    if (f.ckpt.empty()) {
      std::printf("  %s: checkpoint not committed and not written by synth, not run\n", f.name.c_str());
      continue;
    }
    f.patches = *formats::read_npy(dir + "/patches.npy");
    f.grid = *formats::read_npy(dir + "/grid.npy");
    f.merged = *formats::read_npy(dir + "/merged.npy");
    auto w = load_vision_weights(f.ckpt);
    ASSERT_TRUE(w.ok()) << f.name << ": " << w.message();
    ASSERT_EQ(f.grid.shape.size(), 2u);
    ASSERT_EQ(f.patches.shape[1], (*w)->config.patch_dim()) << f.name;
    ASSERT_EQ(f.merged.shape[1], (*w)->config.out_hidden) << f.name;

    VisionTower ref_tower(**w, kernels::ref_ops());
    const std::vector<float> ref = encode_all(ref_tower, kernels::Context{}, f);
    ASSERT_EQ(ref.size(), f.merged.data.size()) << f.name;
    const double ref_err = max_diff(ref, f.merged.data);
    EXPECT_LE(ref_err, 1e-3) << f.name << ": scalar reference ops vs the float64 reference";

    core::ThreadPool pool(3);
    kernels::Context ctx;
    ctx.pool = &pool;
    auto ws = kernels::cpu_ops().new_workspace();
    ctx.workspace = ws.get();
    VisionTower cpu_tower(**w, kernels::cpu_ops());
    const std::vector<float> cpu = encode_all(cpu_tower, ctx, f);
    const double cpu_err = max_diff(cpu, f.merged.data);
    EXPECT_LE(cpu_err, 1e-3) << f.name << ": CPU backend vs the float64 reference";
    // The CPU backend's matmuls sum in another order than the scalar reference's: measured
    // below 3e-6 on every case.
    EXPECT_LE(max_diff(cpu, ref), 1e-5) << f.name << ": CPU backend vs the scalar reference ops";
    // Threads and the images before it do not change an image's bits.
    VisionTower solo(**w, kernels::cpu_ops());
    EXPECT_EQ(encode_all(solo, kernels::Context{}, f), cpu) << f.name << ": one thread vs three";
    // Piece by piece (the engine's way), images interleaved: the same bits.
    for (double k : {0.0, 3.0})
      EXPECT_EQ(encode_staged(solo, ctx, f, k), cpu) << f.name << ": pieces of " << k << " attention rows' work";
    // Float towers (bf16, f32) have no int8 path: fast mode is exact mode, bit for bit, and so
    // within the bound above (vision_fast_test.cc bounds the quantized towers).
    kernels::Context fast = ctx;
    fast.int8_activations = true;
    EXPECT_EQ(encode_all(cpu_tower, fast, f), cpu) << f.name << ": fast mode vs exact mode";
    std::printf("  %-14s max |ref ops - float64| %.2e, |cpu - float64| %.2e, |cpu - ref ops| %.2e\n",
                f.name.c_str(), ref_err, cpu_err, max_diff(cpu, ref));
    ++ran;
  }
  EXPECT_GE(ran, 9);  // the reference worker's committed cases, its prompt case, the synth ones
}

// Through the model: its pool and workspace give the tower's bits; a text-only model refuses with
// the reason.
TEST(VisionTowerGrid, ModelEncodesImages) {
  TempDir d, d0;
  synth(d.path());
  synth(d0.path(), "tiny", "off");
  auto w = load_weights(d.path());
  ASSERT_TRUE(w.ok()) << w.message();
  auto solo = load_vision_weights(d.path());
  ASSERT_TRUE(solo.ok()) << solo.message();
  core::ThreadPool pool(2);
  Model m(std::move(*w), kernels::cpu_ops(), &pool);
  ASSERT_TRUE(m.has_vision());
  std::vector<float> rows(size_t(24 * 1536));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = float(int64_t(i * 104729 % 1999) - 999) / 999.0f;
  std::vector<float> got(size_t(6 * 128)), want(got.size());
  ASSERT_TRUE(m.encode_image(rows.data(), 1, 4, 6, got.data()).ok());
  VisionTower tower(**solo, kernels::cpu_ops());
  ASSERT_TRUE(tower.encode(kernels::Context{}, rows.data(), 1, 4, 6, want.data()).ok());
  EXPECT_EQ(got, want);
  EXPECT_FALSE(m.encode_image(rows.data(), 1, 3, 8, got.data()).ok());
  auto w0 = load_weights(d0.path());
  ASSERT_TRUE(w0.ok());
  Model m0(std::move(*w0), kernels::cpu_ops(), nullptr);
  EXPECT_FALSE(m0.has_vision());
  const core::Status st = m0.encode_image(rows.data(), 1, 4, 6, got.data());
  EXPECT_NE(st.message().find("[vision] no vision tower: the checkpoint has no"), std::string::npos)
      << st.message();
}

// End to end through the model: the prompt fixture's patch rows through this tower
// (Model::encode_image), its tokens put in place of the image pads, the text model with
// multimodal rotary positions: every position's logits within 1e-3 of the float64 reference
// (which ran the float64 tower), and the greedy continuation.
TEST(VisionTowerGrid, ImagePromptThroughTheTower) {
  const std::string dir = vision_fixtures() + "/prompt_tiny";
  const json prompt = json::parse(std::ifstream(dir + "/prompt.json"));
  auto w = load_weights(dir + "/ckpt");
  ASSERT_TRUE(w.ok()) << w.message();
  core::ThreadPool pool(2);
  Model m(std::move(*w), kernels::cpu_ops(), &pool);
  ASSERT_TRUE(m.has_vision()) << m.weights().vision_problem;
  const formats::NpyArray patches = *formats::read_npy(dir + "/patches.npy");
  const formats::NpyArray logits_ref = *formats::read_npy(dir + "/logits_all.npy");
  const formats::NpyArray cont_ref = *formats::read_npy(dir + "/logits_cont.npy");
  const int64_t H = m.config().hidden, V = m.config().vocab;
  std::vector<std::array<int64_t, 3>> grids;
  std::vector<float> tower_rows;
  const float* rows = patches.data.data();
  for (const json& g : prompt["grids"]) {
    const std::array<int64_t, 3> grid{g[0].get<int64_t>(), g[1].get<int64_t>(), g[2].get<int64_t>()};
    grids.push_back(grid);
    const size_t at = tower_rows.size();
    tower_rows.resize(at + size_t(grid[0] * (grid[1] / 2) * (grid[2] / 2) * H));
    ASSERT_TRUE(m.encode_image(rows, grid[0], grid[1], grid[2], tower_rows.data() + at).ok());
    rows += grid[0] * grid[1] * grid[2] * 1536;
  }
  const auto tokens = prompt["tokens"].get<std::vector<int32_t>>();
  const int32_t image = int32_t(m.weights().vision->config.image_token_id);
  auto pos = mrope_positions(tokens, image, grids, 2);
  ASSERT_TRUE(pos.ok()) << pos.message();
  std::vector<const float*> embeddings;
  int64_t row = 0;
  for (int32_t t : tokens) embeddings.push_back(t == image ? tower_rows.data() + H * row++ : nullptr);
  ASSERT_EQ(size_t(row * H), tower_rows.size());
  auto st = m.new_state(256);
  std::vector<float> logits;
  SequenceRows sr{st.get(), tokens, true};
  sr.positions = pos->pos;
  sr.embeddings = embeddings;
  ASSERT_TRUE(m.forward({&sr, 1}, &logits).ok());
  double worst = 0;
  for (size_t i = 0; i < logits.size(); ++i) worst = std::max(worst, std::abs(double(logits[i]) - logits_ref.data[i]));
  EXPECT_LE(worst, 1e-3) << "prompt logits";
  st->set_rope_delta(pos->delta);
  const auto cont = prompt["continuation"].get<std::vector<int32_t>>();
  for (size_t k = 0; k < cont.size(); ++k) {
    SequenceRows one{st.get(), {&cont[k], 1}, false};
    ASSERT_TRUE(m.forward({&one, 1}, &logits).ok());
    for (int64_t v = 0; v < V; ++v) worst = std::max(worst, std::abs(double(logits[size_t(v)]) - cont_ref.data[size_t(int64_t(k) * V + v)]));
    if (k + 1 < cont.size()) {
      EXPECT_EQ(std::max_element(logits.begin(), logits.end()) - logits.begin(), cont[k + 1]) << "step " << k;
    }
  }
  EXPECT_LE(worst, 1e-3) << "continuation logits";
  std::printf("  image prompt: max |logits - float64| %.2e\n", worst);
}

TEST(VisionTowerGrid, BadGridsAreRefusedWithoutWriting) {
  TempDir d;
  synth(d.path());
  auto w = load_vision_weights(d.path());
  ASSERT_TRUE(w.ok()) << w.message();
  VisionTower tower(**w, kernels::ref_ops());
  std::vector<float> rows(size_t(4 * 1536), 0.5f), out(4, 7.0f);
  for (auto [t, h, wd] : {std::tuple{1, 3, 2}, {1, 2, 5}, {0, 2, 2}, {1, 0, 2}, {1, 512, 512}}) {
    const core::Status st = tower.encode(kernels::Context{}, rows.data(), t, h, wd, out.data());
    EXPECT_FALSE(st.ok()) << t << "x" << h << "x" << wd;
  }
  EXPECT_EQ(out, std::vector<float>(4, 7.0f));
  EXPECT_NE(tower.check_grid(1, 3, 2).message().find("multiples of the merge size 2"), std::string::npos);
}

// The position rows of a grid the size of the table are the table's rows (interpolation weights
// 0 or 1), in merge-block order; the rotary angles are the row and column times inv_freq.
TEST(VisionTowerGrid, PositionTablesOnTheTableGrid) {
  TempDir d;
  synth(d.path());
  auto w = load_vision_weights(d.path());
  ASSERT_TRUE(w.ok()) << w.message();
  const VisionTower tower(**w, kernels::ref_ops());
  std::vector<float> pos, cos, sin;
  tower.position_tables(48, 48, &pos, &cos, &sin);
  const int64_t H = 64;
  // Row 5 of the merge order: block (0, 1), patch (0, 1) inside: grid (0, 3).
  for (int64_t e = 0; e < H; ++e) EXPECT_EQ(pos[size_t(5 * H + e)], (*w)->pos[size_t(3 * H + e)]);
  // Row 24·4 of the merge order (24 blocks per block row, 4 rows each) is block (1, 0), patch
  // (0, 0): grid (2, 0).
  for (int64_t e = 0; e < H; ++e) EXPECT_EQ(pos[size_t(24 * 4 * H + e)], (*w)->pos[size_t(2 * 48 * H + e)]);
  // head_dim 16: 8 angles, 4 from the row and 4 from the column, inv_freq_j = 10000^(-j/4).
  const int64_t row = 24 * 4 + 3;  // block (1, 0), patch (1, 1): grid (3, 1)
  for (int j = 0; j < 4; ++j) {
    const double inv = std::pow(10000.0, -double(j) / 4.0);
    EXPECT_FLOAT_EQ(cos[size_t(row * 8 + j)], float(std::cos(3 * inv)));
    EXPECT_FLOAT_EQ(sin[size_t(row * 8 + 4 + j)], float(std::sin(1 * inv)));
  }
}

}  // namespace
}  // namespace qwen35::model
