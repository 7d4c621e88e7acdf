// A generation request, as the engine takes it (runtime/engine.h).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "runtime/drafter.h"
#include "runtime/sampler.h"

namespace qwen35::runtime {

// An image's patch rows waiting for the vision tower, and then its merged rows (docs/design.md
// "Images"). The engine runs the tower when a prompt's prefill reaches the image (never when
// the prefix cache holds the prompt past it), once for every prompt that shares this object
// (the choices of a request, the requests the ImageEncoder's cache answers).
// Thread-safety: rows() and bytes() from any thread; patches() and set_rows() on the engine
// thread only.
class PendingImage {
 public:
  explicit PendingImage(std::vector<float> patches)
      : values_(int64_t(patches.size())), patches_(std::move(patches)) {}
  int64_t patch_values() const { return values_; }  // the patch rows' size, from any thread
  std::shared_ptr<const std::vector<float>> rows() const {
    std::lock_guard<std::mutex> lock(mu_);
    return rows_;
  }
  const std::vector<float>& patches() const { return patches_; }  // until set_rows
  void set_rows(std::shared_ptr<const std::vector<float>> rows) {
    std::vector<float> gone;
    std::lock_guard<std::mutex> lock(mu_);
    rows_ = std::move(rows);
    gone.swap(patches_);  // the patch rows are not needed again
  }

 private:
  mutable std::mutex mu_;
  const int64_t values_;
  std::vector<float> patches_;  // [t·h·w, patch_dim]
  std::shared_ptr<const std::vector<float>> rows_;
};

// An image of the prompt: its merged rows take the places of the prompt's image tokens, image
// after image in prompt order (docs/design.md "Images").
struct PromptImage {
  std::array<int64_t, 3> grid{};  // the patch grid (t = 1, h, w): (h/2)·(w/2) tokens
  uint64_t hash = 0;              // of the image's content: the prefix cache's key for its tokens
  std::shared_ptr<const std::vector<float>> rows;  // [tokens, hidden]; null: `pending` has them
  std::shared_ptr<PendingImage> pending;           // the tower's input while `rows` is null
  // The merged rows when they are known (null: the tower has not run yet).
  std::shared_ptr<const std::vector<float>> merged() const {
    return rows ? rows : pending ? pending->rows() : nullptr;
  }
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
