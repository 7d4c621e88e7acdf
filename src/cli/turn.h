// One request of `qwen35 run` on the engine, seen from the terminal: the sampled tokens become
// text (tokenizer::StreamDecoder) and pass through the stop strings (tokenizer::StopMatcher) to a
// sink; a completed stop string or an interrupt (Ctrl-C) cancels the request. Sampling, EOS,
// context capacity and chunking are the engine's.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "core/result.h"
#include "runtime/engine.h"
#include "tokenizer/tokenizer.h"

namespace qwen35::cli {

// What the closing line shows.
struct TurnStats {
  int64_t prompt_tokens = 0;  // computed; tokens resumed from the prefix cache are not counted
  double prompt_seconds = 0;
  int64_t generated_tokens = 0;  // tokens whose text was shown (or held back by a stop string)
  double generation_seconds = 0;
  std::string finish_reason;  // "stop", "length", "interrupted"
  int64_t drafted = 0, accepted = 0;  // speculative decoding
};

// Submits `req`, streams its text to `emit` until it ends, then returns. Text after a stop string
// or an interrupt is never shown; what the decoder and the matcher hold back is flushed as a
// completed generation would. Fails when the engine refuses the request or reports an error.
core::Result<TurnStats> run_turn(runtime::Engine& engine, runtime::GenerationRequest req,
                                 const tokenizer::Tokenizer& tok,
                                 const std::vector<std::string>& stops,
                                 const std::atomic<bool>& interrupt,
                                 const std::function<void(const std::string&)>& emit);

}  // namespace qwen35::cli
