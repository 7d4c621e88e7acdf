// Binding GGUF files that are not what they claim: a fixture rewritten with one thing changed
// (a tensor missing, of a type without kernels or of the wrong shape, a key missing or of the
// wrong type, another architecture, a pattern key that contradicts the tensors) fails to load with
// one line naming what is wrong.
#include <gtest/gtest.h>

#include <functional>
#include <utility>

#include "formats/gguf.h"
#include "gguf_builder.h"
#include "model/weights.h"
#include "test_util.h"

namespace qwen35::model {
namespace {

std::string gguf_dir() { return qwen35::testing::source_dir() + "/tests/fixtures/gguf"; }

// Rewrites a fixture with one change and expects load_weights to fail with `what`.
void expect_bind_error(const std::function<void(qwen35::testing::GgufBuilder&)>& change, const std::string& what,
                       const std::string& fixture = "dense_q8_0_untied_f16") {
  auto f = formats::GgufFile::open(gguf_dir() + "/" + fixture + ".gguf");
  ASSERT_TRUE(f.ok()) << f.message();
  qwen35::testing::GgufBuilder b;
  b.copy_from(**f);
  change(b);
  qwen35::testing::TempDir tmp;
  qwen35::testing::write_file(tmp.file("m.gguf"), b.build());
  auto w = load_weights(tmp.file("m.gguf"));
  ASSERT_FALSE(w.ok()) << "expected: " << what;
  EXPECT_NE(w.message().find(what), std::string::npos) << w.message();
}

// Qwen3 files (llama.cpp's qwen3 and qwen3moe architectures): what is not built is refused by
// its key, and a file whose blocks are not all full attention names the tensor.
TEST(GgufBinding, Qwen3FilesRefuseWhatIsNotBuilt) {
  using B = qwen35::testing::GgufBuilder;
  const std::string dense = "qwen3_dense_q8_0", moe = "qwen3moe_q4_0_untied";
  ASSERT_TRUE(load_weights(gguf_dir() + "/" + dense + ".gguf").ok());
  expect_bind_error([](B& b) { b.u32("qwen3.rope.dimension_count", 64); }, "'qwen3.rope.dimension_count' = 64", dense);
  expect_bind_error([](B& b) { b.str("qwen3.rope.scaling.type", "yarn"); }, "'qwen3.rope.scaling.type' = \"yarn\"", dense);
  expect_bind_error([](B& b) { b.u32("qwen3.attention.sliding_window", 4096); }, "'qwen3.attention.sliding_window'", dense);
  expect_bind_error([](B& b) { b.erase_tensor("blk.1.attn_q.weight"); }, "missing tensor 'blk.1.attn_q.weight'", dense);
  expect_bind_error([](B& b) { b.erase_tensor("blk.0.ffn_norm.weight"); }, "missing tensor 'blk.0.ffn_norm.weight'", dense);
  expect_bind_error([](B& b) { b.erase_kv("qwen3moe.expert_count"); }, "missing metadata key 'qwen3moe.expert_count'", moe);
  expect_bind_error([](B& b) { b.u32("qwen3moe.expert_used_count", 99); }, "num_experts_per_tok", moe);
  expect_bind_error([](B& b) { b.str("qwen3moe.rope.scaling.type", "yarn"); }, "'qwen3moe.rope.scaling.type' = \"yarn\"", moe);
  expect_bind_error([](B& b) { b.u32("qwen3moe.attention.sliding_window", 4096); }, "'qwen3moe.attention.sliding_window'", moe);
  expect_bind_error([](B& b) { b.str("general.architecture", "qwen2moe"); }, "architecture 'qwen2moe' is not supported", moe);
}

TEST(GgufBinding, FilesThatAreNotWhatTheyClaim) {
  using B = qwen35::testing::GgufBuilder;
  // The fixture itself loads.
  ASSERT_TRUE(load_weights(gguf_dir() + "/dense_q8_0_untied_f16.gguf").ok());
  expect_bind_error([](B& b) { b.erase_tensor("blk.0.ssm_a"); }, "missing tensor 'blk.0.ssm_a'");
  expect_bind_error([](B& b) { b.erase_tensor("blk.3.attn_k.weight"); }, "missing tensor 'blk.3.attn_k.weight'");
  expect_bind_error([](B& b) { b.erase_tensor("blk.1.attn_qkv.weight"); }, "block 1 has neither");
  expect_bind_error([](B& b) { b.str("general.architecture", "llama"); }, "architecture 'llama' is not supported");
  expect_bind_error([](B& b) { b.str("general.architecture", "qwen3next"); }, "architecture 'qwen3next' is not supported");
  expect_bind_error([](B& b) { b.erase_kv("qwen35.ssm.state_size"); }, "missing metadata key 'qwen35.ssm.state_size'");
  expect_bind_error([](B& b) { b.str("qwen35.embedding_length", "wide"); }, "'qwen35.embedding_length': expected an integer");
  expect_bind_error([](B& b) { b.u32("qwen35.attention.head_count_kv", 3); }, "num_key_value_heads");
  expect_bind_error(
      [](B& b) {
        auto* t = b.find_tensor("blk.0.ffn_up.weight");
        t->type = uint32_t(formats::GgmlType::kQ2_K);
        t->ne = {256, t->ne[1] * t->ne[0] / 256};
        t->data.resize(size_t(t->ne[1]) * 84);
      },
      "blk.0.ffn_up.weight");
  for (auto type : {formats::GgmlType::kIQ1_S, formats::GgmlType::kIQ2_S, formats::GgmlType::kMXFP4})
    expect_bind_error(
        [type](B& b) {
          auto* t = b.find_tensor("blk.0.ffn_up.weight");
          t->type = uint32_t(type);
          const auto blk = formats::ggml_block(type);
          t->data.resize(size_t(int64_t(t->ne[0] * t->ne[1]) / blk.elements * blk.bytes));
        },
        "'blk.0.ffn_up.weight': type " + formats::ggml_type_name(type) + " is not supported", "dense_q4_k_m");
  expect_bind_error(
      [](B& b) {
        // Every block recurrent, but block 3 is full attention.
        b.raw_kv("qwen35.attention.recurrent_layers", uint32_t(formats::GgufValueType::kArray),
                 B::le(uint32_t(formats::GgufValueType::kBool)) + B::le(uint64_t(4)) + std::string(4, '\x01'));
      },
      "says block 3 is recurrent");
  expect_bind_error([](B& b) { std::swap(b.find_tensor("blk.0.attn_gate.weight")->ne[0], b.find_tensor("blk.0.attn_gate.weight")->ne[1]); },
                    "'blk.0.attn_gate.weight': expected ggml shape");
}

}  // namespace
}  // namespace qwen35::model
