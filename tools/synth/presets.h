// The synthetic checkpoints: the real Qwen3.5 geometries (docs/design.md §5, "Real geometries"),
// the real Qwen3 and Qwen3-MoE ones (qwen3-0.6b, -4b, -8b, -32b, -30b-a3b), Qwen3-Next's
// (qwen3-next-80b-a3b), and tiny ones for tests (tiny, tiny-moe, qwen3-tiny, qwen3-tiny-moe,
// qwen3-next-tiny).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"
#include "model/config.h"

namespace qwen35::tools {

// Number of Qwen3.5 added tokens (<|endoftext|> ... <|audio_pad|>), placed right after the BPE
// vocabulary.
constexpr int64_t kNumAddedTokens = 33;

// Every Qwen3.5 and Qwen3-Next preset has the real checkpoints' layer pattern L L L F (Qwen3: all F).
constexpr int64_t kFullAttentionInterval = 4;

struct Preset {
  std::string name;
  // The geometry, as make_model_config reads it back from the written config.json. It has an
  // MTP layer (the HF layout writes one; the MLX layout drops it, as mlx-lm does) and no
  // quantization (that comes from the format options).
  model::ModelConfig config;
  // Tokenizer: BPE vocabulary size (byte symbols + merges); the added tokens follow it, and the
  // embedding has config.vocab rows (>= bpe_vocab + kNumAddedTokens).
  int64_t bpe_vocab = 0;
  // Init: true = gen_tiny's fan-in scaled init (1/sqrt(fan_in), 0.7/sqrt(fan_in) for output
  // projections, 2/sqrt(H) embeddings and routers); false = HF-style std 0.02 everywhere.
  bool fan_in_init = false;
};

core::Result<Preset> find_preset(const std::string& name);
std::vector<std::string> preset_names();

}  // namespace qwen35::tools
