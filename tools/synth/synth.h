// Synthetic random-weight Qwen3.5 checkpoints at real geometries (`qwen35 synth`).
//
// HF and MLX: writes DIR/config.json, generation_config.json, tokenizer.json,
// tokenizer_config.json and the weights (model.safetensors, or shards +
// model.safetensors.index.json above max_shard_bytes). Existing *.safetensors files and the index
// in DIR are removed first. GGUF: writes one .gguf file in llama.cpp's layout holding the values
// of the HF checkpoint of the same preset and seed (gguf_layout.h). Output bytes are a pure
// function of (preset, format, bits, group size, outtype, seed).
#pragma once

#include <cstdint>
#include <string>

#include "core/result.h"
#include "tools/synth/presets.h"

namespace qwen35::tools {

struct SynthOptions {
  std::string preset = "tiny";  // tiny, tiny-moe, 0.8b, 2b, 4b, 9b, 27b, 35b-a3b
  std::string format = "hf";    // hf (bf16), mlx (affine) or gguf
  int bits = 4;                 // mlx only: 2, 3, 4, 5, 6 or 8
  int group_size = 64;          // mlx only: 32, 64 or 128
  std::string outtype;          // gguf only: f32, f16 (when empty), bf16, q8_0 or q4_0
  // The MTP head (mtp.*): auto (hf and gguf: yes, as the converter; mlx: no, as mlx-lm), on, off.
  std::string mtp = "auto";
  // The vision tower: auto (hf: yes; mlx: no, as mlx-lm exports; gguf: no), on, off. A
  // checkpoint without it is text-only. GGUF: "on" writes the tower as llama.cpp does, in an
  // mmproj file beside the model file (mmproj-NAME.gguf).
  std::string vision = "auto";
  // The tower's geometry from another preset (its width, heads and MLP, projecting into this
  // preset's hidden size), and its depth (0: the preset's): real-width towers on a tiny text
  // model, for tests and fixtures.
  std::string vision_preset;
  int64_t vision_depth = 0;
  uint64_t seed = 1;
  std::string out_dir;  // hf, mlx: the directory; gguf: the file, NAME.gguf
  bool progress = true;                          // progress bar on stderr
  uint64_t max_shard_bytes = uint64_t(4) << 30;  // shard above this (4 GiB)
};

struct SynthSummary {
  int64_t n_tensors = 0;
  uint64_t total_bytes = 0;  // tensor data
  int n_files = 0;           // safetensors (or gguf) files
};

core::Result<SynthSummary> write_synthetic_checkpoint(const SynthOptions& opts);
// The same at a given geometry (opts.preset is not read): tests make variants of the presets.
core::Result<SynthSummary> write_synthetic_checkpoint(const SynthOptions& opts, const Preset& preset);

}  // namespace qwen35::tools
