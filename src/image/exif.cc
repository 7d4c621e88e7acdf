#include "image/exif.h"

#include <cstdint>

namespace qwen35::image {
namespace {

struct TiffReader {
  std::string_view b;
  bool little;
  bool u16(size_t at, uint32_t* v) const {
    if (at > b.size() || b.size() - at < 2) return false;
    const auto p = reinterpret_cast<const uint8_t*>(b.data()) + at;
    *v = little ? (p[0] | p[1] << 8) : (p[0] << 8 | p[1]);
    return true;
  }
  bool u32(size_t at, uint32_t* v) const {
    if (at > b.size() || b.size() - at < 4) return false;
    const auto p = reinterpret_cast<const uint8_t*>(b.data()) + at;
    *v = little
             ? (uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24)
             : (uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]});
    return true;
  }
};

constexpr uint32_t kOrientationTag = 0x0112;
constexpr uint32_t kTypeShort = 3;

}  // namespace

int exif_orientation(std::string_view tiff) {
  if (tiff.substr(0, 6) == std::string_view("Exif\0\0", 6)) tiff.remove_prefix(6);
  if (tiff.size() < 8) return 1;
  TiffReader r{tiff, false};
  if (tiff.substr(0, 4) == std::string_view("II*\0", 4)) {
    r.little = true;
  } else if (tiff.substr(0, 4) != std::string_view("MM\0*", 4)) {
    return 1;
  }
  uint32_t ifd = 0, count = 0;
  if (!r.u32(4, &ifd) || !r.u16(ifd, &count)) return 1;
  // 12 bytes per entry: tag, type, count (u32), value or offset (4 bytes).
  for (uint32_t i = 0; i < count; ++i) {
    const size_t entry = size_t{ifd} + 2 + size_t{i} * 12;
    uint32_t tag = 0, type = 0, n = 0, value = 0;
    if (!r.u16(entry, &tag) || !r.u16(entry + 2, &type) || !r.u32(entry + 4, &n)) return 1;
    if (tag != kOrientationTag) continue;
    // A SHORT with count 1 sits in the first two bytes of the value field.
    if (type != kTypeShort || n != 1 || !r.u16(entry + 8, &value)) return 1;
    return value >= 1 && value <= 8 ? static_cast<int>(value) : 1;
  }
  return 1;
}

}  // namespace qwen35::image
