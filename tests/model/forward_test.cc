// The forward pass against the float64 reference logits of every fixture in tests/fixtures/models
// (the five shared ones and the generated extra_* geometries), and the exactness equalities:
// prefill == decode and chunk sizes within 1e-3; grid-aligned splits, thread counts and batching
// bit for bit.
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

using qwen35::testing::fixture_model_names;
using qwen35::testing::fixture_models_dir;

constexpr float kTol = 1e-3f;

struct Fixture {
  std::string dir;
  std::vector<int32_t> tokens;
  std::vector<int32_t> greedy;
  formats::NpyArray logits;
  std::vector<int32_t> long_tokens;
  formats::NpyArray long_logits;
};

std::vector<int32_t> ids(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

Fixture load_fixture(const std::string& name) {
  Fixture f;
  f.dir = fixture_models_dir() + "/" + name;
  auto g = nlohmann::json::parse(std::ifstream(f.dir + "/golden.json"));
  f.tokens = ids(g["tokens"]);
  f.greedy = ids(g["greedy_continuation"]);
  f.logits = *formats::read_npy(f.dir + "/logits_all.npy");
  if (std::filesystem::exists(f.dir + "/golden_long.json")) {
    auto gl = nlohmann::json::parse(std::ifstream(f.dir + "/golden_long.json"));
    f.long_tokens = ids(gl["tokens"]);
    f.long_logits = *formats::read_npy(f.dir + "/logits_long.npy");
  }
  return f;
}

class ForwardTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    fx_ = load_fixture(GetParam());
    auto w = load_weights(fx_.dir + "/ckpt");
    ASSERT_TRUE(w.ok()) << w.message();
    model_ = std::make_unique<Model>(std::move(*w), kernels::cpu_ops(), &pool_);
  }

  // Logits of every position, feeding `step` tokens per forward call.
  std::vector<float> run(const std::vector<int32_t>& toks, int64_t step, Model* m = nullptr) {
    m = m ? m : model_.get();
    auto st = m->new_state(int64_t(toks.size()) + 8);
    return run_on(*m, *st, toks, step);
  }
  static std::vector<float> run_on(Model& m, SequenceState& st, const std::vector<int32_t>& toks, int64_t step) {
    std::vector<float> all, part;
    for (size_t p = 0; p < toks.size(); p += size_t(step)) {
      const size_t len = std::min(size_t(step), toks.size() - p);
      SequenceRows r{&st, std::span<const int32_t>(toks.data() + p, len), true};
      auto s = m.forward(std::span<const SequenceRows>(&r, 1), &part);
      EXPECT_TRUE(s.ok()) << s.message();
      all.insert(all.end(), part.begin(), part.end());
    }
    return all;
  }
  const std::vector<int32_t>& seq() const { return fx_.long_tokens.empty() ? fx_.tokens : fx_.long_tokens; }
  int64_t vocab() const { return model_->config().vocab; }

  void expect_near_ref(const std::vector<float>& got, const formats::NpyArray& ref, const char* what) {
    ASSERT_EQ(got.size(), ref.data.size()) << what;
    const int64_t V = vocab(), T = int64_t(got.size()) / V;
    float worst = 0;
    for (int64_t t = 0; t < T; ++t) {
      const float* g = got.data() + t * V;
      const float* r = ref.data.data() + t * V;
      for (int64_t v = 0; v < V; ++v) worst = std::max(worst, std::fabs(g[v] - r[v]));
      EXPECT_EQ(std::max_element(g, g + V) - g, std::max_element(r, r + V) - r) << what << ": argmax at position " << t;
    }
    EXPECT_LE(worst, kTol) << what;
  }
  static float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float d = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
    return d;
  }

  core::ThreadPool pool_{2};
  Fixture fx_;
  std::unique_ptr<Model> model_;
};

TEST_P(ForwardTest, MatchesReferenceLogits) {
  expect_near_ref(run(fx_.tokens, int64_t(fx_.tokens.size())), fx_.logits, "prefill");
  if (!fx_.long_tokens.empty())
    expect_near_ref(run(fx_.long_tokens, int64_t(fx_.long_tokens.size())), fx_.long_logits, "long prefill");
}

TEST_P(ForwardTest, GreedyContinuation) {
  auto st = model_->new_state(int64_t(fx_.tokens.size() + fx_.greedy.size()));
  std::vector<float> logits;
  SequenceRows r{st.get(), fx_.tokens, false};
  ASSERT_TRUE(model_->forward(std::span<const SequenceRows>(&r, 1), &logits).ok());
  std::vector<int32_t> got;
  for (size_t i = 0; i < fx_.greedy.size(); ++i) {
    int32_t tok = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    got.push_back(tok);
    SequenceRows d{st.get(), std::span<const int32_t>(&got.back(), 1), false};
    ASSERT_TRUE(model_->forward(std::span<const SequenceRows>(&d, 1), &logits).ok());
  }
  EXPECT_EQ(got, fx_.greedy);
}

TEST_P(ForwardTest, PrefillEqualsDecodeAndChunkSizes) {
  const auto& toks = seq();
  const auto whole = run(toks, int64_t(toks.size()));
  EXPECT_LE(max_diff(run(toks, 1), whole), kTol) << "token-by-token decode";
  for (int64_t c : {7, 200}) EXPECT_LE(max_diff(run(toks, c), whole), kTol) << "chunk " << c;
  // Chunks on the 64-token grid run exactly the operations of the whole prompt.
  EXPECT_EQ(run(toks, 64), whole) << "chunk 64 must be bit-exact";
}

TEST_P(ForwardTest, SplitPrefillThenContinuation) {
  const auto& toks = seq();
  const auto whole = run(toks, int64_t(toks.size()));
  for (size_t split : {size_t(1), size_t(20), toks.size() - 1}) {
    auto st = model_->new_state(int64_t(toks.size()));
    std::vector<int32_t> a(toks.begin(), toks.begin() + int64_t(split)), b(toks.begin() + int64_t(split), toks.end());
    auto la = run_on(*model_, *st, a, int64_t(a.size()));
    auto lb = run_on(*model_, *st, b, int64_t(b.size()));
    la.insert(la.end(), lb.begin(), lb.end());
    EXPECT_LE(max_diff(la, whole), kTol) << "split at " << split;
  }
}

TEST_P(ForwardTest, ThreadCountDoesNotChangeBits) {
  auto w = load_weights(fx_.dir + "/ckpt");
  ASSERT_TRUE(w.ok());
  Model single(std::move(*w), kernels::cpu_ops(), nullptr);
  const auto& toks = seq();
  EXPECT_EQ(run(toks, int64_t(toks.size()), &single), run(toks, int64_t(toks.size())));
  EXPECT_EQ(run(fx_.tokens, 1, &single), run(fx_.tokens, 1));
}

TEST_P(ForwardTest, BatchEqualsAloneBitForBit) {
  // Sequence A: a prefill of the fixture tokens then decode; sequence B: other tokens, already
  // 5 tokens in when the batch starts, prefilling 30 more (crossing nothing special).
  const int64_t V = vocab();
  std::vector<int32_t> a = fx_.tokens, b;
  for (size_t i = 0; i < 35; ++i) b.push_back(int32_t((i * 7919 + 13) % size_t(V)));
  std::vector<int32_t> b0(b.begin(), b.begin() + 5), b1(b.begin() + 5, b.end());
  // Alone.
  auto sa = model_->new_state(256), sb = model_->new_state(256);
  auto la = run_on(*model_, *sa, a, int64_t(a.size()));
  run_on(*model_, *sb, b0, 5);
  auto lb = run_on(*model_, *sb, b1, int64_t(b1.size()));
  // Together.
  auto ta = model_->new_state(256), tb = model_->new_state(256);
  run_on(*model_, *tb, b0, 5);
  std::vector<float> both;
  SequenceRows rows[2] = {{ta.get(), a, true}, {tb.get(), b1, true}};
  ASSERT_TRUE(model_->forward(rows, &both).ok());
  std::vector<float> got_a(both.begin(), both.begin() + int64_t(la.size())), got_b(both.begin() + int64_t(la.size()), both.end());
  EXPECT_EQ(got_a, la);
  EXPECT_EQ(got_b, lb);
  // A decode row and a prefill chunk in one call, in the other order.
  int32_t next = 3;
  std::vector<float> alone, mixed;
  auto sa2 = model_->new_state(256);
  run_on(*model_, *sa2, a, int64_t(a.size()));
  SequenceRows one{sa2.get(), std::span<const int32_t>(&next, 1), true};
  ASSERT_TRUE(model_->forward(std::span<const SequenceRows>(&one, 1), &alone).ok());
  auto tc = model_->new_state(256);
  SequenceRows mix[2] = {{tc.get(), b, true}, {ta.get(), std::span<const int32_t>(&next, 1), true}};
  ASSERT_TRUE(model_->forward(mix, &mixed).ok());
  std::vector<float> tail(mixed.end() - V, mixed.end());
  EXPECT_EQ(tail, alone);
}

TEST_P(ForwardTest, RejectsBadInputWithoutTouchingState) {
  auto st = model_->new_state(4);
  std::vector<float> out;
  std::vector<int32_t> bad = {1, int32_t(vocab())};
  SequenceRows r{st.get(), bad, true};
  auto s = model_->forward(std::span<const SequenceRows>(&r, 1), &out);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("out of range"), std::string::npos);
  EXPECT_EQ(st->pos(), 0);
  std::vector<int32_t> five = {1, 2, 3, 4, 5};
  r.tokens = five;
  s = model_->forward(std::span<const SequenceRows>(&r, 1), &out);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("context full"), std::string::npos);
  r.tokens = {};
  EXPECT_FALSE(model_->forward(std::span<const SequenceRows>(&r, 1), &out).ok());
  EXPECT_EQ(st->pos(), 0);
}

// Fast mode (int8 activations in MLX-quantized matmuls) is not the exact path: its error against
// the reference is measured and printed. On bf16 checkpoints it changes nothing (~2e-5). The
// random-weight quantized fixtures amplify every perturbation (0.5..0.9 on logits spanning 17-19;
// moe_q4 reaches 7: its router top-k gaps go down to 0.008, so rounding upstream flips experts),
// so the bound here only catches a broken kernel (half the logit range); the error that
// matters is measured on the trained model (trained_model_test: perplexity within 2%, README) and
// per op against a derived bound (ops_test). Its own equalities hold bit for bit.
TEST_P(ForwardTest, FastModeErrorIsBoundedAndItsEqualitiesExact) {
  model_->set_fast_activations(true);
  const auto& toks = seq();
  const auto whole = run(toks, int64_t(toks.size()));
  const auto& ref = fx_.long_tokens.empty() ? fx_.logits : fx_.long_logits;
  ASSERT_EQ(whole.size(), ref.data.size());
  float worst = 0, lo = ref.data[0], hi = ref.data[0];
  for (size_t i = 0; i < whole.size(); ++i) {
    worst = std::max(worst, std::fabs(whole[i] - ref.data[i]));
    lo = std::min(lo, ref.data[i]);
    hi = std::max(hi, ref.data[i]);
  }
  std::printf("[fast mode] %s: max |logit - reference| = %.2e (logits span %.1f)\n", GetParam().c_str(), worst,
              hi - lo);
  EXPECT_LE(worst, 0.5f * (hi - lo));
  EXPECT_EQ(run(toks, 64), whole) << "grid chunks";
  auto w = load_weights(fx_.dir + "/ckpt");
  ASSERT_TRUE(w.ok());
  Model single(std::move(*w), kernels::cpu_ops(), nullptr);
  single.set_fast_activations(true);
  EXPECT_EQ(run(toks, int64_t(toks.size()), &single), whole) << "thread count";
  // Batching: the fixture's prompt next to another sequence.
  std::vector<int32_t> other = {5, 4, 3, 2, 1, 0, 7};
  auto sa = model_->new_state(512), sb = model_->new_state(512);
  std::vector<float> both;
  SequenceRows rows[2] = {{sb.get(), other, true}, {sa.get(), toks, true}};
  ASSERT_TRUE(model_->forward(rows, &both).ok());
  std::vector<float> tail(both.end() - int64_t(whole.size()), both.end());
  EXPECT_EQ(tail, whole) << "batching";
}

// Fast-mode logits are the same bits on AMX tiles (kernels/cpu/amx.h) as on the VNNI/AVX2
// kernels: through the scalar model of the tile instructions on every machine, and through the
// hardware where this one has AMX (the test says so when it has not).
TEST_P(ForwardTest, FastModeLogitsAreTheSameOnAmxTiles) {
  using kernels::cpu::AmxUnit;
  const AmxUnit saved = kernels::cpu::amx_unit();
  model_->set_fast_activations(true);
  const auto& toks = seq();
  ASSERT_TRUE(kernels::cpu::amx_use_for_tests(AmxUnit::kNone));
  const auto vnni = run(toks, int64_t(toks.size()));
  ASSERT_TRUE(kernels::cpu::amx_use_for_tests(AmxUnit::kEmulated));
  EXPECT_EQ(run(toks, int64_t(toks.size())), vnni) << "emulated tiles";
  const kernels::cpu::AmxStatus st = kernels::cpu::amx_status();
  if (st.in_use) {
    ASSERT_TRUE(kernels::cpu::amx_use_for_tests(AmxUnit::kHardware));
    EXPECT_EQ(run(toks, int64_t(toks.size())), vnni) << "AMX tiles";
  }
  kernels::cpu::amx_use_for_tests(saved);
  if (!st.in_use) GTEST_SKIP() << "hardware tiles not checked, AMX not in use here: " << st.why_not;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ForwardTest, ::testing::ValuesIn(fixture_model_names()),
                         [](const auto& info) { return info.param; });

TEST(ForwardRef, ScalarReferenceBackendMatchesToo) {
  for (const char* name : {"dense_q4_untied", "moe_bf16"}) {
    Fixture fx = load_fixture(name);
    auto w = load_weights(fx.dir + "/ckpt");
    ASSERT_TRUE(w.ok());
    Model m(std::move(*w), kernels::ref_ops(), nullptr);
    auto st = m.new_state(256);
    std::vector<float> out;
    SequenceRows r{st.get(), fx.tokens, true};
    ASSERT_TRUE(m.forward(std::span<const SequenceRows>(&r, 1), &out).ok());
    float worst = 0;
    for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::fabs(out[i] - fx.logits.data[i]));
    EXPECT_LE(worst, kTol) << name;
  }
}

}  // namespace
}  // namespace qwen35::model
