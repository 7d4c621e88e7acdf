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

// How a weight's standard deviation is chosen (see Geometry::fan_in_init).
enum class Kind { kLinear, kOut, kEmbed, kRouter };

class Planner {
 public:
  Planner(const Geometry& g, const PlanOptions& o)
      : g_(g),
        o_(o),
        pfx_(o.layout == Layout::kHf ? "model.language_model." : "language_model.model.") {}

  TensorPlan build();

 private:
  bool mlx() const { return o_.layout == Layout::kMlx; }
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
  void linear(const std::string& full, std::vector<int64_t> shape, Kind kind,
              const QuantOverride* ov = nullptr);
  void norm(const std::string& full, int64_t n, bool zero_centred);
  void mlp(const std::string& p);  // p ends in "mlp."
  void linear_attention(const std::string& p);
  void full_attention(const std::string& p);
  void mtp();

  const Geometry& g_;
  const PlanOptions& o_;
  const std::string pfx_;
  TensorPlan plan_;
};

float Planner::std_for(Kind kind, int64_t fan_in) const {
  if (!g_.fan_in_init) return 0.02f;
  const double f = double(fan_in);
  switch (kind) {
    case Kind::kLinear:
      return float(1.0 / std::sqrt(f));
    case Kind::kOut:
      return float(0.7 / std::sqrt(f));
    case Kind::kEmbed:
      return float(2.0 / std::sqrt(double(g_.hidden)));
    case Kind::kRouter:
      return float(2.0 / std::sqrt(f));
  }
  return 0.02f;
}

void Planner::linear(const std::string& full, std::vector<int64_t> shape, Kind kind,
                     const QuantOverride* ov) {
  const int64_t in = shape.back();
  const float sd = std_for(kind, in);
  const int bits = ov ? ov->bits : o_.bits;
  const int gs = ov ? ov->group_size : o_.group_size;
  if (!mlx() || in % gs != 0) {
    add(full, DType::kBF16, std::move(shape), Init::kNormal, 0.0f, sd);
    return;
  }
  const std::string base = full.substr(0, full.size() - std::string(".weight").size());
  if (ov) plan_.quant_overrides[base] = *ov;
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
      add(base + ".scales", DType::kBF16, gshape, Init::kQuantScales, s0, 0).stream;
  TensorSpec& biases = add(base + ".biases", DType::kBF16, gshape, Init::kQuantBiases, s0, 0);
  biases.stream = scale_stream;  // biases are derived from the scales
  biases.bits = bits;
  plan_.tensors[plan_.tensors.size() - 2].bits = bits;
}

void Planner::norm(const std::string& full, int64_t n, bool zero_centred) {
  // HF stores zero-centred norms as w (applied as 1+w); MLX stores 1+w. The GDN gated norm is a
  // plain weight in both.
  const float mean = (zero_centred && !mlx()) ? 0.0f : 1.0f;
  add(full, DType::kBF16, {n}, Init::kNormal, mean, 0.1f);
}

void Planner::mlp(const std::string& p) {
  const int64_t h = g_.hidden;
  if (!g_.moe()) {
    const int64_t i = g_.intermediate;
    linear(p + "gate_proj.weight", {i, h}, Kind::kLinear);
    linear(p + "up_proj.weight", {i, h}, Kind::kLinear);
    linear(p + "down_proj.weight", {h, i}, Kind::kOut);
    return;
  }
  const int64_t e = g_.experts, im = g_.moe_intermediate, is = g_.shared_intermediate;
  if (mlx()) {
    linear(p + "switch_mlp.gate_proj.weight", {e, im, h}, Kind::kLinear);
    linear(p + "switch_mlp.up_proj.weight", {e, im, h}, Kind::kLinear);
    linear(p + "switch_mlp.down_proj.weight", {e, h, im}, Kind::kOut);
  } else {
    // Fused HF experts: gate rows first, then up rows.
    add(p + "experts.gate_up_proj", DType::kBF16, {e, 2 * im, h}, Init::kNormal, 0,
        std_for(Kind::kLinear, h));
    add(p + "experts.down_proj", DType::kBF16, {e, h, im}, Init::kNormal, 0,
        std_for(Kind::kOut, im));
  }
  // mlx-lm's qwen3_5 quant_predicate keeps the router and the shared-expert gate at 8 bits, g64.
  const QuantOverride gate8{8, 64};
  linear(p + "gate.weight", {e, h}, Kind::kRouter, &gate8);
  linear(p + "shared_expert.gate_proj.weight", {is, h}, Kind::kLinear);
  linear(p + "shared_expert.up_proj.weight", {is, h}, Kind::kLinear);
  linear(p + "shared_expert.down_proj.weight", {h, is}, Kind::kOut);
  linear(p + "shared_expert_gate.weight", {1, h}, Kind::kLinear, &gate8);
}

void Planner::linear_attention(const std::string& p) {
  const int64_t h = g_.hidden, nv = g_.lin_v_heads, k = g_.conv_kernel;
  linear(p + "in_proj_qkv.weight", {g_.conv_dim(), h}, Kind::kLinear);
  linear(p + "in_proj_z.weight", {g_.value_dim(), h}, Kind::kLinear);
  linear(p + "in_proj_b.weight", {nv, h}, Kind::kLinear);
  linear(p + "in_proj_a.weight", {nv, h}, Kind::kLinear);
  linear(p + "out_proj.weight", {h, g_.value_dim()}, Kind::kOut);
  // Depthwise conv taps N(0, 1/K): HF [C,1,K], MLX [C,K,1] (same bytes).
  std::vector<int64_t> conv =
      mlx() ? std::vector<int64_t>{g_.conv_dim(), k, 1} : std::vector<int64_t>{g_.conv_dim(), 1, k};
  add(p + "conv1d.weight", DType::kBF16, conv, Init::kNormal, 0, float(1.0 / std::sqrt(double(k))));
  // A = exp(A_log) in [0.02, 2]; A_log stays f32 in both layouts.
  add(p + "A_log", DType::kF32, {nv}, Init::kUniform, float(std::log(0.02)), float(std::log(2.0)));
  add(p + "dt_bias", DType::kBF16, {nv}, Init::kNormal, 1.0f, 0.3f);
  norm(p + "norm.weight", g_.lin_v_dim, /*zero_centred=*/false);
}

void Planner::full_attention(const std::string& p) {
  const int64_t h = g_.hidden, hd = g_.head_dim;
  linear(p + "q_proj.weight", {2 * g_.heads * hd, h}, Kind::kLinear);  // query + output gate
  linear(p + "k_proj.weight", {g_.kv_heads * hd, h}, Kind::kLinear);
  linear(p + "v_proj.weight", {g_.kv_heads * hd, h}, Kind::kLinear);
  linear(p + "o_proj.weight", {h, g_.heads * hd}, Kind::kOut);
  norm(p + "q_norm.weight", hd, true);
  norm(p + "k_norm.weight", hd, true);
}

// The multi-token-prediction head (HF layout only; mlx-lm drops it). Never quantized.
void Planner::mtp() {
  const int64_t h = g_.hidden;
  add("mtp.fc.weight", DType::kBF16, {h, 2 * h}, Init::kNormal, 0, std_for(Kind::kLinear, 2 * h));
  for (const char* n :
       {"mtp.norm.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
        "mtp.layers.0.input_layernorm.weight", "mtp.layers.0.post_attention_layernorm.weight"})
    norm(n, h, true);
  full_attention("mtp.layers.0.self_attn.");
  mlp("mtp.layers.0.mlp.");
  plan_.has_mtp = true;
}

TensorPlan Planner::build() {
  const int64_t h = g_.hidden;
  linear(pfx_ + "embed_tokens.weight", {g_.vocab_rows, h}, Kind::kEmbed);
  for (int64_t i = 0; i < g_.layers; ++i) {
    const std::string p = pfx_ + "layers." + std::to_string(i) + ".";
    norm(p + "input_layernorm.weight", h, true);
    norm(p + "post_attention_layernorm.weight", h, true);
    if (g_.is_full_attention(i)) {
      full_attention(p + "self_attn.");
    } else {
      linear_attention(p + "linear_attn.");
    }
    mlp(p + "mlp.");
  }
  norm(pfx_ + "norm.weight", h, true);
  if (!g_.tied)
    linear(mlx() ? "language_model.lm_head.weight" : "lm_head.weight", {g_.vocab_rows, h},
           Kind::kEmbed);
  if (!mlx()) mtp();
  std::sort(plan_.tensors.begin(), plan_.tensors.end(),
            [](const TensorSpec& x, const TensorSpec& y) { return x.name < y.name; });
  return std::move(plan_);
}

}  // namespace

TensorPlan build_tensor_plan(const Geometry& g, const PlanOptions& opts) {
  return Planner(g, opts).build();
}

}  // namespace qwen35::tools
