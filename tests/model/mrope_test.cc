// Multimodal RoPE (issue 33): a prompt's rotary positions and the pair-to-axis rule against the
// float64 reference's (tests/fixtures/vision/mrope_positions.json, from
// tools/fixtures/mrope_positions.py), and the text model's logits on a prompt with two images
// against the reference's (tests/fixtures/vision/prompt_tiny: the images' merged tower rows
// injected at their pad tokens, 1e-3 at every prompt position and along a greedy continuation).
// Text rows with three equal positions keep the bits of plain text.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>

#include "core/thread_pool.h"
#include "formats/npy.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/model.h"
#include "model/mrope.h"
#include "model/weights.h"
#include "test_util.h"

namespace qwen35::model {
namespace {

using Json = nlohmann::json;

std::string vision_dir() { return testing::source_dir() + "/tests/fixtures/vision"; }

std::vector<std::array<int64_t, 3>> grids_of(const Json& g) {
  std::vector<std::array<int64_t, 3>> out;
  for (const auto& x : g) out.push_back({x[0].get<int64_t>(), x[1].get<int64_t>(), x[2].get<int64_t>()});
  return out;
}

TEST(Mrope, PositionsMatchTheReference) {
  const Json j = Json::parse(testing::read_file(vision_dir() + "/mrope_positions.json"));
  const int32_t image = j["image_token_id"].get<int32_t>();
  const int64_t merge = j["spatial_merge_size"].get<int64_t>();
  ASSERT_GE(j["cases"].size(), 3u);
  for (const auto& c : j["cases"]) {
    const auto tokens = c["tokens"].get<std::vector<int32_t>>();
    const auto grids = grids_of(c["grids"]);
    auto m = mrope_positions(tokens, image, grids, merge);
    ASSERT_TRUE(m.ok()) << c["name"] << ": " << m.message();
    for (size_t t = 0; t < tokens.size(); ++t)
      for (size_t a = 0; a < 3; ++a)
        EXPECT_EQ(m->pos[3 * t + a], c["positions"][a][t].get<int64_t>()) << c["name"] << " " << t << " " << a;
    EXPECT_EQ(m->delta, c["rope_delta"].get<int64_t>()) << c["name"];
    EXPECT_EQ(int64_t(tokens.size()) + m->delta, c["next_position"].get<int64_t>()) << c["name"];
  }
}

TEST(Mrope, PairAxesMatchTheReference) {
  const Json j = Json::parse(testing::read_file(vision_dir() + "/mrope_positions.json"));
  ASSERT_GE(j["pair_axes"].size(), 3u);
  for (const auto& [name, axes] : j["pair_axes"].items()) {
    // "<pairs>_pairs_section_<t>_<h>_<w>"
    int64_t pairs = 0, t = 0, h = 0, w = 0;
    ASSERT_EQ(std::sscanf(name.c_str(), "%ld_pairs_section_%ld_%ld_%ld", &pairs, &t, &h, &w), 4) << name;
    const std::vector<uint8_t> got = mrope_pair_axis({t, h, w}, pairs);
    ASSERT_EQ(got.size(), axes.size()) << name;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(int(got[i]), axes[i].get<int>()) << name << " pair " << i;
  }
}

TEST(Mrope, ImageTokensThatDoNotFillTheirGridsAreRefused) {
  const std::vector<int32_t> tokens = {1, 9, 9, 9, 2};
  const std::vector<std::array<int64_t, 3>> one = {{1, 4, 4}};  // needs 4 image tokens
  EXPECT_FALSE(mrope_positions(tokens, 9, one, 2).ok());
  const std::vector<std::array<int64_t, 3>> small = {{1, 2, 2}};  // 1 token: 2 are left over
  EXPECT_FALSE(mrope_positions(tokens, 9, small, 2).ok());
  const std::vector<std::array<int64_t, 3>> video = {{2, 2, 6}};
  auto v = mrope_positions(tokens, 9, video, 2);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.message().find("video"), std::string::npos) << v.message();
  const std::vector<std::array<int64_t, 3>> fits = {{1, 2, 6}};  // 1 × 3 tokens
  EXPECT_TRUE(mrope_positions(tokens, 9, fits, 2).ok());
}

class MropeModel : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = vision_dir() + "/prompt_tiny";
    prompt_ = Json::parse(testing::read_file(dir + "/prompt.json"));
    auto w = load_weights(dir + "/ckpt");
    ASSERT_TRUE(w.ok()) << w.message();
    model_ = std::make_unique<Model>(std::move(*w), kernels::cpu_ops(), &pool_);
    merged_ = *formats::read_npy(dir + "/merged.npy");
    logits_ = *formats::read_npy(dir + "/logits_all.npy");
    cont_logits_ = *formats::read_npy(dir + "/logits_cont.npy");
    tokens_ = prompt_["tokens"].get<std::vector<int32_t>>();
    const int32_t image = prompt_["image_token_id"].get<int32_t>();
    auto m = mrope_positions(tokens_, image, grids_of(prompt_["grids"]), 2);
    ASSERT_TRUE(m.ok()) << m.message();
    pos_ = *m;
    const int64_t H = model_->config().hidden;
    ASSERT_EQ(merged_.shape[1], H);
    int64_t row = 0;
    for (int32_t t : tokens_) embeddings_.push_back(t == image ? merged_.data.data() + H * row++ : nullptr);
    ASSERT_EQ(row, merged_.shape[0]);
  }

  static float max_abs_diff(const float* a, const float* b, int64_t n) {
    float d = 0;
    for (int64_t i = 0; i < n; ++i) d = std::max(d, std::fabs(a[i] - b[i]));
    return d;
  }

  core::ThreadPool pool_{2};
  std::unique_ptr<Model> model_;
  Json prompt_;
  formats::NpyArray merged_, logits_, cont_logits_;
  std::vector<int32_t> tokens_;
  MropePositions pos_;
  std::vector<const float*> embeddings_;
};

TEST_F(MropeModel, ImagePromptLogitsMatchTheReference) {
  const int64_t V = model_->config().vocab, T = int64_t(tokens_.size());
  auto st = model_->new_state(256);
  std::vector<float> logits;
  SequenceRows rows{st.get(), tokens_, true};
  rows.positions = pos_.pos;
  rows.embeddings = embeddings_;
  ASSERT_TRUE(model_->forward({&rows, 1}, &logits).ok());
  ASSERT_EQ(int64_t(logits.size()), T * V);
  for (int64_t t = 0; t < T; ++t)
    EXPECT_LE(max_abs_diff(logits.data() + t * V, logits_.data.data() + t * V, V), 1e-3f) << "position " << t;
  // The continuation: decode rows at KV position + delta on every axis.
  st->set_rope_delta(pos_.delta);
  const auto cont = prompt_["continuation"].get<std::vector<int32_t>>();
  for (size_t k = 0; k < cont.size(); ++k) {
    const int32_t tok = cont[k];
    SequenceRows one{st.get(), {&tok, 1}, false};
    ASSERT_TRUE(model_->forward({&one, 1}, &logits).ok());
    EXPECT_LE(max_abs_diff(logits.data(), cont_logits_.data.data() + int64_t(k) * V, V), 1e-3f) << "step " << k;
    if (k + 1 < cont.size()) {
      EXPECT_EQ(std::max_element(logits.begin(), logits.end()) - logits.begin(), cont[k + 1]);
    }
  }
}

TEST_F(MropeModel, TextRowsWithEqualAxesKeepTheirBits) {
  std::vector<int32_t> text(tokens_.begin(), tokens_.begin() + 3);
  for (int k = 0; k < 70; ++k) text.push_back(int32_t(20 + k * 3));
  std::vector<int64_t> same;
  for (int64_t t = 0; t < int64_t(text.size()); ++t) same.insert(same.end(), {t, t, t});
  auto a = model_->new_state(256), b = model_->new_state(256);
  std::vector<float> la, lb;
  SequenceRows plain{a.get(), text, true};
  SequenceRows given{b.get(), text, true};
  given.positions = same;
  ASSERT_TRUE(model_->forward({&plain, 1}, &la).ok());
  ASSERT_TRUE(model_->forward({&given, 1}, &lb).ok());
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0);
}

TEST_F(MropeModel, MismatchedPositionsOrInputsAreRefused) {
  auto st = model_->new_state(256);
  std::vector<float> logits;
  std::vector<int64_t> short_pos(3 * tokens_.size() - 3, 0);
  SequenceRows bad{st.get(), tokens_, false};
  bad.positions = short_pos;
  EXPECT_FALSE(model_->forward({&bad, 1}, &logits).ok());
  SequenceRows bad_in{st.get(), tokens_, false};
  const std::vector<const float*> few(2, nullptr);
  bad_in.embeddings = few;
  EXPECT_FALSE(model_->forward({&bad_in, 1}, &logits).ok());
  EXPECT_EQ(st->pos(), 0);
}

}  // namespace
}  // namespace qwen35::model
