#include "tools/synth/gguf_layout.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>

#include "model/tensor_table.h"
#include "tools/synth/gguf_encode.h"

namespace qwen35::tools {

using core::Result;
using formats::GgmlType;

int64_t GgufTensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

uint64_t GgufTensorSpec::nbytes() const {
  return uint64_t(numel() / ne[0]) * gguf_row_bytes(type, ne[0]);
}

Result<GgmlType> gguf_outtype(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (n == "f32") return GgmlType::kF32;
  if (n == "f16") return GgmlType::kF16;
  if (n == "bf16") return GgmlType::kBF16;
  if (n == "q8_0") return GgmlType::kQ8_0;
  if (n == "q4_0") return GgmlType::kQ4_0;
  return core::error("[synth] unknown GGUF outtype '" + name + "' (expected f32|f16|bf16|q8_0|q4_0)");
}

int64_t grouped_v_head(int64_t p, int64_t nk, int64_t nv) {
  const int64_t r = nv / nk, g = p % nk, j = p / nk;
  return g * r + j;
}

namespace {

// Tensors whose type the converter forces to F32 whatever the outtype (besides 1-D ones and norms).
bool forced_f32(const std::string& name) {
  for (const char* s : {"ssm_conv1d.weight", "ssm_a", "ssm_dt.bias", "ffn_gate_inp.weight",
                        "ffn_gate_inp_shexp.weight", "norm.weight"})
    if (name.size() >= std::strlen(s) && name.compare(name.size() - std::strlen(s), std::string::npos, s) == 0)
      return true;
  return false;
}

// The GGUF tensors of the tensor table (model/tensor_table.h) for one config: each entry's ggml
// name, shape and type, the HF tensor its values come from, and how they move on the way.
class Mapper {
 public:
  Mapper(const Preset& p, const TensorPlan& hf, GgmlType t) : c_(p.config), type_(t) {
    for (const TensorSpec& s : hf.tensors) by_name_[s.name] = &s;
  }
  Result<std::vector<GgufTensorSpec>> build(bool mtp);

 private:
  void add(const model::Tensor& t, int64_t layer);
  // The value-head axes llama.cpp tiles (the header's list), by ggml name within the block.
  void tile_value_heads(const std::string& name, GgufTensorSpec* t) const;
  // Row r of a tensor whose rows from `start` on are value heads of `block` rows.
  std::function<int64_t(int64_t)> head_rows(int64_t start, int64_t block) const;

  const model::ModelConfig& c_;
  GgmlType type_;
  std::map<std::string, const TensorSpec*> by_name_;
  std::vector<GgufTensorSpec> out_;
  std::string missing_;  // the first HF tensor the plan lacks
};

void Mapper::add(const model::Tensor& e, int64_t layer) {
  using model::Dialect;
  using model::Fused;
  if (e.fused == Fused::kA) return;  // ssm_ba holds b and a: written whole at b
  GgufTensorSpec t;
  t.name = model::tensor_prefix(e, Dialect::kGguf, "", c_, layer) + e.gguf;
  const std::string src = model::tensor_prefix(e, Dialect::kHf, text_prefix(c_, Dialect::kHf), c_, layer) + e.hf;
  const auto it = by_name_.find(src);
  if (it == by_name_.end() && missing_.empty()) missing_ = src;
  t.src = it == by_name_.end() ? nullptr : it->second;
  const model::Dims d = e.dims(c_);
  if (e.form == model::Form::kExperts) t.ne = {d.in, d.out, c_.n_experts};
  else if (d.in > 0) t.ne = {d.in, d.out};
  else t.ne = {d.out};
  t.unit = t.ne[0];
  // Qwen3.5's converter stores zero-centred norms as 1+w; Qwen3's norms are stored as applied.
  t.values = e.role == model::Role::kNorm && c_.hf_norms_zero_centred() ? ValueMap::kPlusOne
             : e.role == model::Role::kDecay ? ValueMap::kNegExp
                                             : ValueMap::kSame;
  if (e.half != model::Half::kWhole) {  // HF gate_up [E, 2I, H]: per expert I gate rows, I up rows
    const int64_t I = d.out;
    const bool up = e.half == model::Half::kUp;
    t.unit_map = [I, up](int64_t r) { return (r / I) * 2 * I + (up ? I : 0) + r % I; };
  }
  // Qwen3-Next: attn_qkv and attn_gate are in_proj_qkvz's rows regrouped (the converter's
  // current layout), ssm_ba is in_proj_ba whole; value heads stay in HF's grouped order.
  if (e.fused == Fused::kB) t.ne = {d.in, model::fused_rows(c_, e.fused)};
  if (e.fused == Fused::kQkv || e.fused == Fused::kZ) {
    std::vector<int64_t> rows;
    for (const model::RowRun& run : model::fused_part_runs(c_, e.fused))
      for (int64_t r = 0; r < run.count; ++r) rows.push_back(run.first + r);
    t.unit_map = [rows](int64_t r) { return rows[size_t(r)]; };
  }
  if (c_.family == model::Family::kQwen35) tile_value_heads(e.gguf, &t);
  const bool f32 = t.ne.size() == 1 || forced_f32(t.name) || type_ == GgmlType::kF32;
  t.type = f32 ? GgmlType::kF32 : gguf_row_fits(type_, t.ne[0]) ? type_ : GgmlType::kF16;
  out_.push_back(std::move(t));
}

void Mapper::tile_value_heads(const std::string& name, GgufTensorSpec* t) const {
  const int64_t dv = c_.d_v, qk = 2 * c_.n_k_heads * c_.d_k;
  if (name == "attn_qkv.weight" || name == "ssm_conv1d.weight") {
    t->unit_map = head_rows(qk, dv);
  } else if (name == "attn_gate.weight") {
    t->unit_map = head_rows(0, dv);
  } else if (name == "ssm_beta.weight" || name == "ssm_alpha.weight") {
    t->unit_map = head_rows(0, 1);
  } else if (name == "ssm_dt.bias" || name == "ssm_a") {
    t->unit = 1;
    t->unit_map = head_rows(0, 1);
  } else if (name == "ssm_out.weight") {
    if (const auto cols = head_rows(0, dv))
      for (int64_t col = 0; col < c_.n_v_heads * dv; ++col) t->col_perm.push_back(int32_t(cols(col)));
  }
}

std::function<int64_t(int64_t)> Mapper::head_rows(int64_t start, int64_t block) const {
  if (c_.n_v_heads == c_.n_k_heads) return {};
  const int64_t nk = c_.n_k_heads, nv = c_.n_v_heads;
  return [=](int64_t r) {
    if (r < start) return r;
    const int64_t p = (r - start) / block, d = (r - start) % block;
    return start + grouped_v_head(p, nk, nv) * block + d;
  };
}

Result<std::vector<GgufTensorSpec>> Mapper::build(bool mtp) {
  const bool head = !c_.tie_word_embeddings.value_or(true);
  model::for_each_tensor_at(c_, head, mtp, [&](const model::Tensor& e, int64_t layer) { add(e, layer); });
  if (!missing_.empty())
    return core::error("[synth] the HF plan has no tensor '" + missing_ + "' for the GGUF layout");
  return std::move(out_);
}

}  // namespace

Result<std::vector<GgufTensorSpec>> gguf_tensors(const Preset& preset, const TensorPlan& hf,
                                                 GgmlType matrix_type) {
  const model::ModelConfig& c = preset.config;
  // llama.cpp's qwen35 and qwen3next graphs take the value head dim from ssm.state_size (= d_k),
  // and repeat key heads over value heads.
  if (c.n_linear_layers() > 0 && (c.d_k != c.d_v || c.n_k_heads <= 0 || c.n_v_heads % c.n_k_heads != 0))
    return core::error("[synth] preset '" + preset.name +
                       "' has no GGUF layout (llama.cpp needs d_k == d_v and n_v_heads a multiple of n_k_heads)");
  // llama.cpp's converter drops Qwen3-Next's MTP head.
  return Mapper(preset, hf, matrix_type).build(hf.has_mtp && c.family != model::Family::kQwen3Next);
}

}  // namespace qwen35::tools
