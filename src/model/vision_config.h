// The Qwen3.5 vision tower's configuration and its support gate (docs/design.md, "Vision
// tower"): a ViT over 16×16×2 patches with a learned 48×48 position table, 2-D rotary
// attention, and a 2×2 patch merger into the text model's hidden size. Qwen3-VL's DeepStack
// towers (features taken from middle layers) are refused by name.
#pragma once

#include <cstdint>
#include <string>

#include "core/result.h"
#include "formats/hf_config.h"

namespace qwen35::model {

struct VisionConfig {
  int64_t depth = 0;         // vision blocks
  int64_t hidden = 0;        // the tower's width
  int64_t intermediate = 0;  // its MLP
  int64_t n_heads = 0;
  int64_t head_dim = 0;      // hidden / n_heads: even, a multiple of 4 (2-D rotary halves)
  int64_t in_channels = 3;
  int64_t patch = 16;        // pixels per patch side
  int64_t temporal = 2;      // frames per patch (an image is two identical frames)
  int64_t merge = 2;         // merge × merge patches become one token
  int64_t out_hidden = 0;    // the merger's output: the text model's hidden size
  int64_t grid_side = 48;    // the position table is grid_side² rows
  double eps = 1e-6;         // LayerNorm epsilon (fixed in the model code)
  double rope_theta = 1e4;   // the 2-D rotary base (fixed in the model code)
  bool tanh_gelu = true;     // block MLP: gelu_pytorch_tanh (the merger's GELU is the erf form)
  // Root keys: the placeholder token an image's features replace, and its delimiters.
  int64_t image_token_id = -1, video_token_id = -1, vision_start_token_id = -1, vision_end_token_id = -1;

  // Values in one patch row: C·T·P·P, in (C, T, P, P) order.
  int64_t patch_dim() const { return in_channels * temporal * patch * patch; }
  // Width of a merged token before the merger's MLP: merge² rows side by side.
  int64_t merged_dim() const { return hidden * merge * merge; }
  int64_t n_positions() const { return grid_side * grid_side; }
};

// The support gate for vision_config: admitted, or one line naming the field and why. The text
// model's hidden size must equal out_hidden_size.
core::Result<VisionConfig> make_vision_config(const formats::HfVisionConfig& v, int64_t text_hidden);

}  // namespace qwen35::model
