// The metadata of a synthetic GGUF file: what llama.cpp's converter writes for the config.json,
// tokenizer.json and tokenizer_config.json of `qwen35 synth --format hf` at the same preset.
#include "tools/synth/gguf_layout.h"
#include "tools/synth/tokenizer_gen.h"

namespace qwen35::tools {

using formats::GgmlType;

namespace {

// llama.cpp's LlamaFileType of a file whose matrices are `t`.
uint32_t file_type(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return 0;   // ALL_F32
    case GgmlType::kF16: return 1;   // MOSTLY_F16
    case GgmlType::kQ4_0: return 2;  // MOSTLY_Q4_0
    case GgmlType::kQ8_0: return 7;  // MOSTLY_Q8_0
    case GgmlType::kBF16: return 32; // MOSTLY_BF16
    default: return 0;
  }
}

// gguf TokenType values.
constexpr int32_t kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5;

bool looks_special(const std::string& t) {
  return t.size() >= 4 && t.compare(0, 2, "<|") == 0 && t.compare(t.size() - 2, 2, "|>") == 0;
}

// The converter's vocabulary: the BPE tokens (NORMAL), the added tokens (CONTROL when special or
// shaped <|...|>, else USER_DEFINED), then "[PAD<id>]" (UNUSED) up to the embedding's rows.
void add_tokenizer(GgufWriter* w, const Preset& p) {
  BpeModel m = make_bpe_model(p.bpe_vocab);
  std::vector<std::string> tokens = std::move(m.vocab);
  std::vector<int32_t> types(tokens.size(), kNormal);
  for (const AddedToken& t : qwen35_added_tokens()) {
    tokens.push_back(t.content);
    types.push_back(t.special || looks_special(t.content) ? kControl : kUserDefined);
  }
  while (int64_t(tokens.size()) < p.config.vocab) {
    tokens.push_back("[PAD" + std::to_string(tokens.size()) + "]");
    types.push_back(kUnused);
  }
  std::vector<std::string> merges;
  merges.reserve(m.merges.size());
  for (const auto& [a, b] : m.merges) merges.push_back(a + " " + b);
  w->add_string("tokenizer.ggml.model", "gpt2");
  w->add_string("tokenizer.ggml.pre", "qwen35");
  w->add_strings("tokenizer.ggml.tokens", tokens);
  w->add_i32s("tokenizer.ggml.token_type", types);
  w->add_strings("tokenizer.ggml.merges", merges);
  // tokenizer_config.json names eos <|im_end|> and pad <|endoftext|>. bos is <|endoftext|> as in
  // tests/fixtures/gguf; add_bos_token false (tokenizer_config.json) means it is never added.
  const int64_t eot = added_token_id(p.bpe_vocab, "<|endoftext|>");
  w->add_u32("tokenizer.ggml.eos_token_id", uint32_t(added_token_id(p.bpe_vocab, "<|im_end|>")));
  w->add_u32("tokenizer.ggml.padding_token_id", uint32_t(eot));
  w->add_u32("tokenizer.ggml.bos_token_id", uint32_t(eot));
  w->add_bool("tokenizer.ggml.add_bos_token", false);
  w->add_string("tokenizer.chat_template", chat_template_for(p.config.model_type));
}

// The keys both architectures write alike: general.*, and the attention and expert geometry.
// Returns the architecture's key prefix.
std::string add_common(GgufWriter* w, const Preset& p, const std::string& arch, const std::string& family,
                       int64_t blocks, GgmlType matrix_type) {
  const model::ModelConfig& c = p.config;
  w->add_string("general.architecture", arch);
  w->add_string("general.type", "model");
  w->add_string("general.name", family + " synth " + p.name);
  w->add_u32("general.alignment", GgufWriter::kAlignment);
  w->add_u32("general.file_type", file_type(matrix_type));
  w->add_u32("general.quantization_version", 2);
  const std::string a = arch + ".";
  w->add_u32(a + "block_count", uint32_t(blocks));
  w->add_u32(a + "context_length", uint32_t(c.max_position));
  w->add_u32(a + "embedding_length", uint32_t(c.hidden));
  w->add_u32(a + "attention.head_count", uint32_t(c.n_heads));
  w->add_u32(a + "attention.head_count_kv", uint32_t(c.n_kv_heads));
  w->add_f32(a + "rope.freq_base", float(c.rope_theta));
  w->add_f32(a + "attention.layer_norm_rms_epsilon", float(c.eps));
  w->add_u32(a + "attention.key_length", uint32_t(c.head_dim));
  w->add_u32(a + "attention.value_length", uint32_t(c.head_dim));
  if (c.moe) {
    w->add_u32(a + "expert_count", uint32_t(c.n_experts));
    w->add_u32(a + "expert_used_count", uint32_t(c.top_k));
    w->add_u32(a + "expert_feed_forward_length", uint32_t(c.moe_intermediate));
  }
  return a;
}

// llama.cpp's converter for Qwen3 and Qwen3-MoE: no recurrent or M-RoPE keys, the whole head
// rotated (no rope.dimension_count).
void add_qwen3_metadata(GgufWriter* w, const Preset& p, GgmlType matrix_type) {
  const model::ModelConfig& c = p.config;
  const std::string a = add_common(w, p, c.moe ? "qwen3moe" : "qwen3", "Qwen3", c.n_layers, matrix_type);
  w->add_u32(a + "feed_forward_length", uint32_t(c.moe ? 3 * c.hidden : c.intermediate));
  add_tokenizer(w, p);
}

}  // namespace

void add_gguf_metadata(GgufWriter* w, const Preset& p, int64_t n_mtp, GgmlType matrix_type) {
  const model::ModelConfig& c = p.config;
  if (c.family == model::Family::kQwen3) return add_qwen3_metadata(w, p, matrix_type);
  const std::string a = add_common(w, p, c.moe ? "qwen35moe" : "qwen35", "Qwen3.5", c.n_layers + n_mtp, matrix_type);
  if (!c.moe) w->add_u32(a + "feed_forward_length", uint32_t(c.intermediate));
  // The M-RoPE sections config.json gives (config_gen.cc), padded to four.
  const int32_t half = int32_t(c.rotary_dim / 2), s0 = (half * 11 + 16) / 32;
  w->add_i32s(a + "rope.dimension_sections", {s0, s0, half - 2 * s0, 0});
  if (c.moe) w->add_u32(a + "expert_shared_feed_forward_length", uint32_t(c.shared_intermediate));
  w->add_u32(a + "ssm.conv_kernel", uint32_t(c.conv_kernel));
  w->add_u32(a + "ssm.state_size", uint32_t(c.d_k));
  w->add_u32(a + "ssm.group_count", uint32_t(c.n_k_heads));
  w->add_u32(a + "ssm.time_step_rank", uint32_t(c.n_v_heads));
  w->add_u32(a + "ssm.inner_size", uint32_t(c.n_v_heads * c.d_v));
  std::vector<bool> recurrent;
  for (model::LayerKind k : c.layers) recurrent.push_back(k == model::LayerKind::kLinearAttention);
  recurrent.resize(size_t(c.n_layers + n_mtp), false);  // the MTP layer is full attention
  w->add_bools(a + "attention.recurrent_layers", recurrent);
  w->add_u32(a + "full_attention_interval", uint32_t(kFullAttentionInterval));
  w->add_u32(a + "rope.dimension_count", uint32_t(c.rotary_dim));
  if (n_mtp > 0) w->add_u32(a + "nextn_predict_layers", uint32_t(n_mtp));
  add_tokenizer(w, p);
}

}  // namespace qwen35::tools
