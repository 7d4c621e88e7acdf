// Multimodal rotary positions of a prompt with images (Qwen3.5's get_rope_index): which
// (temporal, height, width) position each token's rotary embedding turns by.
//
// A running start s begins at 0. A text token (vision start/end markers included) is at
// (s, s, s), then s += 1. An image's tokens — its merged grid (h/m)·(w/m) in row-major order,
// the merger's order — are at (s, s + i, s + j), then s += max(h/m, w/m): the text after an
// image continues from the image's largest position + 1. Decoding continues from the last s
// on every axis: generated token k (KV position T + k) is at T + k + delta, delta = s − T.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "core/result.h"

namespace qwen35::model {

// The tower's spatial merge: each 2 × 2 block of patches is one token (every Qwen3.5 tower).
inline constexpr int64_t kSpatialMerge = 2;

struct MropePositions {
  std::vector<int64_t> pos;  // [T, 3]: temporal, height, width of each token
  int64_t delta = 0;         // next position − T
};

// `grids`: each image's patch grid (t, h, w) in prompt order, t = 1 (video is refused); its
// tokens are the next (h/merge)·(w/merge) `image_token`s of the prompt. Fails when the prompt's
// image tokens do not match the grids.
core::Result<MropePositions> mrope_positions(std::span<const int32_t> tokens, int32_t image_token,
                                            std::span<const std::array<int64_t, 3>> grids,
                                            int64_t merge);

}  // namespace qwen35::model
