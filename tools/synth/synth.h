// Synthetic random-weight Qwen3.5 checkpoints at real geometries (`qwen35 synth`).
#pragma once

#include <string>

#include "core/result.h"

namespace qwen35::tools {

struct SynthOptions {
  std::string preset = "tiny";  // tiny, 0.8b, 2b, 4b, 9b, 27b, 35b-a3b
  std::string format = "hf";    // hf (bf16) or mlx (affine)
  int bits = 4;                 // mlx only: 4 or 8
  int group_size = 64;
  uint64_t seed = 1;
  std::string out_dir;
  bool progress = true;
};

core::Status write_synthetic_checkpoint(const SynthOptions& opts);

}  // namespace qwen35::tools
