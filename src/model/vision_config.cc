#include "model/vision_config.h"

#include <cmath>

namespace qwen35::model {

namespace {

core::Status reject(const std::string& field, int64_t value, const std::string& why) {
  return core::error("[vision] unsupported: vision_config '" + field + "' = " + std::to_string(value) + ": " + why);
}

core::Status positive(const char* field, int64_t v) {
  if (v <= 0) return reject(field, v, "must be positive");
  if (v > (int64_t(1) << 20)) return reject(field, v, "is implausibly large");
  return core::Status();
}

}  // namespace

core::Result<VisionConfig> make_vision_config(const formats::HfVisionConfig& v, int64_t text_hidden) {
  if (!v.error.empty()) return core::error(v.error);
  if (!v.deepstack_visual_indexes.empty())
    return core::error("[vision] unsupported: vision_config 'deepstack_visual_indexes' has " +
                       std::to_string(v.deepstack_visual_indexes.size()) +
                       " entries: DeepStack towers (Qwen3-VL) are not supported");
  VisionConfig c;
  c.depth = v.depth;
  c.hidden = v.hidden_size;
  c.intermediate = v.intermediate_size;
  c.n_heads = v.num_heads;
  c.in_channels = v.in_channels;
  c.patch = v.patch_size;
  c.temporal = v.temporal_patch_size;
  c.merge = v.spatial_merge_size;
  c.out_hidden = v.out_hidden_size;
  QWEN35_RETURN_IF_ERROR(positive("depth", c.depth));
  QWEN35_RETURN_IF_ERROR(positive("hidden_size", c.hidden));
  QWEN35_RETURN_IF_ERROR(positive("intermediate_size", c.intermediate));
  QWEN35_RETURN_IF_ERROR(positive("num_heads", c.n_heads));
  QWEN35_RETURN_IF_ERROR(positive("out_hidden_size", c.out_hidden));
  if (c.hidden % c.n_heads != 0)
    return reject("num_heads", c.n_heads, "does not divide hidden_size (" + std::to_string(c.hidden) + ")");
  c.head_dim = c.hidden / c.n_heads;
  if (c.head_dim % 4 != 0)
    return reject("hidden_size", c.hidden,
                  "gives head_dim " + std::to_string(c.head_dim) +
                      ": the 2-D rotary embedding needs a multiple of 4 (two halves of rotate-half pairs)");
  if (c.in_channels != 3) return reject("in_channels", c.in_channels, "images are RGB: expected 3");
  if (c.patch != 16) return reject("patch_size", c.patch, "Qwen3.5 towers have 16");
  if (c.temporal != 2) return reject("temporal_patch_size", c.temporal, "Qwen3.5 towers have 2");
  if (c.merge != 2) return reject("spatial_merge_size", c.merge, "Qwen3.5 towers have 2");
  const int64_t side = int64_t(std::llround(std::sqrt(double(v.num_position_embeddings))));
  if (v.num_position_embeddings <= 0 || side * side != v.num_position_embeddings || side < 2)
    return reject("num_position_embeddings", v.num_position_embeddings, "must be a square of at least 4 (a square grid)");
  c.grid_side = side;
  if (v.hidden_act == "gelu_pytorch_tanh") c.tanh_gelu = true;
  else if (v.hidden_act == "gelu") c.tanh_gelu = false;
  else
    return core::error("[vision] unsupported: vision_config 'hidden_act' = \"" + v.hidden_act +
                       "\": expected gelu_pytorch_tanh or gelu");
  if (c.out_hidden != text_hidden)
    return reject("out_hidden_size", c.out_hidden,
                  "differs from the text model's hidden_size (" + std::to_string(text_hidden) + ")");
  return c;
}

}  // namespace qwen35::model
