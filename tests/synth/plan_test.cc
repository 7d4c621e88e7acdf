// Tensor plans at the real geometries (nothing is written) and chunking-independent values.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "tools/synth/gguf_layout.h"
#include "tools/synth/presets.h"
#include "tools/synth/tensor_plan.h"

namespace qwen35::tools {
namespace {

const TensorSpec* find(const TensorPlan& p, const std::string& name) {
  for (const TensorSpec& t : p.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

uint64_t plan_params_bf16(const TensorPlan& p) {
  uint64_t n = 0;
  for (const TensorSpec& t : p.tensors) n += t.numel();
  return n;
}

// The Qwen3 presets against the parameter counts of their model cards (total, billions; tied
// heads counted once), with Qwen3's "model." names and no MTP head or tower.
TEST(SynthPlan, Qwen3RealGeometries) {
  struct Case {
    const char* preset;
    double params_b;
    bool tied;
  };
  for (const Case& c : {Case{"qwen3-0.6b", 0.6, true}, Case{"qwen3-4b", 4.0, true}, Case{"qwen3-8b", 8.2, false},
                        Case{"qwen3-32b", 32.8, false}, Case{"qwen3-30b-a3b", 30.5, false}}) {
    auto g = find_preset(c.preset);
    ASSERT_TRUE(g.ok()) << g.message();
    const TensorPlan hf = build_tensor_plan(*g, {Dialect::kHf, 4, 64});
    EXPECT_NEAR(double(plan_params_bf16(hf)) / 1e9, c.params_b, 0.03 * c.params_b) << c.preset;
    EXPECT_EQ(find(hf, "lm_head.weight") == nullptr, c.tied) << c.preset;
    // mlx-lm's qwen3 / qwen3_moe keep the root lm_head (no language_model. prefix).
    const TensorPlan mlx = build_tensor_plan(*g, {Dialect::kMlx, 4, 64});
    EXPECT_EQ(find(mlx, "lm_head.weight") == nullptr, c.tied) << c.preset;
    EXPECT_EQ(find(mlx, "language_model.lm_head.weight"), nullptr) << c.preset;
    const TensorSpec* e = find(hf, "model.embed_tokens.weight");
    ASSERT_NE(e, nullptr) << c.preset;
    EXPECT_EQ(e->shape, (std::vector<int64_t>{151936, g->config.hidden}));
    const TensorSpec* norm = find(hf, "model.layers.0.post_attention_layernorm.weight");
    ASSERT_NE(norm, nullptr) << c.preset;
    EXPECT_EQ(norm->a, 1.0f) << c.preset << ": Qwen3 norms are stored as applied, drawn around 1";
    EXPECT_FALSE(hf.has_mtp);
    EXPECT_FALSE(hf.has_vision);
  }
}

// Qwen3-Next-80B-A3B against its model card (80B in total, about 3B activated), in the hub's
// layout: "model." names, the fused DeltaNet projections, zero-centred norms, one MTP layer in
// HF (mlx-lm drops it).
TEST(SynthPlan, Qwen3NextRealGeometry) {
  auto g = find_preset("qwen3-next-80b-a3b");
  ASSERT_TRUE(g.ok()) << g.message();
  const TensorPlan trunk = build_tensor_plan(*g, {Dialect::kHf, 4, 64, PlanOptions::Mtp::kOff});
  EXPECT_NEAR(double(plan_params_bf16(trunk)) / 1e9, 80.0, 0.03 * 80.0);
  const TensorPlan hf = build_tensor_plan(*g, {Dialect::kHf, 4, 64});
  EXPECT_TRUE(hf.has_mtp);
  const TensorSpec* qkvz = find(hf, "model.layers.0.linear_attn.in_proj_qkvz.weight");
  ASSERT_NE(qkvz, nullptr);
  EXPECT_EQ(qkvz->shape, (std::vector<int64_t>{2 * 16 * 128 + 2 * 32 * 128, 2048}));
  const TensorSpec* ba = find(hf, "model.layers.0.linear_attn.in_proj_ba.weight");
  ASSERT_NE(ba, nullptr);
  EXPECT_EQ(ba->shape, (std::vector<int64_t>{64, 2048}));
  EXPECT_EQ(find(hf, "model.layers.0.linear_attn.in_proj_qkv.weight"), nullptr);
  EXPECT_EQ(find(hf, "model.layers.3.self_attn.q_proj.weight")->shape, (std::vector<int64_t>{2 * 16 * 256, 2048}));
  EXPECT_EQ(find(hf, "model.layers.0.input_layernorm.weight")->a, 0.0f) << "zero-centred";
  EXPECT_NE(find(hf, "lm_head.weight"), nullptr);
  const TensorPlan mlx = build_tensor_plan(*g, {Dialect::kMlx, 4, 64});
  EXPECT_FALSE(mlx.has_mtp);
  EXPECT_NE(find(mlx, "lm_head.weight"), nullptr);
  EXPECT_NE(find(mlx, "model.layers.0.mlp.switch_mlp.gate_proj.scales"), nullptr);
  EXPECT_EQ(find(mlx, "model.layers.0.input_layernorm.weight")->a, 1.0f) << "stored as 1 + w";
  // The GGUF layout (nothing written): llama.cpp's qwen3next names and shapes, no MTP block.
  auto gguf = gguf_tensors(*g, hf, formats::GgmlType::kQ8_0);
  ASSERT_TRUE(gguf.ok()) << gguf.message();
  std::map<std::string, std::vector<int64_t>> ne;
  for (const GgufTensorSpec& t : *gguf) ne[t.name] = t.ne;
  EXPECT_EQ(ne["blk.0.attn_qkv.weight"], (std::vector<int64_t>{2048, 2 * 16 * 128 + 32 * 128}));
  EXPECT_EQ(ne["blk.0.attn_gate.weight"], (std::vector<int64_t>{2048, 32 * 128}));
  EXPECT_EQ(ne["blk.0.ssm_ba.weight"], (std::vector<int64_t>{2048, 64}));
  EXPECT_EQ(ne["blk.3.attn_q.weight"], (std::vector<int64_t>{2048, 2 * 16 * 256}));
  EXPECT_EQ(ne["blk.47.ffn_gate_exps.weight"], (std::vector<int64_t>{2048, 512, 512}));
  EXPECT_EQ(ne.count("blk.0.ssm_alpha.weight") + ne.count("blk.0.ssm_in.weight") + ne.count("blk.48.attn_q.weight"), 0u);
}

TEST(SynthPlan, RealGeometries) {
  struct Case {
    const char* preset;
    double params_b;  // text + MTP parameters, billions (HF plan), +-10%
    bool tied;
  };
  for (const Case& c :
       {Case{"0.8b", 0.77, true}, Case{"2b", 1.9, true}, Case{"4b", 4.5, true},
        Case{"9b", 9.2, false}, Case{"27b", 27.0, false}, Case{"35b-a3b", 35.0, false}}) {
    auto g = find_preset(c.preset);
    ASSERT_TRUE(g.ok()) << g.message();
    const TensorPlan hf = build_tensor_plan(*g, {Dialect::kHf, 4, 64});
    const double params = double(plan_params_bf16(hf)) / 1e9;
    EXPECT_NEAR(params, c.params_b, 0.12 * c.params_b) << c.preset;
    EXPECT_EQ(find(hf, "lm_head.weight") == nullptr, c.tied) << c.preset;
    const TensorSpec* e = find(hf, "model.language_model.embed_tokens.weight");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->shape, (std::vector<int64_t>{248320, g->config.hidden}));
    const TensorPlan mlx = build_tensor_plan(*g, {Dialect::kMlx, 4, 64});
    const TensorSpec* w = find(mlx, "language_model.model.embed_tokens.weight");
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->dtype, core::DType::kU32);
    EXPECT_EQ(w->shape, (std::vector<int64_t>{248320, g->config.hidden / 8}));
    EXPECT_EQ(find(mlx, "language_model.lm_head.weight") == nullptr, c.tied) << c.preset;
    for (const TensorSpec& t : hf.tensors) EXPECT_NE(t.dtype, core::DType::kU32) << t.name;
  }
}

TEST(SynthPlan, MoeOverridesOnlyInMlx) {
  auto g = find_preset("35b-a3b");
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(build_tensor_plan(*g, {Dialect::kHf, 4, 64}).quant_overrides.empty());
  const TensorPlan mlx = build_tensor_plan(*g, {Dialect::kMlx, 4, 64});
  EXPECT_EQ(mlx.quant_overrides.size(), 80u);  // router + shared gate per layer
  const TensorSpec* sw =
      find(mlx, "language_model.model.layers.39.mlp.switch_mlp.down_proj.weight");
  ASSERT_NE(sw, nullptr);
  EXPECT_EQ(sw->shape, (std::vector<int64_t>{256, 2048, 512 / 8}));
}

TEST(SynthPlan, ValuesIndependentOfChunking) {
  TensorSpec t;
  t.name = "x";
  t.stream = name_hash("x");
  t.shape = {300000};
  for (Init init : {Init::kNormal, Init::kQuantWords, Init::kQuantBiases}) {
    t.init = init;
    t.dtype = init == Init::kQuantWords ? core::DType::kU32 : core::DType::kBF16;
    t.a = 0.5f;
    t.b = 2.0f;
    t.bits = 4;
    const size_t es = core::dtype_size(t.dtype);
    std::vector<uint8_t> whole(t.nbytes()), parts(t.nbytes());
    fill_tensor(t, 9, 0, t.numel(), whole.data());
    const uint64_t cuts[] = {0, 1, 65535, 65537, 200001, 300000};
    for (int i = 0; i + 1 < 6; ++i)
      fill_tensor(t, 9, cuts[i], cuts[i + 1] - cuts[i], parts.data() + cuts[i] * es);
    EXPECT_EQ(whole, parts);
  }
}

TEST(SynthPlan, NormalMoments) {
  TensorSpec t;
  t.name = "n";
  t.stream = name_hash("n");
  t.shape = {1 << 20};
  t.dtype = core::DType::kF32;
  t.init = Init::kNormal;
  t.a = 1.0f;
  t.b = 0.02f;
  std::vector<float> v(t.numel());
  fill_tensor(t, 1, 0, t.numel(), reinterpret_cast<uint8_t*>(v.data()));
  double m = 0, s = 0;
  for (float x : v) m += x;
  m /= double(v.size());
  for (float x : v) s += (x - m) * (x - m);
  s = std::sqrt(s / double(v.size()));
  EXPECT_NEAR(m, 1.0, 1e-3);
  EXPECT_NEAR(s, 0.02, 2e-4);
}

}  // namespace
}  // namespace qwen35::tools
