// A model split by layers, in one process: stages that each hold a share of the weights
// (keep_share) chained by Model::forward_layers, against the whole model's forward(): logits bit
// for bit on batched prefill chunks and decode steps, speculative verification with a commit that
// keeps fewer rows, and MTP drafts on the last stage. This is what ranks over MPI run, without
// the transport (tests/dist/pipeline_test.sh runs it over mpirun).
#include <gtest/gtest.h>

#include <cstring>

#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/pipeline_plan.h"
#include "test_util.h"

namespace qwen35::model {
namespace {

struct Param {
  std::string fixture;
  std::vector<int64_t> starts;
};

class PipelineStagesTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const std::string dir = qwen35::testing::fixture_models_dir() + "/" + GetParam().fixture + "/ckpt";
    auto whole = load_weights(dir);
    ASSERT_TRUE(whole.ok()) << whole.message();
    const PipelineCosts costs = pipeline_costs(**whole, 64, 2);
    auto plan = plan_pipeline(costs, int(GetParam().starts.size()) + 1, GetParam().starts);
    ASSERT_TRUE(plan.ok()) << plan.message();
    plan_ = *plan;
    whole_ = std::make_unique<Model>(std::move(*whole), kernels::cpu_ops(), &pool_);
    for (const RankShare& s : plan_.ranks) {
      auto w = load_weights(dir);
      ASSERT_TRUE(w.ok()) << w.message();
      keep_share(**w, s);
      for (int64_t l = 0; l < int64_t((*w)->layers.size()); ++l)  // only its own layers bound
        EXPECT_EQ((*w)->layers[size_t(l)].input_norm.empty(), l < s.first || l >= s.end) << l;
      EXPECT_EQ((*w)->head.data != nullptr, s.head);
      stages_.push_back(std::make_unique<Model>(std::move(*w), kernels::cpu_ops(), &pool_));
    }
    mtp_ = whole_->enable_mtp().ok();
    if (mtp_) {
      ASSERT_TRUE(stages_.back()->enable_mtp().ok());
    }
  }

  // Sequence i: its state in the whole model and in every stage.
  void add_sequence() {
    whole_states_.push_back(whole_->new_state(64));
    stage_states_.emplace_back();
    for (auto& m : stages_) stage_states_.back().push_back(m->new_state(64));
  }

  // One step: rows (sequence, tokens, verify) through the whole model and through the stages;
  // expects the same logits, bit for bit.
  void step(const std::vector<std::pair<size_t, std::vector<int32_t>>>& rows, bool verify = false) {
    std::vector<SequenceRows> whole;
    for (const auto& [s, t] : rows) whole.push_back({whole_states_[s].get(), t, true, verify});
    std::vector<float> expect, got, hidden;
    ASSERT_TRUE(whole_->forward(whole, &expect).ok());
    for (size_t r = 0; r < stages_.size(); ++r) {
      std::vector<SequenceRows> batch = whole;
      for (size_t i = 0; i < rows.size(); ++i) batch[i].state = stage_states_[rows[i].first][r].get();
      const RankShare& s = plan_.ranks[r];
      const auto st = stages_[r]->forward_layers(batch, s.first, s.end, &hidden, &got);
      ASSERT_TRUE(st.ok()) << st.message();
    }
    ASSERT_EQ(got.size(), expect.size());
    EXPECT_EQ(0, std::memcmp(got.data(), expect.data(), got.size() * sizeof(float)));
  }

  // Commits sequence s's verification keeping `rows`, on the whole model and every stage.
  void commit(size_t s, int64_t rows) {
    whole_->commit(whole_states_[s].get(), rows);
    for (size_t r = 0; r < stages_.size(); ++r) stages_[r]->commit(stage_states_[s][r].get(), rows);
  }

  // k drafts of sequence s after `token`, from the whole model and from the last stage.
  void expect_same_drafts(size_t s, int32_t token) {
    std::vector<int32_t> a, b;
    const DraftRequest ra{whole_states_[s].get(), token, 3, &a};
    const DraftRequest rb{stage_states_[s].back().get(), token, 3, &b};
    ASSERT_TRUE(whole_->draft(std::span(&ra, 1)).ok());
    ASSERT_TRUE(stages_.back()->draft(std::span(&rb, 1)).ok());
    EXPECT_EQ(a, b);
    EXPECT_FALSE(a.empty());
  }

  core::ThreadPool pool_{2};
  PipelinePlan plan_;
  std::unique_ptr<Model> whole_;
  std::vector<std::unique_ptr<Model>> stages_;
  bool mtp_ = false;
  std::vector<std::unique_ptr<SequenceState>> whole_states_;
  std::vector<std::vector<std::unique_ptr<SequenceState>>> stage_states_;
};

TEST_P(PipelineStagesTest, SameBitsAsOneModel) {
  add_sequence();
  add_sequence();
  std::vector<int32_t> a(20), b(5);
  for (size_t i = 0; i < a.size(); ++i) a[i] = int32_t(7 * i + 3);
  for (size_t i = 0; i < b.size(); ++i) b[i] = int32_t(11 * i + 1);
  step({{0, std::vector<int32_t>(a.begin(), a.begin() + 12)}});
  step({{0, std::vector<int32_t>(a.begin() + 12, a.end())}, {1, b}});  // a chunk beside a prompt
  for (int32_t t : {40, 41, 42}) step({{0, {t}}, {1, {int32_t(t + 100)}}});  // decode, batched
  // A verification of 4 rows of which 2 are kept, then decoding on from there.
  step({{0, {50, 51, 52, 53}}}, true);
  commit(0, 2);
  step({{0, {60}}, {1, {61}}});
  if (mtp_) expect_same_drafts(0, 70);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PipelineStagesTest,
                         ::testing::Values(Param{"dense_bf16_tied", {3}}, Param{"dense_bf16_tied", {3, 4}},
                                           Param{"moe_bf16", {1, 7}}, Param{"moe_bf16", {7}},
                                           Param{"dense_q4_untied", {3, 4}}),
                         [](const auto& i) {
                           std::string n = i.param.fixture;
                           for (int64_t s : i.param.starts) n += "_" + std::to_string(s);
                           return n;
                         });

}  // namespace
}  // namespace qwen35::model
