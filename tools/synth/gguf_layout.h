// The GGUF form of a synthetic checkpoint: the tensors and metadata llama.cpp's converter
// (convert_hf_to_gguf.py, Qwen3_5TextModel / Qwen3_5MoeTextModel) writes for the HF checkpoint
// `qwen35 synth --format hf` writes at the same preset and seed. Each GGUF tensor names the HF
// tensor its values come from and how they are moved and mapped (the conventions are tabled in
// tests/fixtures/gguf/README.md):
//   - zero-centred RMSNorm weights hold 1 + w (f32); the gated DeltaNet norm holds w;
//   - ssm_a holds -exp(A_log) (f32); ssm_conv1d is [C, 1, K] squeezed to ggml ne [K, C];
//   - when there are more value heads than key heads, every value-head axis (the V rows of
//     attn_qkv and channels of ssm_conv1d, the rows of attn_gate, ssm_alpha, ssm_beta, the
//     elements of ssm_a and ssm_dt.bias, the columns of ssm_out) goes from grouped order (HF
//     head g*r + j reads key head g) to tiled order (position j*nk + g);
//   - the fused HF experts gate_up [E, 2I, H] split into ffn_gate_exps and ffn_up_exps;
//   - the MTP head is block n_layers: nextn.{eh_proj,enorm,hnorm,shared_head_norm} plus a
//     full-attention layer's tensors.
// Types: 1-D tensors, norms, ssm_conv1d, ssm_a, ssm_dt.bias, ffn_gate_inp and
// ffn_gate_inp_shexp stay F32 (as the converter and llama-quantize keep them); every other matrix
// is the chosen type, or F16 when its rows are not whole blocks of it (the converter's fallback).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/result.h"
#include "formats/gguf.h"
#include "tools/synth/gguf_writer.h"
#include "tools/synth/presets.h"
#include "tools/synth/tensor_plan.h"

namespace qwen35::tools {

// How a value is changed on its way from the HF tensor (in f32).
enum class ValueMap : uint8_t { kSame, kPlusOne, kNegExp };

struct GgufTensorSpec {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] contiguous
  formats::GgmlType type = formats::GgmlType::kF32;
  const TensorSpec* src = nullptr;  // the HF tensor (in the plan the layout was made from)
  // GGUF element e is HF element unit_map(e / unit) * unit + e % unit, before col_perm.
  int64_t unit = 1;
  std::function<int64_t(int64_t)> unit_map;  // empty: the identity
  std::vector<int32_t> col_perm;             // within a row: GGUF column c = HF column col_perm[c]
  ValueMap values = ValueMap::kSame;

  int64_t numel() const;
  uint64_t nbytes() const;
};

// The GGUF file types of `qwen35 synth --format gguf --outtype T`: f32, f16, bf16, q8_0, q4_0.
core::Result<formats::GgmlType> gguf_outtype(const std::string& name);

// The HF value head stored at tiled position p (nk key heads, nv value heads).
int64_t grouped_v_head(int64_t p, int64_t nk, int64_t nv);

// The GGUF tensors of the HF checkpoint `hf` (a plan of the HF dialect) in the converter's order,
// matrices as `matrix_type`. The specs point into `hf`, which must outlive them.
core::Result<std::vector<GgufTensorSpec>> gguf_tensors(const Preset& preset, const TensorPlan& hf,
                                                       formats::GgmlType matrix_type);

// The metadata keys the converter writes (general.*, qwen35[moe].*, tokenizer.*), in its order.
// `n_mtp`: MTP layers in the file (nextn_predict_layers, and counted in block_count).
void add_gguf_metadata(GgufWriter* w, const Preset& preset, int64_t n_mtp,
                       formats::GgmlType matrix_type);

}  // namespace qwen35::tools
