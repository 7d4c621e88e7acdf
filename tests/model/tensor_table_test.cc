// The tensor table: it names every tensor of every fixture checkpoint, each once (safetensors in
// the checkpoint's own dialect, GGUF under ggml names), and its entries are well formed.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>

#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "model/tensor_table.h"
#include "model/weights.h"
#include "test_util.h"

namespace qwen35::model {
namespace {

// The names in `a` and not in `b`, for a readable failure.
std::string missing_from(const std::set<std::string>& a, const std::set<std::string>& b) {
  std::string out;
  for (const std::string& n : a)
    if (!b.count(n)) out += " " + n;
  return out;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The names the table gives a bound checkpoint. Where the table has two spellings of the experts
// (HF fused or MLX switch_mlp; GGUF fused or apart) the one in `file` counts.
std::set<std::string> table_names(const ModelWeights& w, const std::set<std::string>& file) {
  std::set<std::string> out;
  for_each_tensor(w.config, w.dialect, w.prefix, !w.tied, w.has_mtp, [&](const Tensor& t, const std::string& p) {
    std::string name = p + t.name(w.dialect);
    if (w.dialect == Dialect::kGguf && t.gguf_fused != nullptr && file.count(p + t.gguf_fused) &&
        (t.fused == Fused::kNone || !file.count(name)))
      name = p + t.gguf_fused;
    // The untied head: mlx-lm exports of text-only models (Qwen3-Next) keep HF's root name.
    if (w.dialect == Dialect::kMlx && t.block == Block::kHead && file.count(p + t.hf)) name = p + t.hf;
    // Safetensors experts are HF-fused or MLX switch_mlp whatever the dialect: the file decides.
    if (w.dialect != Dialect::kGguf && t.form == Form::kExperts)
      for (const char* n : {t.hf, t.mlx})
        if (file.count(p + n)) name = p + n;
    // Or one module per expert (HF Qwen3-MoE): every expert's name.
    if (w.dialect != Dialect::kGguf && t.form == Form::kExperts && t.hf_expert != nullptr &&
        file.count(p + "mlp.experts.0." + t.hf_expert)) {
      for (int64_t e = 0; e < w.config.n_experts; ++e)
        EXPECT_TRUE(out.insert(p + "mlp.experts." + std::to_string(e) + "." + t.hf_expert).second);
      return;
    }
    // Qwen3-Next's fused projections: the second part's entry names the tensor the first's did.
    const bool second_part = (t.form == Form::kExperts && t.half == Half::kUp) || t.fused == Fused::kZ || t.fused == Fused::kA;
    EXPECT_TRUE(out.insert(name).second || second_part) << name << " twice";
  });
  return out;
}

TEST(TensorTable, NamesEveryTensorOfEachSafetensorsFixture) {
  for (const auto& fixture : qwen35::testing::fixture_model_names()) {
    const std::string dir = qwen35::testing::fixture_models_dir() + "/" + fixture + "/ckpt";
    auto w = load_weights(dir);
    ASSERT_TRUE(w.ok()) << fixture << ": " << w.message();
    auto store = formats::TensorStore::open_dir(dir);
    ASSERT_TRUE(store.ok()) << store.message();
    std::set<std::string> file;
    // The text model's tensors: the image tower (HF model.visual.*, MLX vision_tower.*) is not
    // bound yet, and quantized matrices' scales and biases go with their weight.
    for (const auto& [name, _] : store->all())
      if (!ends_with(name, ".scales") && !ends_with(name, ".biases") && name.rfind("model.visual.", 0) != 0 &&
          name.rfind("vision_tower.", 0) != 0)
        file.insert(name);
    const std::set<std::string> table = table_names(**w, file);
    EXPECT_EQ(missing_from(file, table), "") << fixture << ": in the file, not in the table";
    EXPECT_EQ(missing_from(table, file), "") << fixture << ": in the table, not in the file";
  }
}

TEST(TensorTable, NamesEveryTensorOfEachGgufFixture) {
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(qwen35::testing::source_dir() + "/tests/fixtures/gguf")) {
    if (e.path().extension() != ".gguf") continue;
    ++files;
    auto w = load_weights(e.path().string());
    ASSERT_TRUE(w.ok()) << e.path() << ": " << w.message();
    std::set<std::string> file;
    for (const auto& [name, _] : (*w)->gguf->tensors()) file.insert(name);
    const std::set<std::string> table = table_names(**w, file);
    EXPECT_EQ(missing_from(file, table), "") << e.path() << ": in the file, not in the table";
    EXPECT_EQ(missing_from(table, file), "") << e.path() << ": in the table, not in the file";
  }
  EXPECT_GT(files, 0);
}

TEST(TensorTable, EntriesAreWellFormed) {
  for (const Tensor& t : tensor_table()) {
    const std::string what = t.hf ? t.hf : "(unnamed)";
    EXPECT_TRUE(t.hf && t.gguf && t.dims && t.slot) << what;
    const bool matmul = t.form == Form::kMatrix || t.form == Form::kExperts;
    EXPECT_TRUE(!t.int8 || matmul) << what << ": an int8 form is of a matrix";
    EXPECT_EQ(t.form == Form::kExperts, t.expert != nullptr) << what;
    EXPECT_TRUE(t.half == Half::kWhole || t.form == Form::kExperts) << what;
    EXPECT_TRUE(t.summary == nullptr || matmul) << what << ": inspect summarizes matrices";
    EXPECT_TRUE(!t.optional || t.block == Block::kSharedExpert) << what;
    // A fused part: a DeltaNet matrix of Qwen3-Next's, with the ggml name of its fused tensor.
    if (t.fused != Fused::kNone) {
      EXPECT_TRUE(t.form == Form::kMatrix && t.block == Block::kLinearAttn && t.gguf_fused &&
                  t.family == FamilyOnly::kQwen3Next) << what;
    }
  }
  // The router and the shared expert's gate stay exact in fast mode; every other matmul may not.
  int exact = 0;
  for (const Tensor& t : tensor_table())
    if ((t.form == Form::kMatrix || t.form == Form::kExperts) && !t.int8 && t.role != Role::kEmbedding) ++exact;
  EXPECT_EQ(exact, 2);
}

// The vision entries: named in every dialect, bound through vslot, and naming exactly the tower's
// tensors of the reference worker's committed checkpoints (HF names, nothing else in the file).
TEST(TensorTable, VisionEntriesAreWellFormed) {
  std::set<std::string> hf, gguf;
  for (const Tensor& t : vision_tensor_table()) {
    const std::string what = t.hf ? t.hf : "(unnamed)";
    EXPECT_TRUE(t.hf && t.gguf && t.dims && t.vslot && !t.slot) << what;
    EXPECT_TRUE(t.is_vision() && !t.is_layer()) << what;
    EXPECT_FALSE(t.int8 || t.optional || t.summary || t.expert) << what;
    EXPECT_TRUE(t.form != Form::kExperts && t.form != Form::kConv) << what;
    EXPECT_TRUE(hf.insert(std::string(t.block == Block::kVision ? "" : "b.") + t.hf).second) << what;
    EXPECT_TRUE(gguf.insert(std::string(t.block == Block::kVision ? "" : "b.") + t.gguf).second) << what;
  }
  for (const char* ck : {"ckpt_tiny", "ckpt_side4", "ckpt_mid"}) {
    const std::string dir = qwen35::testing::source_dir() + "/tests/fixtures/vision/" + ck;
    auto store = formats::TensorStore::open_dir(dir);
    ASSERT_TRUE(store.ok()) << store.message();
    auto w = load_vision_weights(dir);
    ASSERT_TRUE(w.ok()) << w.message();
    ModelConfig c;
    c.vision = (*w)->config;
    std::set<std::string> file, table;
    for (const auto& [name, _] : store->all()) file.insert(name);
    for_each_vision_tensor(c, [&](const Tensor& t, int64_t layer) {
      table.insert(vision_tensor_prefix(t, Dialect::kHf, layer) + t.hf);
    });
    EXPECT_EQ(missing_from(file, table), "") << ck << ": in the file, not in the table";
    EXPECT_EQ(missing_from(table, file), "") << ck << ": in the table, not in the file";
  }
}

}  // namespace
}  // namespace qwen35::model
