#include "tools/synth/config_gen.h"

#include <nlohmann/json.hpp>

#include "tools/synth/tokenizer_gen.h"

namespace qwen35::tools {

using json = nlohmann::json;  // sorted keys, like the fixtures' text_config

namespace {
constexpr int64_t kMaxPositions = 262144;
}

std::string make_config_json(const Geometry& g, const PlanOptions& opts, const TensorPlan& plan) {
  const int64_t eos = added_token_id(g.bpe_vocab, "<|endoftext|>");
  json layer_types = json::array();
  for (int64_t i = 0; i < g.layers; ++i)
    layer_types.push_back(g.is_full_attention(i) ? "full_attention" : "linear_attention");
  const double partial = 0.25;
  // M-RoPE sections over the rotary half-dim (11/11/10 for rotary dim 64).
  const int64_t half = int64_t(double(g.head_dim) * partial) / 2;
  const int64_t s0 = (half * 11 + 16) / 32;
  json text = {
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"attn_output_gate", true},
      {"bos_token_id", nullptr},
      {"dtype", "bfloat16"},
      {"eos_token_id", eos},
      {"full_attention_interval", g.full_interval},
      {"head_dim", g.head_dim},
      {"hidden_act", "silu"},
      {"hidden_size", g.hidden},
      {"initializer_range", 0.02},
      {"layer_types", layer_types},
      {"linear_conv_kernel_dim", g.conv_kernel},
      {"linear_key_head_dim", g.lin_k_dim},
      {"linear_num_key_heads", g.lin_k_heads},
      {"linear_num_value_heads", g.lin_v_heads},
      {"linear_value_head_dim", g.lin_v_dim},
      {"mamba_ssm_dtype", "float32"},
      {"max_position_embeddings", kMaxPositions},
      {"model_type", g.moe() ? "qwen3_5_moe_text" : "qwen3_5_text"},
      {"mtp_num_hidden_layers", plan.has_mtp ? 1 : 0},
      {"mtp_use_dedicated_embeddings", false},
      {"num_attention_heads", g.heads},
      {"num_hidden_layers", g.layers},
      {"num_key_value_heads", g.kv_heads},
      {"pad_token_id", nullptr},
      {"partial_rotary_factor", partial},
      {"rms_norm_eps", 1e-6},
      {"rope_parameters",
       {{"mrope_interleaved", true},
        {"mrope_section", {s0, s0, half - 2 * s0}},
        {"partial_rotary_factor", partial},
        {"rope_theta", 10000000.0},
        {"rope_type", "default"}}},
      {"tie_word_embeddings", g.tied},
      {"use_cache", true},
      {"vocab_size", g.vocab_rows},
  };
  if (g.moe()) {
    text["moe_intermediate_size"] = g.moe_intermediate;
    text["num_experts"] = g.experts;
    text["num_experts_per_tok"] = g.top_k;
    text["shared_expert_intermediate_size"] = g.shared_intermediate;
    text["output_router_logits"] = false;
    text["router_aux_loss_coef"] = 0.001;
  } else {
    text["intermediate_size"] = g.intermediate;
    text["mlp_only_layers"] = json::array();
  }
  const char* root_type = g.moe() ? "qwen3_5_moe" : "qwen3_5";
  // No vision weights are written; the vision_config is a small placeholder (as in the fixtures).
  json vision = {{"deepstack_visual_indexes", json::array()},
                 {"depth", 1},
                 {"hidden_act", "gelu_pytorch_tanh"},
                 {"hidden_size", 32},
                 {"in_channels", 3},
                 {"intermediate_size", 64},
                 {"model_type", root_type},
                 {"num_heads", 2},
                 {"num_position_embeddings", 16},
                 {"out_hidden_size", g.hidden},
                 {"patch_size", 16},
                 {"spatial_merge_size", 2},
                 {"temporal_patch_size", 2}};
  json root = {
      {"architectures",
       {g.moe() ? "Qwen3_5MoeForConditionalGeneration" : "Qwen3_5ForConditionalGeneration"}},
      {"image_token_id", added_token_id(g.bpe_vocab, "<|image_pad|>")},
      {"model_type", root_type},
      {"text_config", text},
      {"tie_word_embeddings", g.tied},
      {"transformers_version", "5.0.0"},
      {"video_token_id", added_token_id(g.bpe_vocab, "<|video_pad|>")},
      {"vision_config", vision},
      {"vision_end_token_id", added_token_id(g.bpe_vocab, "<|vision_end|>")},
      {"vision_start_token_id", added_token_id(g.bpe_vocab, "<|vision_start|>")},
  };
  if (opts.layout == Layout::kMlx) {
    json q = {{"group_size", opts.group_size}, {"bits", opts.bits}, {"mode", "affine"}};
    for (const auto& [module, ov] : plan.quant_overrides)
      q[module] = {{"group_size", ov.group_size}, {"bits", ov.bits}};
    root["quantization"] = q;
    root["quantization_config"] = q;
  }
  return root.dump(2) + "\n";
}

std::string make_generation_config_json(const Geometry& g) {
  const int64_t eot = added_token_id(g.bpe_vocab, "<|endoftext|>");
  const int64_t im_end = added_token_id(g.bpe_vocab, "<|im_end|>");
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
