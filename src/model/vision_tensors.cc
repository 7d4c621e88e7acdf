// The vision tower's entries of the tensor table (model/tensor_table.h). HF names are under
// "model.visual.", MLX (mlx-vlm) ones under "vision_tower.", GGUF ones are llama.cpp's mmproj
// names (its converter splits the patch embedding into one tensor per frame, "v.patch_embd.weight"
// and "v.patch_embd.weight.1", and names the merger's linears "mm.0" and "mm.2").
#include "model/tensor_table.h"
#include "model/vision_weights.h"

namespace qwen35::model {
namespace {

using V = VisionWeights;
using B = VisionBlockWeights;
using C = ModelConfig;

Slot floats(std::vector<float>* v) { return Slot{.floats = v}; }

constexpr Tensor kVisionTable[] = {
    // The tower's own: patch embedding, position table, and the merger.
    {.block = Block::kVision, .form = Form::kPatch, .hf = "patch_embed.proj.weight", .gguf = "v.patch_embd.weight",
     .dims = [](const C& c) { return Dims{c.vision.hidden, c.vision.patch_dim()}; }, .mlx_quant = MlxQuant::kNone,
     .vslot = [](V& w, B*) { return floats(&w.patch_w); }},
    {.block = Block::kVision, .form = Form::kVector, .role = Role::kBias, .hf = "patch_embed.proj.bias",
     .gguf = "v.patch_embd.bias", .dims = [](const C& c) { return Dims{c.vision.hidden}; },
     .vslot = [](V& w, B*) { return floats(&w.patch_b); }},
    {.block = Block::kVision, .form = Form::kTable, .role = Role::kPosEmbed, .hf = "pos_embed.weight",
     .gguf = "v.position_embd.weight",
     .dims = [](const C& c) { return Dims{c.vision.n_positions(), c.vision.hidden}; }, .mlx_quant = MlxQuant::kNone,
     .vslot = [](V& w, B*) { return floats(&w.pos); }},
    {.block = Block::kVision, .form = Form::kVector, .role = Role::kLayerNorm, .hf = "merger.norm.weight",
     .gguf = "v.post_ln.weight", .dims = [](const C& c) { return Dims{c.vision.hidden}; },
     .vslot = [](V& w, B*) { return floats(&w.merger_norm_w); }},
    {.block = Block::kVision, .form = Form::kVector, .role = Role::kBias, .hf = "merger.norm.bias",
     .gguf = "v.post_ln.bias", .dims = [](const C& c) { return Dims{c.vision.hidden}; },
     .vslot = [](V& w, B*) { return floats(&w.merger_norm_b); }},
    {.block = Block::kVision, .hf = "merger.linear_fc1.weight", .gguf = "mm.0.weight",
     .dims = [](const C& c) { return Dims{c.vision.merged_dim(), c.vision.merged_dim()}; },
     .vslot = [](V& w, B*) { return Slot{.matrix = &w.merger_fc1}; }},
    {.block = Block::kVision, .form = Form::kVector, .role = Role::kBias, .hf = "merger.linear_fc1.bias",
     .gguf = "mm.0.bias", .dims = [](const C& c) { return Dims{c.vision.merged_dim()}; },
     .vslot = [](V& w, B*) { return floats(&w.merger_fc1_b); }},
    {.block = Block::kVision, .role = Role::kOutProj, .hf = "merger.linear_fc2.weight", .gguf = "mm.2.weight",
     .dims = [](const C& c) { return Dims{c.vision.out_hidden, c.vision.merged_dim()}; },
     .vslot = [](V& w, B*) { return Slot{.matrix = &w.merger_fc2}; }},
    {.block = Block::kVision, .form = Form::kVector, .role = Role::kBias, .hf = "merger.linear_fc2.bias",
     .gguf = "mm.2.bias", .dims = [](const C& c) { return Dims{c.vision.out_hidden}; },
     .vslot = [](V& w, B*) { return floats(&w.merger_fc2_b); }},

    // Every vision block: LayerNorm, fused qkv attention, LayerNorm, GELU MLP.
    {.block = Block::kVisionBlock, .form = Form::kVector, .role = Role::kLayerNorm, .hf = "norm1.weight",
     .gguf = "ln1.weight", .dims = [](const C& c) { return Dims{c.vision.hidden}; },
     .vslot = [](V&, B* b) { return floats(&b->norm1_w); }},
    {.block = Block::kVisionBlock, .form = Form::kVector, .role = Role::kBias, .hf = "norm1.bias",
     .gguf = "ln1.bias", .dims = [](const C& c) { return Dims{c.vision.hidden}; },
     .vslot = [](V&, B* b) { return floats(&b->norm1_b); }},
    {.block = Block::kVisionBlock, .hf = "attn.qkv.weight", .gguf = "attn_qkv.weight",
     .dims = [](const C& c) { return Dims{3 * c.vision.hidden, c.vision.hidden}; },
     .vslot = [](V&, B* b) { return Slot{.matrix = &b->qkv}; }},
    {.block = Block::kVisionBlock, .form = Form::kVector, .role = Role::kBias, .hf = "attn.qkv.bias",
     .gguf = "attn_qkv.bias", .dims = [](const C& c) { return Dims{3 * c.vision.hidden}; },
     .vslot = [](V&, B* b) { return floats(&b->qkv_b); }},
    {.block = Block::kVisionBlock, .role = Role::kOutProj, .hf = "attn.proj.weight", .gguf = "attn_out.weight",
     .dims = [](const C& c) { return Dims{c.vision.hidden, c.vision.hidden}; },
     .vslot = [](V&, B* b) { return Slot{.matrix = &b->proj}; }},
    {.block = Block::kVisionBlock, .form = Form::kVector, .role = Role::kBias, .hf = "attn.proj.bias",
     .gguf = "attn_out.bias", .dims = [](const C& c) { return Dims{c.vision.hidden}; },
     .vslot = [](V&, B* b) { return floats(&b->proj_b); }},
    {.block = Block::kVisionBlock, .form = Form::kVector, .role = Role::kLayerNorm, .hf = "norm2.weight",
     .gguf = "ln2.weight", .dims = [](const C& c) { return Dims{c.vision.hidden}; },
     .vslot = [](V&, B* b) { return floats(&b->norm2_w); }},
    {.block = Block::kVisionBlock, .form = Form::kVector, .role = Role::kBias, .hf = "norm2.bias",
     .gguf = "ln2.bias", .dims = [](const C& c) { return Dims{c.vision.hidden}; },
     .vslot = [](V&, B* b) { return floats(&b->norm2_b); }},
    {.block = Block::kVisionBlock, .hf = "mlp.linear_fc1.weight", .gguf = "ffn_up.weight",
     .dims = [](const C& c) { return Dims{c.vision.intermediate, c.vision.hidden}; },
     .vslot = [](V&, B* b) { return Slot{.matrix = &b->fc1}; }},
    {.block = Block::kVisionBlock, .form = Form::kVector, .role = Role::kBias, .hf = "mlp.linear_fc1.bias",
     .gguf = "ffn_up.bias", .dims = [](const C& c) { return Dims{c.vision.intermediate}; },
     .vslot = [](V&, B* b) { return floats(&b->fc1_b); }},
    {.block = Block::kVisionBlock, .role = Role::kOutProj, .hf = "mlp.linear_fc2.weight", .gguf = "ffn_down.weight",
     .dims = [](const C& c) { return Dims{c.vision.hidden, c.vision.intermediate}; },
     .vslot = [](V&, B* b) { return Slot{.matrix = &b->fc2}; }},
    {.block = Block::kVisionBlock, .form = Form::kVector, .role = Role::kBias, .hf = "mlp.linear_fc2.bias",
     .gguf = "ffn_down.bias", .dims = [](const C& c) { return Dims{c.vision.hidden}; },
     .vslot = [](V&, B* b) { return floats(&b->fc2_b); }},
};

}  // namespace

std::span<const Tensor> vision_tensor_table() { return kVisionTable; }

std::string vision_tensor_prefix(const Tensor& t, Dialect d, int64_t layer) {
  const bool block = t.block == Block::kVisionBlock;
  if (d == Dialect::kGguf) return block ? names::kGgufVisionBlocks + std::to_string(layer) + "." : "";
  const std::string root = d == Dialect::kMlx ? names::kMlxVisual : names::kHfVisual;
  return block ? root + names::kVisionBlocks + std::to_string(layer) + "." : root;
}

void for_each_vision_tensor(const ModelConfig& c, const std::function<void(const Tensor&, int64_t layer)>& fn) {
  for (const Tensor& t : kVisionTable)
    if (t.block == Block::kVision) fn(t, -1);
  for (int64_t i = 0; i < c.vision.depth; ++i)
    for (const Tensor& t : kVisionTable)
      if (t.block == Block::kVisionBlock) fn(t, i);
}

}  // namespace qwen35::model
