// The tensor names of Qwen3.5 checkpoints, spelled once: the weight binder looks them up and the
// synthetic checkpoint writer (tools/synth) writes them.
//
// A name is <text prefix><module path>[<suffix>], e.g. "model.language_model." +
// "layers.3.self_attn.q_proj" + ".weight". The dialects differ only in the text prefix, the
// untied output head and how the routed experts are stored; the modules inside a decoder layer
// are named alike in both.
#pragma once

#include <cstdint>
#include <string>

namespace qwen35::model {

enum class Dialect { kHf, kMlx, kGguf };  // kGguf: ggml names (model/gguf_weights.cc)

// What differs between the dialects.
struct DialectNames {
  const char* prefix;   // of the text model: embed_tokens, layers.N.*, norm
  const char* lm_head;  // the untied output head module
};

inline constexpr DialectNames kHfNames{"model.language_model.", "lm_head"};
inline constexpr DialectNames kMlxNames{"language_model.model.", "language_model.lm_head"};
const DialectNames& dialect_names(Dialect d);

namespace names {

// Prefixes the binder also accepts: text-only HF exports and bare names.
inline constexpr const char* kTextOnlyPrefix = "model.";
inline constexpr const char* kBarePrefix = "";

// Suffixes of a module's tensors: its weight, and for MLX affine quantization the per-group
// scales and biases.
inline constexpr char kWeight[] = ".weight";
inline constexpr char kScales[] = ".scales";
inline constexpr char kBiases[] = ".biases";

// Modules of the text model, after the prefix.
inline constexpr char kEmbed[] = "embed_tokens";
inline constexpr char kFinalNorm[] = "norm";
std::string layer(const std::string& prefix, int64_t i);  // "<prefix>layers.<i>."

// Modules of a decoder layer, after layer(); the three blocks end in '.'.
inline constexpr char kInputNorm[] = "input_layernorm";
inline constexpr char kPostNorm[] = "post_attention_layernorm";
inline constexpr char kSelfAttn[] = "self_attn.";
inline constexpr char kLinearAttn[] = "linear_attn.";
inline constexpr char kMlp[] = "mlp.";

// Gated attention, after kSelfAttn.
inline constexpr char kQProj[] = "q_proj";  // query and output gate, interleaved per head
inline constexpr char kKProj[] = "k_proj";
inline constexpr char kVProj[] = "v_proj";
inline constexpr char kOProj[] = "o_proj";
inline constexpr char kQNorm[] = "q_norm";
inline constexpr char kKNorm[] = "k_norm";

// Gated DeltaNet, after kLinearAttn. A_log and dt_bias are bare tensors (no suffix).
inline constexpr char kInProjQkv[] = "in_proj_qkv";
inline constexpr char kInProjZ[] = "in_proj_z";
inline constexpr char kInProjB[] = "in_proj_b";
inline constexpr char kInProjA[] = "in_proj_a";
inline constexpr char kOutProj[] = "out_proj";
inline constexpr char kConv1d[] = "conv1d";
inline constexpr char kALog[] = "A_log";
inline constexpr char kDtBias[] = "dt_bias";
inline constexpr char kGatedNorm[] = "norm";

// SwiGLU MLP, after kMlp (also inside the shared expert and MLX's switch_mlp).
inline constexpr char kGateProj[] = "gate_proj";
inline constexpr char kUpProj[] = "up_proj";
inline constexpr char kDownProj[] = "down_proj";

// MoE, after kMlp.
inline constexpr char kRouter[] = "gate";
inline constexpr char kSharedExpert[] = "shared_expert.";
inline constexpr char kSharedExpertGate[] = "shared_expert_gate";
// HF fuses the routed experts into two tensors (no suffix): gate_up [E, 2I, H], gate rows
// first, and down [E, H, I].
inline constexpr char kHfExpertsGateUp[] = "experts.gate_up_proj";
inline constexpr char kHfExpertsDown[] = "experts.down_proj";
// MLX stores them as SwitchGLU modules of [E, out, in] weights: kMlxSwitchMlp + kGateProj, ...
inline constexpr char kMlxSwitchMlp[] = "switch_mlp.";

// The multi-token-prediction head (HF only; outside the text prefix). Its one decoder layer
// has the modules of a full-attention layer.
inline constexpr char kMtp[] = "mtp.";
inline constexpr char kMtpFc[] = "mtp.fc";
inline constexpr char kMtpNorm[] = "mtp.norm";
inline constexpr char kMtpPreFcNormEmbedding[] = "mtp.pre_fc_norm_embedding";
inline constexpr char kMtpPreFcNormHidden[] = "mtp.pre_fc_norm_hidden";
inline constexpr char kMtpLayer[] = "mtp.layers.0.";

}  // namespace names
}  // namespace qwen35::model
