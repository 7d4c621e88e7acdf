// Loading: the fixtures bind with the geometry of their config.json; broken checkpoints (missing
// or misshapen tensors, unsupported configs) fail with one line naming the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "model/weights.h"
#include "test_util.h"

namespace qwen35::model {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using qwen35::testing::TempDir;

json text_config(const std::string& dir) {
  json j = json::parse(std::ifstream(dir + "/config.json"));
  json t = j.contains("text_config") ? j["text_config"] : j;
  return t;
}

TEST(Load, FixturesBindWithTheirGeometry) {
  for (const auto& name : qwen35::testing::fixture_model_names()) {
    const std::string dir = qwen35::testing::fixture_models_dir() + "/" + name + "/ckpt";
    auto w = load_weights(dir);
    ASSERT_TRUE(w.ok()) << name << ": " << w.message();
    const ModelConfig& c = (*w)->config;
    json t = text_config(dir);
    EXPECT_EQ(c.hidden, t["hidden_size"].get<int64_t>()) << name;
    EXPECT_EQ(c.n_layers, t["num_hidden_layers"].get<int64_t>()) << name;
    EXPECT_EQ(c.vocab, t["vocab_size"].get<int64_t>()) << name;
    EXPECT_EQ(c.n_heads, t["num_attention_heads"].get<int64_t>()) << name;
    EXPECT_EQ(c.n_kv_heads, t["num_key_value_heads"].get<int64_t>()) << name;
    EXPECT_EQ(c.head_dim, t["head_dim"].get<int64_t>()) << name;
    const std::string type = t["model_type"].get<std::string>();
    if (type == "qwen3" || type == "qwen3_moe") {  // full attention throughout, the whole head rotates
      EXPECT_EQ(c.family, Family::kQwen3) << name;
      EXPECT_FALSE(c.attn_gate) << name;
      EXPECT_EQ(c.rotary_dim, c.head_dim) << name;
      EXPECT_EQ(c.n_linear_layers(), 0) << name;
      EXPECT_EQ(c.layers.size(), size_t(c.n_layers)) << name;
      EXPECT_EQ(c.rope_theta, t.value("rope_theta", 10000.0)) << name;
    } else {
      EXPECT_EQ(c.family, Family::kQwen35) << name;
      EXPECT_EQ(c.n_k_heads, t["linear_num_key_heads"].get<int64_t>()) << name;
      EXPECT_EQ(c.n_v_heads, t["linear_num_value_heads"].get<int64_t>()) << name;
      EXPECT_EQ(c.conv_kernel, t["linear_conv_kernel_dim"].get<int64_t>()) << name;
      EXPECT_EQ(c.rotary_dim, int64_t(t["head_dim"].get<double>() * t["rope_parameters"]["partial_rotary_factor"].get<double>()));
      const auto& lt = t["layer_types"];
      ASSERT_EQ(c.layers.size(), lt.size());
      for (size_t i = 0; i < lt.size(); ++i)
        EXPECT_EQ(c.layers[i] == LayerKind::kFullAttention, lt[i] == "full_attention") << name << " layer " << i;
    }
    EXPECT_EQ(c.moe, t.contains("num_experts")) << name;
    if (c.moe) {
      EXPECT_EQ(c.top_k, t["num_experts_per_tok"].get<int64_t>());
    }
    EXPECT_EQ((*w)->tied, t["tie_word_embeddings"].get<bool>()) << name;
    EXPECT_EQ((*w)->dialect == Dialect::kMlx, (*w)->prefix == "language_model.model.") << name;
  }
}

// Copies a fixture checkpoint, letting `edit` drop or change tensors and the config.
void copy_checkpoint(const std::string& src, const std::string& dst,
                     const std::function<bool(qwen35::testing::RawTensor&)>& edit,
                     const std::function<void(json&)>& edit_config = nullptr) {
  auto store = formats::TensorStore::open_dir(src);
  ASSERT_TRUE(store.ok());
  std::vector<qwen35::testing::RawTensor> out;
  for (const auto& [name, v] : store->all()) {
    qwen35::testing::RawTensor t{name, std::string(core::dtype_name(v.dtype)), v.shape,
                                 std::string(reinterpret_cast<const char*>(v.data), v.nbytes)};
    if (edit(t)) out.push_back(std::move(t));
  }
  qwen35::testing::write_file(dst + "/model.safetensors", qwen35::testing::safetensors_bytes(out));
  json cfg = json::parse(std::ifstream(src + "/config.json"));
  if (edit_config) edit_config(cfg);
  qwen35::testing::write_file(dst + "/config.json", cfg.dump());
}

std::string load_error(const std::string& dir) {
  auto w = load_weights(dir);
  EXPECT_FALSE(w.ok());
  if (w.ok()) return "";
  EXPECT_EQ(w.message().find('\n'), std::string::npos);
  return w.message();
}

const std::string kDense = qwen35::testing::fixture_models_dir() + "/dense_bf16_tied/ckpt";
const std::string kQ4 = qwen35::testing::fixture_models_dir() + "/dense_q4_untied/ckpt";

TEST(Load, MissingTensorIsNamed) {
  TempDir d;
  copy_checkpoint(kDense, d.path(), [](auto& t) { return t.name != "model.language_model.layers.2.linear_attn.A_log"; });
  EXPECT_NE(load_error(d.path()).find("missing tensor 'model.language_model.layers.2.linear_attn.A_log'"), std::string::npos);
}

TEST(Load, WrongShapeNamesExpectedAndFound) {
  TempDir d;
  copy_checkpoint(kDense, d.path(), [](auto& t) {
    if (t.name == "model.language_model.layers.3.self_attn.k_proj.weight") {
      t.shape = {256, 256};
      t.bytes.resize(256 * 256 * 2);
    }
    return true;
  });
  const std::string e = load_error(d.path());
  EXPECT_NE(e.find("layers.3.self_attn.k_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("expected shape [512, 128]"), std::string::npos) << e;
  EXPECT_NE(e.find("found [256, 256]"), std::string::npos) << e;
}

TEST(Load, WrongQuantizedShape) {
  TempDir d;
  copy_checkpoint(kQ4, d.path(), [](auto&) { return true; }, [](json& c) { c["quantization"]["bits"] = 8; });
  const std::string e = load_error(d.path());
  EXPECT_NE(e.find("8-bit, group 64"), std::string::npos) << e;
}

TEST(Load, UnsupportedConfigs) {
  struct Case {
    std::function<void(json&)> edit;
    const char* expect;
  };
  std::vector<Case> cases = {
      {[](json& c) { c["model_type"] = "llama"; }, "'model_type' = \"llama\""},
      {[](json& c) { c["text_config"]["model_type"] = "qwen3_next"; }, "text_config.model_type"},
      {[](json& c) { c["quantization"] = {{"bits", 4}, {"group_size", 64}, {"mode", "mxfp4"}}; }, "mode' = \"mxfp4\""},
      {[](json& c) { c["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}}; }, "quant_method"},
      {[](json& c) { c["text_config"]["rope_parameters"]["partial_rotary_factor"] = 0.0; }, "partial_rotary_factor"},
      {[](json& c) { c["text_config"]["rope_parameters"]["partial_rotary_factor"] = 3.0 / 256; }, "rotary dims 3"},
      {[](json& c) { c["text_config"]["layer_types"][2] = "sliding_attention"; }, "'layer_types[2]' = \"sliding_attention\""},
      {[](json& c) { c["text_config"]["num_key_value_heads"] = 3; }, "'num_key_value_heads' = 3"},
      {[](json& c) { c["text_config"]["linear_num_value_heads"] = 3; }, "'linear_num_value_heads' = 3"},
      {[](json& c) { c["text_config"]["attn_output_gate"] = false; }, "'attn_output_gate' = false"},
      {[](json& c) { c["text_config"]["hidden_size"] = -4; }, "'hidden_size' = -4"},
      {[](json& c) { c["text_config"]["layer_types"].erase(0); }, "layer_types"},
  };
  for (const auto& c : cases) {
    TempDir d;
    copy_checkpoint(kDense, d.path(), [](auto&) { return true; }, c.edit);
    const std::string e = load_error(d.path());
    EXPECT_NE(e.find(c.expect), std::string::npos) << e;
  }
}

// Qwen3 and Qwen3-MoE: what they may say that is not built is refused by field name; what they
// say that is built (layer_types all full_attention, sliding_window set but off) loads.
TEST(Load, Qwen3ConfigsRefusedByFieldName) {
  const std::string dense = qwen35::testing::fixture_models_dir() + "/qwen3_dense_tied_bf16/ckpt";
  const std::string moe = qwen35::testing::fixture_models_dir() + "/qwen3_moe_e8_top2/ckpt";
  struct Case {
    const std::string* dir;
    std::function<void(json&)> edit;
    const char* expect;
  };
  std::vector<Case> cases = {
      {&dense, [](json& c) { c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; },
       "'rope_scaling.rope_type' = \"yarn\""},
      {&dense, [](json& c) { c["use_sliding_window"] = true; }, "'use_sliding_window' = true"},
      {&dense, [](json& c) { c["layer_types"] = {"full_attention", "sliding_attention", "full_attention"}; },
       "'layer_types[1]' = \"sliding_attention\""},
      {&dense, [](json& c) { c["attn_output_gate"] = true; }, "'attn_output_gate' = true"},
      {&dense, [](json& c) { c["attention_bias"] = true; }, "'attention_bias' = true"},
      {&dense, [](json& c) { c["model_type"] = "qwen3_next"; }, "'model_type' = \"qwen3_next\""},
      {&dense, [](json& c) { c["partial_rotary_factor"] = 0.0; }, "partial_rotary_factor"},
      {&moe, [](json& c) { c["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}}; }, "yarn"},
      {&moe, [](json& c) { c["use_sliding_window"] = true; }, "'use_sliding_window' = true"},
      {&moe, [](json& c) { c["layer_types"] = {"full_attention", "linear_attention"}; }, "'layer_types"},
      {&moe, [](json& c) { c["decoder_sparse_step"] = 2; }, "'decoder_sparse_step' = 2"},
      {&moe, [](json& c) { c["mlp_only_layers"] = {1}; }, "'mlp_only_layers' = [1]"},
      {&moe, [](json& c) { c["shared_expert_intermediate_size"] = 64; }, "'shared_expert_intermediate_size' = 64"},
      {&moe, [](json& c) { c["num_experts_per_tok"] = 9; }, "'num_experts_per_tok' = 9"},
  };
  for (const auto& c : cases) {
    TempDir d;
    copy_checkpoint(*c.dir, d.path(), [](auto&) { return true; }, c.edit);
    const std::string e = load_error(d.path());
    EXPECT_NE(e.find(c.expect), std::string::npos) << e;
  }
  TempDir d;
  copy_checkpoint(dense, d.path(), [](auto&) { return true; }, [](json& c) {
    c["layer_types"] = {"full_attention", "full_attention", "full_attention"};
    c["sliding_window"] = 4096;
  });
  auto w = load_weights(d.path());
  ASSERT_TRUE(w.ok()) << w.message();
  EXPECT_EQ((*w)->config.n_full_layers(), 3);
}

TEST(Load, DirectoryProblems) {
  TempDir d;
  EXPECT_NE(load_error(d.path()).find("no config.json"), std::string::npos);
  qwen35::testing::write_file(d.file("config.json"), "{\"model_type\": ");
  EXPECT_NE(load_error(d.path()).find("not valid JSON"), std::string::npos);
  EXPECT_NE(load_error(d.file("config.json")).find("not a directory"), std::string::npos);
  EXPECT_NE(load_error(d.file("nope")).find("does not exist"), std::string::npos);
  fs::copy_file(kDense + "/config.json", d.file("config.json"), fs::copy_options::overwrite_existing);
  EXPECT_NE(load_error(d.path()).find("no .safetensors"), std::string::npos);
}

}  // namespace
}  // namespace qwen35::model
