// Text generation for the terminal: feeds tokens to one sequence, samples, streams the decoded
// text through stop strings, and keeps timing for the closing line. Used by `qwen35 run`.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "model/model.h"
#include "runtime/sampler.h"
#include "tokenizer/tokenizer.h"

namespace qwen35::cli {

struct GenerationStats {
  int64_t prompt_tokens = 0;
  double prompt_seconds = 0;
  int64_t generated_tokens = 0;
  double generation_seconds = 0;
  std::string finish_reason;  // "stop", "length", "interrupted"
};

class Generation {
 public:
  Generation(model::Model& model, const tokenizer::Tokenizer& tok, int64_t ctx);

  // Tokens already in the sequence state (prompt and generated), in order.
  const std::vector<int32_t>& history() const { return history_; }
  void reset();

  // Feeds `prompt` (appended to the history), then generates until an end-of-sequence id, a stop
  // string, `max_tokens`, a full context, or *interrupt. Text goes to `emit` as it is decided.
  core::Result<GenerationStats> run(std::span<const int32_t> prompt, const runtime::SamplingParams& sp,
                                    const std::vector<int32_t>& eos_ids, const std::vector<std::string>& stops,
                                    int64_t max_tokens, const std::atomic<bool>* interrupt,
                                    const std::function<void(const std::string&)>& emit);

 private:
  model::Model& model_;
  const tokenizer::Tokenizer& tok_;
  std::unique_ptr<model::SequenceState> state_;
  std::vector<int32_t> history_;
  std::vector<float> logits_;
};

}  // namespace qwen35::cli
