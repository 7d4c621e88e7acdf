#include "tools/synth/gguf_layout.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>

#include "tools/synth/gguf_encode.h"

namespace qwen35::tools {

using core::Result;
using formats::GgmlType;
using namespace model::names;  // HF module names: kQProj, kMlp, ...

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

class Mapper {
 public:
  Mapper(const Preset& p, const TensorPlan& hf, GgmlType t) : c_(p.config), type_(t) {
    for (const TensorSpec& s : hf.tensors) by_name_[s.name] = &s;
  }
  Result<std::vector<GgufTensorSpec>> build(bool mtp);

 private:
  // Adds GGUF `name` with `ne` from HF `src`; returns it for the caller to add a mapping.
  GgufTensorSpec& add(const std::string& name, const std::string& src, std::vector<int64_t> ne,
                      ValueMap v = ValueMap::kSame);
  void attention(const std::string& hp, const std::string& gp);
  void deltanet(const std::string& hp, const std::string& gp);
  void mlp(const std::string& hp, const std::string& gp);
  void moe(const std::string& hp, const std::string& gp);
  void norms(const std::string& hp, const std::string& gp);
  // Row r of a tensor whose rows from `start` on are value heads of `block` rows.
  std::function<int64_t(int64_t)> head_rows(int64_t start, int64_t block) const;

  const model::ModelConfig& c_;
  GgmlType type_;
  std::map<std::string, const TensorSpec*> by_name_;
  std::vector<GgufTensorSpec> out_;
  std::string missing_;  // the first HF tensor the plan lacks
};

GgufTensorSpec& Mapper::add(const std::string& name, const std::string& src, std::vector<int64_t> ne,
                            ValueMap v) {
  GgufTensorSpec t;
  t.name = name;
  const auto it = by_name_.find(src);
  if (it == by_name_.end() && missing_.empty()) missing_ = src;
  t.src = it == by_name_.end() ? nullptr : it->second;
  t.unit = ne[0];
  t.ne = std::move(ne);
  t.values = v;
  const bool f32 = t.ne.size() == 1 || forced_f32(name) || type_ == GgmlType::kF32;
  t.type = f32 ? GgmlType::kF32 : gguf_row_fits(type_, t.ne[0]) ? type_ : GgmlType::kF16;
  out_.push_back(std::move(t));
  return out_.back();
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

void Mapper::norms(const std::string& hp, const std::string& gp) {
  const int64_t H = c_.hidden;
  add(gp + "attn_norm.weight", hp + kInputNorm + kWeight, {H}, ValueMap::kPlusOne);
  add(gp + "post_attention_norm.weight", hp + kPostNorm + kWeight, {H}, ValueMap::kPlusOne);
}

void Mapper::attention(const std::string& hp, const std::string& gp) {
  const std::string a = hp + kSelfAttn;
  const int64_t H = c_.hidden, hd = c_.head_dim;
  add(gp + "attn_q.weight", a + kQProj + kWeight, {H, 2 * c_.n_heads * hd});  // [q | gate] per head
  add(gp + "attn_k.weight", a + kKProj + kWeight, {H, c_.n_kv_heads * hd});
  add(gp + "attn_v.weight", a + kVProj + kWeight, {H, c_.n_kv_heads * hd});
  add(gp + "attn_output.weight", a + kOProj + kWeight, {c_.n_heads * hd, H});
  add(gp + "attn_q_norm.weight", a + kQNorm + kWeight, {hd}, ValueMap::kPlusOne);
  add(gp + "attn_k_norm.weight", a + kKNorm + kWeight, {hd}, ValueMap::kPlusOne);
}

void Mapper::deltanet(const std::string& hp, const std::string& gp) {
  const std::string a = hp + kLinearAttn;
  const int64_t H = c_.hidden, nv = c_.n_v_heads, dv = c_.d_v, C = c_.conv_channels();
  const int64_t qk = 2 * c_.n_k_heads * c_.d_k;
  add(gp + "attn_qkv.weight", a + kInProjQkv + kWeight, {H, C}).unit_map = head_rows(qk, dv);
  add(gp + "attn_gate.weight", a + kInProjZ + kWeight, {H, nv * dv}).unit_map = head_rows(0, dv);
  add(gp + "ssm_beta.weight", a + kInProjB + kWeight, {H, nv}).unit_map = head_rows(0, 1);
  add(gp + "ssm_alpha.weight", a + kInProjA + kWeight, {H, nv}).unit_map = head_rows(0, 1);
  add(gp + "ssm_conv1d.weight", a + kConv1d + kWeight, {c_.conv_kernel, C}).unit_map = head_rows(qk, dv);
  GgufTensorSpec& dt = add(gp + "ssm_dt.bias", a + kDtBias, {nv});
  dt.unit = 1;
  dt.unit_map = head_rows(0, 1);
  GgufTensorSpec& A = add(gp + "ssm_a", a + kALog, {nv}, ValueMap::kNegExp);
  A.unit = 1;
  A.unit_map = head_rows(0, 1);
  add(gp + "ssm_norm.weight", a + kGatedNorm + kWeight, {dv});  // not zero-centred: no +1
  GgufTensorSpec& o = add(gp + "ssm_out.weight", a + kOutProj + kWeight, {nv * dv, H});
  if (const auto cols = head_rows(0, dv))
    for (int64_t col = 0; col < nv * dv; ++col) o.col_perm.push_back(int32_t(cols(col)));
}

void Mapper::mlp(const std::string& hp, const std::string& gp) {
  if (c_.moe) return moe(hp, gp);
  const std::string m = hp + kMlp;
  const int64_t H = c_.hidden, I = c_.intermediate;
  add(gp + "ffn_gate.weight", m + kGateProj + kWeight, {H, I});
  add(gp + "ffn_up.weight", m + kUpProj + kWeight, {H, I});
  add(gp + "ffn_down.weight", m + kDownProj + kWeight, {I, H});
}

void Mapper::moe(const std::string& hp, const std::string& gp) {
  const std::string m = hp + kMlp;
  const int64_t H = c_.hidden, E = c_.n_experts, I = c_.moe_intermediate, S = c_.shared_intermediate;
  add(gp + "ffn_gate_inp.weight", m + kRouter + kWeight, {H, E});
  // HF gate_up [E, 2I, H]: per expert the I gate rows, then the I up rows.
  for (const bool up : {false, true}) {
    GgufTensorSpec& t = add(gp + (up ? "ffn_up_exps.weight" : "ffn_gate_exps.weight"),
                            m + kHfExpertsGateUp, {H, I, E});
    t.unit_map = [I, up](int64_t r) { return (r / I) * 2 * I + (up ? I : 0) + r % I; };
  }
  add(gp + "ffn_down_exps.weight", m + kHfExpertsDown, {I, H, E});
  const std::string s = m + kSharedExpert;
  add(gp + "ffn_gate_shexp.weight", s + kGateProj + kWeight, {H, S});
  add(gp + "ffn_up_shexp.weight", s + kUpProj + kWeight, {H, S});
  add(gp + "ffn_down_shexp.weight", s + kDownProj + kWeight, {S, H});
  add(gp + "ffn_gate_inp_shexp.weight", m + kSharedExpertGate + kWeight, {H, 1});  // HF [1, H]
}

Result<std::vector<GgufTensorSpec>> Mapper::build(bool mtp) {
  const std::string P = model::kHfNames.prefix;
  const int64_t H = c_.hidden, V = c_.vocab;
  add("token_embd.weight", P + kEmbed + kWeight, {H, V});
  add("output_norm.weight", P + kFinalNorm + kWeight, {H}, ValueMap::kPlusOne);
  if (!c_.tie_word_embeddings.value_or(true))
    add("output.weight", std::string(model::kHfNames.lm_head) + kWeight, {H, V});
  for (int64_t i = 0; i < c_.n_layers; ++i) {
    const std::string hp = layer(P, i), gp = "blk." + std::to_string(i) + ".";
    norms(hp, gp);
    if (c_.layers[size_t(i)] == model::LayerKind::kFullAttention) {
      attention(hp, gp);
    } else {
      deltanet(hp, gp);
    }
    mlp(hp, gp);
  }
  if (mtp) {
    const std::string gp = "blk." + std::to_string(c_.n_layers) + ".";
    add(gp + "nextn.eh_proj.weight", std::string(kMtpFc) + kWeight, {2 * H, H});
    add(gp + "nextn.enorm.weight", std::string(kMtpPreFcNormEmbedding) + kWeight, {H}, ValueMap::kPlusOne);
    add(gp + "nextn.hnorm.weight", std::string(kMtpPreFcNormHidden) + kWeight, {H}, ValueMap::kPlusOne);
    add(gp + "nextn.shared_head_norm.weight", std::string(kMtpNorm) + kWeight, {H}, ValueMap::kPlusOne);
    norms(kMtpLayer, gp);
    attention(kMtpLayer, gp);
    mlp(kMtpLayer, gp);
  }
  if (!missing_.empty())
    return core::error("[synth] the HF plan has no tensor '" + missing_ + "' for the GGUF layout");
  return std::move(out_);
}

}  // namespace

Result<std::vector<GgufTensorSpec>> gguf_tensors(const Preset& preset, const TensorPlan& hf,
                                                 GgmlType matrix_type) {
  const model::ModelConfig& c = preset.config;
  // llama.cpp's qwen35 graph takes the value head dim from ssm.state_size (= d_k), and tiles value
  // heads over key heads.
  if (c.d_k != c.d_v || c.n_k_heads <= 0 || c.n_v_heads % c.n_k_heads != 0)
    return core::error("[synth] preset '" + preset.name +
                       "' has no GGUF layout (llama.cpp needs d_k == d_v and n_v_heads a multiple of n_k_heads)");
  return Mapper(preset, hf, matrix_type).build(hf.has_mtp);
}

}  // namespace qwen35::tools
