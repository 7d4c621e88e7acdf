// decode(): the format from the magic bytes, the decoder of that format (png.cc, jpeg.cc, webp.cc,
// gif.cc), then what every format shares: alpha composited on white, EXIF orientation.
#include "image/image.h"

#include <cstdio>
#include <new>
#include <string>

#include "image/codec.h"
#include "image/exif.h"
#include "image/pixels.h"

namespace qwen35::image {

const char* format_name(Format f) {
  switch (f) {
    case Format::kPng:
      return "PNG";
    case Format::kJpeg:
      return "JPEG";
    case Format::kWebp:
      return "WebP";
    case Format::kGif:
      return "GIF";
  }
  return "?";
}

core::Result<Format> sniff_format(std::string_view b) {
  if (b.empty()) return core::error("image is empty (0 bytes)");
  if (b.substr(0, 8) == "\x89PNG\r\n\x1a\n") return Format::kPng;
  if (b.substr(0, 3) == "\xff\xd8\xff") return Format::kJpeg;
  if (b.size() >= 12 && b.substr(0, 4) == "RIFF" && b.substr(8, 4) == "WEBP") return Format::kWebp;
  if (b.substr(0, 6) == "GIF87a" || b.substr(0, 6) == "GIF89a") return Format::kGif;
  std::string first;
  for (size_t i = 0; i < b.size() && i < 8; ++i) {
    char hex[4];
    std::snprintf(hex, sizeof hex, "%s%02x", i ? " " : "", static_cast<unsigned char>(b[i]));
    first += hex;
  }
  return core::error("not a PNG, JPEG, WebP or GIF image (it begins with bytes " + first + ")");
}

namespace detail {

core::Status check_dimensions(int64_t width, int64_t height, const ImageLimits& limits) {
  const std::string dims = std::to_string(width) + " × " + std::to_string(height) + " pixels";
  if (width <= 0 || height <= 0) return core::error("image is empty (" + dims + ")");
  // Both are at most 2^32 in every format, so the product fits in int64.
  if (width * height > limits.max_pixels) {
    return core::error("image has " + dims + ", more than the limit of " +
                       std::to_string(limits.max_pixels));
  }
  const double ratio = width > height ? static_cast<double>(width) / static_cast<double>(height)
                                      : static_cast<double>(height) / static_cast<double>(width);
  if (ratio > limits.max_aspect_ratio) {
    char limit[32];
    std::snprintf(limit, sizeof limit, "%g", limits.max_aspect_ratio);
    return core::error("image has " + dims + ": the aspect ratio is over " + limit);
  }
  return core::ok_status();
}

}  // namespace detail

namespace {

core::Result<detail::Raster> decode_raster(Format f, std::string_view bytes,
                                           const ImageLimits& limits) {
  switch (f) {
    case Format::kPng:
      return detail::decode_png(bytes, limits);
    case Format::kJpeg:
      return detail::decode_jpeg(bytes, limits);
    case Format::kWebp:
      return detail::decode_webp(bytes, limits);
    case Format::kGif:
      return detail::decode_gif(bytes, limits);
  }
  return core::error("unknown format");
}

Image to_rgb(detail::Raster r) {
  Image img;
  img.width = r.width;
  img.height = r.height;
  const int64_t n = r.width * r.height;
  if (r.channels == 3) {
    img.rgb = std::move(r.pixels);
  } else {
    // In place: pixel i's 3 output bytes end at or before its 4 input bytes begin.
    composite_on_white(r.pixels.data(), n, r.pixels.data());
    r.pixels.resize(static_cast<size_t>(n * 3));
    img.rgb = std::move(r.pixels);
  }
  return img;
}

core::Result<detail::Raster> probe_raster(Format f, std::string_view bytes, const ImageLimits& limits,
                                          int64_t* working) {
  switch (f) {
    case Format::kPng:
      return detail::probe_png(bytes, limits, working);
    case Format::kJpeg:
      return detail::probe_jpeg(bytes, limits, working);
    case Format::kWebp:
      return detail::probe_webp(bytes, limits, working);
    case Format::kGif:
      return detail::probe_gif(bytes, limits, working);
  }
  return core::error("unknown format");
}

}  // namespace

core::Result<ImageHeader> probe(std::string_view bytes, const ImageLimits& limits) {
  if (bytes.size() > limits.max_bytes) {
    return core::error("image is " + std::to_string(bytes.size()) +
                       " bytes, more than the limit of " + std::to_string(limits.max_bytes));
  }
  QWEN35_ASSIGN_OR_RETURN(const Format f, sniff_format(bytes));
  try {
    int64_t working = 0;
    auto raster = probe_raster(f, bytes, limits, &working);
    if (!raster.ok()) return raster.status().with_context(format_name(f));
    ImageHeader h;
    h.format = f;
    h.width = raster->width;
    h.height = raster->height;
    h.channels = raster->channels;
    // The raster (RGB made from it in place), then an oriented copy beside it, and the library's
    // working memory while the raster fills.
    const int64_t pixels = h.width * h.height;
    h.peak_bytes = pixels * h.channels + pixels * 3 + working;
    return h;
  } catch (const std::bad_alloc&) {
    return core::error(std::string(format_name(f)) + ": out of memory reading the header");
  }
}

core::Result<Image> decode(std::string_view bytes, const ImageLimits& limits) {
  if (bytes.size() > limits.max_bytes) {
    return core::error("image is " + std::to_string(bytes.size()) +
                       " bytes, more than the limit of " + std::to_string(limits.max_bytes));
  }
  QWEN35_ASSIGN_OR_RETURN(const Format f, sniff_format(bytes));
  try {
    auto raster = decode_raster(f, bytes, limits);
    if (!raster.ok()) return raster.status().with_context(format_name(f));
    const int orientation = exif_orientation(raster->exif);
    return apply_orientation(to_rgb(std::move(raster).value()), orientation);
  } catch (const std::bad_alloc&) {
    return core::error(std::string(format_name(f)) + ": out of memory decoding the image");
  }
}

}  // namespace qwen35::image
