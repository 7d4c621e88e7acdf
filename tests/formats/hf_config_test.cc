#include "formats/hf_config.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace qwen35::formats {
namespace {

TEST(HfConfig, TextConfigWinsAndRopeParameters) {
  auto c = parse_hf_config(R"({
    "model_type": "qwen3_5", "hidden_size": 1, "vocab_size": 7, "rope_theta": 5.0,
    "tie_word_embeddings": false,
    "text_config": {"model_type": "qwen3_5_text", "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 99,
      "layer_types": ["linear_attention", "full_attention"], "tie_word_embeddings": true,
      "rope_parameters": {"rope_theta": 1e6, "partial_rotary_factor": 0.5, "rope_type": "default"},
      "eos_token_id": [1, 2]}})", "config.json");
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->model_type, "qwen3_5");
  EXPECT_EQ(c->text_model_type, "qwen3_5_text");
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->vocab_size, 99);
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->partial_rotary_factor, 0.5);
  EXPECT_EQ(c->layer_types.size(), 2u);
  EXPECT_EQ(c->tie_word_embeddings, std::optional<bool>(true));
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{1, 2}));
}

TEST(HfConfig, FlatKeysAndRootTie) {
  auto c = parse_hf_config(R"({"model_type": "qwen3_5_text", "hidden_size": 8, "num_hidden_layers": 1,
    "num_attention_heads": 2, "vocab_size": 5, "rope_theta": 123.0, "partial_rotary_factor": 0.25,
    "tie_word_embeddings": true})", "config.json");
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->rope_theta, 123.0);
  EXPECT_EQ(c->num_key_value_heads, 2);  // defaults to num_attention_heads
  EXPECT_EQ(c->head_dim, 4);             // hidden / heads when absent
  EXPECT_EQ(c->tie_word_embeddings, std::optional<bool>(true));
  auto u = parse_hf_config(R"({"model_type": "x", "hidden_size": 8, "num_hidden_layers": 1,
    "num_attention_heads": 2, "vocab_size": 5})", "config.json");
  ASSERT_TRUE(u.ok());
  EXPECT_FALSE(u->tie_word_embeddings.has_value());
}

// Qwen3's config.json: the fields of its own (sliding window, MoE layer plan), which keys are
// there (absent and null ones are not: the gate's defaults differ by family), and which block the
// RoPE parameters came from.
TEST(HfConfig, Qwen3FieldsAndPresentKeys) {
  auto c = parse_hf_config(R"({"model_type": "qwen3_moe", "hidden_size": 8, "num_hidden_layers": 2,
    "num_attention_heads": 2, "vocab_size": 5, "sliding_window": null, "use_sliding_window": true,
    "decoder_sparse_step": 2, "mlp_only_layers": [0, 1], "norm_topk_prob": false,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})", "config.json");
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_TRUE(c->use_sliding_window);
  EXPECT_EQ(c->decoder_sparse_step, 2);
  EXPECT_EQ(c->mlp_only_layers, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(c->rope_block_key, "rope_scaling");
  EXPECT_EQ(c->rope_type, "yarn");
  EXPECT_FALSE(c->rope_theta_set);
  EXPECT_FALSE(c->partial_rotary_factor_set);
  EXPECT_TRUE(c->keys.count("norm_topk_prob"));
  EXPECT_FALSE(c->keys.count("sliding_window"));  // null
  EXPECT_FALSE(c->keys.count("rope_theta"));
  auto d = parse_hf_config(R"({"model_type": "qwen3", "hidden_size": 8, "num_hidden_layers": 1,
    "num_attention_heads": 2, "vocab_size": 5, "rope_scaling": null, "rope_theta": 1e6})", "config.json");
  ASSERT_TRUE(d.ok()) << d.message();
  EXPECT_TRUE(d->rope_theta_set);
  EXPECT_EQ(d->rope_block_key, "");
  EXPECT_EQ(d->decoder_sparse_step, 1);
  EXPECT_FALSE(d->use_sliding_window);
  EXPECT_FALSE(parse_hf_config(R"({"model_type": "qwen3", "hidden_size": 8, "num_hidden_layers": 1,
    "num_attention_heads": 2, "vocab_size": 5, "mlp_only_layers": "all"})", "config.json").ok());
}

TEST(HfConfig, QuantizationBlockWithOverrides) {
  auto c = parse_hf_config(R"({"model_type": "qwen3_5", "hidden_size": 8, "num_hidden_layers": 1,
    "num_attention_heads": 2, "vocab_size": 5,
    "quantization": {"group_size": 64, "bits": 4, "mode": "affine",
      "language_model.model.layers.0.mlp.gate": {"group_size": 64, "bits": 8},
      "language_model.model.layers.1.mlp.down_proj": false}})", "config.json");
  ASSERT_TRUE(c.ok()) << c.message();
  ASSERT_TRUE(c->quantization.has_value());
  EXPECT_EQ(c->quantization->defaults.bits, 4);
  bool unq = false;
  const QuantSpec* s = c->quantization->lookup("model.language_model.layers.0.mlp.gate", &unq);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->bits, 8);
  EXPECT_EQ(c->quantization->lookup("language_model.model.layers.1.mlp.down_proj", &unq), nullptr);
  EXPECT_TRUE(unq);
  EXPECT_EQ(c->quantization->lookup("language_model.model.layers.1.mlp.up_proj", &unq), nullptr);
  EXPECT_FALSE(unq);

  auto g = parse_hf_config(R"({"model_type": "qwen3_5", "hidden_size": 8, "num_hidden_layers": 1,
    "num_attention_heads": 2, "vocab_size": 5, "quantization_config": {"quant_method": "gptq", "bits": 4}})", "config.json");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->quant_method, "gptq");
}

TEST(HfConfig, ErrorsNameTheField) {
  struct Case {
    const char* json;
    const char* expect;
  } cases[] = {
      {"{", "not valid JSON"},
      {"[]", "not a JSON object"},
      {R"({"hidden_size": 8})", "'model_type'"},
      {R"({"model_type": "qwen3_5", "hidden_size": "big", "num_hidden_layers": 1, "num_attention_heads": 1, "vocab_size": 1})",
       "'hidden_size': expected an integer"},
      {R"({"model_type": "qwen3_5", "num_hidden_layers": 1, "num_attention_heads": 1, "vocab_size": 1})",
       "'hidden_size': is missing"},
      {R"({"model_type": "qwen3_5", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1, "vocab_size": 1, "layer_types": "LLLF"})",
       "'layer_types'"},
      {R"({"model_type": "qwen3_5", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1, "vocab_size": 1, "quantization": {"bits": 4}})",
       "group_size"},
      {R"({"model_type": "qwen3_5", "text_config": 3, "hidden_size": 8})", "text_config"},
  };
  for (const auto& c : cases) {
    auto r = parse_hf_config(c.json, "config.json");
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_NE(r.message().find(c.expect), std::string::npos) << r.message();
  }
}

TEST(HfConfig, GenerationConfig) {
  qwen35::testing::TempDir d;
  auto none = load_generation_config(d.path());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->present);
  qwen35::testing::write_file(d.file("generation_config.json"),
                              R"({"temperature": 0.7, "top_k": 20, "top_p": 0.8, "eos_token_id": [5, 6], "do_sample": true})");
  auto g = load_generation_config(d.path());
  ASSERT_TRUE(g.ok()) << g.message();
  EXPECT_EQ(*g->temperature, 0.7);
  EXPECT_EQ(*g->top_k, 20);
  EXPECT_EQ(g->eos_token_ids, (std::vector<int64_t>{5, 6}));
  qwen35::testing::write_file(d.file("generation_config.json"), R"({"temperature": "hot"})");
  EXPECT_FALSE(load_generation_config(d.path()).ok());
}

}  // namespace
}  // namespace qwen35::formats

namespace qwen35::formats {
namespace {

// Found by the config fuzzer: out-of-range numbers must be errors, not undefined casts.
TEST(HfConfig, OutOfRangeNumbers) {
  for (const char* j : {R"({"model_type":"qwen3_5","hidden_size":1e19})",
                        R"({"model_type":"qwen3_5","hidden_size":8,"num_hidden_layers":1,"num_attention_heads":1,"vocab_size":18446744073709551615})",
                        R"({"model_type":"qwen3_5","hidden_size":-1e300})",
                        R"({"model_type":"qwen3_5","hidden_size":2.5})",
                        R"({"model_type":"qwen3_5","hidden_size":8,"num_hidden_layers":1,"num_attention_heads":1,"vocab_size":4,"eos_token_id":18446744073709551615})"}) {
    auto r = parse_hf_config(j, "config.json");
    EXPECT_FALSE(r.ok()) << j;
  }
  auto ok = parse_hf_config(R"({"model_type":"qwen3_5","hidden_size":64.0,"num_hidden_layers":1,"num_attention_heads":1,"vocab_size":4})", "config.json");
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_EQ(ok->hidden_size, 64);
}

}  // namespace
}  // namespace qwen35::formats
