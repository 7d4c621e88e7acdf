#include "tools/synth/tensor_plan.h"

#include <algorithm>
#include <cmath>

#include "model/tensor_table.h"

namespace qwen35::tools {

uint64_t TensorSpec::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= uint64_t(d);
  return n;
}

uint64_t TensorSpec::nbytes() const { return numel() * core::dtype_size(dtype); }

namespace {

using core::DType;
using model::Form;
using model::Role;
using model::names::kBiases;
using model::names::kScales;
using model::names::kWeight;

// How a weight's standard deviation is chosen (see Preset::fan_in_init).
enum class Kind { kLinear, kOut, kEmbed, kRouter };

class Planner {
 public:
  Planner(const Preset& p, const PlanOptions& o)
      : p_(p), c_(p.config), o_(o) {}

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
  // A Linear / Embedding / SwitchLinear weight `name` (2-D [out, in] or 3-D [E, out, in]). MLX
  // quantizes it when `in` is divisible by the group size, unless `quant` keeps it bf16;
  // kGate8 forces 8 bits, group 64 (MoE router, shared gate).
  void linear(const std::string& name, std::vector<int64_t> shape, Kind kind, model::MlxQuant quant);
  void norm(const std::string& name, int64_t n, bool zero_centred);
  void entry(const model::Tensor& t, const std::string& prefix);  // one table entry
  void vision_entry(const model::Tensor& t, const std::string& prefix);  // one of the tower's

  const Preset& p_;
  const model::ModelConfig& c_;
  const PlanOptions& o_;
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

void Planner::linear(const std::string& name, std::vector<int64_t> shape, Kind kind,
                     model::MlxQuant quant) {
  const int64_t in = shape.back();
  const float sd = std_for(kind, in);
  const QuantOverride gate8{8, 64};
  const QuantOverride* ov = quant == model::MlxQuant::kGate8 ? &gate8 : nullptr;
  const int bits = ov ? ov->bits : o_.bits;
  const int gs = ov ? ov->group_size : o_.group_size;
  if (!mlx() || in % gs != 0 || quant == model::MlxQuant::kNone) {
    add(name, DType::kBF16, std::move(shape), Init::kNormal, 0.0f, sd);
    return;
  }
  const std::string module = model::module_of(name);
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
  add(module + kWeight, DType::kU32, wshape, Init::kQuantWords, 0, 0).bits = bits;
  const uint64_t scale_stream =
      add(module + kScales, DType::kBF16, gshape, Init::kQuantScales, s0, 0).stream;
  TensorSpec& biases = add(module + kBiases, DType::kBF16, gshape, Init::kQuantBiases, s0, 0);
  biases.stream = scale_stream;  // biases are derived from the scales
  biases.bits = bits;
  plan_.tensors[plan_.tensors.size() - 2].bits = bits;
}

void Planner::norm(const std::string& name, int64_t n, bool zero_centred) {
  // HF stores zero-centred norms as w (applied as 1+w); MLX stores 1+w. The GDN gated norm is a
  // plain weight in both.
  const float mean = (zero_centred && !mlx() && c_.hf_norms_zero_centred()) ? 0.0f : 1.0f;
  add(name, DType::kBF16, {n}, Init::kNormal, mean, 0.1f);
}

// The weight-init kind of a matrix's role.
Kind kind_of(Role r) {
  switch (r) {
    case Role::kEmbedding: return Kind::kEmbed;
    case Role::kOutProj: return Kind::kOut;
    case Role::kRouter: return Kind::kRouter;
    default: return Kind::kLinear;
  }
}

void Planner::entry(const model::Tensor& t, const std::string& prefix) {
  // mlx-lm's exports of the text-only families keep HF's root lm_head.
  const bool root_head = t.block == model::Block::kHead && c_.family != model::Family::kQwen35;
  const std::string name = prefix + (root_head ? t.hf : t.name(o_.dialect));
  const model::Dims d = t.dims(c_);
  switch (t.form) {
    case Form::kMatrix:
      // Qwen3-Next's fused DeltaNet projections: written once, whole, at their first part.
      if (t.fused == model::Fused::kZ || t.fused == model::Fused::kA) return;
      linear(name, {t.fused == model::Fused::kNone ? d.out : model::fused_rows(c_, t.fused), d.in}, kind_of(t.role),
             t.mlx_quant);
      return;
    case Form::kExperts:
      // HF fuses gate and up into one tensor, gate rows first: written once, at the gate half.
      if (!mlx() && t.half == model::Half::kUp) return;
      linear(name, {c_.n_experts, !mlx() && t.half == model::Half::kGate ? 2 * d.out : d.out, d.in},
             kind_of(t.role), t.mlx_quant);
      return;
    case Form::kConv: {
      // Depthwise conv taps N(0, 1/K): HF [C,1,K], MLX [C,K,1] (same bytes).
      std::vector<int64_t> conv = mlx() ? std::vector<int64_t>{d.out, d.in, 1} : std::vector<int64_t>{d.out, 1, d.in};
      add(name, DType::kBF16, conv, Init::kNormal, 0, float(1.0 / std::sqrt(double(d.in))));
      return;
    }
    case Form::kVector:
      break;
    case Form::kPatch:
    case Form::kTable:
      vision_entry(t, prefix);
      return;
  }
  switch (t.role) {
    case Role::kDecay:  // A = exp(A_log) in [0.02, 2]; A_log stays f32 in both layouts.
      add(name, DType::kF32, {d.out}, Init::kUniform, float(std::log(0.02)), float(std::log(2.0)));
      return;
    case Role::kDtBias:
      add(name, DType::kBF16, {d.out}, Init::kNormal, 1.0f, 0.3f);
      return;
    case Role::kLayerNorm:
    case Role::kBias:
      vision_entry(t, prefix);
      return;
    default:
      norm(name, d.out, t.role == Role::kNorm);
  }
}

// The tower's patch embedding (HF [O, C, T, P, P]; MLX channels last, [O, T, P, P, C], as
// mlx-vlm stores convolutions), position table, LayerNorms (weights ~1) and biases (small).
void Planner::vision_entry(const model::Tensor& t, const std::string& prefix) {
  const std::string name = prefix + t.name(o_.dialect);
  const model::Dims d = t.dims(c_);
  const model::VisionConfig& v = c_.vision;
  switch (t.form) {
    case Form::kPatch: {
      const std::vector<int64_t> shape = mlx() ? std::vector<int64_t>{d.out, v.temporal, v.patch, v.patch, v.in_channels}
                                               : std::vector<int64_t>{d.out, v.in_channels, v.temporal, v.patch, v.patch};
      add(name, DType::kBF16, shape, Init::kNormal, 0.0f, std_for(Kind::kLinear, d.in));
      return;
    }
    case Form::kTable:  // position rows of about the patch embedding's scale
      add(name, DType::kBF16, {d.out, d.in}, Init::kNormal, 0.0f, p_.fan_in_init ? 0.5f : 0.02f);
      return;
    default:
      break;
  }
  if (t.role == Role::kLayerNorm) add(name, DType::kBF16, {d.out}, Init::kNormal, 1.0f, 0.1f);
  else add(name, DType::kBF16, {d.out}, Init::kNormal, 0.0f, p_.fan_in_init ? 0.1f : 0.02f);
}

TensorPlan Planner::build() {
  const bool head = !c_.tie_word_embeddings.value_or(true);
  // The MTP head: mlx-lm drops it, so MLX checkpoints have it only when asked.
  const bool with_mtp = c_.mtp_layers > 0 && (o_.mtp == PlanOptions::Mtp::kOn ||
                                              (o_.mtp == PlanOptions::Mtp::kAuto && !mlx()));
  model::for_each_tensor(c_, o_.dialect, text_prefix(c_, o_.dialect), head, with_mtp,
                         [&](const model::Tensor& t, const std::string& prefix) { entry(t, prefix); });
  plan_.has_mtp = with_mtp;
  if (o_.vision && c_.vision.depth > 0) {
    model::for_each_vision_tensor(c_, [&](const model::Tensor& t, int64_t layer) {
      entry(t, model::vision_tensor_prefix(t, o_.dialect, layer));
    });
    plan_.has_vision = true;
  }
  std::sort(plan_.tensors.begin(), plan_.tensors.end(),
            [](const TensorSpec& x, const TensorSpec& y) { return x.name < y.name; });
  return std::move(plan_);
}

}  // namespace

std::string text_prefix(const model::ModelConfig& c, Dialect d) {
  // Qwen3's and Qwen3-Next's checkpoints (HF and mlx-lm's exports alike) name the text model
  // "model.".
  if (c.family != model::Family::kQwen35) return model::names::kTextOnlyPrefix;
  return model::dialect_names(d).prefix;
}

TensorPlan build_tensor_plan(const Preset& preset, const PlanOptions& opts) {
  return Planner(preset, opts).build();
}

}  // namespace qwen35::tools
