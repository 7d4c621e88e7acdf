#include "model/tensor_table.h"

#include <cstdlib>

#include "model/weights.h"

namespace qwen35::model {
namespace {

using M = ModelWeights;
using L = LayerWeights;
using C = ModelConfig;

// Each entry: where it belongs, how it binds, its role, its names (HF, MLX when different, GGUF),
// its shape, and where it is stored. Within a block, entries are in binding order, which is the
// order problems are reported in.
constexpr Tensor kTable[] = {
    // The text model.
    {.block = Block::kModel, .role = Role::kEmbedding, .hf = "embed_tokens.weight", .gguf = "token_embd.weight",
     .dims = [](const C& c) { return Dims{c.vocab, c.hidden}; }, .summary = "embed_tokens",
     .slot = [](M& w, L*) { return Slot{.matrix = &w.embed}; }},
    {.block = Block::kHead, .role = Role::kEmbedding, .hf = "lm_head.weight",
     .mlx = "language_model.lm_head.weight", .gguf = "output.weight",
     .dims = [](const C& c) { return Dims{c.vocab, c.hidden}; }, .int8 = true, .summary = "lm_head",
     .slot = [](M& w, L*) { return Slot{.matrix = &w.head}; }},
    {.block = Block::kModel, .form = Form::kVector, .role = Role::kNorm, .hf = "norm.weight",
     .gguf = "output_norm.weight", .dims = [](const C& c) { return Dims{c.hidden}; },
     .slot = [](M& w, L*) { return Slot{.floats = &w.final_norm}; }},

    // Every decoder layer.
    {.block = Block::kLayer, .form = Form::kVector, .role = Role::kNorm, .hf = "input_layernorm.weight",
     .gguf = "attn_norm.weight", .dims = [](const C& c) { return Dims{c.hidden}; },
     .slot = [](M&, L* l) { return Slot{.floats = &l->input_norm}; }},
    {.block = Block::kLayer, .form = Form::kVector, .role = Role::kNorm,
     .hf = "post_attention_layernorm.weight", .gguf = "post_attention_norm.weight",
     .dims = [](const C& c) { return Dims{c.hidden}; },
     .slot = [](M&, L* l) { return Slot{.floats = &l->post_norm}; }, .family = FamilyOnly::kHybrid},
    // The same norm in llama.cpp's qwen3 and qwen3moe architectures, which name it ffn_norm.
    {.block = Block::kLayer, .form = Form::kVector, .role = Role::kNorm,
     .hf = "post_attention_layernorm.weight", .gguf = "ffn_norm.weight",
     .dims = [](const C& c) { return Dims{c.hidden}; },
     .slot = [](M&, L* l) { return Slot{.floats = &l->post_norm}; }, .family = FamilyOnly::kQwen3},

    // Full attention. With the output gate (Qwen3.5) q_proj holds the query and the gate,
    // interleaved per head; without it (Qwen3) the query alone.
    {.block = Block::kFullAttn, .hf = "self_attn.q_proj.weight", .gguf = "attn_q.weight",
     .dims = [](const C& c) { return Dims{(c.attn_gate ? 2 : 1) * c.n_heads * c.head_dim, c.hidden}; }, .int8 = true,
     .summary = "self_attn.q/k/v/o_proj", .slot = [](M&, L* l) { return Slot{.matrix = &l->attn.q_proj}; }},
    {.block = Block::kFullAttn, .hf = "self_attn.k_proj.weight", .gguf = "attn_k.weight",
     .dims = [](const C& c) { return Dims{c.n_kv_heads * c.head_dim, c.hidden}; }, .int8 = true,
     .summary = "self_attn.q/k/v/o_proj", .slot = [](M&, L* l) { return Slot{.matrix = &l->attn.k_proj}; }},
    {.block = Block::kFullAttn, .hf = "self_attn.v_proj.weight", .gguf = "attn_v.weight",
     .dims = [](const C& c) { return Dims{c.n_kv_heads * c.head_dim, c.hidden}; }, .int8 = true,
     .summary = "self_attn.q/k/v/o_proj", .slot = [](M&, L* l) { return Slot{.matrix = &l->attn.v_proj}; }},
    {.block = Block::kFullAttn, .role = Role::kOutProj, .hf = "self_attn.o_proj.weight", .gguf = "attn_output.weight",
     .dims = [](const C& c) { return Dims{c.hidden, c.n_heads * c.head_dim}; }, .int8 = true,
     .summary = "self_attn.q/k/v/o_proj", .slot = [](M&, L* l) { return Slot{.matrix = &l->attn.o_proj}; }},
    {.block = Block::kFullAttn, .form = Form::kVector, .role = Role::kNorm, .hf = "self_attn.q_norm.weight",
     .gguf = "attn_q_norm.weight", .dims = [](const C& c) { return Dims{c.head_dim}; },
     .slot = [](M&, L* l) { return Slot{.floats = &l->attn.q_norm}; }},
    {.block = Block::kFullAttn, .form = Form::kVector, .role = Role::kNorm, .hf = "self_attn.k_norm.weight",
     .gguf = "attn_k_norm.weight", .dims = [](const C& c) { return Dims{c.head_dim}; },
     .slot = [](M&, L* l) { return Slot{.floats = &l->attn.k_norm}; }},

    // Gated DeltaNet.
    {.block = Block::kLinearAttn, .hf = "linear_attn.in_proj_qkv.weight", .gguf = "attn_qkv.weight",
     .dims = [](const C& c) { return Dims{c.conv_channels(), c.hidden}; }, .int8 = true,
     .summary = "linear_attn.in_proj_qkv/z", .slot = [](M&, L* l) { return Slot{.matrix = &l->gdn.in_proj_qkv}; },
     .family = FamilyOnly::kQwen35},
    {.block = Block::kLinearAttn, .hf = "linear_attn.in_proj_z.weight", .gguf = "attn_gate.weight",
     .dims = [](const C& c) { return Dims{c.n_v_heads * c.d_v, c.hidden}; }, .int8 = true,
     .summary = "linear_attn.in_proj_qkv/z", .slot = [](M&, L* l) { return Slot{.matrix = &l->gdn.in_proj_z}; },
     .family = FamilyOnly::kQwen35},
    {.block = Block::kLinearAttn, .hf = "linear_attn.in_proj_b.weight", .gguf = "ssm_beta.weight",
     .dims = [](const C& c) { return Dims{c.n_v_heads, c.hidden}; }, .int8 = true,
     .summary = "linear_attn.in_proj_a/b", .slot = [](M&, L* l) { return Slot{.matrix = &l->gdn.in_proj_b}; },
     .family = FamilyOnly::kQwen35},
    {.block = Block::kLinearAttn, .hf = "linear_attn.in_proj_a.weight", .gguf = "ssm_alpha.weight",
     .dims = [](const C& c) { return Dims{c.n_v_heads, c.hidden}; }, .int8 = true,
     .summary = "linear_attn.in_proj_a/b", .slot = [](M&, L* l) { return Slot{.matrix = &l->gdn.in_proj_a}; },
     .family = FamilyOnly::kQwen35},
    // Qwen3-Next's fused forms of the four above (model/fused_proj.h), regrouped at load. GGUF:
    // llama.cpp's converter now writes attn_qkv and attn_gate regrouped as here (value heads in
    // HF's grouped order, not Qwen3.5's tiled one); older files hold ssm_in; ssm_ba always fused.
    {.block = Block::kLinearAttn, .hf = "linear_attn.in_proj_qkvz.weight", .gguf = "attn_qkv.weight",
     .gguf_fused = "ssm_in.weight", .dims = [](const C& c) { return Dims{c.conv_channels(), c.hidden}; }, .int8 = true,
     .summary = "linear_attn.in_proj_qkvz", .slot = [](M&, L* l) { return Slot{.matrix = &l->gdn.in_proj_qkv}; },
     .family = FamilyOnly::kQwen3Next, .fused = Fused::kQkv},
    {.block = Block::kLinearAttn, .hf = "linear_attn.in_proj_qkvz.weight", .gguf = "attn_gate.weight",
     .gguf_fused = "ssm_in.weight", .dims = [](const C& c) { return Dims{c.n_v_heads * c.d_v, c.hidden}; }, .int8 = true,
     .summary = "linear_attn.in_proj_qkvz", .slot = [](M&, L* l) { return Slot{.matrix = &l->gdn.in_proj_z}; },
     .family = FamilyOnly::kQwen3Next, .fused = Fused::kZ},
    {.block = Block::kLinearAttn, .hf = "linear_attn.in_proj_ba.weight", .gguf = "ssm_ba.weight",
     .gguf_fused = "ssm_ba.weight", .dims = [](const C& c) { return Dims{c.n_v_heads, c.hidden}; }, .int8 = true,
     .summary = "linear_attn.in_proj_ba", .slot = [](M&, L* l) { return Slot{.matrix = &l->gdn.in_proj_b}; },
     .family = FamilyOnly::kQwen3Next, .fused = Fused::kB},
    {.block = Block::kLinearAttn, .hf = "linear_attn.in_proj_ba.weight", .gguf = "ssm_ba.weight",
     .gguf_fused = "ssm_ba.weight", .dims = [](const C& c) { return Dims{c.n_v_heads, c.hidden}; }, .int8 = true,
     .summary = "linear_attn.in_proj_ba", .slot = [](M&, L* l) { return Slot{.matrix = &l->gdn.in_proj_a}; },
     .family = FamilyOnly::kQwen3Next, .fused = Fused::kA},
    {.block = Block::kLinearAttn, .role = Role::kOutProj, .hf = "linear_attn.out_proj.weight",
     .gguf = "ssm_out.weight", .dims = [](const C& c) { return Dims{c.hidden, c.n_v_heads * c.d_v}; },
     .int8 = true, .summary = "linear_attn.out_proj",
     .slot = [](M&, L* l) { return Slot{.matrix = &l->gdn.out_proj}; }},
    {.block = Block::kLinearAttn, .form = Form::kConv, .role = Role::kConvTaps, .hf = "linear_attn.conv1d.weight",
     .gguf = "ssm_conv1d.weight", .dims = [](const C& c) { return Dims{c.conv_channels(), c.conv_kernel}; },
     .slot = [](M&, L* l) { return Slot{.floats = &l->gdn.conv}; }},
    {.block = Block::kLinearAttn, .form = Form::kVector, .role = Role::kDecay, .hf = "linear_attn.A_log",
     .gguf = "ssm_a", .dims = [](const C& c) { return Dims{c.n_v_heads}; },
     .slot = [](M&, L* l) { return Slot{.floats = &l->gdn.decay}; }},
    {.block = Block::kLinearAttn, .form = Form::kVector, .role = Role::kDtBias, .hf = "linear_attn.dt_bias",
     .gguf = "ssm_dt.bias", .dims = [](const C& c) { return Dims{c.n_v_heads}; },
     .slot = [](M&, L* l) { return Slot{.floats = &l->gdn.dt_bias}; }},
    {.block = Block::kLinearAttn, .form = Form::kVector, .role = Role::kGatedNorm, .hf = "linear_attn.norm.weight",
     .gguf = "ssm_norm.weight", .dims = [](const C& c) { return Dims{c.d_v}; },
     .slot = [](M&, L* l) { return Slot{.floats = &l->gdn.norm}; }},

    // Dense SwiGLU MLP.
    {.block = Block::kDenseMlp, .hf = "mlp.gate_proj.weight", .gguf = "ffn_gate.weight",
     .dims = [](const C& c) { return Dims{c.intermediate, c.hidden}; }, .int8 = true,
     .summary = "mlp.gate/up/down_proj", .slot = [](M&, L* l) { return Slot{.matrix = &l->mlp.gate_proj}; }},
    {.block = Block::kDenseMlp, .hf = "mlp.up_proj.weight", .gguf = "ffn_up.weight",
     .dims = [](const C& c) { return Dims{c.intermediate, c.hidden}; }, .int8 = true,
     .summary = "mlp.gate/up/down_proj", .slot = [](M&, L* l) { return Slot{.matrix = &l->mlp.up_proj}; }},
    {.block = Block::kDenseMlp, .role = Role::kOutProj, .hf = "mlp.down_proj.weight", .gguf = "ffn_down.weight",
     .dims = [](const C& c) { return Dims{c.hidden, c.intermediate}; }, .int8 = true,
     .summary = "mlp.gate/up/down_proj", .slot = [](M&, L* l) { return Slot{.matrix = &l->mlp.down_proj}; }},

    // MoE: the router (exact in fast mode) and the routed experts. HF fuses gate and up into one
    // bare tensor [E, 2I, H]; MLX stores SwitchGLU modules; GGUF either.
    {.block = Block::kMoe, .role = Role::kRouter, .hf = "mlp.gate.weight", .gguf = "ffn_gate_inp.weight",
     .dims = [](const C& c) { return Dims{c.n_experts, c.hidden}; }, .mlx_quant = MlxQuant::kGate8,
     .summary = "mlp.gate (router)", .slot = [](M&, L* l) { return Slot{.matrix = &l->moe.router}; }},
    {.block = Block::kMoe, .form = Form::kExperts, .hf = "mlp.experts.gate_up_proj",
     .mlx = "mlp.switch_mlp.gate_proj.weight", .gguf = "ffn_gate_exps.weight", .gguf_fused = "ffn_gate_up_exps.weight",
     .half = Half::kGate, .dims = [](const C& c) { return Dims{c.moe_intermediate, c.hidden}; }, .int8 = true,
     .summary = "mlp.experts", .slot = [](M&, L* l) { return Slot{.experts = &l->moe.experts}; },
     .expert = &MlpWeights::gate_proj, .hf_expert = "gate_proj.weight"},
    {.block = Block::kMoe, .form = Form::kExperts, .hf = "mlp.experts.gate_up_proj",
     .mlx = "mlp.switch_mlp.up_proj.weight", .gguf = "ffn_up_exps.weight", .gguf_fused = "ffn_gate_up_exps.weight",
     .half = Half::kUp, .dims = [](const C& c) { return Dims{c.moe_intermediate, c.hidden}; }, .int8 = true,
     .summary = "mlp.experts", .slot = [](M&, L* l) { return Slot{.experts = &l->moe.experts}; },
     .expert = &MlpWeights::up_proj, .hf_expert = "up_proj.weight"},
    {.block = Block::kMoe, .form = Form::kExperts, .role = Role::kOutProj, .hf = "mlp.experts.down_proj",
     .mlx = "mlp.switch_mlp.down_proj.weight", .gguf = "ffn_down_exps.weight",
     .dims = [](const C& c) { return Dims{c.hidden, c.moe_intermediate}; }, .int8 = true,
     .summary = "mlp.experts", .slot = [](M&, L* l) { return Slot{.experts = &l->moe.experts}; },
     .expert = &MlpWeights::down_proj, .hf_expert = "down_proj.weight"},

    // The shared expert and its sigmoid gate (exact in fast mode; some checkpoints have none).
    {.block = Block::kSharedExpert, .hf = "mlp.shared_expert.gate_proj.weight", .gguf = "ffn_gate_shexp.weight",
     .dims = [](const C& c) { return Dims{c.shared_intermediate, c.hidden}; }, .int8 = true,
     .summary = "mlp.shared_expert", .slot = [](M&, L* l) { return Slot{.matrix = &l->moe.shared.gate_proj}; }},
    {.block = Block::kSharedExpert, .hf = "mlp.shared_expert.up_proj.weight", .gguf = "ffn_up_shexp.weight",
     .dims = [](const C& c) { return Dims{c.shared_intermediate, c.hidden}; }, .int8 = true,
     .summary = "mlp.shared_expert", .slot = [](M&, L* l) { return Slot{.matrix = &l->moe.shared.up_proj}; }},
    {.block = Block::kSharedExpert, .role = Role::kOutProj, .hf = "mlp.shared_expert.down_proj.weight",
     .gguf = "ffn_down_shexp.weight", .dims = [](const C& c) { return Dims{c.hidden, c.shared_intermediate}; },
     .int8 = true, .summary = "mlp.shared_expert",
     .slot = [](M&, L* l) { return Slot{.matrix = &l->moe.shared.down_proj}; }},
    {.block = Block::kSharedExpert, .hf = "mlp.shared_expert_gate.weight", .gguf = "ffn_gate_inp_shexp.weight",
     .dims = [](const C& c) { return Dims{1, c.hidden}; }, .optional = true, .mlx_quant = MlxQuant::kGate8,
     .summary = "mlp.shared_expert_gate",
     .slot = [](M&, L* l) { return Slot{.matrix = &l->moe.shared_gate, .present = &l->moe.has_shared_gate}; }},

    // The MTP head's own tensors (its layer is a full-attention layer of the entries above).
    {.block = Block::kMtp, .hf = "mtp.fc.weight", .gguf = "nextn.eh_proj.weight",
     .dims = [](const C& c) { return Dims{c.hidden, 2 * c.hidden}; }, .int8 = true, .mlx_quant = MlxQuant::kNone,
     .slot = [](M& w, L*) { return Slot{.matrix = &w.mtp->fc}; }},
    {.block = Block::kMtp, .form = Form::kVector, .role = Role::kNorm, .hf = "mtp.pre_fc_norm_embedding.weight",
     .gguf = "nextn.enorm.weight", .dims = [](const C& c) { return Dims{c.hidden}; },
     .slot = [](M& w, L*) { return Slot{.floats = &w.mtp->norm_embedding}; }},
    {.block = Block::kMtp, .form = Form::kVector, .role = Role::kNorm, .hf = "mtp.pre_fc_norm_hidden.weight",
     .gguf = "nextn.hnorm.weight", .dims = [](const C& c) { return Dims{c.hidden}; },
     .slot = [](M& w, L*) { return Slot{.floats = &w.mtp->norm_hidden}; }},
    {.block = Block::kMtp, .form = Form::kVector, .role = Role::kNorm, .hf = "mtp.norm.weight",
     .gguf = "nextn.shared_head_norm.weight", .dims = [](const C& c) { return Dims{c.hidden}; },
     .slot = [](M& w, L*) { return Slot{.floats = &w.mtp->norm}; }},
};

}  // namespace

std::span<const Tensor> tensor_table() { return kTable; }

const Tensor& table_entry(Block block, Role role) {
  for (const Tensor& t : kTable)
    if (t.block == block && t.role == role) return t;
  std::abort();
}

bool in_family(const Tensor& t, const ModelConfig& c) {
  switch (t.family) {
    case FamilyOnly::kAll: return true;
    case FamilyOnly::kQwen35: return c.family == Family::kQwen35;
    case FamilyOnly::kQwen3: return c.family == Family::kQwen3;
    case FamilyOnly::kQwen3Next: return c.family == Family::kQwen3Next;
    case FamilyOnly::kHybrid: return c.family != Family::kQwen3;
  }
  return false;
}

bool in_layer(const Tensor& t, const ModelConfig& c, LayerKind kind) {
  if (!in_family(t, c)) return false;
  switch (t.block) {
    case Block::kLayer: return true;
    case Block::kFullAttn: return kind == LayerKind::kFullAttention;
    case Block::kLinearAttn: return kind == LayerKind::kLinearAttention;
    case Block::kDenseMlp: return !c.moe;
    case Block::kMoe: return c.moe;
    case Block::kSharedExpert: return c.moe && c.shared_intermediate > 0;
    case Block::kModel:
    case Block::kHead:
    case Block::kMtp:
    case Block::kVision:
    case Block::kVisionBlock: return false;
  }
  return false;
}

std::string tensor_prefix(const Tensor& t, Dialect d, const std::string& text_prefix,
                          const ModelConfig& c, int64_t layer) {
  if (d == Dialect::kGguf) {
    if (t.block == Block::kModel || t.block == Block::kHead) return "";
    return "blk." + std::to_string(t.block == Block::kMtp ? c.n_layers : layer) + ".";
  }
  switch (t.block) {
    case Block::kModel: return text_prefix;
    case Block::kHead:
    case Block::kMtp: return "";
    default: return layer == c.n_layers ? std::string(names::kMtpLayer) : names::layer(text_prefix, layer);
  }
}

void for_each_tensor_at(const ModelConfig& c, bool head, bool mtp,
                        const std::function<void(const Tensor&, int64_t layer)>& fn) {
  for (const Tensor& t : kTable) {
    const bool wanted =
        t.block == Block::kModel || (t.block == Block::kHead && head) || (t.block == Block::kMtp && mtp);
    if (wanted && in_family(t, c)) fn(t, -1);
  }
  auto layer = [&](int64_t i, LayerKind kind) {
    for (const Tensor& t : kTable)
      if (in_layer(t, c, kind)) fn(t, i);
  };
  for (int64_t i = 0; i < c.n_layers; ++i) layer(i, c.layers[size_t(i)]);
  if (mtp) layer(c.n_layers, LayerKind::kFullAttention);
}

void for_each_tensor(const ModelConfig& c, Dialect d, const std::string& text_prefix, bool head, bool mtp,
                     const std::function<void(const Tensor&, const std::string& prefix)>& fn) {
  for_each_tensor_at(c, head, mtp, [&](const Tensor& t, int64_t layer) {
    fn(t, tensor_prefix(t, d, text_prefix, c, layer));
  });
}

std::string module_of(const std::string& name) {
  const std::string w = names::kWeight;
  if (name.size() >= w.size() && name.compare(name.size() - w.size(), w.size(), w) == 0)
    return name.substr(0, name.size() - w.size());
  return name;
}

}  // namespace qwen35::model
