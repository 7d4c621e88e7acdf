// runtime::ImageEncoder on a random-weight checkpoint with a tower (`qwen35 synth --preset tiny`):
// a fixture PNG becomes the grid smart_resize gives (computed by hand below) and the patch rows
// the processor gives on its own (another pool), bit for bit, waiting for the engine's tower
// (tests/server/engine_tower_test.cc runs it); the same bytes hit the cache and share one
// PendingImage; other bytes or another processor give another hash; a text-only checkpoint says
// why not; bad bytes give the decoder's message.
#include "runtime/image_encoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "core/sha256.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/weights.h"
#include "test_util.h"

namespace qwen35::runtime {
namespace {

std::string image_bytes(const std::string& name) {
  return testing::read_file(testing::source_dir() + "/tests/fixtures/images/" + name);
}

std::unique_ptr<model::Model> synth_model(testing::TempDir& dir, const std::string& flags, core::ThreadPool* pool) {
  auto r = testing::run_qwen35("synth --preset tiny --quiet " + flags + " --out " + dir.file("m"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto w = model::load_weights(dir.file("m"));
  EXPECT_TRUE(w.ok()) << w.message();
  if (!w.ok()) return nullptr;
  return std::make_unique<model::Model>(std::move(*w), kernels::cpu_ops(), pool);
}

class ImageEncoderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir;
    pool_ = new core::ThreadPool(1);
    model_ = synth_model(*dir_, "", pool_).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete pool_;
    delete dir_;
  }
  static ImageEncoderOptions options() {
    ImageEncoderOptions o;
    o.threads = 2;
    auto p = read_processor_config(dir_->file("m"));
    EXPECT_TRUE(p.ok()) << p.message();
    EXPECT_TRUE(p.ok() && p->has_value());
    if (p.ok()) o.processor = *p;
    return o;
  }
  static testing::TempDir* dir_;
  static core::ThreadPool* pool_;
  static model::Model* model_;
};
testing::TempDir* ImageEncoderTest::dir_ = nullptr;
core::ThreadPool* ImageEncoderTest::pool_ = nullptr;
model::Model* ImageEncoderTest::model_ = nullptr;

TEST_F(ImageEncoderTest, PreparesAPngAsTheProcessorDoes) {
  ASSERT_NE(model_, nullptr);
  ImageEncoder enc(*model_, options());
  ASSERT_TRUE(enc.available()) << enc.why_not();
  const std::string bytes = image_bytes("png_rgb.png");  // 24 × 16
  auto im = enc.encode(bytes);
  ASSERT_TRUE(im.ok()) << im.message();
  // smart_resize(16, 24, factor 32, min 65536): 16·24 = 384 pixels are under the minimum, so
  // both sides grow by sqrt(65536 / 384) = 13.064 and round up to multiples of 32: 224 × 320,
  // a patch grid of 14 × 20 and (14/2)·(20/2) = 70 tokens.
  EXPECT_EQ(im->grid, (std::array<int64_t, 3>{1, 14, 20}));
  EXPECT_EQ(enc.tokens(*im), 70);
  EXPECT_EQ(im->rows, nullptr);  // the engine runs the tower
  ASSERT_NE(im->pending, nullptr);
  EXPECT_EQ(im->pending->rows(), nullptr);

  auto img = image::decode(bytes);
  ASSERT_TRUE(img.ok());
  auto patches = image::preprocess(*img, enc.processor());
  ASSERT_TRUE(patches.ok());
  EXPECT_EQ(im->pending->patches(), patches->rows);  // bit for bit: no pool changes a value
  EXPECT_EQ(im->pending->patch_values(), 14 * 20 * model_->config().vision.patch_dim());
}

TEST_F(ImageEncoderTest, SameBytesHitTheCache) {
  ImageEncoder enc(*model_, options());
  const std::string bytes = image_bytes("png_palette.png");
  auto a = enc.encode(bytes);
  ASSERT_TRUE(a.ok()) << a.message();
  auto b = enc.encode(std::string(bytes));  // another buffer, the same bytes
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->hash, b->hash);
  EXPECT_EQ(a->grid, b->grid);
  EXPECT_EQ(a->pending.get(), b->pending.get());  // one PendingImage: the tower runs once
  EXPECT_EQ(enc.stats().hits, 1);
  EXPECT_EQ(enc.stats().misses, 1);
  // The larger of the patch rows and the merged rows it will hold.
  const size_t merged = size_t(enc.tokens(*a) * model_->config().hidden);
  EXPECT_EQ(enc.stats().cached_bytes, std::max(merged, a->pending->patches().size()) * sizeof(float));

  // The hash: SHA-256's first 8 bytes, big-endian, over the processor settings and the bytes.
  // Whatever the settings' spelling, it is not the digest of the bytes alone (the processor is
  // in it) and it is the same for a second encoder with the same settings.
  const auto plain = core::sha256(bytes);
  uint64_t plain8 = 0;
  for (int i = 0; i < 8; ++i) plain8 = plain8 << 8 | plain[i];
  EXPECT_NE(a->hash, plain8);
  ImageEncoder again(*model_, options());
  EXPECT_EQ(again.encode(bytes)->hash, a->hash);
}

TEST_F(ImageEncoderTest, OtherBytesOrAnotherProcessorGiveAnotherHash) {
  ImageEncoder enc(*model_, options());
  auto a = enc.encode(image_bytes("png_rgb.png"));
  auto b = enc.encode(image_bytes("png_interlaced.png"));
  auto c = enc.encode(image_bytes("png_gray.png"));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_NE(a->hash, b->hash);
  EXPECT_NE(a->hash, c->hash);
  EXPECT_NE(b->hash, c->hash);
  EXPECT_EQ(enc.stats().misses, 3);

  ImageEncoderOptions o = options();
  o.processor->min_pixels = 2 * 65536;
  ImageEncoder other(*model_, o);
  auto d = other.encode(image_bytes("png_rgb.png"));
  ASSERT_TRUE(d.ok()) << d.message();
  EXPECT_NE(d->hash, a->hash);
  EXPECT_GT(other.tokens(*d), enc.tokens(*a));
}

TEST_F(ImageEncoderTest, TheCacheIsBoundedInBytes) {
  ImageEncoderOptions o = options();
  // One 14 × 20-patch image (its patch rows are larger than its 70 merged rows), not two.
  o.cache_bytes = 420 * size_t(model_->config().vision.patch_dim()) * sizeof(float);
  ImageEncoder enc(*model_, o);
  const std::string a = image_bytes("png_rgb.png"), b = image_bytes("png_gray.png");
  ASSERT_TRUE(enc.encode(a).ok());
  ASSERT_TRUE(enc.encode(b).ok());  // evicts a
  ASSERT_TRUE(enc.encode(a).ok());
  EXPECT_EQ(enc.stats().hits, 0);
  EXPECT_EQ(enc.stats().misses, 3);
  EXPECT_LE(enc.stats().cached_bytes, o.cache_bytes);
}

// An entry is charged the same bytes when it leaves as when it came, though the engine's tower
// run in between drops its patch rows for the (smaller) merged rows: the gauge stays the sum of
// what is held, and a repeated image hits however many images came before it.
TEST_F(ImageEncoderTest, TheCacheGivesBackWhatItCharged) {
  size_t one = 0;  // what one 24 × 16 fixture is charged (its patch rows: larger than its merged rows)
  {
    ImageEncoder alone(*model_, options());
    ASSERT_TRUE(alone.encode(image_bytes("png_rgb.png")).ok());
    one = alone.stats().cached_bytes;
  }
  ASSERT_GT(one, 0u);
  ImageEncoderOptions o = options();
  o.cache_bytes = 2 * one;
  ImageEncoder enc(*model_, o);
  const std::vector<std::string> names = {"png_rgb.png", "png_gray.png", "gif_plain.gif", "png_gray.png", "gif_plain.gif"};
  int64_t misses = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    auto im = enc.encode(image_bytes(names[i]));
    ASSERT_TRUE(im.ok()) << im.message();
    if (im->pending->patches().empty()) continue;  // a hit on an image whose tower has run
    ++misses;
    // What the engine does once the tower has run: the merged rows replace the patch rows.
    im->pending->set_rows(std::make_shared<const std::vector<float>>(
        size_t(enc.tokens(*im) * model_->config().hidden), 0.0f));
    EXPECT_LE(enc.stats().cached_bytes, o.cache_bytes) << names[i];
    auto again = enc.encode(image_bytes(names[i]));  // the conversation's next turn
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->pending, im->pending) << names[i] << " missed the cache";
  }
  // Three distinct images (of one size) through a cache of two: the gif evicts png_rgb alone,
  // and the two it keeps hit when they come again.
  EXPECT_EQ(misses, 3);
  EXPECT_EQ(enc.stats().cached_bytes, 2 * one);
  EXPECT_EQ(enc.stats().misses, 3);
}

TEST_F(ImageEncoderTest, ThreadsAtOnceGetTheSoloPatchRows) {
  ImageEncoder solo(*model_, options());
  const std::vector<std::string> names = {"png_rgb.png", "png_gray.png", "png_palette.png", "jpeg_rgb.jpg"};
  std::vector<std::vector<float>> want;
  for (const auto& n : names) want.push_back(solo.encode(image_bytes(n))->pending->patches());
  ImageEncoder shared(*model_, options());
  std::vector<std::vector<float>> got(names.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < names.size(); ++i)
    threads.emplace_back([&, i] { got[i] = shared.encode(image_bytes(names[i]))->pending->patches(); });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(got[i], want[i]) << names[i];
}

TEST_F(ImageEncoderTest, BadBytesGiveTheDecodersMessage) {
  ImageEncoder enc(*model_, options());
  const std::string png = image_bytes("png_rgb.png");
  auto truncated = enc.encode(png.substr(0, png.size() / 2));
  ASSERT_FALSE(truncated.ok());
  auto direct = image::decode(png.substr(0, png.size() / 2));
  ASSERT_FALSE(direct.ok());
  EXPECT_EQ(truncated.message(), direct.message());
  auto junk = enc.encode("this is not an image");
  ASSERT_FALSE(junk.ok());
  EXPECT_EQ(junk.message(), image::decode("this is not an image").message());
  auto bomb = enc.encode(image_bytes("bomb.png"));
  ASSERT_FALSE(bomb.ok());
  EXPECT_NE(bomb.message().find("more than the limit"), std::string::npos) << bomb.message();
  ImageEncoderOptions o = options();
  o.limits.max_bytes = 100;
  ImageEncoder small(*model_, o);
  auto big = small.encode(png);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.message().find("over the limit of 100"), std::string::npos) << big.message();
  EXPECT_EQ(enc.stats().hits + enc.stats().misses, 0);  // failures are neither
}

TEST(ImageEncoderTextOnly, SaysWhyNot) {
  testing::TempDir dir;
  core::ThreadPool pool(1);
  auto model = synth_model(dir, "--vision off", &pool);
  ASSERT_NE(model, nullptr);
  ImageEncoder enc(*model, ImageEncoderOptions{});
  EXPECT_FALSE(enc.available());
  ASSERT_FALSE(enc.why_not().empty());
  EXPECT_EQ(enc.why_not(), model->weights().vision_problem);
  auto r = enc.encode(image_bytes("png_rgb.png"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(), enc.why_not());
}

TEST_F(ImageEncoderTest, AProcessorThatDisagreesWithTheTowerIsRefused) {
  ImageEncoderOptions o = options();
  o.processor->patch_size = 14;
  ImageEncoder enc(*model_, o);
  EXPECT_FALSE(enc.available());
  EXPECT_NE(enc.why_not().find("patch_size is 14"), std::string::npos) << enc.why_not();
}

}  // namespace
}  // namespace qwen35::runtime
