// The engine with images in the prompt (issue 33), on the tiny image-text checkpoint of
// tests/fixtures/vision/prompt_tiny with its images' merged tower rows: the reference's greedy
// continuation; *concurrent == solo*, *resumed == fresh* (a prompt that repeats an image
// resumes through it; the same ids with another image do not) and *drafted == plain*, bit for
// bit; images that do not fit their prompt are refused at submission.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "engine_drain.h"
#include "image_request_util.h"
#include "formats/npy.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/weights.h"
#include "runtime/engine.h"
#include "test_util.h"

namespace qwen35::runtime {
namespace {

using testing::run;

using Json = nlohmann::json;

class EngineImageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = testing::source_dir() + "/tests/fixtures/vision/prompt_tiny";
    auto w = model::load_weights(dir + "/ckpt");
    ASSERT_TRUE(w.ok()) << w.message();
    pool_ = new core::ThreadPool(2);
    model_ = new model::Model(std::move(*w), kernels::cpu_ops(), pool_);
    prompt_ = new Json(Json::parse(testing::read_file(dir + "/prompt.json")));
    const formats::NpyArray merged = *formats::read_npy(dir + "/merged.npy");
    const int64_t H = merged.shape[1];
    const auto rows = [&](int64_t from, int64_t n) {
      return std::make_shared<const std::vector<float>>(merged.data.begin() + from * H,
                                                        merged.data.begin() + (from + n) * H);
    };
    a_ = PromptImage{{1, 4, 6}, 11, rows(0, 6), nullptr};
    b_ = PromptImage{{1, 6, 10}, 22, rows(6, 15), nullptr};
    // Image C: B's grid, other content (its rows in reverse order).
    std::vector<float> rev;
    for (int64_t r = 14; r >= 0; --r) rev.insert(rev.end(), b_.rows->begin() + r * H, b_.rows->begin() + (r + 1) * H);
    c_ = PromptImage{{1, 6, 10}, 33, std::make_shared<const std::vector<float>>(std::move(rev)), nullptr};
  }
  static void TearDownTestSuite() {
    delete model_;
    delete pool_;
    delete prompt_;
  }

  static int32_t id(const char* key) { return (*prompt_)[key].get<int32_t>(); }
  static testing::ImageTokenIds ids() {
    return {id("vision_start_token_id"), id("vision_end_token_id"), id("image_token_id")};
  }
  static GenerationRequest request(std::vector<int32_t> pre, std::vector<PromptImage> images,
                                   std::vector<int32_t> post, uint64_t seed = 1) {
    return testing::image_request(ids(), std::move(pre), std::move(images), std::move(post), 12, seed);
  }
  static std::vector<int32_t> text(int n, int salt) { return testing::text_ids(n, salt); }

  static inline core::ThreadPool* pool_ = nullptr;
  static inline model::Model* model_ = nullptr;
  static inline Json* prompt_ = nullptr;
  static inline PromptImage a_, b_, c_;
};

TEST_F(EngineImageTest, GreedyAnswerIsTheReferences) {
  Engine engine(*model_, EngineOptions{2, 256, 8, 64});
  GenerationRequest r;
  r.prompt = (*prompt_)["tokens"].get<std::vector<int32_t>>();
  r.images = {a_, b_};
  r.image_token = id("image_token_id");
  r.max_tokens = 8;
  r.sampling.temperature = 0.0f;
  const testing::EngineOut out = run(engine, std::move(r));
  ASSERT_EQ(out.finish, "length") << out.error;
  const auto want = (*prompt_)["continuation"].get<std::vector<int32_t>>();
  ASSERT_EQ(out.samples.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(out.samples[k].token, want[k]) << k;
}

TEST_F(EngineImageTest, ConcurrentEqualsSolo) {
  std::vector<GenerationRequest> reqs = {
      request(text(3, 1), {a_, b_}, text(4, 2), 1), request(text(70, 3), {b_}, text(9, 4), 2),
      request(text(5, 5), {c_}, text(60, 6), 3), request(text(20, 7), {}, text(8, 8), 4)};
  std::vector<testing::EngineOut> solo;
  for (const auto& r : reqs) {
    Engine alone(*model_, EngineOptions{1, 256, 8, 64});
    solo.push_back(run(alone, r));
    ASSERT_EQ(solo.back().finish, "length") << solo.back().error;
  }
  Engine engine(*model_, EngineOptions{4, 256, 8, 64});
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) {
    SubmitError err;
    std::string msg;
    streams.push_back(engine.submit(r, &err, &msg));
    ASSERT_TRUE(streams.back()) << msg;
  }
  for (size_t i = 0; i < reqs.size(); ++i) testing::expect_same_bits(testing::drain(*streams[i]), solo[i]);
}

TEST_F(EngineImageTest, ResumedEqualsFreshThroughTheImageOnly) {
  EngineOptions cached{2, 256, 8, 64};
  cached.cache_bytes = int64_t(64) << 20;
  cached.cache_interval = 64;
  Engine engine(*model_, cached);
  Engine fresh(*model_, EngineOptions{2, 256, 8, 64});
  // 70 text tokens, an image, 80 more: snapshots at 64 (before the image) and 128 (after it).
  const GenerationRequest with_b = request(text(70, 1), {b_}, text(80, 2));
  const testing::EngineOut first = run(engine, with_b);
  testing::expect_same_bits(first, run(fresh, with_b));
  const int64_t hit_before = engine.stats().cache.hit_tokens;
  testing::expect_same_bits(run(engine, with_b), first);
  EXPECT_GE(engine.stats().cache.hit_tokens - hit_before, 128);  // resumed through the image
  // The same ids with image C: only the text before the image may come from the cache.
  const GenerationRequest with_c = request(text(70, 1), {c_}, text(80, 2));
  const int64_t hit_c = engine.stats().cache.hit_tokens;
  const testing::EngineOut c_cached = run(engine, with_c);
  EXPECT_EQ(engine.stats().cache.hit_tokens - hit_c, 64);
  testing::expect_same_bits(c_cached, run(fresh, with_c));
}

TEST_F(EngineImageTest, DraftedEqualsPlain) {
  std::vector<int32_t> rep;
  for (int k = 0; k < 6; ++k) {
    const auto t = text(9, 3);
    rep.insert(rep.end(), t.begin(), t.end());
  }
  GenerationRequest plain = request(rep, {a_}, rep, 5);
  plain.sampling.temperature = 0.0f;
  GenerationRequest drafted = plain;
  drafted.spec = SpecOptions{SpecMethod::kLookup, 3};
  drafted.prediction = rep;
  Engine engine(*model_, EngineOptions{2, 512, 8, 64});
  const testing::EngineOut p = run(engine, plain);
  testing::expect_same_bits(run(engine, drafted), p);
  EXPECT_GT(engine.stats().accepted_tokens, 0);
}

TEST_F(EngineImageTest, ImagesThatDoNotFitThePromptAreRefused) {
  Engine engine(*model_, EngineOptions{1, 256, 8, 64});
  const auto refused = [&](GenerationRequest r, const char* what) {
    SubmitError err;
    std::string msg;
    EXPECT_FALSE(engine.submit(std::move(r), &err, &msg)) << what;
    EXPECT_EQ(err, SubmitError::kInvalid) << what;
    EXPECT_FALSE(msg.empty()) << what;
  };
  GenerationRequest missing = request(text(3, 1), {a_, b_}, text(3, 2));
  missing.images.pop_back();
  refused(missing, "more image tokens than images");
  GenerationRequest extra = request(text(3, 1), {a_}, text(3, 2));
  extra.images.push_back(b_);
  refused(extra, "an image without tokens");
  GenerationRequest rows = request(text(3, 1), {a_}, text(3, 2));
  rows.images[0].grid = {1, 4, 8};  // 8 tokens: the prompt has 6 and the rows are 6
  refused(rows, "rows and tokens that do not match the grid");
  GenerationRequest width = request(text(3, 1), {a_}, text(3, 2));
  width.images[0].rows = std::make_shared<const std::vector<float>>(a_.rows->begin(), a_.rows->end() - 1);
  refused(width, "rows of the wrong width");
  GenerationRequest video = request(text(3, 1), {a_}, text(3, 2));
  video.images[0].grid = {2, 4, 6};
  refused(video, "a video");
  // The engine still serves.
  EXPECT_EQ(run(engine, request(text(3, 1), {a_}, text(3, 2))).finish, "length");
}

}  // namespace
}  // namespace qwen35::runtime
