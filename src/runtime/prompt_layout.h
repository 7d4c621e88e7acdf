// What a prompt with images needs besides its ids (docs/design.md "Images"): each token's
// multimodal rotary positions, its input row (an image's merged tower row, or its own
// embedding), and the prefix cache's key, in which each image token is an id drawn from its
// image's content hash (negative, so never a vocabulary id): prompts with other images at the
// same places share no cached state past the first image that differs, and a prompt that repeats
// an image resumes through it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/result.h"
#include "runtime/generation_request.h"

namespace qwen35::runtime {

// Where an image's tokens are in the prompt.
struct ImageSpan {
  int64_t first = 0, tokens = 0;
  size_t image = 0;  // index into GenerationRequest::images
  int64_t end() const { return first + tokens; }
};

struct PromptLayout {
  std::vector<int64_t> positions;    // [T, 3]
  // [T]: a row of [hidden] floats, or null (the token's own embedding); an image's tokens are
  // null until bind_image gives them its merged rows.
  std::vector<const float*> inputs;
  std::vector<int32_t> cache_key;    // [T]
  int64_t rope_delta = 0;            // decode rows turn at KV position + rope_delta
  std::vector<ImageSpan> images;     // in prompt order
};

// Fails with a message for the client when the images do not fit the prompt (their token runs,
// row counts and widths, video frames, the image token, an image with neither rows nor patches).
core::Result<PromptLayout> layout_prompt(const GenerationRequest& r, int64_t hidden, int64_t vocab);
// Points the inputs of span's tokens at `rows` ([span.tokens, hidden], kept alive by the caller).
void bind_image(PromptLayout* l, const ImageSpan& span, const float* rows, int64_t hidden);

}  // namespace qwen35::runtime
