// Internal to image/: what each format's decoder hands back to decode() (image.cc), and the
// checks they share.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "image/image.h"

namespace qwen35::image::detail {

// 8-bit pixels, row-major, `channels` per pixel: 3 (RGB) or 4 (RGBA, not premultiplied).
struct Raster {
  int64_t width = 0;
  int64_t height = 0;
  int channels = 3;
  std::vector<uint8_t> pixels;
  std::string exif;  // the TIFF-structured EXIF block if the file has one ("" otherwise)
};

// Refuses an empty image, one over limits.max_pixels and one over limits.max_aspect_ratio, from
// the dimensions a header declares (before any pixel memory is allocated).
core::Status check_dimensions(int64_t width, int64_t height, const ImageLimits& limits);

// Each decoder's messages omit the format name: decode() prefixes it ("PNG: ...").
// probe_*: the header alone, through the same stages as decode_* up to its first pixel (so
// every error a header can cause is worded the same): a Raster without pixels, its width,
// height and channels as decode_* will return them, and in *working the bytes the library
// itself holds while decoding beyond the raster (progressive JPEG coefficients, GIF indices).
core::Result<Raster> decode_png(std::string_view bytes, const ImageLimits& limits);
core::Result<Raster> decode_jpeg(std::string_view bytes, const ImageLimits& limits);
core::Result<Raster> decode_webp(std::string_view bytes, const ImageLimits& limits);
core::Result<Raster> decode_gif(std::string_view bytes, const ImageLimits& limits);
core::Result<Raster> probe_png(std::string_view bytes, const ImageLimits& limits, int64_t* working);
core::Result<Raster> probe_jpeg(std::string_view bytes, const ImageLimits& limits, int64_t* working);
core::Result<Raster> probe_webp(std::string_view bytes, const ImageLimits& limits, int64_t* working);
core::Result<Raster> probe_gif(std::string_view bytes, const ImageLimits& limits, int64_t* working);

inline constexpr const char* kTruncated = "image is truncated";

}  // namespace qwen35::image::detail
