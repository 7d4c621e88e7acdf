#include "tools/synth/presets.h"

#include "tools/synth/tokenizer_gen.h"

namespace qwen35::tools {

namespace {

using model::LayerKind;
using model::ModelConfig;

// A dense Qwen3.5 text model; what every size shares (head dims, rotary dims, RoPE, context,
// layer pattern, one MTP layer) is set here, the rest by the caller.
ModelConfig dense(int64_t hidden, int64_t n_layers, int64_t intermediate, int64_t n_heads,
                  int64_t n_kv_heads, int64_t n_k_heads, int64_t n_v_heads, bool tied,
                  int64_t vocab) {
  ModelConfig c;
  c.model_type = "qwen3_5";
  c.hidden = hidden;
  c.n_layers = n_layers;
  c.intermediate = intermediate;
  c.vocab = vocab;
  c.eps = 1e-6;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.head_dim = 256;
  c.rotary_dim = 64;  // partial_rotary_factor 0.25
  c.rope_theta = 1e7;
  c.max_position = 262144;
  c.n_k_heads = n_k_heads;
  c.n_v_heads = n_v_heads;
  c.d_k = 128;
  c.d_v = 128;
  c.conv_kernel = 4;
  for (int64_t i = 0; i < n_layers; ++i)
    c.layers.push_back((i + 1) % kFullAttentionInterval == 0 ? LayerKind::kFullAttention
                                                             : LayerKind::kLinearAttention);
  c.tie_word_embeddings = tied;
  c.mtp_layers = 1;
  return c;
}

// A vision tower of the real towers' fixed parts (16×16×2 patches, 2×2 merge, 48×48 position
// table, gelu_pytorch_tanh) projecting into the text hidden size.
ModelConfig with_tower(ModelConfig c, int64_t depth, int64_t hidden, int64_t intermediate, int64_t n_heads) {
  model::VisionConfig& v = c.vision;
  v.depth = depth;
  v.hidden = hidden;
  v.intermediate = intermediate;
  v.n_heads = n_heads;
  v.head_dim = hidden / n_heads;
  v.out_hidden = c.hidden;
  return c;
}
// The tiny presets' tower: 2 blocks of width 64, 4 heads of 16.
ModelConfig with_tiny_tower(ModelConfig c) { return with_tower(std::move(c), 2, 64, 128, 4); }

// The same model with its dense MLP replaced by routed experts and a shared expert.
ModelConfig with_moe(ModelConfig c, int64_t n_experts, int64_t top_k, int64_t moe_intermediate,
                     int64_t shared_intermediate) {
  c.model_type = "qwen3_5_moe";
  c.moe = true;
  c.intermediate = 0;
  c.n_experts = n_experts;
  c.top_k = top_k;
  c.moe_intermediate = moe_intermediate;
  c.shared_intermediate = shared_intermediate;
  c.norm_topk = true;
  return c;
}

// A Qwen3 text model (transformers' qwen3): full attention throughout, no output gate, the whole
// head rotated, theta 1e6, head_dim 128, context 40960, no MTP head, no tower.
ModelConfig qwen3(int64_t hidden, int64_t n_layers, int64_t intermediate, int64_t n_heads, int64_t n_kv_heads,
                  bool tied, int64_t vocab) {
  ModelConfig c;
  c.model_type = "qwen3";
  c.family = model::Family::kQwen3;
  c.attn_gate = false;
  c.hidden = hidden;
  c.n_layers = n_layers;
  c.intermediate = intermediate;
  c.vocab = vocab;
  c.eps = 1e-6;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.head_dim = 128;
  c.rotary_dim = 128;
  c.rope_theta = 1e6;
  c.max_position = 40960;
  c.layers.assign(size_t(n_layers), LayerKind::kFullAttention);
  c.tie_word_embeddings = tied;
  return c;
}

// Qwen3-MoE: every layer's MLP routed (128 experts top-8 in the real ones), renormalised, no
// shared expert.
ModelConfig qwen3_moe(ModelConfig c, int64_t n_experts, int64_t top_k, int64_t moe_intermediate) {
  c.model_type = "qwen3_moe";
  c.moe = true;
  c.intermediate = 0;
  c.n_experts = n_experts;
  c.top_k = top_k;
  c.moe_intermediate = moe_intermediate;
  c.norm_topk = true;
  return c;
}

// Qwen3-Next (transformers' qwen3_next): Qwen3.5's hybrid trunk (head_dim 256, rotary 64, theta
// 1e7, L L L F, d_k = d_v = 128) with one-dimensional RoPE, always MoE with a shared expert
// (top-k renormalised), context 262144, one MTP layer, no tower.
ModelConfig qwen3_next(int64_t hidden, int64_t n_layers, int64_t n_heads, int64_t n_kv_heads, int64_t n_k_heads,
                       int64_t n_v_heads, int64_t n_experts, int64_t top_k, int64_t moe_intermediate,
                       int64_t shared_intermediate, int64_t vocab) {
  ModelConfig c = with_moe(dense(hidden, n_layers, 0, n_heads, n_kv_heads, n_k_heads, n_v_heads, false, vocab),
                           n_experts, top_k, moe_intermediate, shared_intermediate);
  c.model_type = "qwen3_next";
  c.family = model::Family::kQwen3Next;
  return c;
}

// Real sizes: vocab 248320 rows, BPE 248044 + 33 added tokens (248044..248076), std 0.02 init.
constexpr int64_t kRealVocab = 248320;
Preset real(const char* name, ModelConfig c) {
  c.eos_token_ids = {added_token_id(248044, "<|endoftext|>")};
  return Preset{name, std::move(c), 248044, /*fan_in_init=*/false};
}

constexpr int64_t kQwen3Vocab = 151936;
Preset qwen3_real(const char* name, ModelConfig c) {
  c.eos_token_ids = {added_token_id(151643, "<|endoftext|>")};
  return Preset{name, std::move(c), 151643, /*fan_in_init=*/false};
}

// The gen_tiny default geometry with a small synthetic tokenizer: BPE vocabulary 4000 (256 byte
// symbols + 3744 merges), added tokens at 4000..4032, vocab rows rounded up to 4096 (multiple of
// 64), fan-in scaled init.
constexpr int64_t kTinyVocab = 4096;
Preset tiny(const char* name, ModelConfig c) {
  c.eos_token_ids = {added_token_id(4000, "<|endoftext|>")};
  return Preset{name, std::move(c), 4000, /*fan_in_init=*/true};
}

std::vector<Preset> all_presets() {
  std::vector<Preset> v;
  v.push_back(tiny("tiny", with_tiny_tower(dense(128, 8, 256, 4, 2, 2, 4, true, kTinyVocab))));
  v.push_back(tiny("tiny-moe", with_tiny_tower(with_moe(dense(128, 8, 0, 4, 2, 2, 4, false, kTinyVocab), 8, 2,
                                                        128, 128))));
  // The 27B's Gated DeltaNet state (48 layers of 48 value heads, 128 x 128: about 151 MB a
  // sequence) on a tiny trunk: what copying, snapshotting and resuming that state costs, without
  // the 27B's weights.
  v.push_back(tiny("27b-state", with_tiny_tower(dense(64, 64, 128, 2, 1, 16, 48, true, kTinyVocab))));
  // Towers (depth, width, MLP, heads) as the released config.json files have them: 768 x 12 for
  // 0.8B, 1024 x 24 for 2B and 4B, 1152 x 27 for 9B, 27B and the MoE.
  v.push_back(real("0.8b", with_tower(dense(1024, 24, 3584, 8, 2, 16, 16, true, kRealVocab), 12, 768, 3072, 12)));
  // 2B: the linear-attention head counts were not found in public sources; 16/16 as in 0.8B.
  v.push_back(real("2b", with_tower(dense(2048, 24, 6144, 8, 2, 16, 16, true, kRealVocab), 24, 1024, 4096, 16)));
  v.push_back(real("4b", with_tower(dense(2560, 32, 9216, 16, 4, 16, 32, true, kRealVocab), 24, 1024, 4096, 16)));
  v.push_back(real("9b", with_tower(dense(4096, 32, 12288, 16, 4, 16, 32, false, kRealVocab), 27, 1152, 4304, 16)));
  v.push_back(real("27b", with_tower(dense(5120, 64, 17408, 24, 4, 16, 48, false, kRealVocab), 27, 1152, 4304, 16)));
  v.push_back(real("35b-a3b", with_tower(with_moe(dense(2048, 40, 0, 16, 2, 16, 32, false, kRealVocab), 256, 8,
                                                  512, 512),
                                         27, 1152, 4304, 16)));
  // Qwen3 at the released config.json geometries: vocab 151936 rows. The synthetic tokenizer is
  // Qwen3.5's kind (its BPE 151643 and added tokens after it), which the real rows hold.
  v.push_back(qwen3_real("qwen3-0.6b", qwen3(1024, 28, 3072, 16, 8, true, kQwen3Vocab)));
  v.push_back(qwen3_real("qwen3-4b", qwen3(2560, 36, 9728, 32, 8, true, kQwen3Vocab)));
  v.push_back(qwen3_real("qwen3-8b", qwen3(4096, 36, 12288, 32, 8, false, kQwen3Vocab)));
  v.push_back(qwen3_real("qwen3-32b", qwen3(5120, 64, 25600, 64, 8, false, kQwen3Vocab)));
  v.push_back(qwen3_real("qwen3-30b-a3b", qwen3_moe(qwen3(2048, 48, 0, 32, 4, false, kQwen3Vocab), 128, 8, 768)));
  // Qwen3-Next-80B-A3B's config.json: 48 layers of width 2048, 16 query heads of 2 kv heads, 16
  // key heads of 32 value heads, 512 experts of 512 (top 10) and a shared expert of 512.
  v.push_back(qwen3_real("qwen3-next-80b-a3b", qwen3_next(2048, 48, 16, 2, 16, 32, 512, 10, 512, 512, kQwen3Vocab)));
  // The tiny trunk for tests, dense and MoE.
  v.push_back(tiny("qwen3-next-tiny", qwen3_next(128, 4, 4, 2, 2, 4, 8, 2, 128, 128, kTinyVocab)));
  v.push_back(tiny("qwen3-tiny", qwen3(128, 4, 256, 4, 2, true, kTinyVocab)));
  v.push_back(tiny("qwen3-tiny-moe", qwen3_moe(qwen3(128, 4, 0, 4, 2, false, kTinyVocab), 8, 2, 128)));
  // Qwen3-0.6B's width (hidden 1024, 16 query and 8 kv heads of 128, MLP 3072) in 2 layers on
  // the tiny tokenizer: the real matrices' shapes at a test's cost (36 M parameters).
  v.push_back(tiny("qwen3-0.6b-2l", qwen3(1024, 2, 3072, 16, 8, true, kTinyVocab)));
  // Qwen3-30B-A3B's width (hidden 2048, 32 query and 4 kv heads of 128, 128 experts of 768, top
  // 8 renormalised, untied head) in 1 layer on the tiny tokenizer: every expert matrix at its real
  // shape (640 M parameters, nearly all in the experts).
  v.push_back(tiny("qwen3-30b-a3b-1l", qwen3_moe(qwen3(2048, 1, 0, 32, 4, false, kTinyVocab), 128, 8, 768)));
  return v;
}

}  // namespace

core::Result<Preset> find_preset(const std::string& name) {
  for (Preset& p : all_presets())
    if (p.name == name) return std::move(p);
  std::string names;
  for (const std::string& n : preset_names()) {
    if (!names.empty()) names += '|';
    names += n;
  }
  return core::error("[synth] unknown preset '" + name + "' (expected " + names + ")");
}

std::vector<std::string> preset_names() {
  std::vector<std::string> v;
  for (const Preset& p : all_presets()) v.push_back(p.name);
  return v;
}

}  // namespace qwen35::tools
