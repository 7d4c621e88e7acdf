// The fixtures tools/fixtures/make_image_fixtures.py writes into tests/fixtures/images/ (its
// manifest.json lists them), and the procedural image that script and these tests both compute.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "image/image.h"
#include "test_util.h"

namespace qwen35::image::testing {

inline std::string fixture_path(const std::string& name) {
  return qwen35::testing::source_dir() + "/tests/fixtures/images/" + name;
}

inline std::string fixture_bytes(const std::string& name) {
  return qwen35::testing::read_file(fixture_path(name));
}

inline const nlohmann::json& manifest() {
  static const nlohmann::json m = nlohmann::json::parse(fixture_bytes("manifest.json"));
  return m;
}

// The script's procedural(): ((x·37 + y·91 + c·71) xor (x·y)) & 255.
inline Image procedural(int64_t w, int64_t h) {
  Image img{w, h, std::vector<uint8_t>(static_cast<size_t>(w * h * 3))};
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      for (int64_t c = 0; c < 3; ++c) {
        img.rgb[static_cast<size_t>((y * w + x) * 3 + c)] =
            static_cast<uint8_t>(((x * 37 + y * 91 + c * 71) ^ (x * y)) & 255);
      }
    }
  }
  return img;
}

}  // namespace qwen35::image::testing
