// config.json of Hugging Face and MLX checkpoints, flattened: keys of `text_config` win over root
// keys; `rope_parameters` (transformers v5) wins over `rope_scaling` and flat keys. This layer only
// reads and type-checks; what the engine supports is decided by model/config (the support gate).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/result.h"

namespace qwen35::formats {

struct QuantSpec {
  int bits = 0;
  int group_size = 0;
  std::string mode = "affine";
};

// The MLX `quantization` block: defaults plus per-module overrides (object, or `false` meaning
// "this module is not quantized").
struct QuantConfig {
  QuantSpec defaults;
  std::map<std::string, std::optional<QuantSpec>> overrides;
  // Returns the override for a module path (e.g. "language_model.model.layers.0.mlp.gate"),
  // trying the HF spelling too; nullptr when there is none. *unquantized is set for `false`.
  const QuantSpec* lookup(const std::string& module, bool* unquantized) const;
};

// `vision_config` of a multimodal checkpoint, as written (model/vision_config.h decides what is
// supported). Absent fields take the values every Qwen3.5 tower has; the geometry fields
// (depth, hidden_size, intermediate_size, num_heads, out_hidden_size) have no default.
struct HfVisionConfig {
  int64_t depth = 0, hidden_size = 0, intermediate_size = 0, num_heads = 0, out_hidden_size = 0;
  int64_t in_channels = 3, patch_size = 16, spatial_merge_size = 2, temporal_patch_size = 2;
  int64_t num_position_embeddings = 2304;
  std::string hidden_act = "gelu_pytorch_tanh";
  std::vector<int64_t> deepstack_visual_indexes;
  // A field of the wrong type or a missing geometry field: the tower is refused with this
  // message, the text model still loads.
  std::string error;
};

struct HfConfig {
  std::string model_type;       // root model_type
  std::string text_model_type;  // text_config.model_type (or root)
  std::vector<std::string> architectures;
  bool has_text_config = false;

  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t intermediate_size = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  double rms_norm_eps = 1e-6;
  bool attention_bias = false;
  bool attn_output_gate = true;

  int64_t linear_num_key_heads = 0;
  int64_t linear_num_value_heads = 0;
  int64_t linear_key_head_dim = 0;
  int64_t linear_value_head_dim = 0;
  int64_t linear_conv_kernel_dim = 4;
  int64_t full_attention_interval = 4;
  std::vector<std::string> layer_types;  // as written; empty when absent

  double rope_theta = 1e7;
  double partial_rotary_factor = 0.25;
  bool rope_theta_set = false, partial_rotary_factor_set = false;  // flat or in the RoPE block
  int64_t rotary_dim = 0;  // > 0: the rotary width itself (GGUF rope.dimension_count), wins over the factor
  std::string rope_type = "default";
  // Multimodal RoPE: rotary pairs per axis (temporal, height, width), interleaved; empty when
  // absent (every pair turns by the one text position).
  std::vector<int64_t> mrope_section;
  int64_t max_position_embeddings = 0;

  std::optional<bool> tie_word_embeddings;  // text_config first, then root; nullopt if absent

  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;
  bool norm_topk_prob = true;

  // Qwen3-MoE's layer plan: MoE every decoder_sparse_step layers, dense on mlp_only_layers.
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  // Sliding-window attention (Qwen3): use_sliding_window turns it on.
  bool use_sliding_window = false;

  int64_t mtp_num_hidden_layers = 0;
  std::vector<int64_t> eos_token_ids;
  // Every key the config sets (text_config's and the root's, non-null), for the support gate to
  // tell an absent field from its default; and the key the RoPE block came from
  // ("rope_parameters" or "rope_scaling"; empty when neither).
  std::set<std::string> keys;
  std::string rope_block_key;

  std::optional<QuantConfig> quantization;
  std::string quant_method;  // non-MLX "quantization_config.quant_method" (gptq, fp8, ...)

  std::optional<HfVisionConfig> vision;  // nullopt: no vision_config
  // Root keys of multimodal checkpoints; -1 when absent.
  int64_t image_token_id = -1, video_token_id = -1, vision_start_token_id = -1, vision_end_token_id = -1;
};

core::Result<HfConfig> parse_hf_config(const std::string& text, const std::string& label);
core::Result<HfConfig> load_hf_config(const std::string& dir);  // DIR/config.json

// generation_config.json (all optional).
struct GenerationConfig {
  bool present = false;
  std::optional<double> temperature, top_p, min_p, repetition_penalty, presence_penalty;
  std::optional<int64_t> top_k;
  std::optional<bool> do_sample;
  std::vector<int64_t> eos_token_ids;
};
core::Result<GenerationConfig> load_generation_config(const std::string& dir);

}  // namespace qwen35::formats
