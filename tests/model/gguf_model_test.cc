// GGUF models: the logits of every tests/fixtures/gguf file (dense and MoE, tied and untied,
// value heads tiled, the ggml type mixes of real files) against the float64 reference run on the
// file's own dequantized weights (tools/fixtures/make_gguf_fixtures.py); the conversion round trip
// (an HF checkpoint written as GGUF F32 gives that checkpoint's logits); bit-exactness across
// batching and threads. The binding errors are in gguf_load_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "formats/npy.h"
#include "kernels/cpu/amx.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "test_util.h"

namespace qwen35::model {
namespace {

using qwen35::testing::source_dir;

constexpr float kTol = 1e-3f;

std::string gguf_dir() { return source_dir() + "/tests/fixtures/gguf"; }

std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(gguf_dir()))
    if (e.path().extension() == ".gguf") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<float> run(Model& m, const std::vector<int32_t>& toks, int64_t step) {
  auto st = m.new_state(int64_t(toks.size()) + 8);
  std::vector<float> all, part;
  for (size_t p = 0; p < toks.size(); p += size_t(step)) {
    const size_t len = std::min(size_t(step), toks.size() - p);
    SequenceRows r{st.get(), std::span<const int32_t>(toks.data() + p, len), true};
    auto s = m.forward(std::span<const SequenceRows>(&r, 1), &part);
    EXPECT_TRUE(s.ok()) << s.message();
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

void expect_logits(const std::vector<float>& got, const std::vector<float>& ref, int64_t V, float tol,
                   const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t p = 0; p * size_t(V) < ref.size(); ++p) {
    const float* g = got.data() + p * size_t(V);
    const float* r = ref.data() + p * size_t(V);
    float worst = 0;
    for (int64_t v = 0; v < V; ++v) worst = std::max(worst, std::fabs(g[v] - r[v]));
    EXPECT_LE(worst, tol) << what << ", position " << p;
    EXPECT_EQ(std::max_element(g, g + V) - g, std::max_element(r, r + V) - r) << what << ": argmax at " << p;
  }
}

class GgufFixture : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    path_ = gguf_dir() + "/" + GetParam() + ".gguf";
    auto j = nlohmann::json::parse(std::ifstream(gguf_dir() + "/" + GetParam() + ".json"));
    tokens_ = j["tokens"].get<std::vector<int32_t>>();
    ref_ = formats::read_npy(gguf_dir() + "/" + GetParam() + ".logits.npy")->data;
  }
  std::unique_ptr<Model> load(const kernels::Ops& ops, core::ThreadPool* pool) {
    auto w = load_weights(path_);
    EXPECT_TRUE(w.ok()) << w.message();
    if (!w.ok()) return nullptr;
    return std::make_unique<Model>(std::move(*w), ops, pool);
  }
  std::string path_;
  std::vector<int32_t> tokens_;
  std::vector<float> ref_;
  core::ThreadPool pool_{2};
};

TEST_P(GgufFixture, MatchesTheReferenceOnTheDequantizedWeights) {
  auto m = load(kernels::cpu_ops(), &pool_);
  ASSERT_NE(m, nullptr);
  const int64_t V = m->config().vocab;
  expect_logits(run(*m, tokens_, int64_t(tokens_.size())), ref_, V, kTol, "prefill");
  expect_logits(run(*m, tokens_, 1), ref_, V, kTol, "decode");
  auto r = load(kernels::ref_ops(), nullptr);
  ASSERT_NE(r, nullptr);
  expect_logits(run(*r, tokens_, 64), ref_, V, kTol, "scalar reference kernels");
}

// Grid-aligned prefill pieces, decode steps and one thread give the bits of one prefill.
TEST_P(GgufFixture, BitExactAcrossSplitsAndThreads) {
  auto m = load(kernels::cpu_ops(), &pool_);
  ASSERT_NE(m, nullptr);
  const std::vector<float> whole = run(*m, tokens_, int64_t(tokens_.size()));
  EXPECT_EQ(run(*m, tokens_, 64), whole);
  core::ThreadPool one(1);
  auto m1 = load(kernels::cpu_ops(), &one);
  EXPECT_EQ(run(*m1, tokens_, int64_t(tokens_.size())), whole);
}

// Fast mode multiplies the block-type matrices in their int8 forms (kernels/int8_form.h) in place
// of the blocks, while it is on: its error against the reference is printed and bounded as for MLX
// checkpoints (forward_test: random weights amplify rounding, so the bound only catches a broken
// kernel; the per-op bound is in int8_form_test), its equalities hold bit for bit, and turning it
// off gives the exact bits back.
TEST_P(GgufFixture, FastModeTakesTheInt8FormsWithItsEqualities) {
  auto m = load(kernels::cpu_ops(), &pool_);
  ASSERT_NE(m, nullptr);
  const int64_t V = m->config().vocab, T = int64_t(tokens_.size());
  const std::vector<float> exact = run(*m, tokens_, T);
  const kernels::Matrix head = m->weights().head;
  const bool head_form = kernels::cpu_ops().int8_form(head, nullptr) != nullptr;
  m->set_fast_activations(true);
  EXPECT_EQ(m->weights().head.type, head_form ? kernels::WeightType::kAffine : head.type);
  const std::vector<float> fast = run(*m, tokens_, T);
  ASSERT_EQ(fast.size(), ref_.size());
  float worst = 0, lo = ref_[0], hi = ref_[0];
  int64_t same_argmax = 0;
  for (size_t i = 0; i < fast.size(); ++i) {
    worst = std::max(worst, std::fabs(fast[i] - ref_[i]));
    lo = std::min(lo, ref_[i]);
    hi = std::max(hi, ref_[i]);
  }
  for (int64_t p = 0; p < T; ++p) {
    const float* f = fast.data() + p * V;
    const float* r = ref_.data() + p * V;
    same_argmax += std::max_element(f, f + V) - f == std::max_element(r, r + V) - r;
  }
  std::printf("[fast mode] %s: max |logit - reference| = %.2e (logits span %.1f), argmax equal at %lld/%lld\n",
              GetParam().c_str(), worst, hi - lo, (long long)same_argmax, (long long)T);
  EXPECT_LE(worst, 0.5f * (hi - lo));
  EXPECT_EQ(run(*m, tokens_, 64), fast) << "grid chunks";
  core::ThreadPool one(1);
  auto m1 = load(kernels::cpu_ops(), &one);
  m1->set_fast_activations(true);
  EXPECT_EQ(run(*m1, tokens_, T), fast) << "thread count";
  m->set_fast_activations(false);
  EXPECT_EQ(m->weights().head.type, head.type);
  EXPECT_EQ(run(*m, tokens_, T), exact) << "exact again";
}

// The int8 forms' fast-mode logits are the same bits on AMX tiles as on the VNNI/AVX2 kernels:
// through the scalar model of the tile instructions everywhere, on the hardware where AMX is in
// use (kernels/cpu/amx.h; the test says when it skips that).
TEST_P(GgufFixture, FastModeLogitsAreTheSameOnAmxTiles) {
  using kernels::cpu::AmxUnit;
  auto m = load(kernels::cpu_ops(), &pool_);
  ASSERT_NE(m, nullptr);
  const AmxUnit saved = kernels::cpu::amx_unit();
  const int64_t T = int64_t(tokens_.size());
  m->set_fast_activations(true);
  ASSERT_TRUE(kernels::cpu::amx_use_for_tests(AmxUnit::kNone));
  const std::vector<float> vnni = run(*m, tokens_, T);
  ASSERT_TRUE(kernels::cpu::amx_use_for_tests(AmxUnit::kEmulated));
  EXPECT_EQ(run(*m, tokens_, T), vnni) << "emulated tiles";
  const kernels::cpu::AmxStatus st = kernels::cpu::amx_status();
  if (st.in_use) {
    ASSERT_TRUE(kernels::cpu::amx_use_for_tests(AmxUnit::kHardware));
    EXPECT_EQ(run(*m, tokens_, T), vnni) << "AMX tiles";
  }
  kernels::cpu::amx_use_for_tests(saved);
  if (!st.in_use) GTEST_SKIP() << "hardware tiles not checked, AMX not in use here: " << st.why_not;
}

INSTANTIATE_TEST_SUITE_P(Files, GgufFixture, ::testing::ValuesIn(fixture_names()));

// HF bf16 checkpoint (MoE, n_v = 2·n_k) -> GGUF F32 (the converter's conventions, value heads tiled): the logits of the
// checkpoint itself, to fp32 rounding. With the scalar reference kernels (float64 sums) the same
// weights give the same sums whatever their storage type; the CPU kernels sum f32 rows and bf16
// tiles in different orders, which moves the logits by float rounding only.
TEST(GgufRoundTrip, F32FileGivesTheCheckpointsLogits) {
  core::ThreadPool pool(2);
  auto j = nlohmann::json::parse(std::ifstream(gguf_dir() + "/moe_f32_tied.json"));
  const auto toks = j["tokens"].get<std::vector<int32_t>>();
  for (const kernels::Ops* ops : {&kernels::ref_ops(), &kernels::cpu_ops()}) {
    auto hf = load_weights(qwen35::testing::fixture_models_dir() + "/extra_moe_hf_e4_top1/ckpt");
    auto gg = load_weights(gguf_dir() + "/moe_f32_tied.gguf");
    ASSERT_TRUE(hf.ok()) << hf.message();
    ASSERT_TRUE(gg.ok()) << gg.message();
    EXPECT_FALSE((*hf)->tiled_v_heads);
    EXPECT_TRUE((*gg)->tiled_v_heads);
    Model a(std::move(*hf), *ops, &pool), b(std::move(*gg), *ops, &pool);
    const std::vector<float> la = run(a, toks, 64), lb = run(b, toks, 64);
    ASSERT_EQ(la.size(), lb.size());
    float worst = 0, scale = 0;
    for (size_t i = 0; i < la.size(); ++i) {
      worst = std::max(worst, std::fabs(la[i] - lb[i]));
      scale = std::max(scale, std::fabs(la[i]));
    }
    std::printf("%s kernels: max |hf - gguf| %.3g (max |logit| %.3g)\n", ops->name(), worst, scale);
    EXPECT_LE(worst, (ops == &kernels::ref_ops() ? 1e-6f : 1e-5f) * scale) << ops->name();
  }
}

}  // namespace
}  // namespace qwen35::model
