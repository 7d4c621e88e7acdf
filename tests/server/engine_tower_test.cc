// The vision tower inside the engine's steps (docs/design.md "Images"), on the tiny image-text
// checkpoint of tests/fixtures/vision/prompt_tiny: an image handed over as patch rows
// (PendingImage) gets the reference's answer and the bits of its rows encoded beforehand; a
// large image is spread over steps, one stage a step when a stage costs more than the step's
// budget, while another request decodes a token in every one of those steps; an image the
// prefix cache holds the prompt past is never encoded; choices that share an image encode it
// once.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <deque>

#include "core/random.h"
#include "core/thread_pool.h"
#include "engine_drain.h"
#include "stepper_drive.h"
#include "image_request_util.h"
#include "formats/npy.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/vision.h"
#include "model/weights.h"
#include "runtime/engine.h"
#include "runtime/stepper.h"
#include "test_util.h"

namespace qwen35::runtime {
namespace {

using Json = nlohmann::json;

class EngineTowerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing::source_dir() + "/tests/fixtures/vision/prompt_tiny";
    auto w = model::load_weights(dir_ + "/ckpt");
    ASSERT_TRUE(w.ok()) << w.message();
    pool_ = new core::ThreadPool(2);
    model_ = new model::Model(std::move(*w), kernels::cpu_ops(), pool_);
    ASSERT_TRUE(model_->has_vision());
    prompt_ = new Json(Json::parse(testing::read_file(dir_ + "/prompt.json")));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete pool_;
    delete prompt_;
  }

  static int32_t id(const char* key) { return (*prompt_)[key].get<int32_t>(); }
  static int64_t patch_dim() { return model_->weights().vision->config.patch_dim(); }

  // The fixture's two images as patch rows, the tower still to run.
  static std::vector<PromptImage> fixture_images() {
    const formats::NpyArray p = *formats::read_npy(dir_ + "/patches.npy");
    const int64_t d = patch_dim();
    EXPECT_EQ(int64_t(p.data.size()), (24 + 60) * d);
    return {pending({1, 4, 6}, 11, std::vector<float>(p.data.begin(), p.data.begin() + 24 * d)),
            pending({1, 6, 10}, 22, std::vector<float>(p.data.begin() + 24 * d, p.data.end()))};
  }
  static PromptImage pending(std::array<int64_t, 3> grid, uint64_t hash, std::vector<float> patches) {
    PromptImage im;
    im.grid = grid;
    im.hash = hash;
    im.pending = std::make_shared<PendingImage>(std::move(patches));
    return im;
  }
  // The same image with its rows from Model::encode_image, in one call.
  static PromptImage encoded(const PromptImage& im) {
    const int64_t tokens = im.grid[1] / 2 * (im.grid[2] / 2);
    auto rows = std::make_shared<std::vector<float>>(size_t(tokens * model_->config().hidden));
    EXPECT_TRUE(model_->encode_image(im.pending->patches().data(), im.grid[0], im.grid[1], im.grid[2], rows->data()).ok());
    return PromptImage{im.grid, im.hash, rows, nullptr};
  }
  // A square image of side × side patches with random patch rows.
  static PromptImage random_image(int64_t side, uint64_t seed) {
    core::Xoshiro256 rng(seed);
    std::vector<float> v(size_t(side * side * patch_dim()));
    for (float& x : v) x = float(rng.uniform()) * 2 - 1;
    return pending({1, side, side}, seed, std::move(v));
  }
  static GenerationRequest request(std::vector<int32_t> pre, std::vector<PromptImage> images,
                                   std::vector<int32_t> post, int64_t max_tokens, uint64_t seed = 1) {
    const testing::ImageTokenIds ids{id("vision_start_token_id"), id("vision_end_token_id"), id("image_token_id")};
    return testing::image_request(ids, std::move(pre), std::move(images), std::move(post), max_tokens, seed);
  }
  static std::vector<int32_t> text(int n, int salt) { return testing::text_ids(n, salt); }

  static inline std::string dir_;
  static inline core::ThreadPool* pool_ = nullptr;
  static inline model::Model* model_ = nullptr;
  static inline Json* prompt_ = nullptr;
};

TEST_F(EngineTowerTest, PatchRowsGiveTheReferenceAnswer) {
  Engine engine(*model_, EngineOptions{2, 256, 8, 64});
  GenerationRequest r;
  r.prompt = (*prompt_)["tokens"].get<std::vector<int32_t>>();
  r.images = fixture_images();
  r.image_token = id("image_token_id");
  r.max_tokens = 8;
  r.sampling.temperature = 0.0f;
  const testing::EngineOut out = testing::run(engine, r);
  ASSERT_EQ(out.finish, "length") << out.error;
  const auto want = (*prompt_)["continuation"].get<std::vector<int32_t>>();
  ASSERT_EQ(out.samples.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(out.samples[k].token, want[k]) << k;
  EXPECT_EQ(engine.stats().images_encoded, 2);
  // The bits of the same prompt with the rows encoded beforehand, in one call per image.
  const std::vector<PromptImage> fresh = fixture_images();
  GenerationRequest pre = r;
  pre.images = {encoded(fresh[0]), encoded(fresh[1])};
  testing::expect_same_bits(testing::run(engine, pre), out);
  EXPECT_EQ(engine.stats().images_encoded, 2);  // rows given: no tower run
}

using testing::admit;
using testing::collect;
using testing::Driven;

TEST_F(EngineTowerTest, ALargeImageIsSpreadOverStepsWithinTheirBudgetWhileOthersDecode) {
  // 64 × 64 patches: each block's attention alone costs about a hundred steps' budgets of
  // prompt-token multiply-adds, so the image is spread over many steps, each running no more
  // tower work than the step's budget leaves (counted in the planner's own units).
  const PromptImage big = random_image(64, 7);
  const GenerationRequest decoding = request(text(10, 1), {}, {}, 600, 3);
  const GenerationRequest with_image = request(text(5, 2), {big}, text(6, 3), 4, 4);
  EngineOptions eo{2, 2048, 8, 64};
  Stepper st(*model_, eo);
  Driven a, b;
  admit(st, decoding, &a);
  {
    StepOutput out;  // the decoding request's prompt, and its first token
    st.step(&out);
    collect(out, {&a});
    ASSERT_EQ(a.out.samples.size(), 1u);
  }
  admit(st, with_image, &b);
  // The step's budget of work, in multiply-adds × 2; the decoding request's row takes its part.
  const double budget = st.step_budget();
  const model::VisionTower tower(*model_->weights().vision, kernels::cpu_ops());
  const int64_t n = 64 * 64;
  double whole = 0;
  for (int64_t s = 0; s < tower.depth() + 2; ++s)
    for (int64_t p = 0; p < (s >= 1 && s <= tower.depth() ? 2 : 1); ++p) whole += double(n) * tower.row_flops({0, s, p, 0}, n);
  ASSERT_GT(whole, 50 * budget);
  int64_t tower_steps = 0, total_stages = 0;
  double total_flops = 0, most = 0;
  while (st.running()) {
    StepOutput out;
    const size_t before = a.out.samples.size();
    st.step(&out);
    collect(out, {&a, &b});
    if (out.tower_flops == 0) continue;
    ++tower_steps;
    total_stages += out.tower_stages;
    total_flops += out.tower_flops;
    most = std::max(most, out.tower_flops);
    EXPECT_LE(out.work_flops, budget) << "step " << tower_steps << " ran more work than its budget";
    // The rows of the step: the decoding request's one row, counted with its attention.
    const double row = out.work_flops - out.tower_flops;
    EXPECT_GT(row, model_->token_flops());
    EXPECT_LT(row, model_->token_flops() + double(eo.ctx) * model_->row_cost().key);
    EXPECT_EQ(a.out.samples.size(), before + 1) << "the decoding request waited for the tower";
    ASSERT_TRUE(a.out.finish.empty()) << "the decoding request ended before the image: make it longer";
  }
  EXPECT_EQ(total_stages, model_->image_stages_per_frame());
  EXPECT_NEAR(total_flops, whole, 1e-9 * whole);
  EXPECT_GE(double(tower_steps), whole / budget);
  EXPECT_GE(most, 0.75 * budget) << "the steps did not use their budget";
  std::printf("  %lld tower steps, at most %.3g of a budget of %.3g multiply-adds x 2\n", (long long)tower_steps, most,
              budget);
  ASSERT_EQ(b.out.finish, "length") << b.out.error;
  // Each request's bits are its own: the decoding one alone, the image one with its rows
  // encoded in one call beforehand.
  while (st.running()) {
    StepOutput out;
    st.step(&out);
    collect(out, {&a});
  }
  ASSERT_EQ(a.out.finish, "length") << a.out.error;
  Engine alone(*model_, EngineOptions{1, 2048, 8, 64});
  testing::expect_same_bits(a.out, testing::run(alone, decoding));
  GenerationRequest pre = with_image;
  pre.images = {encoded(random_image(64, 7))};
  testing::expect_same_bits(b.out, testing::run(alone, pre));
}

TEST_F(EngineTowerTest, AnImageTheCacheHoldsIsNeverEncoded) {
  EngineOptions cached{1, 512, 8, 64};
  cached.cache_bytes = int64_t(64) << 20;
  cached.cache_interval = 64;
  Engine engine(*model_, cached);
  // 70 text tokens, image B (15 tokens), 80 more: snapshots at 64 and 128 (past the image).
  const GenerationRequest first = request(text(70, 1), {fixture_images()[1]}, text(80, 2), 6);
  const testing::EngineOut one = testing::run(engine, first);
  ASSERT_EQ(one.finish, "length") << one.error;
  EXPECT_EQ(engine.stats().images_encoded, 1);
  // The same image as new patch rows (another PendingImage, the same content hash): the
  // prompt resumes past it, so the tower does not run, and the answer has the same bits.
  const GenerationRequest again = request(text(70, 1), {fixture_images()[1]}, text(80, 2), 6);
  testing::expect_same_bits(testing::run(engine, again), one);
  EXPECT_EQ(engine.stats().images_encoded, 1);
  EXPECT_FALSE(again.images[0].pending->rows());
}

TEST_F(EngineTowerTest, ChoicesSharingAnImageEncodeItOnce) {
  Engine engine(*model_, EngineOptions{3, 256, 8, 64});
  const std::vector<PromptImage> images = fixture_images();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    SubmitError err;
    std::string msg;
    streams.push_back(engine.submit(request(text(3, 1), images, text(4, 2), 6, seed), &err, &msg));
    ASSERT_TRUE(streams.back()) << msg;
  }
  std::vector<testing::EngineOut> outs;
  for (auto& s : streams) outs.push_back(testing::drain(*s));
  EXPECT_EQ(engine.stats().images_encoded, 2);
  // Each has the bits it gets alone.
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Engine alone(*model_, EngineOptions{1, 256, 8, 64});
    testing::expect_same_bits(outs[seed - 1], testing::run(alone, request(text(3, 1), fixture_images(), text(4, 2), 6, seed)));
  }
}

TEST_F(EngineTowerTest, PatchRowsThatDoNotFitTheGridAreRefused) {
  Engine engine(*model_, EngineOptions{1, 256, 8, 64});
  PromptImage im = fixture_images()[0];
  im.pending = std::make_shared<PendingImage>(std::vector<float>(size_t(23 * patch_dim())));
  SubmitError err;
  std::string msg;
  EXPECT_FALSE(engine.submit(request(text(3, 1), {im}, text(4, 2), 4), &err, &msg));
  EXPECT_NE(msg.find("patch values"), std::string::npos) << msg;
}

}  // namespace
}  // namespace qwen35::runtime
