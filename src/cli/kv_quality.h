// qwen35 logits --kl-text FILE --kv-type T: how far a KV cache type moves the model's next-token
// distributions from the f32 cache's, on a text at a depth.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/model_loader.h"

namespace qwen35::cli {

struct KvQualityOptions {
  std::string text_file;
  int64_t depth = 0;     // tokens of the text fed (0: all of it)
  int64_t window = 256;  // the positions measured: the last `window` before the depth
  int64_t chunk = 512;   // prefill rows per forward call (a multiple of 64)
  // > 0: perplexity at this context instead of a depth: the text cut into consecutive chunks
  // of ppl_ctx tokens, each fed from empty states, the second half of each chunk measured (its
  // rows predict the chunk's next token), as llama.cpp's perplexity tool counts.
  int64_t ppl_ctx = 0;
  // More KV types measured in the same pass, against the same f32 state ("q8_0", "q8_0,turbo4").
  std::vector<std::string> more_types;
};

// Feeds the text's first `depth` tokens to two states, one with an f32 cache and one with
// lo.kv_type's, chunk by chunk, and over the window's positions prints mean and p99 of
// KL(p_f32 ‖ p_type), top-1 agreement and both perplexities; with ppl_ctx the same over every
// chunk's measured rows. 0, or 1 with one line on stderr.
int run_kv_quality(const LoadOptions& lo, const KvQualityOptions& o);

}  // namespace qwen35::cli
