// Encoded image bytes (PNG, JPEG, WebP, GIF) from an untrusted client, decoded to RGB8.
//
// The format is found from the magic bytes, never from a declared MIME type. Every bound of
// ImageLimits is checked from the header before a pixel is decoded, so a decompression bomb is
// refused after reading a few bytes. Alpha is composited on white and EXIF orientation is
// applied, as the reference pipeline does (transformers' load_image + convert_to_rgb). A failure is
// one line a server can return in a 400: "PNG: image is truncated".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace qwen35::image {

// Row-major RGB8: rgb[(y * width + x) * 3 + c].
struct Image {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> rgb;
};

struct ImageLimits {
  size_t max_bytes = size_t{20} << 20;  // encoded size
  int64_t max_pixels = 50'000'000;      // width · height as the header declares it
  // The longer side over the shorter one. The processor's smart_resize refuses a ratio over 200
  // (transformers' rule), so a larger one could never reach the model.
  double max_aspect_ratio = 200;
  int max_jpeg_scans = 256;  // a progressive JPEG of many tiny scans costs CPU per scan
};

enum class Format { kPng, kJpeg, kWebp, kGif };
const char* format_name(Format f);  // "PNG", "JPEG", "WebP", "GIF"

// The format named by the first bytes; an error names what the bytes look like instead.
core::Result<Format> sniff_format(std::string_view bytes);

core::Result<Image> decode(std::string_view bytes, const ImageLimits& limits = {});

// What an image will cost, from its header alone (no pixel decoded): its size as decode()
// returns it before EXIF orientation (which may swap the sides, never the area), the channels of
// the raster the decoder fills (4 with alpha), and the bytes decoding holds at its peak: that
// raster, the RGB image and its oriented copy, and the decoder library's own working memory.
// Errors are decode()'s for the same header ("PNG: image has 7000 × 7000 pixels, more than
// the limit ..."). decode() under limits whose max_pixels is this width × height never holds
// more pixels than the probe counted.
struct ImageHeader {
  Format format = Format::kPng;
  int64_t width = 0;
  int64_t height = 0;
  int channels = 3;
  int64_t peak_bytes = 0;
};
core::Result<ImageHeader> probe(std::string_view bytes, const ImageLimits& limits = {});

}  // namespace qwen35::image
