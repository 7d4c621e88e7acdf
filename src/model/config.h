// The Qwen3.5 model configuration as the engine uses it, and the support gate: a config is either
// admitted (every geometry of the qwen3_5 / qwen3_5_moe families) or rejected with one line that
// names the field and the value.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "formats/hf_config.h"
#include "model/vision_config.h"

namespace qwen35::model {

enum class LayerKind { kLinearAttention, kFullAttention };

// The model families on the one forward pass. What differs is data, read by the layers:
//   kQwen35: hybrid Gated DeltaNet + gated full attention; RMSNorm weights applied as 1+w (HF
//            stores w); partial rotary.
//   kQwen3:  every layer full attention without the output gate; RMSNorm weights applied as w in
//            every dialect; rotary over the whole head (qwen3, qwen3_moe).
//   kQwen3Next: Qwen3.5's layers and conventions (hybrid layout, gated attention, 1+w norms,
//            partial rotary), 1-D RoPE, always MoE with a sigmoid-gated shared expert; its
//            checkpoints fuse the DeltaNet input projections per key head (in_proj_qkvz,
//            in_proj_ba), which the binders regroup (model/fused_proj.h) (qwen3_next).
enum class Family : uint8_t { kQwen35, kQwen3, kQwen3Next };

struct ModelConfig {
  std::string model_type;
  Family family = Family::kQwen35;
  bool moe = false;
  // Full attention multiplies its output by sigmoid(gate), the gate rows interleaved with the
  // query's in q_proj (Qwen3.5); without it q_proj is the query alone.
  bool attn_gate = true;

  int64_t hidden = 0;
  int64_t n_layers = 0;
  int64_t intermediate = 0;  // dense MLP
  int64_t vocab = 0;
  double eps = 1e-6;

  // Full attention.
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;
  double rope_theta = 1e7;
  // Multimodal RoPE: the axis (0 temporal, 1 height, 2 width) that turns each of the
  // rotary_dim/2 pairs, from mrope_section (interleaved: pair j is height when j % 3 == 1 and
  // j < 3·section[1], width when j % 3 == 2 and j < 3·section[2], else temporal); all temporal
  // without a section. Text rows have one position on every axis, so only images see it.
  std::vector<uint8_t> rope_pair_axis;
  int64_t max_position = 0;

  // Gated DeltaNet.
  int64_t n_k_heads = 0;
  int64_t n_v_heads = 0;
  int64_t d_k = 0;
  int64_t d_v = 0;
  int64_t conv_kernel = 4;

  std::vector<LayerKind> layers;

  // MoE.
  int64_t n_experts = 0;
  int64_t top_k = 0;
  int64_t moe_intermediate = 0;
  int64_t shared_intermediate = 0;
  bool norm_topk = true;

  std::optional<bool> tie_word_embeddings;  // nullopt: decided by the presence of lm_head
  int64_t mtp_layers = 0;
  std::vector<int64_t> eos_token_ids;
  std::optional<formats::QuantConfig> quantization;
  // The vision tower (depth 0: none, or refused; ModelWeights::vision_problem says why).
  VisionConfig vision;

  int64_t n_full_layers() const;
  int64_t n_linear_layers() const;
  int64_t conv_channels() const { return 2 * n_k_heads * d_k + n_v_heads * d_v; }
  std::string layer_pattern() const;  // e.g. "LLLF LLLF"
  // Whether HF checkpoints store RMSNorm weights zero-centred (w for a norm applied as 1+w).
  bool hf_norms_zero_centred() const { return family != Family::kQwen3; }
  const char* family_name() const;  // "Qwen3.5", "Qwen3", ...
};

// The support gate.
// ModelConfig::rope_pair_axis of an mrope_section (temporal, height, width pair counts) over
// `pairs` rotary pairs.
std::vector<uint8_t> mrope_pair_axis(const std::vector<int64_t>& section, int64_t pairs);

core::Result<ModelConfig> make_model_config(const formats::HfConfig& hf);

}  // namespace qwen35::model
