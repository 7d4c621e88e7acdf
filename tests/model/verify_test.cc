// Speculative verification (SequenceRows::verify, Model::commit) on every fixture, exact and
// fast: k+1 verified rows have the logits of k+1 plain decode steps, bit for bit, whatever else
// is in the call; committing any number of them leaves the state exactly where plain decoding of
// those rows leaves it (the logits of every later step agree); a pending verification refuses a
// new forward; the KV blocks past a commit go back to a shared pool.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "model/kv_pool.h"
#include "model/model.h"
#include "test_util.h"

namespace qwen35::model {
namespace {

using qwen35::testing::fixture_model_names;
using qwen35::testing::fixture_models_dir;

// (fixture, fast)
class VerifyTest : public ::testing::TestWithParam<std::tuple<std::string, bool>> {
 protected:
  void SetUp() override {
    auto w = load_weights(fixture_models_dir() + "/" + std::get<0>(GetParam()) + "/ckpt");
    ASSERT_TRUE(w.ok()) << w.message();
    model_ = std::make_unique<Model>(std::move(*w), kernels::cpu_ops(), &pool_);
    model_->set_fast_activations(std::get<1>(GetParam()));
    vocab_ = size_t(model_->config().vocab);
  }
  std::vector<int32_t> tokens(size_t n, size_t salt) const {
    std::vector<int32_t> t;
    for (size_t i = 0; i < n; ++i) t.push_back(int32_t((i * 7919 + salt * 104729 + 13) % vocab_));
    return t;
  }
  // One forward of `rows` (all logits); fails the test on error.
  std::vector<float> run(std::vector<SequenceRows> rows) {
    std::vector<float> out;
    auto st = model_->forward(rows, &out);
    EXPECT_TRUE(st.ok()) << st.message();
    return out;
  }
  // The prompt in grid chunks (its last chunk's logits are not needed).
  void prefill(SequenceState& s, const std::vector<int32_t>& prompt) {
    for (size_t p = 0; p < prompt.size(); p += 64) {
      const size_t len = std::min<size_t>(64, prompt.size() - p);
      run({{&s, std::span<const int32_t>(prompt.data() + p, len), false}});
    }
  }
  std::vector<float> row(const std::vector<float>& all, size_t i) const {
    return {all.begin() + long(i * vocab_), all.begin() + long((i + 1) * vocab_)};
  }
  core::ThreadPool pool_{2};
  std::unique_ptr<Model> model_;
  size_t vocab_ = 0;
};

TEST_P(VerifyTest, VerifiedRowsAndCommitsHaveTheBitsOfPlainDecoding) {
  const ModelConfig& c = model_->config();
  const std::vector<int32_t> prompt = tokens(100, 1), gen = tokens(40, 2), other = tokens(90, 3);
  // Plain: the prompt, then gen[j] one row per step; plain[j] = the logits after gen[j].
  std::vector<std::vector<float>> plain;
  {
    SequenceState s(c, 256);
    prefill(s, prompt);
    for (int32_t t : gen) plain.push_back(run({{&s, std::span<const int32_t>(&t, 1), false}}));
  }
  // Verified in blocks of k+1 rows, keeping `keep` of them, then going on from there; a second
  // sequence prefills in the same calls (its rows share every matmul with the verified ones).
  KvPool kv(c, 12);
  SequenceState s(c, 256, &kv), o(c, 256, &kv);
  prefill(s, prompt);
  // (rows verified, rows kept): all kept, one kept, some kept, a block crossing a grid boundary
  // (positions 126..131) with few kept, the most rows, and single rows.
  const std::vector<std::pair<size_t, size_t>> plan = {{5, 5}, {4, 1}, {5, 3}, {6, 2}, {16, 16},
                                                       {1, 1}, {3, 1}, {2, 2}, {4, 4}};
  size_t at = 0, other_at = 0;
  for (const auto& [n, keep] : plan) {
    ASSERT_LE(at + n, gen.size());
    std::vector<SequenceRows> rows = {{&s, std::span<const int32_t>(gen.data() + at, n), false, true}};
    if (other_at < other.size()) {
      const size_t len = std::min<size_t>(64, other.size() - other_at);
      rows.push_back({&o, std::span<const int32_t>(other.data() + other_at, len), false});
      other_at += len;
    }
    const std::vector<float> out = run(rows);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(row(out, i), plain[at + i]) << "verified row " << i << " at gen " << at;
    EXPECT_TRUE(s.verify_pending());
    EXPECT_EQ(s.pos(), int64_t(prompt.size() + at + n));
    model_->commit(&s, int64_t(keep));
    EXPECT_FALSE(s.verify_pending());
    at += keep;
    EXPECT_EQ(s.pos(), int64_t(prompt.size() + at));
    EXPECT_EQ(s.blocks_held(), (s.pos() + 63) / 64) << "blocks past the kept rows are given back";
  }
  // Plain decoding goes on from the committed state with plain's bits.
  for (; at < gen.size(); ++at)
    ASSERT_EQ(run({{&s, std::span<const int32_t>(&gen[at], 1), false}}), plain[at]) << at;
}

TEST_P(VerifyTest, APendingVerificationRefusesAForward) {
  const ModelConfig& c = model_->config();
  SequenceState s(c, 256);
  prefill(s, tokens(70, 4));
  const std::vector<int32_t> t = tokens(17, 5);
  std::vector<float> out;
  SequenceRows too_many{&s, t, false, true};
  auto st = model_->forward(std::span<const SequenceRows>(&too_many, 1), &out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("at most 16 rows"), std::string::npos) << st.message();
  EXPECT_EQ(s.pos(), 70);
  SequenceRows r{&s, std::span<const int32_t>(t.data(), 3), false, true};
  ASSERT_TRUE(model_->forward(std::span<const SequenceRows>(&r, 1), &out).ok());
  EXPECT_EQ(out.size(), 3 * vocab_);
  SequenceRows next{&s, std::span<const int32_t>(t.data(), 1), false};
  st = model_->forward(std::span<const SequenceRows>(&next, 1), &out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("commit it first"), std::string::npos) << st.message();
  model_->commit(&s, 2);
  EXPECT_EQ(s.pos(), 72);
  EXPECT_TRUE(model_->forward(std::span<const SequenceRows>(&next, 1), &out).ok());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, VerifyTest,
                         ::testing::Combine(::testing::ValuesIn(fixture_model_names()),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param) +
                                  (std::get<1>(info.param) ? "_fast" : "_exact");
                         });

}  // namespace
}  // namespace qwen35::model
