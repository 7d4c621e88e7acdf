#include "runtime/prompt_layout.h"

#include <string>

#include "model/mrope.h"

namespace qwen35::runtime {
namespace {

// splitmix64's finalizer: each image token's key from its image's hash and its index.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

core::Result<PromptLayout> layout_prompt(const GenerationRequest& r, int64_t hidden, int64_t vocab) {
  if (r.image_token < 0 || r.image_token >= vocab)
    return core::error("the image token id " + std::to_string(r.image_token) + " is out of range");
  std::vector<std::array<int64_t, 3>> grids;
  for (const PromptImage& im : r.images) grids.push_back(im.grid);
  auto m = model::mrope_positions(r.prompt, r.image_token, grids, model::kSpatialMerge);
  if (!m.ok()) return core::error(m.message());
  PromptLayout l;
  l.positions = std::move(m->pos);
  l.rope_delta = m->delta;
  l.inputs.assign(r.prompt.size(), nullptr);
  l.cache_key = r.prompt;
  size_t image = 0;
  int64_t row = 0;
  for (size_t t = 0; t < r.prompt.size(); ++t) {
    if (r.prompt[t] != r.image_token) continue;
    const PromptImage& im = r.images[image];  // mrope_positions matched the runs to the images
    const int64_t tokens = (im.grid[1] / model::kSpatialMerge) * (im.grid[2] / model::kSpatialMerge);
    if (row == 0) {
      const auto rows = im.merged();
      if (rows ? int64_t(rows->size()) != tokens * hidden : !im.pending)
        return core::error("image " + std::to_string(image) + " has " + std::to_string(rows ? rows->size() : 0) +
                           " values for " + std::to_string(tokens) + " tokens of width " + std::to_string(hidden));
      l.images.push_back({int64_t(t), tokens, image});
    }
    l.cache_key[t] = -1 - int32_t(mix(im.hash ^ mix(uint64_t(row))) >> 33);
    if (++row == tokens) {
      row = 0;
      ++image;
    }
  }
  return l;
}

void bind_image(PromptLayout* l, const ImageSpan& span, const float* rows, int64_t hidden) {
  for (int64_t j = 0; j < span.tokens; ++j) l->inputs[size_t(span.first + j)] = rows + j * hidden;
}

}  // namespace qwen35::runtime
