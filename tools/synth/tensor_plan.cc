#include "tools/synth/tensor_plan.h"

#include <algorithm>
#include <cmath>

namespace qwen35::tools {

uint64_t TensorSpec::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= uint64_t(d);
  return n;
}

uint64_t TensorSpec::nbytes() const { return numel() * core::dtype_size(dtype); }

namespace {

using core::DType;
using namespace model::names;  // module names: kQProj, kMlp, ...

// How a weight's standard deviation is chosen (see Preset::fan_in_init).
enum class Kind { kLinear, kOut, kEmbed, kRouter };

class Planner {
 public:
  Planner(const Preset& p, const PlanOptions& o)
      : p_(p), c_(p.config), o_(o), names_(model::dialect_names(o.dialect)) {}

  TensorPlan build();

 private:
  bool mlx() const { return o_.dialect == Dialect::kMlx; }
  float std_for(Kind kind, int64_t fan_in) const;

  TensorSpec& add(const std::string& name, DType dt, std::vector<int64_t> shape, Init init, float a,
                  float b) {
    TensorSpec t;
    t.name = name;
    t.dtype = dt;
    t.shape = std::move(shape);
    t.init = init;
    t.a = a;
    t.b = b;
    t.stream = name_hash(name);
    plan_.tensors.push_back(std::move(t));
    return plan_.tensors.back();
  }
  // A Linear / Embedding / SwitchLinear weight (2-D [out, in] or 3-D [E, out, in]). MLX quantizes
  // it when `in` is divisible by the group size; `ov` forces bits/group (MoE router, shared gate).
  void linear(const std::string& module, std::vector<int64_t> shape, Kind kind,
              const QuantOverride* ov = nullptr);
  void norm(const std::string& module, int64_t n, bool zero_centred);
  void mlp(const std::string& p);  // p ends in kMlp
  void linear_attention(const std::string& p);
  void full_attention(const std::string& p);
  void mtp();

  const Preset& p_;
  const model::ModelConfig& c_;
  const PlanOptions& o_;
  const model::DialectNames& names_;
  TensorPlan plan_;
};

float Planner::std_for(Kind kind, int64_t fan_in) const {
  if (!p_.fan_in_init) return 0.02f;
  const double f = double(fan_in);
  switch (kind) {
    case Kind::kLinear:
      return float(1.0 / std::sqrt(f));
    case Kind::kOut:
      return float(0.7 / std::sqrt(f));
    case Kind::kEmbed:
      return float(2.0 / std::sqrt(double(c_.hidden)));
    case Kind::kRouter:
      return float(2.0 / std::sqrt(f));
  }
  return 0.02f;
}

void Planner::linear(const std::string& module, std::vector<int64_t> shape, Kind kind,
                     const QuantOverride* ov) {
  const std::string full = module + kWeight;
  const int64_t in = shape.back();
  const float sd = std_for(kind, in);
  const int bits = ov ? ov->bits : o_.bits;
  const int gs = ov ? ov->group_size : o_.group_size;
  if (!mlx() || in % gs != 0) {
    add(full, DType::kBF16, std::move(shape), Init::kNormal, 0.0f, sd);
    return;
  }
  if (ov) plan_.quant_overrides[module] = *ov;
  // Random codes q, uniform in [0, L] with L = 2^bits - 1, have std sqrt(((L+1)^2 - 1) / 12);
  // w = s*q - s*L/2 has mean 0 and std |s|*that. Scales are s0*(0.75 + 0.5u) with random sign,
  // and E[(0.75 + 0.5u)^2] = 1 + 1/48, so the dequantized weights have std `sd`.
  const double levels = double((1u << bits) - 1);
  const double code_std = std::sqrt(((levels + 1) * (levels + 1) - 1) / 12.0);
  const float s0 = float(sd / code_std / std::sqrt(1.0 + 1.0 / 48.0));
  std::vector<int64_t> wshape = shape, gshape = shape;
  wshape.back() = in * bits / 32;
  gshape.back() = in / gs;
  add(full, DType::kU32, wshape, Init::kQuantWords, 0, 0).bits = bits;
  const uint64_t scale_stream =
      add(module + kScales, DType::kBF16, gshape, Init::kQuantScales, s0, 0).stream;
  TensorSpec& biases = add(module + kBiases, DType::kBF16, gshape, Init::kQuantBiases, s0, 0);
  biases.stream = scale_stream;  // biases are derived from the scales
  biases.bits = bits;
  plan_.tensors[plan_.tensors.size() - 2].bits = bits;
}

void Planner::norm(const std::string& module, int64_t n, bool zero_centred) {
  // HF stores zero-centred norms as w (applied as 1+w); MLX stores 1+w. The GDN gated norm is a
  // plain weight in both.
  const float mean = (zero_centred && !mlx()) ? 0.0f : 1.0f;
  add(module + kWeight, DType::kBF16, {n}, Init::kNormal, mean, 0.1f);
}

void Planner::mlp(const std::string& p) {
  const int64_t h = c_.hidden;
  if (!c_.moe) {
    const int64_t i = c_.intermediate;
    linear(p + kGateProj, {i, h}, Kind::kLinear);
    linear(p + kUpProj, {i, h}, Kind::kLinear);
    linear(p + kDownProj, {h, i}, Kind::kOut);
    return;
  }
  const int64_t e = c_.n_experts, im = c_.moe_intermediate, is = c_.shared_intermediate;
  if (mlx()) {
    const std::string sp = p + kMlxSwitchMlp;
    linear(sp + kGateProj, {e, im, h}, Kind::kLinear);
    linear(sp + kUpProj, {e, im, h}, Kind::kLinear);
    linear(sp + kDownProj, {e, h, im}, Kind::kOut);
  } else {
    // Fused HF experts: gate rows first, then up rows.
    add(p + kHfExpertsGateUp, DType::kBF16, {e, 2 * im, h}, Init::kNormal, 0,
        std_for(Kind::kLinear, h));
    add(p + kHfExpertsDown, DType::kBF16, {e, h, im}, Init::kNormal, 0, std_for(Kind::kOut, im));
  }
  // mlx-lm's qwen3_5 quant_predicate keeps the router and the shared-expert gate at 8 bits, g64.
  const QuantOverride gate8{8, 64};
  linear(p + kRouter, {e, h}, Kind::kRouter, &gate8);
  const std::string se = p + kSharedExpert;
  linear(se + kGateProj, {is, h}, Kind::kLinear);
  linear(se + kUpProj, {is, h}, Kind::kLinear);
  linear(se + kDownProj, {h, is}, Kind::kOut);
  linear(p + kSharedExpertGate, {1, h}, Kind::kLinear, &gate8);
}

void Planner::linear_attention(const std::string& p) {
  const int64_t h = c_.hidden, nv = c_.n_v_heads, k = c_.conv_kernel;
  const int64_t conv_dim = c_.conv_channels(), value_dim = nv * c_.d_v;
  linear(p + kInProjQkv, {conv_dim, h}, Kind::kLinear);
  linear(p + kInProjZ, {value_dim, h}, Kind::kLinear);
  linear(p + kInProjB, {nv, h}, Kind::kLinear);
  linear(p + kInProjA, {nv, h}, Kind::kLinear);
  linear(p + kOutProj, {h, value_dim}, Kind::kOut);
  // Depthwise conv taps N(0, 1/K): HF [C,1,K], MLX [C,K,1] (same bytes).
  std::vector<int64_t> conv =
      mlx() ? std::vector<int64_t>{conv_dim, k, 1} : std::vector<int64_t>{conv_dim, 1, k};
  add(p + kConv1d + kWeight, DType::kBF16, conv, Init::kNormal, 0,
      float(1.0 / std::sqrt(double(k))));
  // A = exp(A_log) in [0.02, 2]; A_log stays f32 in both layouts.
  add(p + kALog, DType::kF32, {nv}, Init::kUniform, float(std::log(0.02)), float(std::log(2.0)));
  add(p + kDtBias, DType::kBF16, {nv}, Init::kNormal, 1.0f, 0.3f);
  norm(p + kGatedNorm, c_.d_v, /*zero_centred=*/false);
}

void Planner::full_attention(const std::string& p) {
  const int64_t h = c_.hidden, hd = c_.head_dim;
  linear(p + kQProj, {2 * c_.n_heads * hd, h}, Kind::kLinear);  // query + output gate
  linear(p + kKProj, {c_.n_kv_heads * hd, h}, Kind::kLinear);
  linear(p + kVProj, {c_.n_kv_heads * hd, h}, Kind::kLinear);
  linear(p + kOProj, {h, c_.n_heads * hd}, Kind::kOut);
  norm(p + kQNorm, hd, true);
  norm(p + kKNorm, hd, true);
}

// The multi-token-prediction head (mlx-lm drops it: MLX checkpoints have it only when asked).
// Its fc stays bf16; the layer's matrices are quantized like the trunk's in MLX.
void Planner::mtp() {
  const int64_t h = c_.hidden;
  add(std::string(kMtpFc) + kWeight, DType::kBF16, {h, 2 * h}, Init::kNormal, 0,
      std_for(Kind::kLinear, 2 * h));
  const std::string lp = kMtpLayer;
  for (const std::string& n : {std::string(kMtpNorm), std::string(kMtpPreFcNormEmbedding),
                               std::string(kMtpPreFcNormHidden), lp + kInputNorm, lp + kPostNorm})
    norm(n, h, true);
  full_attention(lp + kSelfAttn);
  mlp(lp + kMlp);
  plan_.has_mtp = true;
}

TensorPlan Planner::build() {
  const int64_t h = c_.hidden;
  const std::string pfx = names_.prefix;
  linear(pfx + kEmbed, {c_.vocab, h}, Kind::kEmbed);
  for (int64_t i = 0; i < c_.n_layers; ++i) {
    const std::string p = model::names::layer(pfx, i);
    norm(p + kInputNorm, h, true);
    norm(p + kPostNorm, h, true);
    if (c_.layers[size_t(i)] == model::LayerKind::kFullAttention) {
      full_attention(p + kSelfAttn);
    } else {
      linear_attention(p + kLinearAttn);
    }
    mlp(p + kMlp);
  }
  norm(pfx + kFinalNorm, h, true);
  if (!c_.tie_word_embeddings.value_or(true)) linear(names_.lm_head, {c_.vocab, h}, Kind::kEmbed);
  const bool with_mtp = o_.mtp == PlanOptions::Mtp::kOn || (o_.mtp == PlanOptions::Mtp::kAuto && !mlx());
  if (with_mtp && c_.mtp_layers > 0) mtp();
  std::sort(plan_.tensors.begin(), plan_.tensors.end(),
            [](const TensorSpec& x, const TensorSpec& y) { return x.name < y.name; });
  return std::move(plan_);
}

}  // namespace

TensorPlan build_tensor_plan(const Preset& preset, const PlanOptions& opts) {
  return Planner(preset, opts).build();
}

}  // namespace qwen35::tools
