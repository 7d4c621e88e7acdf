// preprocess() against transformers' slow Qwen2VLImageProcessor, written out with PIL and numpy
// by tools/fixtures/make_image_fixtures.py; smart_resize and the row order against hand-computed
// cases; resize_bicubic against PIL's Image.resize(BICUBIC).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/thread_pool.h"
#include "formats/npy.h"
#include "image/processor.h"
#include "image/resample.h"
#include "image_fixtures.h"

namespace qwen35::image {
namespace {

using testing::fixture_bytes;
using testing::fixture_path;
using testing::manifest;
using testing::procedural;

TEST(ImageSmartResize, HandComputed) {
  using P = std::pair<int64_t, int64_t>;
  // 1080/32 = 33.75 -> 34·32; 1920/32 = 60: inside [min, max].
  EXPECT_EQ(*smart_resize(1080, 1920, 32, 65536, 16777216), P(1088, 1920));
  // 48/32 = 1.5 and 80/32 = 2.5 both round to even (Python's round): 2·32 each.
  EXPECT_EQ(*smart_resize(48, 80, 32, 1, 16777216), P(64, 64));
  // Rounds to 0: under min_pixels, β = √(65536/100) = 25.6, ⌈10·25.6/32⌉ = 8 -> 256.
  EXPECT_EQ(*smart_resize(10, 10, 32, 65536, 16777216), P(256, 256));
  // 4992² is over max: β = √(25·10⁶/2²⁴) = 5000/4096, ⌊4096/32⌋·32 = 4096.
  EXPECT_EQ(*smart_resize(5000, 5000, 32, 65536, 16777216), P(4096, 4096));
  // Ratio exactly 200 is allowed: β = √(65536/200), ⌈β/32⌉ = 1, ⌈200β/32⌉ = ⌈113.14⌉ = 114.
  EXPECT_EQ(*smart_resize(1, 200, 32, 65536, 16777216), P(32, 3648));
  EXPECT_EQ(*smart_resize(91, 37, 32, 1024, 4096), P(96, 32));
  auto wide = smart_resize(1, 201, 32, 65536, 16777216);
  ASSERT_FALSE(wide.ok());
  EXPECT_EQ(wide.message(), "image has 201 × 1 pixels: the aspect ratio is over 200");
}

TEST(ImageResize, EqualsPilBicubic) {
  for (const auto& c : manifest()["resize"]) {
    const Image src = procedural(c["width"], c["height"]);
    const Image out = resize_bicubic(src, c["out_width"], c["out_height"]);
    const std::string want = fixture_bytes(c["expected"]);
    ASSERT_EQ(out.rgb.size(), want.size());
    int64_t differ = 0, worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const int d = std::abs(int{out.rgb[i]} - int{static_cast<uint8_t>(want[i])});
      differ += d != 0;
      worst = std::max<int64_t>(worst, d);
    }
    EXPECT_LE(worst, 1) << c.dump();
    EXPECT_EQ(differ, 0) << c.dump() << ": " << differ << " values differ by 1";
  }
  // The same size is a copy (PIL returns one without filtering).
  const Image src = procedural(7, 5);
  EXPECT_EQ(resize_bicubic(src, 7, 5).rgb, src.rgb);
}

TEST(ImagePreprocess, EqualsTransformersSlowProcessor) {
  for (const auto& c : manifest()["preprocess"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    auto config = parse_processor_config_json(c["config"]);
    ASSERT_TRUE(config.ok()) << config.message();
    auto patches = preprocess(procedural(c["width"], c["height"]), *config);
    ASSERT_TRUE(patches.ok()) << patches.message();
    EXPECT_EQ(patches->grid_t, c["grid"][0].get<int64_t>());
    EXPECT_EQ(patches->grid_h, c["grid"][1].get<int64_t>());
    EXPECT_EQ(patches->grid_w, c["grid"][2].get<int64_t>());
    auto want = formats::read_npy(fixture_path(c["rows"]));
    ASSERT_TRUE(want.ok()) << want.message();
    ASSERT_EQ(want->shape,
              (std::vector<int64_t>{patches->grid_h * patches->grid_w, config->row_size()}));
    ASSERT_EQ(patches->rows.size(), want->data.size());
    // One level of the 8-bit resize, through rescale and normalize.
    const float min_std = *std::min_element(config->image_std.begin(), config->image_std.end());
    const double tol = 1.0 / 255.0 / min_std + 1e-6;
    double worst = 0;
    for (size_t i = 0; i < want->data.size(); ++i) {
      worst = std::max(worst, std::fabs(double{patches->rows[i]} - double{want->data[i]}));
    }
    EXPECT_LE(worst, tol);
  }
}

// The row order of vision_common.md by hand: an 8 × 4 image, patch 2, merge 2, no resize and no
// scaling, so each value is its pixel's label (y·8 + x)·3 + c. grid 2 × 4 patches: merge block
// bw = 0 holds patches (0,0) (0,1) (1,0) (1,1) as rows 0..3, block bw = 1 holds (0,2) (0,3) (1,2)
// (1,3) as rows 4..7.
TEST(ImagePreprocess, RowOrderByHand) {
  Image img{8, 4, {}};
  for (int i = 0; i < 8 * 4 * 3; ++i) img.rgb.push_back(static_cast<uint8_t>(i));
  auto config = parse_processor_config(
      R"({"patch_size": 2, "merge_size": 2, "temporal_patch_size": 2, "do_resize": false,
          "do_rescale": false, "do_normalize": false})");
  ASSERT_TRUE(config.ok()) << config.message();
  auto p = preprocess(img, *config);
  ASSERT_TRUE(p.ok()) << p.message();
  ASSERT_EQ(p->grid_h, 2);
  ASSERT_EQ(p->grid_w, 4);
  ASSERT_EQ(config->row_size(), 3 * 2 * 2 * 2);
  auto at = [&](int row, int c, int t, int py, int px) {
    return p->rows[static_cast<size_t>(row * 24 + ((c * 2 + t) * 2 + py) * 2 + px)];
  };
  EXPECT_EQ(at(0, 0, 0, 0, 0), 0);     // patch (0,0): pixel (0,0)
  EXPECT_EQ(at(1, 0, 0, 0, 0), 6);     // patch (0,1): pixel (2,0)
  EXPECT_EQ(at(2, 0, 0, 0, 0), 48);    // patch (1,0): pixel (0,2)
  EXPECT_EQ(at(3, 2, 1, 1, 1), 83);    // patch (1,1): pixel (3,3), c 2, second frame
  EXPECT_EQ(at(4, 0, 0, 0, 0), 12);    // patch (0,2): pixel (4,0)
  EXPECT_EQ(at(5, 0, 0, 0, 0), 18);    // patch (0,3): pixel (6,0)
  EXPECT_EQ(at(5, 1, 1, 1, 1), 46);    // patch (0,3): pixel (7,1), c 1
  EXPECT_EQ(at(7, 0, 0, 1, 0), 90);    // patch (1,3): pixel (6,3)
  for (int row = 0; row < 8; ++row) {  // the two frames are the same image
    for (int c = 0; c < 3; ++c) EXPECT_EQ(at(row, c, 0, 1, 0), at(row, c, 1, 1, 0));
  }
}

// Threads split rows, never a value's arithmetic: the same bits with any pool, downscaling and
// upscaling.
TEST(ImagePreprocess, SameBitsOnAnyPool) {
  const Image img = procedural(210, 97);
  ProcessorConfig down, up;
  down.min_pixels = 1024;
  down.max_pixels = 8192;
  up.min_pixels = 40000;
  up.max_pixels = 65536;
  for (const ProcessorConfig& c : {down, up}) {
    auto solo = preprocess(img, c);
    ASSERT_TRUE(solo.ok()) << solo.message();
    for (int threads : {2, 3, 4}) {
      core::ThreadPool pool(threads);
      auto p = preprocess(img, c, &pool);
      ASSERT_TRUE(p.ok()) << p.message();
      ASSERT_EQ(p->rows.size(), solo->rows.size());
      EXPECT_EQ(std::memcmp(p->rows.data(), solo->rows.data(), p->rows.size() * sizeof(float)), 0)
          << threads << " threads";
    }
  }
}

TEST(ImagePreprocess, RefusesWhatTheProcessorCannotTake) {
  const ProcessorConfig config;
  auto wide = preprocess(procedural(250, 1), config);
  ASSERT_FALSE(wide.ok());
  EXPECT_EQ(wide.message(), "image has 250 × 1 pixels: the aspect ratio is over 200");
  EXPECT_FALSE(preprocess(Image{}, config).ok());
  ProcessorConfig fixed = config;
  fixed.do_resize = false;
  EXPECT_NE(preprocess(procedural(40, 32), fixed).message().find("multiples of 32"),
            std::string::npos);
}

TEST(ImageProcessorConfig, Qwen35FileGivesTheDefaults) {
  // Qwen3.5's preprocessor_config.json as published.
  auto c = parse_processor_config(R"({
    "size": {"longest_edge": 16777216, "shortest_edge": 65536},
    "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
    "processor_class": "Qwen3VLProcessor", "image_processor_type": "Qwen2VLImageProcessorFast"})");
  ASSERT_TRUE(c.ok()) << c.message();
  const ProcessorConfig d;
  EXPECT_EQ(c->patch_size, d.patch_size);
  EXPECT_EQ(c->min_pixels, 65536);
  EXPECT_EQ(c->max_pixels, 16777216);
  EXPECT_EQ(c->image_mean, d.image_mean);
  EXPECT_EQ(c->factor(), 32);
  EXPECT_EQ(c->row_size(), 1536);
  EXPECT_DOUBLE_EQ(c->rescale_factor, 1.0 / 255.0);
  // Top-level min/max_pixels override "size" (transformers' backward compatibility); a combined
  // processor_config.json nests the image processor.
  auto o = parse_processor_config(
      R"({"image_processor": {"size": {"shortest_edge": 10, "longest_edge": 20},
                                       "min_pixels": 3136, "max_pixels": 1003520}})");
  ASSERT_TRUE(o.ok()) << o.message();
  EXPECT_EQ(o->min_pixels, 3136);
  EXPECT_EQ(o->max_pixels, 1003520);
  auto scalar = parse_processor_config(R"({"image_mean": 0.25, "image_std": 2})");
  ASSERT_TRUE(scalar.ok()) << scalar.message();
  EXPECT_EQ(scalar->image_std[2], 2.0f);
}

TEST(ImageProcessorConfig, BadValuesNameTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"patch_size": 0})", "'patch_size' must be an integer in [1, 256], got 0"},
      {R"({"merge_size": "2"})", "'merge_size' must be an integer"},
      {R"({"image_std": [0.5, 0, 0.5]})", "'image_std' must be 3 finite numbers, none zero"},
      {R"({"image_mean": [0.5, 0.5]})", "'image_mean' must be 3 finite numbers"},
      {R"({"resample": 2})", "'resample' is 2: only bicubic (3) is implemented"},
      {R"({"size": {"shortest_edge": 5000, "longest_edge": 4000}})",
       "min_pixels 5000 is over max_pixels 4000"},
      {R"({"max_pixels": 1e12})", "'max_pixels' must be an integer"},
      {R"({"size": 7})", "'size' must be an object"},
      {R"({"rescale_factor": -1})", "'rescale_factor' must be a positive number"},
      {R"([1, 2])", "not a JSON object"},
      {R"({"patch_size": )", "not valid JSON"},
  };
  for (const auto& [text, want] : cases) {
    auto c = parse_processor_config(std::string_view(text));
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_NE(c.message().find(want), std::string::npos) << c.message();
    EXPECT_EQ(c.message().rfind("preprocessor config", 0), 0u) << c.message();
  }
}

}  // namespace
}  // namespace qwen35::image
