// Weight binding: finds every tensor of the tensor table (model/tensor_table.h) in its
// checkpoint's dialect (HF `model.language_model.*`, MLX `language_model.model.*`, text-only
// `model.*`, GGUF ggml names), checks
// presence, dtype and shape (quantized shapes included) before any compute, and exposes them as
// kernel views over the mapped files. Small vectors (norms, conv taps, A_log, dt_bias) are
// converted to fp32 once; matrices stay in their stored type.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/mmap.h"
#include "core/result.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/fused_proj.h"
#include "model/tensor_names.h"
#include "model/vision_weights.h"

namespace qwen35::model {

using kernels::Matrix;

struct AttentionWeights {
  Matrix q_proj, k_proj, v_proj, o_proj;
  std::vector<float> q_norm, k_norm;  // 1+w folded in for the HF dialect
};

struct DeltaNetWeights {
  Matrix in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj;
  std::vector<float> conv;  // [channels, kernel]
  std::vector<float> decay;  // A = -exp(A_log) [nv]
  std::vector<float> dt_bias, norm;
};

struct MlpWeights {
  Matrix gate_proj, up_proj, down_proj;
};

struct MoeWeights {
  Matrix router;                        // [n_experts, hidden]
  std::vector<MlpWeights> experts;      // views into the stacked tensors
  bool has_shared = false;
  MlpWeights shared;
  bool has_shared_gate = false;
  Matrix shared_gate;                   // [1, hidden]
};

struct LayerWeights {
  LayerKind kind = LayerKind::kLinearAttention;
  std::vector<float> input_norm, post_norm;
  AttentionWeights attn;
  DeltaNetWeights gdn;
  MlpWeights mlp;
  MoeWeights moe;
};

// The multi-token-prediction head (model/mtp.cc): row p combines the trunk's hidden state at p
// (after its final norm) with the embedding of token p+1, as fc(concat(norm_embedding(e),
// norm_hidden(h))), the embedding first; then one gated full-attention decoder layer with the
// trunk's kind of MLP (dense, or MoE), `norm`, and the trunk's head. It predicts token p+2.
struct MtpWeights {
  Matrix fc;  // [hidden, 2·hidden]
  std::vector<float> norm_embedding, norm_hidden, norm;  // 1+w folded for the HF dialect
  LayerWeights layer;
};

struct ModelWeights {
  ModelConfig config;
  Dialect dialect = Dialect::kHf;
  std::string prefix;  // e.g. "model.language_model."
  bool tied = false;
  Matrix embed;        // [vocab, hidden]
  Matrix head;         // [vocab, hidden] (== embed when tied)
  std::vector<float> final_norm;
  std::vector<LayerWeights> layers;
  size_t weight_bytes = 0;     // bytes of all bound tensors
  size_t stream_bytes = 0;     // bytes read per decoded token (untied embedding and unrouted
                               // experts excluded; MoE counts top_k/n_experts of the experts)
  int64_t n_params = 0;        // parameters of the text model (no MTP, no vision)
  bool has_mtp = false;        // the checkpoint has mtp.* tensors
  std::unique_ptr<MtpWeights> mtp;  // bound MTP head; null: none, or unusable (mtp_problem)
  std::string mtp_problem;     // why an MTP head that is there cannot be used
  size_t mtp_bytes = 0;        // bytes of the bound MTP head (not in weight_bytes)
  // The vision tower (model/vision_weights.cc, or an mmproj file: model/gguf_vision.cc); null
  // when there is none or it cannot be used, and then vision_problem says why ("no vision
  // tower: ..." for a text-only checkpoint).
  std::unique_ptr<VisionWeights> vision;
  std::string vision_problem;
  // The trunk layers this process holds, [held_first, end_held()): all of them, or a pipeline
  // rank's share (model/pipeline_plan.h keep_share), whose other layers are left unbound. The
  // embedding is held with layer 0, the final norm, the head and the MTP head with the last.
  int64_t held_first = 0;
  int64_t held_end = -1;  // -1: through the last layer
  int64_t end_held() const { return held_end < 0 ? int64_t(layers.size()) : held_end; }
  // GGUF files store the value heads of Gated DeltaNet in tiled order (model/gguf_weights.cc).
  bool tiled_v_heads = false;
  // Matrices regrouped at load (Qwen3-Next's fused DeltaNet projections, model/fused_proj.h).
  OwnedBuffers owned;
  formats::TensorStore store;  // owns the mappings (safetensors)
  std::shared_ptr<const formats::GgufModel> gguf;  // owns the mappings and the metadata (GGUF)

  // Reads every page of the weights once (TensorStore::prefault).
  void prefault(const std::function<void(size_t, size_t)>& progress) const;
  // The checkpoint's files as mapped (model/resident.h).
  std::vector<const core::MappedFile*> mappings() const;
};

// A checkpoint directory (safetensors, HF or MLX) or a .gguf file (the first shard of a split set).
core::Result<std::unique_ptr<ModelWeights>> load_weights(const std::string& path,
                                                         core::LoadMode mode = core::LoadMode::kMmap);
// The vision tower of a safetensors checkpoint (model/vision_weights.cc).
// Whether `store` has tower tensors, and under which dialect's names.
bool has_vision_tensors(const formats::TensorStore& store, Dialect* d);
// Binds the tower of c.vision (admitted by make_vision_config) under dialect d's names; the first
// missing, misshapen or mistyped tensor is the error, naming it.
core::Result<std::unique_ptr<VisionWeights>> bind_vision(const formats::TensorStore& store, const ModelConfig& c,
                                                         Dialect d);
// The tower's config from config.json (vision_config through the gate, and the root token ids).
core::Result<VisionConfig> vision_config_of(const formats::HfConfig& hf, int64_t text_hidden);
// The tower alone, from a checkpoint directory (config.json with vision_config, its safetensors):
// for tools and tests; checkpoints holding only model.visual.* tensors load too.
core::Result<std::unique_ptr<VisionWeights>> load_vision_weights(const std::string& dir,
                                                                 core::LoadMode mode = core::LoadMode::kMmap);
// load_weights' step for the tower: sets w.vision and w.config.vision, or w.vision_problem.
void attach_vision(const formats::HfConfig& hf, ModelWeights& w);

// llama.cpp's mmproj files (model/gguf_vision.cc): the tower of a GGUF model, in a file of its
// own. Binds the file at `path` against the text model's config (its projection width must be
// the text hidden size).
core::Result<std::unique_ptr<VisionWeights>> load_mmproj(const std::string& path, const ModelConfig& text,
                                                         core::LoadMode mode = core::LoadMode::kMmap);
// Binds the mmproj file at `path` as w's tower (w.vision, w.config.vision), or records why not in
// w.vision_problem (the text model stays usable).
void attach_mmproj(ModelWeights& w, const std::string& path);
// The mmproj file beside a model GGUF: the one "mmproj*.gguf" in its directory; "" when there is
// none, an error when there are several (the caller must name one).
core::Result<std::string> find_mmproj(const std::string& model_gguf);

// A .gguf file (model/gguf_weights.cc).
core::Result<std::unique_ptr<ModelWeights>> load_gguf_weights(const std::string& path,
                                                              core::LoadMode mode = core::LoadMode::kMmap);

}  // namespace qwen35::model
