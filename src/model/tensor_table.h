// The tensor table: every tensor of a Qwen3.5 checkpoint, listed once, with what each consumer
// needs to know about it — where it belongs (model, every layer, full or linear attention, dense
// MLP, MoE, shared expert, MTP head), its shape in terms of the config, its role (which fixes
// how a value is converted and how synth draws it), its name in each dialect, and where the bound
// weight is stored. The HF/MLX binder (weights.cc), the GGUF binder (gguf_weights.cc), fast
// mode's int8 forms (int8_forms.cc), `qwen35 inspect` and `qwen35 synth` (tools/synth) all walk
// this table, so a new tensor (an image tower, a new family's block) is one entry here.
//
// Names are relative to the entry's block prefix (tensor_prefix): HF/MLX layers
// "<text prefix>layers.N.", the MTP layer "mtp.layers.0.", the MTP head's own tensors and the
// untied head the root; GGUF layers "blk.N.", the MTP head "blk.<n_layers>.". Names include their
// suffix (".weight", ".bias" or none); an MLX-quantized matrix's module is its name without
// ".weight", with ".scales" and ".biases" beside it.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/fused_proj.h"
#include "model/tensor_names.h"

namespace qwen35::kernels {
struct Matrix;
}

namespace qwen35::model {

struct ModelWeights;
struct LayerWeights;
struct MlpWeights;
struct VisionWeights;
struct VisionBlockWeights;

// Where a tensor belongs, which decides when it exists and what its names are relative to.
enum class Block : uint8_t {
  kModel,         // once, under the text prefix: embedding table, final norm
  kHead,          // the untied output head: outside the text prefix; absent when tied
  kLayer,         // every decoder layer (and the MTP head's layer)
  kFullAttn,      // gated full-attention layers (and the MTP head's layer)
  kLinearAttn,    // Gated DeltaNet layers
  kDenseMlp,      // every layer of a dense model
  kMoe,           // every layer of an MoE model: router and routed experts
  kSharedExpert,  // MoE models with shared_intermediate > 0
  kMtp,           // the MTP head's own tensors (fc and norms), when the checkpoint has one
  // The vision tower (vision_tensor_table(), not tensor_table()): its own tensors (patch
  // embedding, position table, merger), and those of every vision block.
  kVision,
  kVisionBlock,
};

// How a tensor is bound.
enum class Form : uint8_t {
  kMatrix,   // [out, in] in its stored type (float, MLX affine, ggml block)
  kExperts,  // n_experts matrices [out, in] stacked into one tensor, bound as one matrix of
             // n_experts·out rows and sliced per expert
  kVector,   // [out] floats, converted to fp32
  kConv,     // depthwise conv taps, [out = channels, in = kernel], converted to fp32
  kPatch,    // the vision patch embedding (a Conv3d with kernel = stride), converted to fp32
             // [out, in = C·T·P·P] in (C, T, P, P) order (model/vision_weights.h)
  kTable,    // a 2-D float table [out, in] converted to fp32 (the vision position table)
};

// What a tensor is, for value conversion and synthetic initialization.
enum class Role : uint8_t {
  kEmbedding,  // token rows: the embedding table and the head
  kInProj,     // a projection reading the hidden state (or a block's input)
  kOutProj,    // a projection writing back into the residual stream
  kRouter,     // the MoE router
  kNorm,       // an RMSNorm weight applied as 1+w: HF stores w, MLX and GGUF store 1+w
  kGatedNorm,  // the Gated DeltaNet output norm: a plain weight in every dialect
  kConvTaps,   // HF [C, 1, K], MLX [C, K, 1], GGUF ne [K, C]
  kDecay,      // HF and MLX store A_log (bound as A = -exp(A_log)); GGUF stores A
  kDtBias,
  kLayerNorm,  // a LayerNorm weight, applied as is in every dialect
  kBias,       // a linear layer's or a LayerNorm's bias
  kPosEmbed,   // the vision position table
};

// Which half of each expert's rows a kExperts tensor is when gate and up are stored fused
// ([E, 2·out, in], gate rows first): always in HF, when gguf_fused is present in GGUF.
enum class Half : uint8_t { kWhole, kGate, kUp };

// How mlx-lm exports a matrix (what synth writes and MLX checkpoints look like).
enum class MlxQuant : uint8_t {
  kDefault,  // the checkpoint's bits and group when `in` divides into groups
  kGate8,    // 8-bit, group 64 (mlx-lm's quant_predicate for the router and the shared gate)
  kNone,     // kept bf16 (the MTP fc)
};

// Which families an entry belongs to, where a tensor's name differs between them (llama.cpp
// names the post-attention norm post_attention_norm in qwen35 and qwen3next, ffn_norm in qwen3;
// Qwen3-Next fuses the DeltaNet input projections that Qwen3.5 stores apart).
enum class FamilyOnly : uint8_t { kAll, kQwen35, kQwen3, kQwen3Next, kHybrid /* Qwen3.5 and Qwen3-Next */ };

struct Dims {
  int64_t out = 0;
  int64_t in = 0;  // 0 for vectors
};

// Where a bound tensor is stored in ModelWeights (exactly one of the first three is set).
struct Slot {
  kernels::Matrix* matrix = nullptr;           // kMatrix
  std::vector<float>* floats = nullptr;        // kVector, kConv
  std::vector<MlpWeights>* experts = nullptr;  // kExperts: sized n_experts by the binder
  bool* present = nullptr;                     // optional tensors: set when bound
};

struct Tensor {
  Block block = Block::kModel;
  Form form = Form::kMatrix;
  Role role = Role::kInProj;
  const char* hf = nullptr;          // HF name
  const char* mlx = nullptr;         // MLX name; nullptr: as HF
  const char* gguf = nullptr;        // ggml name
  // kExperts: ggml name of the fused gate+up tensor. An entry with `fused` set: ggml name of the
  // fused tensor it is cut from, bound when `gguf` is absent (or when it is `gguf` itself).
  const char* gguf_fused = nullptr;
  Half half = Half::kWhole;
  Dims (*dims)(const ModelConfig&) = nullptr;  // per expert for kExperts
  bool optional = false;  // bound only when present (the MoE shared-expert gate)
  bool int8 = false;      // a matmul reads it: fast mode may put an int8 form in its place
  MlxQuant mlx_quant = MlxQuant::kDefault;
  const char* summary = nullptr;  // `inspect`'s quantization line it counts in (nullptr: none)
  Slot (*slot)(ModelWeights&, LayerWeights*) = nullptr;  // the layer for layer blocks
  kernels::Matrix MlpWeights::*expert = nullptr;         // kExperts: the matrix per expert
  // Vision entries (vision_tensor_table()) are stored here instead of through `slot`; the block
  // for kVisionBlock.
  Slot (*vslot)(VisionWeights&, VisionBlockWeights*) = nullptr;
  FamilyOnly family = FamilyOnly::kAll;
  // kExperts: the HF name of one expert's matrix under "mlp.experts.<e>.", for checkpoints that
  // store each expert apart (Qwen3-MoE) rather than stacked.
  const char* hf_expert = nullptr;
  // Qwen3-Next's fused DeltaNet projections (model/fused_proj.h): the part of the fused tensor
  // (hf/mlx always, GGUF gguf_fused) this entry's matrix is regrouped from. `dims` are the part's.
  Fused fused = Fused::kNone;

  const char* name(Dialect d) const { return d == Dialect::kGguf ? gguf : d == Dialect::kMlx && mlx ? mlx : hf; }
  bool is_layer() const {
    return block != Block::kModel && block != Block::kHead && block != Block::kMtp && !is_vision();
  }
  bool is_vision() const { return block == Block::kVision || block == Block::kVisionBlock; }
};

// Every tensor, in binding order: model-level ones first, then a layer's, then the MTP head's.
std::span<const Tensor> tensor_table();

// The first entry of `block` with `role`, in table order (for the few a binder names: the
// embedding table, the head, the conv taps, a block's first projection); aborts when the table
// has none, a bug any load would show.
const Tensor& table_entry(Block block, Role role);

// Whether an entry belongs to c's family.
bool in_family(const Tensor& t, const ModelConfig& c);
// Whether a layer-block tensor is in a layer of `kind` under `c` (and c's family).
bool in_layer(const Tensor& t, const ModelConfig& c, LayerKind kind);

// The prefix of `t`'s name for layer `layer` (ignored for model-level blocks; c.n_layers names
// the MTP head's layer). `text_prefix` is the HF/MLX text model's prefix.
std::string tensor_prefix(const Tensor& t, Dialect d, const std::string& text_prefix,
                          const ModelConfig& c, int64_t layer);

// Calls fn(entry, prefix) for every tensor a checkpoint of `c` in dialect `d` has, in table
// order: the model's, the untied head's when `head`, every layer's, then, when `mtp`, the MTP
// head's own and its layer's. A fused gate+up expert tensor comes twice (once per half).
void for_each_tensor(const ModelConfig& c, Dialect d, const std::string& text_prefix, bool head, bool mtp,
                     const std::function<void(const Tensor&, const std::string& prefix)>& fn);
// The same walk, handing out each tensor's layer (-1 for the model's, the head's and the MTP
// head's own tensors; c.n_layers for the MTP head's layer), for a consumer that names a tensor
// in two dialects (tensor_prefix).
void for_each_tensor_at(const ModelConfig& c, bool head, bool mtp,
                        const std::function<void(const Tensor&, int64_t layer)>& fn);

// The vision tower's tensors (model/vision_tensors.cc), in binding order: the tower's own, then
// one vision block's. Dims are in terms of ModelConfig::vision.
std::span<const Tensor> vision_tensor_table();

// The prefix of a vision tensor's name in dialect `d` for vision block `layer` (ignored for
// kVision): HF "model.visual." (+ "blocks.N."), MLX "vision_tower." (+ "blocks.N."), GGUF
// (llama.cpp's mmproj files) "" for the tower's own (their names are whole) and "v.blk.N.".
std::string vision_tensor_prefix(const Tensor& t, Dialect d, int64_t layer);

// Calls fn(entry, layer) for every tensor of a tower of c.vision: the tower's own (layer -1),
// then each block's, in table order.
void for_each_vision_tensor(const ModelConfig& c, const std::function<void(const Tensor&, int64_t layer)>& fn);

// The MLX quantization module of a tensor name: the name without ".weight".
std::string module_of(const std::string& name);

}  // namespace qwen35::model
