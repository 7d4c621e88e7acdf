#include "tools/synth/config_gen.h"

#include <nlohmann/json.hpp>

#include "tools/synth/tokenizer_gen.h"

namespace qwen35::tools {

using json = nlohmann::json;  // sorted keys, like the fixtures' text_config

namespace {

// Presets always say whether the embedding is tied.
bool tied(const model::ModelConfig& c) { return c.tie_word_embeddings.value_or(true); }

json text_config(const model::ModelConfig& c, const TensorPlan& plan) {
  json layer_types = json::array();
  for (model::LayerKind k : c.layers)
    layer_types.push_back(k == model::LayerKind::kFullAttention ? "full_attention"
                                                               : "linear_attention");
  const double partial = double(c.rotary_dim) / double(c.head_dim);
  // M-RoPE sections over the rotary half-dim (11/11/10 for rotary dim 64).
  const int64_t half = c.rotary_dim / 2;
  const int64_t s0 = (half * 11 + 16) / 32;
  json text = {
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"attn_output_gate", true},
      {"bos_token_id", nullptr},
      {"dtype", "bfloat16"},
      {"eos_token_id", c.eos_token_ids.front()},
      {"full_attention_interval", kFullAttentionInterval},
      {"head_dim", c.head_dim},
      {"hidden_act", "silu"},
      {"hidden_size", c.hidden},
      {"initializer_range", 0.02},
      {"layer_types", layer_types},
      {"linear_conv_kernel_dim", c.conv_kernel},
      {"linear_key_head_dim", c.d_k},
      {"linear_num_key_heads", c.n_k_heads},
      {"linear_num_value_heads", c.n_v_heads},
      {"linear_value_head_dim", c.d_v},
      {"mamba_ssm_dtype", "float32"},
      {"max_position_embeddings", c.max_position},
      {"model_type", c.model_type + "_text"},
      {"mtp_num_hidden_layers", plan.has_mtp ? c.mtp_layers : 0},
      {"mtp_use_dedicated_embeddings", false},
      {"num_attention_heads", c.n_heads},
      {"num_hidden_layers", c.n_layers},
      {"num_key_value_heads", c.n_kv_heads},
      {"pad_token_id", nullptr},
      {"partial_rotary_factor", partial},
      {"rms_norm_eps", c.eps},
      {"rope_parameters",
       {{"mrope_interleaved", true},
        {"mrope_section", {s0, s0, half - 2 * s0}},
        {"partial_rotary_factor", partial},
        {"rope_theta", c.rope_theta},
        {"rope_type", "default"}}},
      {"tie_word_embeddings", tied(c)},
      {"use_cache", true},
      {"vocab_size", c.vocab},
  };
  if (c.moe) {
    text["moe_intermediate_size"] = c.moe_intermediate;
    text["num_experts"] = c.n_experts;
    text["num_experts_per_tok"] = c.top_k;
    text["shared_expert_intermediate_size"] = c.shared_intermediate;
    text["output_router_logits"] = false;
    text["router_aux_loss_coef"] = 0.001;
  } else {
    text["intermediate_size"] = c.intermediate;
    text["mlp_only_layers"] = json::array();
  }
  return text;
}

// Qwen3 and Qwen3-MoE: the flat config.json of the released checkpoints (no text_config, no
// tower), as transformers' Qwen3Config / Qwen3MoeConfig write it.
json qwen3_config(const model::ModelConfig& c) {
  json j = {
      {"architectures", {c.moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM"}},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"bos_token_id", c.eos_token_ids.front()},
      {"eos_token_id", c.eos_token_ids.front()},
      {"head_dim", c.head_dim},
      {"hidden_act", "silu"},
      {"hidden_size", c.hidden},
      {"initializer_range", 0.02},
      {"max_position_embeddings", c.max_position},
      {"max_window_layers", c.n_layers},
      {"model_type", c.model_type},
      {"num_attention_heads", c.n_heads},
      {"num_hidden_layers", c.n_layers},
      {"num_key_value_heads", c.n_kv_heads},
      {"rms_norm_eps", c.eps},
      {"rope_scaling", nullptr},
      {"rope_theta", c.rope_theta},
      {"sliding_window", nullptr},
      {"tie_word_embeddings", tied(c)},
      {"torch_dtype", "bfloat16"},
      {"transformers_version", "4.51.0"},
      {"use_cache", true},
      {"use_sliding_window", false},
      {"vocab_size", c.vocab},
  };
  if (c.moe) {
    j["decoder_sparse_step"] = 1;
    j["intermediate_size"] = 3 * c.hidden;
    j["mlp_only_layers"] = json::array();
    j["moe_intermediate_size"] = c.moe_intermediate;
    j["norm_topk_prob"] = c.norm_topk;
    j["num_experts"] = c.n_experts;
    j["num_experts_per_tok"] = c.top_k;
    j["output_router_logits"] = false;
    j["router_aux_loss_coef"] = 0.001;
  } else {
    j["intermediate_size"] = c.intermediate;
  }
  return j;
}

// Qwen3-Next: the flat config.json of the released checkpoint, as transformers' Qwen3NextConfig
// writes it (no layer_types: full_attention_interval; no MTP field, though the checkpoint has
// mtp.* tensors).
json qwen3_next_config(const model::ModelConfig& c) {
  return {
      {"architectures", {"Qwen3NextForCausalLM"}},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"bos_token_id", c.eos_token_ids.front()},
      {"decoder_sparse_step", 1},
      {"eos_token_id", c.eos_token_ids.front()},
      {"full_attention_interval", kFullAttentionInterval},
      {"head_dim", c.head_dim},
      {"hidden_act", "silu"},
      {"hidden_size", c.hidden},
      {"initializer_range", 0.02},
      {"intermediate_size", 5 * c.hidden / 2},
      {"linear_conv_kernel_dim", c.conv_kernel},
      {"linear_key_head_dim", c.d_k},
      {"linear_num_key_heads", c.n_k_heads},
      {"linear_num_value_heads", c.n_v_heads},
      {"linear_value_head_dim", c.d_v},
      {"max_position_embeddings", c.max_position},
      {"mlp_only_layers", json::array()},
      {"model_type", c.model_type},
      {"moe_intermediate_size", c.moe_intermediate},
      {"norm_topk_prob", c.norm_topk},
      {"num_attention_heads", c.n_heads},
      {"num_experts", c.n_experts},
      {"num_experts_per_tok", c.top_k},
      {"num_hidden_layers", c.n_layers},
      {"num_key_value_heads", c.n_kv_heads},
      {"output_router_logits", false},
      {"partial_rotary_factor", double(c.rotary_dim) / double(c.head_dim)},
      {"rms_norm_eps", c.eps},
      {"rope_scaling", nullptr},
      {"rope_theta", c.rope_theta},
      {"router_aux_loss_coef", 0.001},
      {"shared_expert_intermediate_size", c.shared_intermediate},
      {"tie_word_embeddings", tied(c)},
      {"torch_dtype", "bfloat16"},
      {"transformers_version", "4.57.0"},
      {"use_cache", true},
      {"use_sliding_window", false},
      {"vocab_size", c.vocab},
  };
}

}  // namespace

std::string make_config_json(const Preset& preset, const PlanOptions& opts, const TensorPlan& plan) {
  const model::ModelConfig& c = preset.config;
  if (c.family != model::Family::kQwen35) {
    json root = c.family == model::Family::kQwen3 ? qwen3_config(c) : qwen3_next_config(c);
    if (opts.dialect == Dialect::kMlx) {
      json q = {{"group_size", opts.group_size}, {"bits", opts.bits}, {"mode", "affine"}};
      for (const auto& [module, ov] : plan.quant_overrides) q[module] = {{"group_size", ov.group_size}, {"bits", ov.bits}};
      root["quantization"] = q;
      root["quantization_config"] = q;
    }
    return root.dump(2) + "\n";
  }
  const int64_t bpe = preset.bpe_vocab;
  const std::string& root_type = c.model_type;
  // The tower's geometry (written whether or not its tensors are: a checkpoint without them is
  // text-only).
  const model::VisionConfig& v = c.vision;
  json vision = {{"deepstack_visual_indexes", json::array()},
                 {"depth", v.depth},
                 {"hidden_act", v.tanh_gelu ? "gelu_pytorch_tanh" : "gelu"},
                 {"hidden_size", v.hidden},
                 {"in_channels", v.in_channels},
                 {"initializer_range", 0.02},
                 {"intermediate_size", v.intermediate},
                 {"model_type", root_type},
                 {"num_heads", v.n_heads},
                 {"num_position_embeddings", v.n_positions()},
                 {"out_hidden_size", v.out_hidden},
                 {"patch_size", v.patch},
                 {"spatial_merge_size", v.merge},
                 {"temporal_patch_size", v.temporal}};
  json root = {
      {"architectures",
       {c.moe ? "Qwen3_5MoeForConditionalGeneration" : "Qwen3_5ForConditionalGeneration"}},
      {"image_token_id", added_token_id(bpe, "<|image_pad|>")},
      {"model_type", root_type},
      {"text_config", text_config(c, plan)},
      {"tie_word_embeddings", tied(c)},
      {"transformers_version", "5.0.0"},
      {"video_token_id", added_token_id(bpe, "<|video_pad|>")},
      {"vision_config", vision},
      {"vision_end_token_id", added_token_id(bpe, "<|vision_end|>")},
      {"vision_start_token_id", added_token_id(bpe, "<|vision_start|>")},
  };
  if (opts.dialect == Dialect::kMlx) {
    json q = {{"group_size", opts.group_size}, {"bits", opts.bits}, {"mode", "affine"}};
    for (const auto& [module, ov] : plan.quant_overrides)
      q[module] = {{"group_size", ov.group_size}, {"bits", ov.bits}};
    root["quantization"] = q;
    root["quantization_config"] = q;
  }
  return root.dump(2) + "\n";
}

std::string make_preprocessor_config_json(const Preset& preset) {
  const model::VisionConfig& v = preset.config.vision;
  // Qwen3.5's image processor: pixels rescaled by 1/255 and normalized with mean = std = 0.5,
  // between 64 Ki and 16 Mi pixels (shortest_edge / longest_edge are pixel counts here).
  json j = {{"do_convert_rgb", true},
            {"do_normalize", true},
            {"do_rescale", true},
            {"do_resize", true},
            {"image_mean", {0.5, 0.5, 0.5}},
            {"image_processor_type", "Qwen2VLImageProcessorFast"},
            {"image_std", {0.5, 0.5, 0.5}},
            {"merge_size", v.merge},
            {"patch_size", v.patch},
            {"processor_class", "Qwen3VLProcessor"},
            {"resample", 3},
            {"rescale_factor", 1.0 / 255.0},
            {"size", {{"longest_edge", 16777216}, {"shortest_edge", 65536}}},
            {"temporal_patch_size", v.temporal}};
  return j.dump(2) + "\n";
}

std::string make_generation_config_json(const Preset& preset) {
  const int64_t eot = added_token_id(preset.bpe_vocab, "<|endoftext|>");
  const int64_t im_end = added_token_id(preset.bpe_vocab, "<|im_end|>");
  json j = {{"bos_token_id", eot},
            {"do_sample", true},
            {"eos_token_id", {im_end, eot}},
            {"pad_token_id", eot},
            {"temperature", 1.0},
            {"top_k", 20},
            {"top_p", 0.95},
            {"transformers_version", "5.0.0"}};
  return j.dump(2) + "\n";
}

}  // namespace qwen35::tools
