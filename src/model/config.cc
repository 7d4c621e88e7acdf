#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace qwen35::model {

using core::error;

namespace {
std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}
core::Status reject(const std::string& field, const std::string& value, const std::string& why) {
  return error("[config] unsupported: field '" + field + "' = " + value + ": " + why);
}
bool supported_bits(int b) { return b == 2 || b == 3 || b == 4 || b == 5 || b == 6 || b == 8; }

core::Status check_quant_spec(const std::string& field, const formats::QuantSpec& q) {
  if (q.mode != "affine")
    return reject(field + ".mode", "\"" + q.mode + "\"", "only MLX affine quantization is supported");
  if (!supported_bits(q.bits))
    return reject(field + ".bits", std::to_string(q.bits), "supported bit widths are 2, 3, 4, 5, 6, 8");
  if (q.group_size != 16 && q.group_size != 32 && q.group_size != 64 && q.group_size != 128)
    return reject(field + ".group_size", std::to_string(q.group_size), "supported group sizes are 16, 32, 64, 128");
  return core::Status();
}
}  // namespace

// The interleaved rule of Qwen3.5's text rotary embedding (transformers'
// Qwen3_5TextRotaryEmbedding.recomposition_frequencies): pair j turns with the height position when j % 3 == 1 and
// j < 3·section[1], with the width position when j % 3 == 2 and j < 3·section[2], else with
// the temporal one.
std::vector<uint8_t> mrope_pair_axis(const std::vector<int64_t>& section, int64_t pairs) {
  std::vector<uint8_t> axis(size_t(std::max<int64_t>(pairs, 0)), 0);
  for (int64_t j = 0; j < pairs; ++j) {
    if (section.size() > 1 && j % 3 == 1 && j < 3 * section[1]) axis[size_t(j)] = 1;
    if (section.size() > 2 && j % 3 == 2 && j < 3 * section[2]) axis[size_t(j)] = 2;
  }
  return axis;
}

int64_t ModelConfig::n_full_layers() const {
  int64_t n = 0;
  for (auto k : layers) n += k == LayerKind::kFullAttention;
  return n;
}
int64_t ModelConfig::n_linear_layers() const { return int64_t(layers.size()) - n_full_layers(); }

std::string ModelConfig::layer_pattern() const {
  std::string s;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (i && i % 4 == 0) s += ' ';
    s += layers[i] == LayerKind::kFullAttention ? 'F' : 'L';
  }
  return s;
}

const char* ModelConfig::family_name() const {
  switch (family) {
    case Family::kQwen35: return moe ? "Qwen3.5-MoE" : "Qwen3.5";
    case Family::kQwen3: return moe ? "Qwen3-MoE" : "Qwen3";
    case Family::kQwen3Next: return "Qwen3-Next";
  }
  return "?";
}

namespace {

// The family and MoE-ness of a model_type pair; an error names the field.
core::Status classify(const formats::HfConfig& hf, ModelConfig* c) {
  struct Type {
    const char* name;
    Family family;
    bool moe;
  };
  static const Type kTypes[] = {{"qwen3_5", Family::kQwen35, false},     {"qwen3_5_text", Family::kQwen35, false},
                                {"qwen3_5_moe", Family::kQwen35, true},  {"qwen3_5_moe_text", Family::kQwen35, true},
                                {"qwen3", Family::kQwen3, false},        {"qwen3_moe", Family::kQwen3, true},
                                {"qwen3_next", Family::kQwen3Next, true}};
  const Type* root = nullptr;
  const Type* text = nullptr;
  for (const Type& t : kTypes) {
    if (hf.model_type == t.name) root = &t;
    if (hf.text_model_type == t.name) text = &t;
  }
  if (root == nullptr)
    return reject("model_type", "\"" + hf.model_type + "\"",
                  "supported are qwen3_5, qwen3_5_text, qwen3_5_moe, qwen3_5_moe_text, qwen3, qwen3_moe, qwen3_next");
  if (text == nullptr || text->moe != root->moe || text->family != root->family)
    return reject("text_config.model_type", "\"" + hf.text_model_type + "\"",
                  "does not match model_type \"" + hf.model_type + "\"");
  c->model_type = hf.model_type;
  c->family = root->family;
  c->moe = root->moe;
  return core::Status();
}

// "[first]" or "[first, ...]" of a non-empty list, for an error message.
std::string short_list(const std::vector<int64_t>& v) {
  std::string list = std::to_string(v[0]);
  list.insert(list.begin(), '[');
  list += v.size() > 1 ? ", ...]" : "]";
  return list;
}

// What Qwen3 and Qwen3-MoE configs may say that the engine does not build: refused by name.
core::Status check_qwen3_fields(const formats::HfConfig& hf) {
  if (hf.keys.count("attn_output_gate") && hf.attn_output_gate)
    return reject("attn_output_gate", "true", "Qwen3 attention has no output gate");
  if (hf.use_sliding_window)
    return reject("use_sliding_window", "true", "sliding-window attention is not supported");
  for (size_t i = 0; i < hf.layer_types.size(); ++i)
    if (hf.layer_types[i] != "full_attention")
      return reject("layer_types[" + std::to_string(i) + "]", "\"" + hf.layer_types[i] + "\"",
                    "Qwen3 layers are full_attention (sliding-window attention is not supported)");
  if (!hf.mrope_section.empty())
    return reject(hf.rope_block_key + ".mrope_section", "set", "Qwen3 has no multimodal rotary sections");
  if (hf.decoder_sparse_step != 1)
    return reject("decoder_sparse_step", std::to_string(hf.decoder_sparse_step),
                  "only every layer MoE (decoder_sparse_step 1) is supported");
  if (!hf.mlp_only_layers.empty())
    return reject("mlp_only_layers", short_list(hf.mlp_only_layers), "dense layers inside a Qwen3-MoE model are not supported");
  if (hf.shared_expert_intermediate_size != 0)
    return reject("shared_expert_intermediate_size", std::to_string(hf.shared_expert_intermediate_size),
                  "Qwen3-MoE has no shared expert");
  if (hf.mtp_num_hidden_layers != 0)
    return reject("mtp_num_hidden_layers", std::to_string(hf.mtp_num_hidden_layers), "Qwen3 has no MTP head");
  return core::Status();
}

// What Qwen3-Next configs may say that the engine does not build: refused by name. Its layer
// pattern, gated attention and MoE go through the Qwen3.5 paths.
core::Status check_qwen3_next_fields(const formats::HfConfig& hf) {
  if (hf.use_sliding_window)
    return reject("use_sliding_window", "true", "sliding-window attention is not supported");
  if (!hf.mrope_section.empty())
    return reject(hf.rope_block_key + ".mrope_section", "set", "Qwen3-Next has one-dimensional RoPE");
  if (hf.decoder_sparse_step != 1)
    return reject("decoder_sparse_step", std::to_string(hf.decoder_sparse_step),
                  "only every layer MoE (decoder_sparse_step 1) is supported");
  if (!hf.mlp_only_layers.empty())
    return reject("mlp_only_layers", short_list(hf.mlp_only_layers), "dense layers inside a Qwen3-Next model are not supported");
  return core::Status();
}

}  // namespace

core::Result<ModelConfig> make_model_config(const formats::HfConfig& hf) {
  ModelConfig c;
  QWEN35_RETURN_IF_ERROR(classify(hf, &c));
  const bool moe = c.moe, qwen3 = c.family == Family::kQwen3, next = c.family == Family::kQwen3Next;
  if (qwen3) QWEN35_RETURN_IF_ERROR(check_qwen3_fields(hf));
  if (next) QWEN35_RETURN_IF_ERROR(check_qwen3_next_fields(hf));

  auto positive = [](const char* field, int64_t v) -> core::Status {
    if (v <= 0) return reject(field, std::to_string(v), "must be positive");
    if (v > (int64_t(1) << 24)) return reject(field, std::to_string(v), "is implausibly large");
    return core::Status();
  };
  c.hidden = hf.hidden_size;
  c.n_layers = hf.num_hidden_layers;
  c.vocab = hf.vocab_size;
  c.n_heads = hf.num_attention_heads;
  c.n_kv_heads = hf.num_key_value_heads;
  c.head_dim = hf.head_dim;
  c.n_k_heads = hf.linear_num_key_heads;
  c.n_v_heads = hf.linear_num_value_heads;
  c.d_k = hf.linear_key_head_dim;
  c.d_v = hf.linear_value_head_dim;
  c.conv_kernel = hf.linear_conv_kernel_dim;
  QWEN35_RETURN_IF_ERROR(positive("hidden_size", c.hidden));
  QWEN35_RETURN_IF_ERROR(positive("num_hidden_layers", c.n_layers));
  QWEN35_RETURN_IF_ERROR(positive("vocab_size", c.vocab));
  if (c.vocab > (int64_t(1) << 24)) return reject("vocab_size", std::to_string(c.vocab), "is implausibly large");
  QWEN35_RETURN_IF_ERROR(positive("num_attention_heads", c.n_heads));
  QWEN35_RETURN_IF_ERROR(positive("num_key_value_heads", c.n_kv_heads));
  QWEN35_RETURN_IF_ERROR(positive("head_dim", c.head_dim));
  if (c.n_heads % c.n_kv_heads != 0)
    return reject("num_key_value_heads", std::to_string(c.n_kv_heads),
                  "num_attention_heads (" + std::to_string(c.n_heads) + ") is not a multiple of it");
  if (!(hf.rms_norm_eps > 0) || !std::isfinite(hf.rms_norm_eps))
    return reject("rms_norm_eps", num(hf.rms_norm_eps), "must be a positive number");
  c.eps = hf.rms_norm_eps;
  c.attn_gate = !qwen3;
  if (!qwen3 && !hf.attn_output_gate)
    return reject("attn_output_gate", "false", std::string(c.family_name()) + " attention always has its output gate");
  if (hf.attention_bias) return reject("attention_bias", "true", "attention biases are not supported");

  // Layer pattern: Qwen3 is full attention throughout; Qwen3.5 and Qwen3-Next from layer_types,
  // else full attention every full_attention_interval layers.
  if (qwen3) {
    c.layers.assign(size_t(c.n_layers), LayerKind::kFullAttention);
  } else if (!hf.layer_types.empty()) {
    if (int64_t(hf.layer_types.size()) != c.n_layers)
      return reject("layer_types", std::to_string(hf.layer_types.size()) + " entries",
                    "num_hidden_layers is " + std::to_string(c.n_layers));
    for (size_t i = 0; i < hf.layer_types.size(); ++i) {
      const auto& t = hf.layer_types[i];
      if (t == "full_attention" || t == "attention") c.layers.push_back(LayerKind::kFullAttention);
      else if (t == "linear_attention" || t == "linear") c.layers.push_back(LayerKind::kLinearAttention);
      else
        return reject("layer_types[" + std::to_string(i) + "]", "\"" + t + "\"",
                      "unknown layer type (expected linear_attention or full_attention)");
    }
  } else {
    if (hf.full_attention_interval <= 0)
      return reject("full_attention_interval", std::to_string(hf.full_attention_interval), "must be positive");
    for (int64_t i = 0; i < c.n_layers; ++i)
      c.layers.push_back((i + 1) % hf.full_attention_interval == 0 ? LayerKind::kFullAttention
                                                                   : LayerKind::kLinearAttention);
  }
  if (c.n_linear_layers() > 0) {
    QWEN35_RETURN_IF_ERROR(positive("linear_num_key_heads", c.n_k_heads));
    QWEN35_RETURN_IF_ERROR(positive("linear_num_value_heads", c.n_v_heads));
    QWEN35_RETURN_IF_ERROR(positive("linear_key_head_dim", c.d_k));
    QWEN35_RETURN_IF_ERROR(positive("linear_value_head_dim", c.d_v));
    QWEN35_RETURN_IF_ERROR(positive("linear_conv_kernel_dim", c.conv_kernel));
    if (c.n_v_heads % c.n_k_heads != 0)
      return reject("linear_num_value_heads", std::to_string(c.n_v_heads),
                    "not a multiple of linear_num_key_heads (" + std::to_string(c.n_k_heads) + ")");
  }

  // RoPE.
  const std::string rope_key = hf.rope_block_key.empty() ? "rope_parameters" : hf.rope_block_key;
  if (hf.rope_type != "default" && (qwen3 || next || hf.rope_type != "mrope"))
    return reject(rope_key + ".rope_type", "\"" + hf.rope_type + "\"",
                  qwen3 || next ? "only default RoPE is supported (no YaRN or other scaling)"
                                : "only default and mrope RoPE are supported");
  // Qwen3's defaults (transformers' Qwen3Config) where the config is silent: the whole head
  // rotates, theta 10000.
  const double factor = qwen3 && !hf.partial_rotary_factor_set ? 1.0 : hf.partial_rotary_factor;
  if (!(factor > 0) || factor > 1)
    return reject("partial_rotary_factor", num(factor), "must be in (0, 1]");
  c.rotary_dim = hf.rotary_dim > 0 ? hf.rotary_dim : int64_t(double(c.head_dim) * factor);
  if (c.rotary_dim <= 0 || c.rotary_dim % 2 != 0)
    return reject("partial_rotary_factor", num(hf.partial_rotary_factor),
                  "gives rotary dims " + std::to_string(c.rotary_dim) + " (head_dim " +
                      std::to_string(c.head_dim) + "): must be even and non-zero");
  if (!(hf.rope_theta > 0) || !std::isfinite(hf.rope_theta))
    return reject("rope_theta", num(hf.rope_theta), "must be positive");
  c.rope_theta = hf.rope_theta;
  // transformers' default theta for both (Qwen3-Next's released configs state 1e7).
  if ((qwen3 || next) && !hf.rope_theta_set) c.rope_theta = 10000.0;
  c.rope_pair_axis = mrope_pair_axis(hf.mrope_section, c.rotary_dim / 2);
  c.max_position = hf.max_position_embeddings;

  // MLP / MoE.
  if (moe) {
    c.n_experts = hf.num_experts;
    c.top_k = hf.num_experts_per_tok;
    c.moe_intermediate = hf.moe_intermediate_size;
    c.shared_intermediate = hf.shared_expert_intermediate_size;
    QWEN35_RETURN_IF_ERROR(positive("num_experts", c.n_experts));
    QWEN35_RETURN_IF_ERROR(positive("num_experts_per_tok", c.top_k));
    QWEN35_RETURN_IF_ERROR(positive("moe_intermediate_size", c.moe_intermediate));
    if (c.top_k > c.n_experts)
      return reject("num_experts_per_tok", std::to_string(c.top_k),
                    "exceeds num_experts (" + std::to_string(c.n_experts) + ")");
    if (c.shared_intermediate < 0) return reject("shared_expert_intermediate_size", std::to_string(c.shared_intermediate), "must not be negative");
    // Qwen3.5-MoE always renormalises the top-k weights; Qwen3-MoE and Qwen3-Next when
    // norm_topk_prob says so (transformers' defaults: false for Qwen3-MoE, true for Qwen3-Next,
    // which is HfConfig's).
    if (qwen3) c.norm_topk = hf.keys.count("norm_topk_prob") && hf.norm_topk_prob;
    else c.norm_topk = !next || hf.norm_topk_prob;
  } else {
    c.intermediate = hf.intermediate_size;
    QWEN35_RETURN_IF_ERROR(positive("intermediate_size", c.intermediate));
  }

  // Quantization.
  if (!hf.quant_method.empty())
    return reject("quantization_config.quant_method", "\"" + hf.quant_method + "\"",
                  "only MLX affine quantization is supported");
  if (hf.quantization) {
    QWEN35_RETURN_IF_ERROR(check_quant_spec("quantization", hf.quantization->defaults));
    for (const auto& [module, spec] : hf.quantization->overrides)
      if (spec) QWEN35_RETURN_IF_ERROR(check_quant_spec("quantization." + module, *spec));
    c.quantization = hf.quantization;
  }
  c.tie_word_embeddings = hf.tie_word_embeddings;
  c.mtp_layers = hf.mtp_num_hidden_layers;
  // Qwen3-Next's config has no MTP field (transformers ignores the mtp.* tensors); the released
  // checkpoints' head is one layer, mtp.layers.0. Used only when the tensors are there.
  if (next && !hf.keys.count("mtp_num_hidden_layers")) c.mtp_layers = 1;
  c.eos_token_ids = hf.eos_token_ids;
  return c;
}

}  // namespace qwen35::model
