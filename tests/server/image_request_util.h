// Engine requests with images for the engine-level image tests (engine_image_test.cc,
// engine_tower_test.cc): text ids, then each image between its markers, then more text.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/generation_request.h"

namespace qwen35::testing {

struct ImageTokenIds {
  int32_t start = -1, end = -1, pad = -1;  // vision_start, vision_end, image_token
};

// `pre`, each image as start + (h/2)·(w/2) pads + end, then `post`; sampled at temperature 0.8
// with `seed`, two logprobs a token.
inline runtime::GenerationRequest image_request(const ImageTokenIds& ids, std::vector<int32_t> pre,
                                                std::vector<runtime::PromptImage> images, std::vector<int32_t> post,
                                                int64_t max_tokens, uint64_t seed) {
  runtime::GenerationRequest r;
  r.prompt = std::move(pre);
  for (const runtime::PromptImage& im : images) {
    r.prompt.push_back(ids.start);
    r.prompt.insert(r.prompt.end(), size_t(im.grid[1] / 2 * (im.grid[2] / 2)), ids.pad);
    r.prompt.push_back(ids.end);
  }
  r.prompt.insert(r.prompt.end(), post.begin(), post.end());
  r.images = std::move(images);
  r.image_token = ids.pad;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.8f;
  r.sampling.seed = seed;
  r.sampling.logprobs = 2;
  return r;
}

// n text ids of the tiny vocabularies, varied by `salt`.
inline std::vector<int32_t> text_ids(int n, int salt) {
  std::vector<int32_t> t;
  for (int k = 0; k < n; ++k) t.push_back(int32_t((k * 7 + salt * 13) % 400 + 10));
  return t;
}

}  // namespace qwen35::testing
