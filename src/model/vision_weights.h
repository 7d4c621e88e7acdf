// The bound weights of the vision tower (model/vision.h runs them). Matrices stay in their
// stored type; vectors, the position table and the patch embedding are fp32 copies (the patch
// embedding's layout differs per dialect: HF [out, C, T, P, P], MLX channels-last, GGUF one
// tensor per frame; it is always rearranged into [out, C·T·P·P] rows in (C, T, P, P) order).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "kernels/ops.h"
#include "model/vision_config.h"

namespace qwen35::model {

struct VisionBlockWeights {
  std::vector<float> norm1_w, norm1_b, norm2_w, norm2_b;  // LayerNorm [hidden]
  kernels::Matrix qkv, proj, fc1, fc2;                    // [3h, h], [h, h], [i, h], [h, i]
  std::vector<float> qkv_b, proj_b, fc1_b, fc2_b;
};

struct VisionWeights {
  VisionConfig config;
  std::vector<float> patch_w;   // [hidden, patch_dim], (C, T, P, P) order
  kernels::Matrix patch;        // f32 view of patch_w (set by the binder)
  std::vector<float> patch_b;   // [hidden]
  std::vector<float> pos;       // [grid_side², hidden]
  std::vector<VisionBlockWeights> blocks;
  std::vector<float> merger_norm_w, merger_norm_b;  // [hidden], per patch row
  kernels::Matrix merger_fc1, merger_fc2;           // [4h, 4h], [out_hidden, 4h]
  std::vector<float> merger_fc1_b, merger_fc2_b;
  size_t bytes = 0;    // bytes of the bound tensors as stored
  int64_t n_params = 0;
  std::string source;  // where it was bound from: the checkpoint, or the mmproj file
  std::shared_ptr<const formats::GgufModel> gguf;  // owns an mmproj file's mapping
  std::shared_ptr<const formats::TensorStore> store;  // owns the files of a tower loaded alone

  void finish();  // points `patch` at patch_w once bound
};

}  // namespace qwen35::model
