// A generation request, as the engine takes it (runtime/engine.h).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/drafter.h"
#include "runtime/sampler.h"

namespace qwen35::runtime {

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
};

}  // namespace qwen35::runtime
