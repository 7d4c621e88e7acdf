// Geometries of the synthetic checkpoints: the real Qwen3.5 sizes (../shared/oracle/README.md,
// "Real configs found") plus two tiny ones for tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"

namespace qwen35::tools {

struct Geometry {
  std::string name;
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t intermediate = 0;  // dense MLP; 0 for MoE
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 256;
  int64_t lin_k_heads = 0;
  int64_t lin_v_heads = 0;
  int64_t lin_k_dim = 128;
  int64_t lin_v_dim = 128;
  int64_t conv_kernel = 4;
  int64_t full_interval = 4;
  bool tied = true;
  // MoE (experts == 0: dense).
  int64_t experts = 0;
  int64_t top_k = 0;
  int64_t moe_intermediate = 0;
  int64_t shared_intermediate = 0;
  // Tokenizer: BPE vocabulary size (byte symbols + merges); the 33 added tokens follow it, and the
  // embedding has vocab_rows rows (>= bpe_vocab + 33).
  int64_t bpe_vocab = 0;
  int64_t vocab_rows = 0;
  // Init: true = gen_tiny's fan-in scaled init (1/sqrt(fan_in), 0.7/sqrt(fan_in) for output
  // projections, 2/sqrt(H) embeddings and routers); false = HF-style std 0.02 everywhere.
  bool fan_in_init = false;

  bool moe() const { return experts > 0; }
  int64_t key_dim() const { return lin_k_heads * lin_k_dim; }
  int64_t value_dim() const { return lin_v_heads * lin_v_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  bool is_full_attention(int64_t layer) const { return (layer + 1) % full_interval == 0; }
};

// Number of Qwen3.5 added tokens (<|endoftext|> ... <|audio_pad|>), placed right after the BPE
// vocabulary.
constexpr int64_t kNumAddedTokens = 33;

core::Result<Geometry> find_preset(const std::string& name);
std::vector<std::string> preset_names();

}  // namespace qwen35::tools
