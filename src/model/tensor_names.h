// The naming conventions around the tensor table (model/tensor_table.h), which spells every
// tensor's name: the dialects, the text model's prefix in each, and the suffixes.
//
// A name is <block prefix><name in the table>, e.g. "model.language_model." + "layers.3." +
// "self_attn.q_proj.weight". HF and MLX differ only in the text prefix, the untied output head
// and how the routed experts are stored; GGUF uses ggml names under "blk.N.".
#pragma once

#include <cstdint>
#include <string>

namespace qwen35::model {

enum class Dialect { kHf, kMlx, kGguf };  // kGguf: ggml names (model/gguf_weights.cc)

// What differs between the safetensors dialects outside the table.
struct DialectNames {
  const char* prefix;  // of the text model: embed_tokens, layers.N.*, norm
};

inline constexpr DialectNames kHfNames{"model.language_model."};
inline constexpr DialectNames kMlxNames{"language_model.model."};
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

std::string layer(const std::string& prefix, int64_t i);  // "<prefix>layers.<i>."

// The multi-token-prediction head (HF and MLX; outside the text prefix): its tensors start with
// kMtp, and its one decoder layer, named like a full-attention layer, is under kMtpLayer.
inline constexpr char kMtp[] = "mtp.";
inline constexpr char kMtpLayer[] = "mtp.layers.0.";

// The vision tower: HF and MLX (mlx-vlm) prefixes, and a vision block under them; GGUF mmproj
// files name blocks "v.blk.N.".
inline constexpr char kHfVisual[] = "model.visual.";
inline constexpr char kMlxVisual[] = "vision_tower.";
inline constexpr char kVisionBlocks[] = "blocks.";
inline constexpr char kGgufVisionBlocks[] = "v.blk.";

}  // namespace names
}  // namespace qwen35::model
