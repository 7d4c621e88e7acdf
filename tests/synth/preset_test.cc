// A preset's ModelConfig is the geometry the engine reads back from the config.json synth writes:
// the preset is the one place a synthetic geometry is spelled.
#include <gtest/gtest.h>

#include <fstream>

#include "formats/hf_config.h"
#include "model/config.h"
#include "test_util.h"
#include "tools/synth/config_gen.h"
#include "tools/synth/presets.h"
#include "tools/synth/tensor_plan.h"

namespace qwen35::tools {
namespace {

void expect_same_geometry(const model::ModelConfig& want, const model::ModelConfig& got,
                          const std::string& what) {
  EXPECT_EQ(got.model_type, want.model_type) << what;
  EXPECT_EQ(got.family, want.family) << what;
  EXPECT_EQ(got.attn_gate, want.attn_gate) << what;
  EXPECT_EQ(got.moe, want.moe) << what;
  EXPECT_EQ(got.hidden, want.hidden) << what;
  EXPECT_EQ(got.n_layers, want.n_layers) << what;
  EXPECT_EQ(got.intermediate, want.intermediate) << what;
  EXPECT_EQ(got.vocab, want.vocab) << what;
  EXPECT_EQ(got.eps, want.eps) << what;
  EXPECT_EQ(got.n_heads, want.n_heads) << what;
  EXPECT_EQ(got.n_kv_heads, want.n_kv_heads) << what;
  EXPECT_EQ(got.head_dim, want.head_dim) << what;
  EXPECT_EQ(got.rotary_dim, want.rotary_dim) << what;
  EXPECT_EQ(got.rope_theta, want.rope_theta) << what;
  EXPECT_EQ(got.max_position, want.max_position) << what;
  EXPECT_EQ(got.n_k_heads, want.n_k_heads) << what;
  EXPECT_EQ(got.n_v_heads, want.n_v_heads) << what;
  EXPECT_EQ(got.d_k, want.d_k) << what;
  EXPECT_EQ(got.d_v, want.d_v) << what;
  EXPECT_EQ(got.conv_kernel, want.conv_kernel) << what;
  EXPECT_EQ(got.layer_pattern(), want.layer_pattern()) << what;
  EXPECT_EQ(got.n_experts, want.n_experts) << what;
  EXPECT_EQ(got.top_k, want.top_k) << what;
  EXPECT_EQ(got.moe_intermediate, want.moe_intermediate) << what;
  EXPECT_EQ(got.shared_intermediate, want.shared_intermediate) << what;
  EXPECT_EQ(got.norm_topk, want.norm_topk) << what;
  EXPECT_EQ(got.tie_word_embeddings, want.tie_word_embeddings) << what;
  EXPECT_EQ(got.eos_token_ids, want.eos_token_ids) << what;
}

TEST(SynthPreset, ConfigJsonReadsBackAsThePresetConfig) {
  for (const std::string& name : preset_names()) {
    auto preset = find_preset(name);
    ASSERT_TRUE(preset.ok()) << preset.message();
    for (Dialect d : {Dialect::kHf, Dialect::kMlx}) {
      const PlanOptions opts{d, 4, 64};
      const TensorPlan plan = build_tensor_plan(*preset, opts);
      testing::TempDir dir;
      std::ofstream(dir.file("config.json")) << make_config_json(*preset, opts, plan);
      auto hf = formats::load_hf_config(dir.path());
      ASSERT_TRUE(hf.ok()) << hf.message();
      auto cfg = model::make_model_config(*hf);
      ASSERT_TRUE(cfg.ok()) << cfg.message();
      const std::string what = name + (d == Dialect::kMlx ? " mlx" : " hf");
      expect_same_geometry(preset->config, *cfg, what);
      // mlx-lm drops the MTP head; the format decides the quantization.
      // (Qwen3-Next's config has no MTP field: one layer, used when its tensors are there.)
      const bool next = preset->config.family == model::Family::kQwen3Next;
      EXPECT_EQ(cfg->mtp_layers, d == Dialect::kMlx && !next ? 0 : preset->config.mtp_layers) << what;
      EXPECT_EQ(cfg->quantization.has_value(), d == Dialect::kMlx) << what;
    }
  }
}

}  // namespace
}  // namespace qwen35::tools
