// The vision tower's binding: synth-written towers (HF, MLX, mmproj GGUF), refusals naming the
// tensor or the field, text-only checkpoints, the presets' towers, token ids, inspect.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "formats/npy.h"
#include "formats/safetensors.h"
#include "model/model.h"
#include "model/vision.h"
#include "model/weights.h"
#include "test_util.h"
#include "vision_test_util.h"
#include "tools/synth/config_gen.h"
#include "tools/synth/presets.h"
#include "tools/synth/synth.h"
#include "tools/synth/tensor_plan.h"

namespace qwen35::model {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using qwen35::testing::TempDir;
using namespace vision_testing;

TEST(VisionLoad, SynthTowerBindsWithThePresetGeometry) {
  TempDir d;
  synth(d.path());
  auto w = load_weights(d.path());
  ASSERT_TRUE(w.ok()) << w.message();
  ASSERT_NE((*w)->vision, nullptr) << (*w)->vision_problem;
  const VisionConfig& v = (*w)->vision->config;
  EXPECT_EQ(v.depth, 2);
  EXPECT_EQ(v.hidden, 64);
  EXPECT_EQ(v.n_heads, 4);
  EXPECT_EQ(v.head_dim, 16);
  EXPECT_EQ(v.intermediate, 128);
  EXPECT_EQ(v.out_hidden, 128);
  EXPECT_EQ(v.grid_side, 48);
  EXPECT_EQ(v.image_token_id, 4012);  // <|image_pad|> of the tiny tokenizer (4000 + 12)
  EXPECT_EQ((*w)->config.vision.depth, 2);
  const VisionWeights& t = *(*w)->vision;
  EXPECT_EQ(t.blocks.size(), 2u);
  EXPECT_EQ(t.patch.rows, 64);
  EXPECT_EQ(t.patch.cols, 1536);
  EXPECT_EQ(t.pos.size(), size_t(2304 * 64));
  EXPECT_EQ(t.merger_fc1.rows, 256);
  EXPECT_EQ(t.merger_fc2.rows, 128);
  // Parameters: patch 64·1536 + 64, table 2304·64, per block 2·(2·64) norms + qkv 3·64·(64+1)
  // + proj 64·65 + fc1 128·65 + fc2 64·129, merger 2·64 + 256·257 + 128·257.
  const int64_t block = 4 * 64 + 3 * 64 * 65 + 64 * 65 + 128 * 65 + 64 * 129;
  EXPECT_EQ(t.n_params, 64 * 1536 + 64 + 2304 * 64 + 2 * block + 2 * 64 + 256 * 257 + 128 * 257);
  EXPECT_EQ(t.bytes, size_t(t.n_params) * 2);  // all bf16
  // The image processor's settings beside it.
  const json pp = json::parse(std::ifstream(d.file("preprocessor_config.json")));
  EXPECT_EQ(pp["patch_size"], 16);
  EXPECT_EQ(pp["merge_size"], 2);
  EXPECT_EQ(pp["temporal_patch_size"], 2);
  EXPECT_EQ(pp["image_mean"], json({0.5, 0.5, 0.5}));
  EXPECT_EQ(pp["image_std"], json({0.5, 0.5, 0.5}));
  EXPECT_EQ(pp["size"]["shortest_edge"], 65536);
  EXPECT_EQ(pp["size"]["longest_edge"], 16777216);
  // Bad tower options are refused by name.
  for (auto [vision, vpreset, depth, expect] :
       {std::tuple{"maybe", "", 0, "--vision must be auto, on or off"}, {"on", "70b", 0, "unknown preset '70b'"},
        {"on", "", -1, "--vision-depth -1"}}) {
    tools::SynthOptions o;
    o.out_dir = d.file("bad");
    o.vision = vision;
    o.vision_preset = vpreset;
    o.vision_depth = depth;
    o.progress = false;
    auto r = tools::write_synthetic_checkpoint(o);
    ASSERT_FALSE(r.ok()) << vision;
    EXPECT_NE(r.message().find(expect), std::string::npos) << r.message();
  }
  // The text model binds as without a tower: the tower is outside its counts.
  TempDir d0;
  synth(d0.path(), "tiny", "off");
  auto w0 = load_weights(d0.path());
  ASSERT_TRUE(w0.ok()) << w0.message();
  EXPECT_EQ((*w0)->n_params, (*w)->n_params);
  EXPECT_EQ((*w0)->weight_bytes, (*w)->weight_bytes);
}

TEST(VisionLoad, TextOnlyCheckpointsLoadAndSayWhy) {
  TempDir d;
  synth(d.path(), "tiny", "off");
  auto w = load_weights(d.path());
  ASSERT_TRUE(w.ok()) << w.message();
  EXPECT_EQ((*w)->vision, nullptr);
  EXPECT_EQ((*w)->config.vision.depth, 0);
  EXPECT_NE((*w)->vision_problem.find("no vision tower"), std::string::npos) << (*w)->vision_problem;
  EXPECT_NE((*w)->vision_problem.find("model.visual."), std::string::npos) << (*w)->vision_problem;
  // Without vision_config (and with the tower's tensors still there).
  TempDir src, dst;
  synth(src.path());
  copy_checkpoint(src.path(), dst.path(), [](auto&) { return true; }, [](json& c) { c.erase("vision_config"); });
  auto w2 = load_weights(dst.path());
  ASSERT_TRUE(w2.ok()) << w2.message();
  EXPECT_EQ((*w2)->vision, nullptr);
  EXPECT_EQ((*w2)->vision_problem, "no vision tower: config.json has no vision_config");
  // The shared fixtures are text-only checkpoints with a placeholder vision_config.
  for (const auto& name : qwen35::testing::fixture_model_names()) {
    auto f = load_weights(qwen35::testing::fixture_models_dir() + "/" + name + "/ckpt");
    ASSERT_TRUE(f.ok()) << name << ": " << f.message();
    EXPECT_EQ((*f)->vision, nullptr) << name;
    EXPECT_FALSE((*f)->vision_problem.empty()) << name;
  }
}

// A tower that is there but cannot be bound: the text model loads, the reason names the tensor or
// the field.
TEST(VisionLoad, BrokenTowersAreRefusedByName) {
  TempDir src;
  synth(src.path());
  struct Case {
    const char* what;
    std::function<bool(qwen35::testing::RawTensor&)> edit;
    std::function<void(json&)> edit_config;
    const char* expect;
  };
  const std::string qkv = "model.visual.blocks.1.attn.qkv.weight";
  const Case cases[] = {
      {"missing tensor", [&](auto& t) { return t.name != qkv; }, nullptr,
       "missing tensor 'model.visual.blocks.1.attn.qkv.weight' (expected [192, 64])"},
      {"wrong shape",
       [](auto& t) {
         if (t.name == "model.visual.merger.linear_fc2.weight") t.shape = {64, 512};
         return true;
       },
       nullptr, "tensor 'model.visual.merger.linear_fc2.weight': expected shape [128, 256], found [64, 512]"},
      {"wrong patch layout",
       [](auto& t) {
         if (t.name == "model.visual.patch_embed.proj.weight") t.shape = {64, 3, 16, 2, 16};
         return true;
       },
       nullptr, "tensor 'model.visual.patch_embed.proj.weight': expected shape [64, 3, 2, 16, 16] (HF)"},
      {"missing bias", [](auto& t) { return t.name != "model.visual.blocks.0.norm2.bias"; }, nullptr,
       "missing tensor 'model.visual.blocks.0.norm2.bias'"},
      {"deepstack", [](auto&) { return true; },
       [](json& c) { c["vision_config"]["deepstack_visual_indexes"] = {0, 1}; },
       "DeepStack towers (Qwen3-VL) are not supported"},
      {"heads", [](auto&) { return true; }, [](json& c) { c["vision_config"]["num_heads"] = 3; },
       "'num_heads' = 3: does not divide hidden_size (64)"},
      {"head_dim", [](auto&) { return true; }, [](json& c) { c["vision_config"]["num_heads"] = 32; },
       "gives head_dim 2"},
      {"out_hidden", [](auto&) { return true; }, [](json& c) { c["vision_config"]["out_hidden_size"] = 96; },
       "'out_hidden_size' = 96: differs from the text model's hidden_size (128)"},
      {"patch", [](auto&) { return true; }, [](json& c) { c["vision_config"]["patch_size"] = 14; },
       "'patch_size' = 14"},
      {"merge", [](auto&) { return true; }, [](json& c) { c["vision_config"]["spatial_merge_size"] = 1; },
       "'spatial_merge_size' = 1"},
      {"type", [](auto&) { return true; }, [](json& c) { c["vision_config"]["depth"] = "two"; },
       "field 'depth': expected an integer"},
      {"act", [](auto&) { return true; }, [](json& c) { c["vision_config"]["hidden_act"] = "silu"; },
       "'hidden_act' = \"silu\""},
  };
  for (const Case& c : cases) {
    TempDir d;
    copy_checkpoint(src.path(), d.path(), c.edit, c.edit_config);
    auto w = load_weights(d.path());
    ASSERT_TRUE(w.ok()) << c.what << ": the text model must still load: " << w.message();
    EXPECT_EQ((*w)->vision, nullptr) << c.what;
    EXPECT_EQ((*w)->config.vision.depth, 0) << c.what;
    EXPECT_NE((*w)->vision_problem.find(c.expect), std::string::npos) << c.what << ": " << (*w)->vision_problem;
    auto alone = load_vision_weights(d.path());
    EXPECT_FALSE(alone.ok()) << c.what;
  }
}

// MLX (mlx-vlm's layout): "vision_tower.*", the patch embedding channels last ([O, T, P, P, C]),
// linears affine-quantized where their width divides into groups.
TEST(VisionLoad, MlxTowerBinds) {
  TempDir d;
  tools::SynthOptions o;
  o.preset = "tiny";
  o.format = "mlx";
  o.vision = "on";
  o.progress = false;
  o.out_dir = d.path();
  auto r = tools::write_synthetic_checkpoint(o);
  ASSERT_TRUE(r.ok()) << r.message();
  auto w = load_weights(d.path());
  ASSERT_TRUE(w.ok()) << w.message();
  ASSERT_NE((*w)->vision, nullptr) << (*w)->vision_problem;
  const VisionWeights& v = *(*w)->vision;
  EXPECT_EQ(v.source, "MLX vision_tower.*");
  EXPECT_EQ(v.blocks[0].qkv.type, kernels::WeightType::kAffine);
  EXPECT_EQ(v.blocks[0].qkv.bits, 4);
  auto store = formats::TensorStore::open_dir(d.path());
  ASSERT_TRUE(store.ok());
  const formats::TensorView* raw = store->find("vision_tower.patch_embed.proj.weight");
  ASSERT_NE(raw, nullptr);
  EXPECT_EQ(raw->shape, (std::vector<int64_t>{64, 2, 16, 16, 3}));
  // Element (o, c, t, p) of the bound rows is raw element (o, t, p, c).
  for (auto [o, c, t, p] : {std::tuple{0, 0, 0, 0}, {5, 2, 1, 77}, {63, 1, 0, 255}}) {
    uint16_t h;
    std::memcpy(&h, raw->data + 2 * size_t(((o * 2 + t) * 256 + p) * 3 + c), 2);
    EXPECT_EQ(v.patch_w[size_t(((o * 3 + c) * 2 + t) * 256 + p)], core::bf16_to_f32(h));
  }
  VisionTower tower(v, kernels::cpu_ops());
  std::vector<float> rows(size_t(16 * 1536), 0.1f), out(size_t(4 * 128));
  ASSERT_TRUE(tower.encode(kernels::Context{}, rows.data(), 1, 4, 4, out.data()).ok());
  for (float x : out) ASSERT_TRUE(std::isfinite(x));
}

// A GGUF model with its mmproj file (synth --vision on): the tower llama.cpp's converter writes,
// bound back, gives the HF checkpoint's tokens: bit for bit in f32 and bf16 (the same values,
// and the scalar reference sums the same way whatever the stored type), close in q8_0.
TEST(VisionLoad, MmprojFilesGiveTheHfTower) {
  TempDir hf_dir, g;
  synth(hf_dir.path());
  auto hf = load_vision_weights(hf_dir.path());
  ASSERT_TRUE(hf.ok()) << hf.message();
  std::vector<float> rows(size_t(24 * 1536));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = float(int64_t(i * 7919 % 2001) - 1000) / 1000.0f;
  auto encode = [&](const VisionWeights& w) {
    VisionTower tower(w, kernels::ref_ops());
    std::vector<float> out(size_t(6 * 128));
    EXPECT_TRUE(tower.encode(kernels::Context{}, rows.data(), 1, 4, 6, out.data()).ok());
    return out;
  };
  const std::vector<float> want = encode(**hf);
  for (const char* type : {"f32", "bf16", "q8_0"}) {
    tools::SynthOptions o;
    o.preset = "tiny";
    o.format = "gguf";
    o.outtype = type;
    o.vision = "on";
    o.progress = false;
    o.out_dir = g.file(std::string("m_") + type + ".gguf");
    auto r = tools::write_synthetic_checkpoint(o);
    ASSERT_TRUE(r.ok()) << r.message();
    auto text = load_weights(o.out_dir);
    ASSERT_TRUE(text.ok()) << text.message();
    EXPECT_EQ((*text)->vision, nullptr);
    EXPECT_NE((*text)->vision_problem.find("mmproj"), std::string::npos);
    const std::string mmproj = g.file(std::string("mmproj-m_") + type + ".gguf");
    // The processor's normalization, which llama.cpp's mmproj loader requires: the HF
    // checkpoint's preprocessor_config.json values, and the converter's per-block DeepStack flags.
    auto file = formats::GgufFile::open(mmproj);
    ASSERT_TRUE(file.ok()) << file.message();
    const json pre = json::parse(std::ifstream(hf_dir.path() + "/preprocessor_config.json"));
    for (const char* key : {"image_mean", "image_std"}) {
      const auto it = (*file)->metadata().find(std::string("clip.vision.") + key);
      ASSERT_NE(it, (*file)->metadata().end()) << key;
      EXPECT_EQ(it->second.elem, formats::GgufValueType::kF32) << key;
      EXPECT_EQ(it->second.floats, pre[key].get<std::vector<double>>()) << key;
    }
    // The converter's types: the position table F32 whatever the file's type (llama.cpp
    // interpolates it as F32 only), the patch kernels F32 outside F16 files.
    for (const formats::GgufTensor& t : (*file)->tensors()) {
      if (t.name == "v.position_embd.weight" || t.name.rfind("v.patch_embd.weight", 0) == 0) {
        EXPECT_EQ(t.type, formats::GgmlType::kF32) << type << ": " << t.name;
      }
    }
    const auto ds = (*file)->metadata().find("clip.vision.is_deepstack_layers");
    ASSERT_NE(ds, (*file)->metadata().end());
    EXPECT_EQ(ds->second.ints, std::vector<int64_t>(2, 0));
    attach_mmproj(**text, mmproj);
    ASSERT_NE((*text)->vision, nullptr) << type << ": " << (*text)->vision_problem;
    const VisionWeights& v = *(*text)->vision;
    EXPECT_EQ(v.config.depth, 2);
    EXPECT_EQ(v.config.hidden, 64);
    EXPECT_EQ(v.config.grid_side, 48);
    EXPECT_EQ(v.n_params, (*hf)->n_params) << type;
    if (std::string(type) != "q8_0") {
      EXPECT_EQ(v.patch_w, (*hf)->patch_w) << type;
    }
    const std::vector<float> got = encode(v);
    if (std::string(type) != "q8_0") {
      EXPECT_EQ(got, want) << type;
    } else {
      double m = 0;
      for (size_t i = 0; i < got.size(); ++i) m = std::max(m, std::abs(double(got[i]) - double(want[i])));
      EXPECT_LT(m, 0.05) << "q8_0 weights";
      EXPECT_GT(m, 0.0) << "q8_0 weights round";
    }
  }
  // One mmproj file beside the model is found; none is ""; several are an error naming them.
  auto found = find_mmproj(g.file("m_f32.gguf"));
  EXPECT_FALSE(found.ok());
  EXPECT_NE(found.message().find("mmproj-m_bf16.gguf"), std::string::npos) << found.message();
  TempDir one;
  fs::copy_file(g.file("m_f32.gguf"), one.file("model.gguf"));
  EXPECT_EQ(*find_mmproj(one.file("model.gguf")), "");
  fs::copy_file(g.file("mmproj-m_f32.gguf"), one.file("mmproj-model.gguf"));
  EXPECT_EQ(*find_mmproj(one.file("model.gguf")), one.file("mmproj-model.gguf"));
  // The model file is not an mmproj file.
  ModelConfig text;
  text.hidden = 128;
  auto wrong = load_mmproj(g.file("m_f32.gguf"), text);
  EXPECT_FALSE(wrong.ok());
  EXPECT_NE(wrong.message().find("is not an mmproj file"), std::string::npos) << wrong.message();
}

// Every Qwen3.5 preset's config.json gives back its tower through the gate (and the CLI reports
// it); the Qwen3 and Qwen3-Next presets have none (text-only families).
TEST(VisionLoad, PresetTowersReadBack) {
  for (const std::string& name : tools::preset_names()) {
    auto p = tools::find_preset(name);
    ASSERT_TRUE(p.ok());
    const VisionConfig& want = p->config.vision;
    if (p->config.family != Family::kQwen35) {
      EXPECT_EQ(want.depth, 0) << name;
      continue;
    }
    ASSERT_GT(want.depth, 0) << name << ": every Qwen3.5 preset has a tower";
    const tools::PlanOptions opts{Dialect::kHf, 4, 64};
    TempDir d;
    std::ofstream(d.file("config.json")) << tools::make_config_json(*p, opts, tools::build_tensor_plan(*p, opts));
    auto hf = formats::load_hf_config(d.path());
    ASSERT_TRUE(hf.ok()) << hf.message();
    auto v = vision_config_of(*hf, p->config.hidden);
    ASSERT_TRUE(v.ok()) << name << ": " << v.message();
    EXPECT_EQ(v->depth, want.depth) << name;
    EXPECT_EQ(v->hidden, want.hidden) << name;
    EXPECT_EQ(v->n_heads, want.n_heads) << name;
    EXPECT_EQ(v->head_dim, want.head_dim) << name;
    EXPECT_EQ(v->intermediate, want.intermediate) << name;
    EXPECT_EQ(v->out_hidden, p->config.hidden) << name;
    EXPECT_EQ(v->grid_side, 48) << name;
    EXPECT_TRUE(v->tanh_gelu) << name;
  }
  // The released towers: width × depth (heads) of 0.8B, 4B and 27B.
  for (auto [name, hidden, depth, heads] : {std::tuple{"0.8b", 768, 12, 12}, {"4b", 1024, 24, 16}, {"27b", 1152, 27, 16}}) {
    const VisionConfig v = tools::find_preset(name)->config.vision;
    EXPECT_EQ(v.hidden, hidden) << name;
    EXPECT_EQ(v.depth, depth) << name;
    EXPECT_EQ(v.n_heads, heads) << name;
  }
  TempDir d, d0;
  synth(d.path());
  synth(d0.path(), "tiny", "off");
  const auto with = qwen35::testing::run_qwen35("inspect -m " + d.path());
  EXPECT_EQ(with.exit_code, 0) << with.err;
  EXPECT_NE(with.out.find("vision: 2 blocks, width 64, 4 heads of 16, mlp 128"), std::string::npos) << with.out;
  EXPECT_NE(with.out.find("vision verdict: usable (image token 4012)"), std::string::npos) << with.out;
  const auto without = qwen35::testing::run_qwen35("inspect -m " + d0.path());
  EXPECT_EQ(without.exit_code, 0) << without.err;
  EXPECT_NE(without.out.find("vision: no vision tower: the checkpoint has no"), std::string::npos) << without.out;
}

// The end-to-end fixture's checkpoint (text model and tower in one file) loads both, with the
// placeholder and delimiter ids its config.json moves into the vocabulary.
TEST(VisionLoad, TokenIdsComeFromConfigJson) {
  const std::string dir = vision_fixtures() + "/prompt_tiny/ckpt";
  const json c = json::parse(std::ifstream(dir + "/config.json"));
  auto w = load_weights(dir);
  ASSERT_TRUE(w.ok()) << w.message();
  ASSERT_NE((*w)->vision, nullptr) << (*w)->vision_problem;
  const VisionConfig& v = (*w)->vision->config;
  EXPECT_EQ(v.image_token_id, c["image_token_id"].get<int64_t>());
  EXPECT_EQ(v.video_token_id, c["video_token_id"].get<int64_t>());
  EXPECT_EQ(v.vision_start_token_id, c["vision_start_token_id"].get<int64_t>());
  EXPECT_EQ(v.vision_end_token_id, c["vision_end_token_id"].get<int64_t>());
  EXPECT_LT(v.image_token_id, (*w)->config.vocab);
}

}  // namespace
}  // namespace qwen35::model
