// A generation request, as the engine takes it (runtime/engine.h).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/drafter.h"
#include "runtime/sampler.h"

namespace qwen35::runtime {

// An image of the prompt, already through the vision tower: its merged rows take the places of
// the prompt's image tokens, image after image in prompt order (docs/design.md "Images").
struct PromptImage {
  std::array<int64_t, 3> grid{};  // the patch grid (t = 1, h, w): (h/2)·(w/2) tokens
  uint64_t hash = 0;              // of the image's content: the prefix cache's key for its tokens
  std::shared_ptr<const std::vector<float>> rows;  // [tokens, hidden]
};

struct GenerationRequest {
  std::vector<int32_t> prompt;  // non-empty
  SamplingParams sampling;
  int64_t max_tokens = -1;       // -1: until end of sequence or the context is full; 0: read
                                 // the prompt only ("length", nothing sampled)
  std::vector<int32_t> eos_ids;  // a sampled id in this list ends the request ("stop")
  int32_t prompt_logprobs = -1;  // >= 0: log-probabilities of the prompt tokens (+ N top ones)
  // Prompt positions worth a prefix-cache snapshot (at the 64-token boundary below each),
  // besides the prompt's last boundary: where other prompts are likely to part from this one.
  std::vector<int64_t> snapshot_hints;
  std::optional<SpecOptions> spec;  // speculative decoding (unset: EngineOptions::spec)
  // Tokens the output is expected to repeat (OpenAI's predicted outputs): prompt lookup drafts
  // from them too. They change the speed only, never the output.
  std::vector<int32_t> prediction;
  // Images: the prompt's `image_token`s, in runs of each image's token count, stand for them.
  std::vector<PromptImage> images;
  int32_t image_token = -1;
};

}  // namespace qwen35::runtime
