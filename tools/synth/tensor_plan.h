// The tensors of a synthetic checkpoint: names, dtypes, shapes and how their values are drawn.
// Values are a pure function of (seed, tensor, element index), so output bytes do not depend on
// write order or chunking.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/tensor_names.h"
#include "tools/synth/presets.h"

namespace qwen35::tools {

using model::Dialect;

enum class Init : uint8_t {
  kNormal,       // a + b * N(0, 1) (Irwin-Hall approximation, |z| <= 3.47)
  kUniform,      // U(a, b)
  kQuantWords,   // uint32 words of uniformly random bits = uniform codes at any bit width
  kQuantScales,  // +-s0 * U(0.75, 1.25) with s0 = a (random sign: MLX scales may be negative)
  kQuantBiases,  // -bf16(scale) * (2^bits - 1) / 2, scale redrawn from the scales' stream
};

struct TensorSpec {
  std::string name;
  core::DType dtype = core::DType::kBF16;  // kBF16, kF32 or kU32
  std::vector<int64_t> shape;
  Init init = Init::kNormal;
  float a = 0.0f;
  float b = 0.0f;
  int bits = 0;         // quantized tensors
  uint64_t stream = 0;  // RNG stream (hash of the name; biases share their scales' stream)

  uint64_t numel() const;
  uint64_t nbytes() const;
};

struct QuantOverride {
  int bits = 0;
  int group_size = 0;
};

struct TensorPlan {
  std::vector<TensorSpec> tensors;                       // sorted by name
  std::map<std::string, QuantOverride> quant_overrides;  // MLX module path -> override
  bool has_mtp = false;
  bool has_vision = false;  // the vision tower's tensors are in the plan
};

struct PlanOptions {
  Dialect dialect = Dialect::kHf;
  int bits = 4;
  int group_size = 64;
  // The MTP head (when the preset has one): auto writes it in HF checkpoints only, as mlx-lm
  // exports drop it.
  enum class Mtp { kAuto, kOn, kOff } mtp = Mtp::kAuto;
  // The vision tower of the preset's config.vision (HF "model.visual.*", MLX "vision_tower.*").
  bool vision = false;
};

// The text model's tensor prefix a checkpoint of `c` in dialect `d` uses.
std::string text_prefix(const model::ModelConfig& c, Dialect d);
TensorPlan build_tensor_plan(const Preset& preset, const PlanOptions& opts);

// 64-bit FNV-1a: the per-tensor RNG stream id.
uint64_t name_hash(const std::string& s);

// Writes elements [begin, begin + count) of `t` as little-endian bytes to `out`
// (count * dtype size bytes).
void fill_tensor(const TensorSpec& t, uint64_t seed, uint64_t begin, uint64_t count, uint8_t* out);

}  // namespace qwen35::tools
