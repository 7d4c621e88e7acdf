#include "model/mrope.h"

#include <algorithm>
#include <string>

namespace qwen35::model {

core::Result<MropePositions> mrope_positions(std::span<const int32_t> tokens, int32_t image_token,
                                            std::span<const std::array<int64_t, 3>> grids,
                                            int64_t merge) {
  MropePositions m;
  m.pos.reserve(tokens.size() * 3);
  const int64_t T = int64_t(tokens.size());
  int64_t s = 0;
  size_t image = 0;
  for (int64_t k = 0; k < T;) {
    if (tokens[size_t(k)] != image_token) {
      m.pos.insert(m.pos.end(), {s, s, s});
      ++s;
      ++k;
      continue;
    }
    if (image == grids.size())
      return core::error("the prompt has more image tokens than its " + std::to_string(grids.size()) +
                         " image(s) fill");
    const auto [gt, gh, gw] = grids[image];
    if (gt != 1) return core::error("image " + std::to_string(image) + " has " + std::to_string(gt) +
                                    " frames: video is not supported");
    if (merge <= 0 || gh <= 0 || gw <= 0 || gh % merge != 0 || gw % merge != 0)
      return core::error("image " + std::to_string(image) + "'s grid " + std::to_string(gh) + " × " +
                         std::to_string(gw) + " is not a multiple of the merge size");
    const int64_t h = gh / merge, w = gw / merge;
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < w; ++j, ++k) {
        if (k >= T || tokens[size_t(k)] != image_token)
          return core::error("image " + std::to_string(image) + " needs " + std::to_string(h * w) +
                             " image tokens in a row; the prompt has fewer");
        m.pos.insert(m.pos.end(), {s, s + i, s + j});
      }
    s += std::max(h, w);
    ++image;
  }
  if (image != grids.size())
    return core::error("the prompt has image tokens for " + std::to_string(image) + " of its " +
                       std::to_string(grids.size()) + " images");
  m.delta = s - T;
  return m;
}

}  // namespace qwen35::model
