// decode() against PIL: every file tools/fixtures/make_image_fixtures.py wrote with PIL's (or its
// own) encoders, in every mode and EXIF orientation, compared with the pixels transformers'
// pipeline gets from PIL (exif_transpose, convert_to_rgb).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "image/exif.h"
#include "image/image.h"
#include "image/pixels.h"
#include "image_fixtures.h"

namespace qwen35::image {
namespace {

using testing::fixture_bytes;
using testing::manifest;

TEST(ImageDecode, EveryFixtureEqualsPil) {
  int cases = 0;
  for (const auto& c : manifest()["decode"]) {
    const std::string name = c["file"];
    SCOPED_TRACE(name);
    auto img = decode(fixture_bytes(name));
    ASSERT_TRUE(img.ok()) << img.message();
    ASSERT_EQ(img->width, c["width"].get<int64_t>());
    ASSERT_EQ(img->height, c["height"].get<int64_t>());
    const std::string want = fixture_bytes(name + ".rgb");
    ASSERT_EQ(img->rgb.size(), want.size());
    int64_t differ = 0, worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const int d = std::abs(int{img->rgb[i]} - int{static_cast<uint8_t>(want[i])});
      differ += d != 0;
      worst = std::max<int64_t>(worst, d);
    }
    EXPECT_EQ(differ, 0) << "values differ (worst by " << worst << ")";
    ++cases;
  }
  EXPECT_EQ(cases, 48);  // every case of the manifest ran
}

// probe() reads the header alone: on every fixture it gives decode()'s size (the sides swapped
// where EXIF orientation swaps them), and a decode held to the probed pixel count succeeds; the
// bombs are refused by probe() with decode()'s own message.
TEST(ImageProbe, EveryFixtureAsDecodeSeesIt) {
  int cases = 0;
  for (const auto& c : manifest()["decode"]) {
    const std::string name = c["file"];
    SCOPED_TRACE(name);
    const std::string bytes = fixture_bytes(name);
    auto h = probe(bytes);
    ASSERT_TRUE(h.ok()) << h.message();
    const int64_t w = c["width"].get<int64_t>(), hh = c["height"].get<int64_t>();
    EXPECT_TRUE((h->width == w && h->height == hh) || (h->width == hh && h->height == w));
    EXPECT_TRUE(h->channels == 3 || h->channels == 4);
    EXPECT_GE(h->peak_bytes, w * hh * (h->channels + 3));
    ImageLimits held;
    held.max_pixels = h->width * h->height;
    EXPECT_TRUE(decode(bytes, held).ok());
    ++cases;
  }
  EXPECT_EQ(cases, 48);
  for (const char* bomb : {"bomb.png", "bomb.jpg", "bomb.webp", "bomb.gif"}) {
    SCOPED_TRACE(bomb);
    auto h = probe(fixture_bytes(bomb));
    auto d = decode(fixture_bytes(bomb));
    ASSERT_FALSE(h.ok());
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(h.message(), d.message());
  }
}

TEST(ImageDecode, FormatFromMagicBytesAlone) {
  EXPECT_EQ(*sniff_format(fixture_bytes("png_rgb.png")), Format::kPng);
  EXPECT_EQ(*sniff_format(fixture_bytes("jpeg_rgb.jpg")), Format::kJpeg);
  EXPECT_EQ(*sniff_format(fixture_bytes("webp_lossy.webp")), Format::kWebp);
  EXPECT_EQ(*sniff_format(fixture_bytes("gif_plain.gif")), Format::kGif);
  auto html = decode("<html><body>not an image</body></html>");
  ASSERT_FALSE(html.ok());
  EXPECT_EQ(html.message(),
            "not a PNG, JPEG, WebP or GIF image (it begins with bytes 3c 68 74 6d 6c 3e 3c 62)");
  auto bmp = decode(std::string("BM\x3e\0\0\0", 6));
  ASSERT_FALSE(bmp.ok());
  EXPECT_NE(bmp.message().find("not a PNG, JPEG, WebP or GIF"), std::string::npos);
  EXPECT_EQ(decode("").message(), "image is empty (0 bytes)");
  // A RIFF file of another kind (WAVE) is not WebP.
  EXPECT_FALSE(decode(std::string("RIFF\x04\0\0\0WAVE", 12)).ok());
}

// Hand-built TIFF blocks: a header, IFD0 with `entries` entries, orientation among them.
std::string tiff(bool little, uint16_t orientation, uint16_t type = 3, uint32_t count = 1) {
  auto u16 = [&](uint16_t v) {
    return little ? std::string{char(v & 255), char(v >> 8)}
                  : std::string{char(v >> 8), char(v & 255)};
  };
  auto u32 = [&](uint32_t v) {
    return little ? u16(v & 0xffff) + u16(v >> 16) : u16(v >> 16) + u16(v & 0xffff);
  };
  std::string t = little ? std::string("II*\0", 4) : std::string("MM\0*", 4);
  t += u32(8) + u16(2);
  t += u16(0x010f) + u16(2) + u32(4) + u32(0);                            // Make: skipped
  t += u16(0x0112) + u16(type) + u32(count) + u16(orientation) + u16(0);  // Orientation
  return t + u32(0);
}

TEST(ImageExif, OrientationTagOfEitherByteOrder) {
  for (int n = 1; n <= 8; ++n) {
    EXPECT_EQ(exif_orientation(tiff(true, n)), n);
    EXPECT_EQ(exif_orientation(tiff(false, n)), n);
    EXPECT_EQ(exif_orientation(std::string("Exif\0\0", 6) + tiff(true, n)), n);
  }
  EXPECT_EQ(exif_orientation(tiff(true, 9)), 1);        // out of range
  EXPECT_EQ(exif_orientation(tiff(true, 6, 4)), 1);     // LONG, not SHORT
  EXPECT_EQ(exif_orientation(tiff(true, 6, 3, 2)), 1);  // two values
  EXPECT_EQ(exif_orientation(""), 1);
  EXPECT_EQ(exif_orientation("XX*\0\x08\0\0\0"), 1);  // no byte order mark
  std::string t = tiff(true, 6);
  for (size_t n = 0; n < t.size(); ++n) {  // every cut: no read past the end
    const int o = exif_orientation(t.substr(0, n));
    EXPECT_TRUE(o == 1 || (o == 6 && n >= 30)) << n;
  }
  t[4] = '\xf0';  // IFD0 offset past the end
  EXPECT_EQ(exif_orientation(t), 1);
  t = tiff(true, 6);
  t[8] = '\xff';  // 255 entries claimed, 2 present
  t[9] = '\x00';
  EXPECT_EQ(exif_orientation(t), 6);  // found before the claimed entries run out
  t = tiff(true, 6);
  t[8] = '\xff';
  t[10 + 12 + 1] = '\x7f';  // the orientation entry's tag changed: the search runs off the end
  EXPECT_EQ(exif_orientation(t), 1);
}

// A 3 × 2 image whose pixels are labelled 0..5 in row-major order, and by hand what each
// orientation shows (PIL's exif_transpose: 6 turns the image 90° clockwise, 8 counter-clockwise).
TEST(ImageExif, EightTransformsByHand) {
  Image src{3, 2, {}};
  for (int i = 0; i < 6; ++i)
    src.rgb.insert(src.rgb.end(), {uint8_t(i), uint8_t(10 + i), uint8_t(20 + i)});
  struct Want {
    int64_t w, h;
    std::vector<int> labels;
  };
  // Source:  0 1 2
  //          3 4 5
  const Want want[9] = {{},
                        {3, 2, {0, 1, 2, 3, 4, 5}},
                        {3, 2, {2, 1, 0, 5, 4, 3}},
                        {3, 2, {5, 4, 3, 2, 1, 0}},
                        {3, 2, {3, 4, 5, 0, 1, 2}},
                        {2, 3, {0, 3, 1, 4, 2, 5}},
                        {2, 3, {3, 0, 4, 1, 5, 2}},
                        {2, 3, {5, 2, 4, 1, 3, 0}},
                        {2, 3, {2, 5, 1, 4, 0, 3}}};
  for (int o = 1; o <= 8; ++o) {
    const Image out = apply_orientation(src, o);
    ASSERT_EQ(out.width, want[o].w) << o;
    ASSERT_EQ(out.height, want[o].h) << o;
    for (size_t i = 0; i < 6; ++i) {
      EXPECT_EQ(out.rgb[i * 3], want[o].labels[i]) << "orientation " << o << " pixel " << i;
      EXPECT_EQ(out.rgb[i * 3 + 2], 20 + want[o].labels[i]);
    }
  }
}

TEST(ImagePixels, CompositeOnWhiteByHand) {
  // (v·a + 255·(255 − a)) / 255, rounded.
  const uint8_t rgba[] = {0, 100, 255, 0, 0, 100, 255, 255, 0, 100, 255, 128, 10, 20, 30, 1};
  uint8_t rgb[12];
  composite_on_white(rgba, 4, rgb);
  const uint8_t want[] = {255, 255, 255, 0, 100, 255, 127, 177, 255, 254, 254, 254};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(rgb[i], want[i]) << i;
}

}  // namespace
}  // namespace qwen35::image
