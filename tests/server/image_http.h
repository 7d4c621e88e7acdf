// Helpers of the image-over-HTTP tests: fixture images as base64 (the test's own encoder, RFC
// 4648), the content parts each API takes, and a random-weight checkpoint with a vision tower.
#pragma once

#include <string>

#include "server_process.h"

namespace qwen35::testing {

inline std::string base64(const std::string& bytes) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = uint32_t(uint8_t(bytes[i])) << 16 | uint32_t(uint8_t(bytes[i + 1])) << 8 | uint8_t(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += a[(v >> s) & 63];
  }
  if (i + 1 == bytes.size()) {
    const uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    out += a[(v >> 18) & 63], out += a[(v >> 12) & 63], out += "==";
  } else if (i + 2 == bytes.size()) {
    const uint32_t v = uint32_t(uint8_t(bytes[i])) << 16 | uint32_t(uint8_t(bytes[i + 1])) << 8;
    out += a[(v >> 18) & 63], out += a[(v >> 12) & 63], out += a[(v >> 6) & 63], out += '=';
  }
  return out;
}

inline std::string image_file(const std::string& name) {
  return read_file(source_dir() + "/tests/fixtures/images/" + name);
}

inline std::string data_url(const std::string& bytes, const std::string& media = "image/png") {
  return "data:" + media + ";base64," + base64(bytes);
}

// OpenAI chat's part.
inline Json chat_image(const std::string& bytes) {
  return {{"type", "image_url"}, {"image_url", {{"url", data_url(bytes)}, {"detail", "low"}}}};
}
inline Json text_part(const std::string& t) { return {{"type", "text"}, {"text", t}}; }

// `qwen35 synth --preset tiny` (with a tower unless `flags` says otherwise) into dir/m.
inline std::string synth_vlm(TempDir& dir, const std::string& flags = "") {
  auto r = run_qwen35("synth --preset tiny --quiet " + flags + " --out " + dir.file("m"));
  return r.exit_code == 0 ? dir.file("m") : "";
}

// Image tokens of the fixtures, by hand: smart_resize(h, w, factor 32, min_pixels 65536) scales
// a small image up by sqrt(65536 / (h·w)) and rounds each side up to a multiple of 32.
//   24 × 16 (png_rgb, png_gray, gif_plain): 320 × 224, patches 20 × 14, tokens 10 · 7 = 70
//   40 × 24 (jpeg_rgb, webp_lossy):         352 × 224, patches 22 × 14, tokens 11 · 7 = 77
inline constexpr int64_t kTokens24x16 = 70, kTokens40x24 = 77;

}  // namespace qwen35::testing
