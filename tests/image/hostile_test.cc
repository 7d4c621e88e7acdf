// decode() on what a hostile or careless client sends: decompression bombs (refused from the
// header, before pixel memory is allocated), degenerate sizes, cut files, corrupt bytes, too many
// bytes, wrong magic. Each is an error naming the problem, never a crash.
#include <gtest/gtest.h>

#include <string>

#include "alloc_hook.h"
#include "image/image.h"
#include "image/processor.h"
#include "image_fixtures.h"
#include "malloc_probe.h"

namespace qwen35::image {
namespace {

using testing::fixture_bytes;
using testing::manifest;

TEST(ImageHostile, BombsAndDegenerateSizesRefusedFromTheHeader) {
  for (const auto& c : manifest()["hostile"]) {
    const std::string name = c["file"];
    const std::string bytes = fixture_bytes(name);
    // Any allocation of 16 MiB or more through operator new (the pixel buffers) would fail and
    // turn the answer into "out of memory": the refusal must come before.
    const int64_t failed = qwen35::testing::failed_allocations();
    qwen35::testing::fail_next_allocation(16u << 20);
    testing::reset_largest_allocation();
    auto img = decode(bytes);
    const size_t largest = testing::largest_allocation();
    qwen35::testing::allow_allocations();
    // And the libraries' own mallocs stay small: no pixel buffer, no row of the declared width.
    if (testing::malloc_probe_active()) {
      EXPECT_LT(largest, 1u << 20) << name;
    }
    ASSERT_FALSE(img.ok()) << name;
    EXPECT_NE(img.message().find(c["expect"].get<std::string>()), std::string::npos)
        << name << ": " << img.message();
    EXPECT_EQ(qwen35::testing::failed_allocations(), failed) << name;
  }
}

// The probe sees the allocations it is meant to bound: a 64 × 64 RGBA decode holds its pixels.
TEST(ImageHostile, MallocProbeSeesPixelBuffers) {
  if (!testing::malloc_probe_active()) GTEST_SKIP() << "malloc belongs to the sanitizer";
  testing::reset_largest_allocation();
  ASSERT_TRUE(decode(fixture_bytes("png_alpha_all.png")).ok());
  EXPECT_GE(testing::largest_allocation(), 64u * 64 * 4);
}

TEST(ImageHostile, LimitsAreTheCallers) {
  const std::string png = fixture_bytes("png_rgb.png");  // 24 × 16
  ImageLimits limits;
  limits.max_pixels = 383;
  EXPECT_EQ(decode(png, limits).message(),
            "PNG: image has 24 × 16 pixels, more than the limit of 383");
  limits.max_pixels = 384;
  EXPECT_TRUE(decode(png, limits).ok());
  limits.max_aspect_ratio = 1.4;
  EXPECT_EQ(decode(png, limits).message(),
            "PNG: image has 24 × 16 pixels: the aspect ratio is over 1.4");
  limits = {};
  limits.max_bytes = png.size() - 1;
  EXPECT_EQ(decode(png, limits).message(), "image is " + std::to_string(png.size()) +
                                               " bytes, more than the limit of " +
                                               std::to_string(png.size() - 1));
  EXPECT_EQ(decode(std::string(21u << 20, '\x89')).message(),
            "image is 22020096 bytes, more than the limit of 20971520");
  limits = {};
  limits.max_jpeg_scans = 2;
  EXPECT_EQ(decode(fixture_bytes("jpeg_progressive.jpg"), limits).message(),
            "JPEG: more than 2 progressive scans");
  EXPECT_TRUE(decode(fixture_bytes("jpeg_rgb.jpg"), limits).ok());  // baseline: one scan
}

TEST(ImageHostile, ZeroSizedImages) {
  std::string gif = fixture_bytes("gif_plain.gif");
  gif.replace(6, 4, std::string(4, '\0'));  // logical screen 0 × 0
  EXPECT_EQ(decode(gif).message(), "GIF: image is empty (0 × 0 pixels)");
  std::string jpg = fixture_bytes("jpeg_rgb.jpg");
  const size_t sof = jpg.find("\xff\xc0");
  ASSERT_NE(sof, std::string::npos);
  jpg.replace(sof + 5, 2, std::string(2, '\0'));  // height 0
  EXPECT_NE(decode(jpg).message().find("JPEG: Empty JPEG image"), std::string::npos)
      << decode(jpg).message();
}

// Every proper prefix of a valid file is an error; once past the signature, a cut one.
TEST(ImageHostile, EveryTruncationIsAnError) {
  for (const char* name :
       {"png_rgb.png", "png_interlaced.png", "png_orient_6.png", "jpeg_rgb.jpg",
        "jpeg_progressive.jpg", "webp_lossy.webp", "webp_alpha.webp", "webp_anim.webp",
        "gif_plain.gif", "gif_anim.gif", "gif_interlaced.gif"}) {
    const std::string full = fixture_bytes(name);
    ASSERT_TRUE(decode(full).ok()) << name;
    for (size_t n = 0; n < full.size(); ++n) {
      auto img = decode(full.substr(0, n));
      ASSERT_FALSE(img.ok()) << name << " cut to " << n << " bytes";
      if (n >= 16) {
        EXPECT_NE(img.message().find("image is truncated"), std::string::npos)
            << name << " cut to " << n << " bytes: " << img.message();
      }
    }
  }
}

// Each byte of small files inverted in turn: an image or an error, never a crash (this runs under
// AddressSanitizer in scripts/test). Corruption the format checks for is an error.
TEST(ImageHostile, CorruptBytes) {
  for (const char* name : {"png_palette_trns.png", "jpeg_gray.jpg", "webp_lossless.webp",
                           "webp_lossy_alpha.webp", "gif_trns.gif"}) {
    const std::string full = fixture_bytes(name);
    for (size_t i = 0; i < full.size(); ++i) {
      std::string bad = full;
      bad[i] = static_cast<char>(~bad[i]);
      auto img = decode(bad);
      if (!img.ok()) {
        EXPECT_FALSE(img.message().empty());
      } else {
        EXPECT_EQ(img->rgb.size(), static_cast<size_t>(img->width * img->height * 3));
      }
    }
  }
  const std::string png = fixture_bytes("png_rgb.png");
  const size_t idat = png.find("IDAT");
  std::string bad = png;
  bad[idat + 10] = static_cast<char>(~bad[idat + 10]);  // inside the zlib stream
  EXPECT_EQ(decode(bad).message().rfind("PNG: IDAT: ", 0), 0u) << decode(bad).message();
  bad = png;
  const size_t crc = idat + 4 + ((uint8_t(png[idat - 2]) << 8) | uint8_t(png[idat - 1]));
  bad[crc] = static_cast<char>(~bad[crc]);
  EXPECT_EQ(decode(bad).message(), "PNG: IDAT: CRC error");
}

// A decoded hostile image still goes through the processor with small limits.
TEST(ImageHostile, TinyDecodedImagesPreprocess) {
  auto img = decode(fixture_bytes("png_gray1.png"));
  ASSERT_TRUE(img.ok()) << img.message();
  auto p = preprocess(*img, ProcessorConfig{});
  ASSERT_TRUE(p.ok()) << p.message();
  // 24 × 16 rounds to 32 × 0, under min_pixels: β = √(65536/384) = 13.06, ⌈16β/32⌉ = 7 and
  // ⌈24β/32⌉ = 10 blocks of 32: 320 × 224.
  EXPECT_EQ(p->grid_h, 14);
  EXPECT_EQ(p->grid_w, 20);
}

}  // namespace
}  // namespace qwen35::image
