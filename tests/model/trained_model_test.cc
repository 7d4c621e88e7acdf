// The bundled trained model (models/qwen35-tiny-kjv, see tools/train/README.md) loads in both of
// its exports and predicts the English of its corpus: perplexity on KJV text far below a random
// model's (~vocabulary size, 4096), in the exact and the MLX 4-bit export alike.
#include <gtest/gtest.h>

#include <cmath>

#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace qwen35::model {
namespace {

double perplexity(const std::string& dir, const std::string& text, bool fast = false) {
  auto tok = tokenizer::Tokenizer::load(dir);
  EXPECT_TRUE(tok.ok()) << tok.message();
  auto ids = tok->encode(text);
  EXPECT_TRUE(ids.ok());
  auto w = load_weights(dir);
  EXPECT_TRUE(w.ok()) << w.message();
  core::ThreadPool pool(2);
  Model m(std::move(*w), kernels::cpu_ops(), &pool);
  m.set_fast_activations(fast);
  auto st = m.new_state(int64_t(ids->size()));
  std::vector<float> logits;
  SequenceRows r{st.get(), *ids, true};
  EXPECT_TRUE(m.forward(std::span<const SequenceRows>(&r, 1), &logits).ok());
  const int64_t V = m.config().vocab;
  double nll = 0;
  for (size_t i = 0; i + 1 < ids->size(); ++i) {
    const float* l = logits.data() + int64_t(i) * V;
    double mx = l[0], z = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(l[v]));
    for (int64_t v = 0; v < V; ++v) z += std::exp(double(l[v]) - mx);
    nll -= double(l[(*ids)[i + 1]]) - mx - std::log(z);
  }
  return std::exp(nll / double(ids->size() - 1));
}

TEST(TrainedModel, PredictsItsCorpus) {
  const std::string dir = qwen35::testing::source_dir() + "/models/qwen35-tiny-kjv";
  const std::string text =
      "And God said, Let there be light: and there was light. And God saw the light, that it was "
      "good: and God divided the light from the darkness. Blessed are the meek: for they shall "
      "inherit the earth.";
  const double exact = perplexity(dir, text), q4 = perplexity(dir + "/mlx-4bit", text);
  std::printf("perplexity: bf16 %.2f, MLX 4-bit %.2f\n", exact, q4);
  EXPECT_LT(exact, 80.0);
  EXPECT_LT(q4, 80.0);
  EXPECT_GT(q4, exact * 0.8);  // quantization costs a little, never helps much
  // Fast mode (int8 activations in the quantized matmuls) on a trained model: the measure of its
  // error that matters. README: within 1% of the exact mode's perplexity.
  const double q4_fast = perplexity(dir + "/mlx-4bit", text, true);
  std::printf("perplexity: MLX 4-bit fast mode %.3f (exact mode %.3f, %+.2f%%)\n", q4_fast, q4,
              100 * (q4_fast / q4 - 1));
  EXPECT_LT(std::fabs(q4_fast / q4 - 1), 0.02);
}

}  // namespace
}  // namespace qwen35::model
