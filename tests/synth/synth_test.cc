// qwen35 synth: tiny checkpoints in both layouts open with our own loader and config parser.
#include "tools/synth/synth.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "formats/hf_config.h"
#include "formats/safetensors.h"

namespace qwen35::tools {
namespace {

namespace fs = std::filesystem;
using core::DType;
using json = nlohmann::json;

class SynthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() /
            ("qwen35_synth_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string synth(const std::string& preset, const std::string& format, int bits = 4,
                    uint64_t seed = 1, const std::string& sub = "ck",
                    uint64_t max_shard = uint64_t(4) << 30) {
    SynthOptions o;
    o.preset = preset;
    o.format = format;
    o.bits = bits;
    o.seed = seed;
    o.progress = false;
    o.max_shard_bytes = max_shard;
    o.out_dir = (root_ / sub).string();
    auto r = write_synthetic_checkpoint(o);
    EXPECT_TRUE(r.ok()) << r.message();
    return o.out_dir;
  }

  fs::path root_;
};

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void expect_tensor(const formats::TensorStore& st, const std::string& name, DType dt,
                   std::vector<int64_t> shape) {
  const formats::TensorView* v = st.find(name);
  ASSERT_NE(v, nullptr) << name;
  EXPECT_EQ(v->dtype, dt) << name;
  EXPECT_EQ(v->shape, shape) << name;
}

float bf16_at(const formats::TensorView& v, size_t i) {
  uint16_t h;
  std::memcpy(&h, v.data + 2 * i, 2);
  return core::bf16_to_f32(h);
}

TEST_F(SynthTest, TinyHf) {
  const std::string dir = synth("tiny", "hf");
  auto st = formats::TensorStore::open_dir(dir);
  ASSERT_TRUE(st.ok()) << st.message();
  auto cfg = formats::load_hf_config(dir);
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  EXPECT_EQ(cfg->model_type, "qwen3_5");
  EXPECT_EQ(cfg->text_model_type, "qwen3_5_text");
  EXPECT_EQ(cfg->architectures, std::vector<std::string>{"Qwen3_5ForConditionalGeneration"});
  EXPECT_EQ(cfg->hidden_size, 128);
  EXPECT_EQ(cfg->num_hidden_layers, 8);
  EXPECT_EQ(cfg->vocab_size, 4096);
  EXPECT_EQ(cfg->intermediate_size, 256);
  EXPECT_EQ(cfg->layer_types.size(), 8u);
  EXPECT_EQ(cfg->layer_types[3], "full_attention");
  EXPECT_EQ(cfg->layer_types[4], "linear_attention");
  EXPECT_EQ(cfg->tie_word_embeddings, std::optional<bool>(true));
  EXPECT_EQ(cfg->eos_token_ids, std::vector<int64_t>{4000});
  EXPECT_FALSE(cfg->quantization.has_value());
  EXPECT_EQ(cfg->mtp_num_hidden_layers, 1);

  const std::string p = "model.language_model.";
  expect_tensor(*st, p + "embed_tokens.weight", DType::kBF16, {4096, 128});
  expect_tensor(*st, p + "norm.weight", DType::kBF16, {128});
  expect_tensor(*st, p + "layers.0.linear_attn.in_proj_qkv.weight", DType::kBF16, {1024, 128});
  expect_tensor(*st, p + "layers.0.linear_attn.in_proj_z.weight", DType::kBF16, {512, 128});
  expect_tensor(*st, p + "layers.0.linear_attn.in_proj_b.weight", DType::kBF16, {4, 128});
  expect_tensor(*st, p + "layers.0.linear_attn.out_proj.weight", DType::kBF16, {128, 512});
  expect_tensor(*st, p + "layers.0.linear_attn.conv1d.weight", DType::kBF16, {1024, 1, 4});
  expect_tensor(*st, p + "layers.0.linear_attn.A_log", DType::kF32, {4});
  expect_tensor(*st, p + "layers.0.linear_attn.dt_bias", DType::kBF16, {4});
  expect_tensor(*st, p + "layers.0.linear_attn.norm.weight", DType::kBF16, {128});
  expect_tensor(*st, p + "layers.3.self_attn.q_proj.weight", DType::kBF16, {2048, 128});
  expect_tensor(*st, p + "layers.3.self_attn.k_proj.weight", DType::kBF16, {512, 128});
  expect_tensor(*st, p + "layers.3.self_attn.o_proj.weight", DType::kBF16, {128, 1024});
  expect_tensor(*st, p + "layers.3.self_attn.q_norm.weight", DType::kBF16, {256});
  expect_tensor(*st, p + "layers.7.mlp.down_proj.weight", DType::kBF16, {128, 256});
  expect_tensor(*st, "mtp.fc.weight", DType::kBF16, {128, 256});
  EXPECT_EQ(st->find("lm_head.weight"), nullptr);  // tied
  EXPECT_EQ(st->find(p + "layers.3.linear_attn.A_log"), nullptr);
  // Zero-centred norm stored ~0 in HF; the gated GDN norm ~1.
  const auto* n = st->find(p + "layers.0.input_layernorm.weight");
  const auto* g = st->find(p + "layers.0.linear_attn.norm.weight");
  double mn = 0, mg = 0;
  for (int i = 0; i < 128; ++i) mn += bf16_at(*n, i) / 128.0, mg += bf16_at(*g, i) / 128.0;
  EXPECT_NEAR(mn, 0.0, 0.05);
  EXPECT_NEAR(mg, 1.0, 0.05);
  // A = exp(A_log) in [0.02, 2].
  const auto* a = st->find(p + "layers.0.linear_attn.A_log");
  for (int i = 0; i < 4; ++i) {
    float v;
    std::memcpy(&v, a->data + 4 * i, 4);
    EXPECT_GE(v, std::log(0.02f) - 1e-6f);
    EXPECT_LE(v, std::log(2.0f) + 1e-6f);
  }
}

TEST_F(SynthTest, TinyMlxQuantized) {
  for (int bits : {4, 8}) {
    const std::string dir = synth("tiny", "mlx", bits, 1, "ck" + std::to_string(bits));
    auto st = formats::TensorStore::open_dir(dir);
    ASSERT_TRUE(st.ok()) << st.message();
    auto cfg = formats::load_hf_config(dir);
    ASSERT_TRUE(cfg.ok()) << cfg.message();
    ASSERT_TRUE(cfg->quantization.has_value());
    EXPECT_EQ(cfg->quantization->defaults.bits, bits);
    EXPECT_EQ(cfg->quantization->defaults.group_size, 64);
    EXPECT_EQ(cfg->quantization->defaults.mode, "affine");
    EXPECT_TRUE(cfg->quantization->overrides.empty());
    EXPECT_EQ(cfg->mtp_num_hidden_layers, 0);
    const std::string p = "language_model.model.";
    const int64_t w = 128 * bits / 32;
    expect_tensor(*st, p + "embed_tokens.weight", DType::kU32, {4096, w});
    expect_tensor(*st, p + "embed_tokens.scales", DType::kBF16, {4096, 2});
    expect_tensor(*st, p + "embed_tokens.biases", DType::kBF16, {4096, 2});
    expect_tensor(*st, p + "layers.0.linear_attn.in_proj_qkv.weight", DType::kU32, {1024, w});
    expect_tensor(*st, p + "layers.0.linear_attn.in_proj_a.weight", DType::kU32, {4, w});
    expect_tensor(*st, p + "layers.0.linear_attn.out_proj.weight", DType::kU32,
                  {128, 512 * bits / 32});
    expect_tensor(*st, p + "layers.0.linear_attn.out_proj.scales", DType::kBF16, {128, 8});
    expect_tensor(*st, p + "layers.0.linear_attn.conv1d.weight", DType::kBF16, {1024, 4, 1});
    expect_tensor(*st, p + "layers.0.linear_attn.A_log", DType::kF32, {4});
    expect_tensor(*st, p + "layers.0.linear_attn.dt_bias", DType::kBF16, {4});
    expect_tensor(*st, p + "layers.3.self_attn.q_proj.weight", DType::kU32, {2048, w});
    expect_tensor(*st, p + "layers.3.self_attn.q_norm.weight", DType::kBF16, {256});
    expect_tensor(*st, p + "norm.weight", DType::kBF16, {128});
    EXPECT_EQ(st->find("language_model.lm_head.weight"), nullptr);
    EXPECT_EQ(st->find("mtp.fc.weight"), nullptr);
    for (const auto& [name, v] : st->all()) EXPECT_EQ(name.rfind("language_model.", 0), 0u) << name;
    // MLX stores 1+w for the zero-centred norms.
    const auto* n = st->find(p + "layers.3.self_attn.k_norm.weight");
    double m = 0;
    for (int i = 0; i < 256; ++i) m += bf16_at(*n, i) / 256.0;
    EXPECT_NEAR(m, 1.0, 0.05);
  }
}

TEST_F(SynthTest, TinyMoeBothLayouts) {
  const std::string hf = synth("tiny-moe", "hf", 4, 1, "hf");
  auto st = formats::TensorStore::open_dir(hf);
  ASSERT_TRUE(st.ok()) << st.message();
  auto cfg = formats::load_hf_config(hf);
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  EXPECT_EQ(cfg->model_type, "qwen3_5_moe");
  EXPECT_EQ(cfg->num_experts, 8);
  EXPECT_EQ(cfg->num_experts_per_tok, 2);
  EXPECT_EQ(cfg->moe_intermediate_size, 128);
  EXPECT_EQ(cfg->shared_expert_intermediate_size, 128);
  EXPECT_EQ(cfg->tie_word_embeddings, std::optional<bool>(false));
  const std::string p = "model.language_model.layers.0.mlp.";
  expect_tensor(*st, p + "experts.gate_up_proj", DType::kBF16, {8, 256, 128});
  expect_tensor(*st, p + "experts.down_proj", DType::kBF16, {8, 128, 128});
  expect_tensor(*st, p + "gate.weight", DType::kBF16, {8, 128});
  expect_tensor(*st, p + "shared_expert.up_proj.weight", DType::kBF16, {128, 128});
  expect_tensor(*st, p + "shared_expert_gate.weight", DType::kBF16, {1, 128});
  expect_tensor(*st, "lm_head.weight", DType::kBF16, {4096, 128});
  expect_tensor(*st, "mtp.layers.0.mlp.experts.gate_up_proj", DType::kBF16, {8, 256, 128});

  const std::string mlx = synth("tiny-moe", "mlx", 4, 1, "mlx");
  auto sm = formats::TensorStore::open_dir(mlx);
  ASSERT_TRUE(sm.ok()) << sm.message();
  auto cm = formats::load_hf_config(mlx);
  ASSERT_TRUE(cm.ok()) << cm.message();
  ASSERT_TRUE(cm->quantization.has_value());
  EXPECT_EQ(cm->quantization->overrides.size(), 16u);
  bool unq = true;
  const formats::QuantSpec* g =
      cm->quantization->lookup("language_model.model.layers.5.mlp.gate", &unq);
  ASSERT_NE(g, nullptr);
  EXPECT_FALSE(unq);
  EXPECT_EQ(g->bits, 8);
  EXPECT_EQ(g->group_size, 64);
  const std::string q = "language_model.model.layers.5.mlp.";
  expect_tensor(*sm, q + "switch_mlp.gate_proj.weight", DType::kU32, {8, 128, 16});
  expect_tensor(*sm, q + "switch_mlp.gate_proj.scales", DType::kBF16, {8, 128, 2});
  expect_tensor(*sm, q + "switch_mlp.down_proj.weight", DType::kU32, {8, 128, 16});
  expect_tensor(*sm, q + "gate.weight", DType::kU32, {8, 32});
  expect_tensor(*sm, q + "shared_expert_gate.weight", DType::kU32, {1, 32});
  expect_tensor(*sm, q + "shared_expert.down_proj.weight", DType::kU32, {128, 16});
  expect_tensor(*sm, "language_model.lm_head.weight", DType::kU32, {4096, 16});
}

TEST_F(SynthTest, TokenizerAndGenerationConfig) {
  const fs::path dir = synth("tiny", "hf");
  const json t = json::parse(read_file(dir / "tokenizer.json"));
  ASSERT_EQ(t["added_tokens"].size(), 33u);
  EXPECT_EQ(t["added_tokens"][0]["content"], "<|endoftext|>");
  EXPECT_EQ(t["added_tokens"][0]["id"], 4000);
  EXPECT_EQ(t["added_tokens"][2]["content"], "<|im_end|>");
  EXPECT_EQ(t["added_tokens"][2]["id"], 4002);
  EXPECT_EQ(t["added_tokens"][24]["content"], "<think>");
  EXPECT_EQ(t["added_tokens"][24]["special"], false);
  EXPECT_EQ(t["added_tokens"][32]["id"], 4032);
  EXPECT_EQ(t["normalizer"]["type"], "NFC");
  EXPECT_EQ(t["pre_tokenizer"]["pretokenizers"][0]["type"], "Split");
  EXPECT_EQ(t["decoder"]["type"], "ByteLevel");
  const json& m = t["model"];
  EXPECT_EQ(m["type"], "BPE");
  ASSERT_EQ(m["vocab"].size(), 4000u);
  std::vector<bool> seen(4000, false);
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    ASSERT_TRUE(id >= 0 && id < 4000);
    EXPECT_FALSE(seen[size_t(id)]);
    seen[size_t(id)] = true;
  }
  EXPECT_EQ(m["merges"].size(), 4000u - 256u);
  for (const json& mg : m["merges"]) {
    const std::string a = mg[0], b = mg[1];
    ASSERT_TRUE(m["vocab"].contains(a) && m["vocab"].contains(b) && m["vocab"].contains(a + b))
        << a << " + " << b;
  }
  const json tc = json::parse(read_file(dir / "tokenizer_config.json"));
  EXPECT_EQ(tc["eos_token"], "<|im_end|>");
  EXPECT_EQ(tc["pad_token"], "<|endoftext|>");
  EXPECT_EQ(tc["added_tokens_decoder"]["4002"]["content"], "<|im_end|>");
  EXPECT_EQ(tc["chat_template"].get<std::string>(),
            read_file(fs::path(QWEN35_SOURCE_DIR) / "tools/synth/chat_template.jinja"));
  auto gen = formats::load_generation_config(dir.string());
  ASSERT_TRUE(gen.ok()) << gen.message();
  EXPECT_EQ(gen->eos_token_ids, (std::vector<int64_t>{4002, 4000}));
  EXPECT_EQ(gen->top_k, std::optional<int64_t>(20));
  EXPECT_EQ(gen->top_p, std::optional<double>(0.95));
  EXPECT_EQ(gen->temperature, std::optional<double>(1.0));
}

// A Qwen3 checkpoint ships Qwen3's own template (Hermes-style JSON tool calls, thinking left to
// the model): the one of tests/fixtures/chat_template/qwen3, taken from Qwen3's tokenizer files.
TEST_F(SynthTest, Qwen3PresetsCarryQwen3sTemplate) {
  const std::string want =
      read_file(fs::path(QWEN35_SOURCE_DIR) / "tests/fixtures/chat_template/qwen3/chat_template.jinja");
  ASSERT_FALSE(want.empty());
  for (const char* preset : {"qwen3-tiny", "qwen3-tiny-moe"}) {
    const fs::path dir = synth(preset, "hf", 4, 1, preset);
    const json tc = json::parse(read_file(dir / "tokenizer_config.json"));
    EXPECT_EQ(tc["chat_template"].get<std::string>(), want) << preset;
  }
}

TEST_F(SynthTest, DeterministicForASeed) {
  const fs::path a = synth("tiny", "mlx", 4, 7, "a");
  const fs::path b = synth("tiny", "mlx", 4, 7, "b");
  const fs::path c = synth("tiny", "mlx", 4, 8, "c");
  for (const char* f : {"model.safetensors", "config.json", "tokenizer.json",
                        "tokenizer_config.json", "generation_config.json"})
    EXPECT_TRUE(read_file(a / f) == read_file(b / f)) << f;
  EXPECT_FALSE(read_file(a / "model.safetensors") == read_file(c / "model.safetensors"));
  EXPECT_TRUE(read_file(a / "tokenizer.json") == read_file(c / "tokenizer.json"));
}

TEST_F(SynthTest, ShardsWithIndex) {
  const fs::path one = synth("tiny", "hf", 4, 3, "one");
  const fs::path many = synth("tiny", "hf", 4, 3, "many", uint64_t(2) << 20);
  ASSERT_TRUE(fs::exists(many / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(many / "model.safetensors"));
  int n_files = 0;
  for (const auto& e : fs::directory_iterator(many))
    if (e.path().extension() == ".safetensors") {
      ++n_files;
      EXPECT_EQ(e.path().filename().string().rfind("model.safetensors-0000", 0), 0u);
      EXPECT_LE(fs::file_size(e.path()), (uint64_t(2) << 20) + 65536);
    }
  EXPECT_GE(n_files, 4);
  auto s1 = formats::TensorStore::open_dir(one.string());
  auto sn = formats::TensorStore::open_dir(many.string());
  ASSERT_TRUE(s1.ok() && sn.ok()) << s1.message() << sn.message();
  ASSERT_EQ(s1->all().size(), sn->all().size());
  for (const auto& [name, v] : s1->all()) {
    const formats::TensorView* w = sn->find(name);
    ASSERT_NE(w, nullptr) << name;
    ASSERT_EQ(v.nbytes, w->nbytes);
    EXPECT_EQ(std::memcmp(v.data, w->data, v.nbytes), 0) << name;
  }
  // Re-synth unsharded into the same directory: stale shards and the index are removed.
  synth("tiny", "hf", 4, 3, "many");
  EXPECT_FALSE(fs::exists(many / "model.safetensors.index.json"));
  EXPECT_TRUE(formats::TensorStore::open_dir(many.string()).ok());
}

TEST_F(SynthTest, RejectsBadOptions) {
  SynthOptions o;
  o.progress = false;
  o.out_dir = (root_ / "bad").string();
  o.preset = "7b";
  EXPECT_FALSE(write_synthetic_checkpoint(o).ok());
  o.preset = "tiny";
  o.format = "onnx";
  EXPECT_FALSE(write_synthetic_checkpoint(o).ok());
  o.format = "mlx";
  o.bits = 7;
  EXPECT_FALSE(write_synthetic_checkpoint(o).ok());
  o.bits = 4;
  o.group_size = 48;
  EXPECT_FALSE(write_synthetic_checkpoint(o).ok());
  o.group_size = 64;
  o.out_dir.clear();
  EXPECT_FALSE(write_synthetic_checkpoint(o).ok());
}

}  // namespace
}  // namespace qwen35::tools
