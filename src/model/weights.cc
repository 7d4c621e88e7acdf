#include "model/weights.h"

#include <cstring>

#include "core/log.h"

namespace qwen35::model {

using core::DType;
using core::error;
using core::Result;
using core::Status;
using formats::TensorView;
using kernels::WeightType;

namespace {

bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

std::string shp(std::initializer_list<int64_t> s) { return formats::shape_to_string(std::vector<int64_t>(s)); }

class Binder {
 public:
  Binder(const formats::TensorStore& store, const ModelConfig& cfg, std::string prefix)
      : store_(store), cfg_(cfg), prefix_(std::move(prefix)) {}

  size_t bytes() const { return bytes_; }
  int64_t params() const { return params_; }

  const TensorView* find(const std::string& full) const { return store_.find(full); }

  Status missing(const std::string& full, const std::string& expect) const {
    return error("[weights] missing tensor '" + full + "' (expected " + expect + ")");
  }

  // A float vector [dim] converted to fp32, plus `offset` per element.
  Result<std::vector<float>> vec(const std::string& full, int64_t dim, float offset = 0.0f) {
    const TensorView* t = find(full);
    if (t == nullptr) return missing(full, shp({dim}));
    if (!is_float(t->dtype))
      return error("[weights] tensor '" + full + "': dtype " + std::string(core::dtype_name(t->dtype)) + ", expected a float type");
    if (t->shape != std::vector<int64_t>{dim})
      return error("[weights] tensor '" + full + "': expected shape " + shp({dim}) + ", found " + t->shape_str());
    account(*t, dim);
    return to_f32(*t, offset);
  }

  // A linear layer's weight [out, in] (".weight" appended), quantized or not.
  Result<Matrix> linear(const std::string& module, int64_t out, int64_t in) {
    return stacked(module + ".weight", module, 1, out, in);
  }

  // `experts` stacked matrices [experts, out, in] as one Matrix of experts*out rows.
  // `key` is the tensor name, `module` the quantization module path (key without ".weight").
  Result<Matrix> stacked(const std::string& key, const std::string& module, int64_t experts,
                         int64_t out, int64_t in) {
    const TensorView* w = find(key);
    std::vector<int64_t> lead;
    if (force_3d_) lead.push_back(experts);
    auto with_lead = [&](std::initializer_list<int64_t> tail) {
      std::vector<int64_t> s = lead;
      s.insert(s.end(), tail);
      return s;
    };
    const TensorView* scales = find(module + ".scales");
    bool unquantized_override = false;
    const formats::QuantSpec* spec = nullptr;
    if (cfg_.quantization) spec = cfg_.quantization->lookup(module, &unquantized_override);
    if (w == nullptr) return missing(key, formats::shape_to_string(with_lead({out, in})));
    Matrix m;
    m.rows = experts * out;
    m.cols = in;
    if (scales == nullptr) {
      if (!is_float(w->dtype))
        return error("[weights] tensor '" + key + "': dtype " + std::string(core::dtype_name(w->dtype)) +
                     " without '.scales' (not a float matrix and not MLX-quantized)");
      if (w->shape != with_lead({out, in}))
        return error("[weights] tensor '" + key + "': expected shape " +
                     formats::shape_to_string(with_lead({out, in})) + ", found " + w->shape_str());
      m.type = w->dtype == DType::kF32 ? WeightType::kF32 : w->dtype == DType::kF16 ? WeightType::kF16 : WeightType::kBF16;
      m.data = w->data;
      account(*w, experts * out * in);
      return m;
    }
    if (unquantized_override)
      return error("[weights] tensor '" + key + "': quantized in the file but config.json marks '" + module + "' unquantized");
    if (!cfg_.quantization)
      return error("[weights] tensor '" + key + "' is MLX-quantized but config.json has no 'quantization' block");
    const formats::QuantSpec q = spec ? *spec : cfg_.quantization->defaults;
    if (in % q.group_size != 0 || (in * q.bits) % 32 != 0)
      return error("[weights] '" + module + "': in-features " + std::to_string(in) + " not divisible by group size " +
                   std::to_string(q.group_size) + " (" + std::to_string(q.bits) + "-bit)");
    const std::string what = " (" + std::to_string(q.bits) + "-bit, group " + std::to_string(q.group_size) + ")";
    if (w->dtype != DType::kU32)
      return error("[weights] tensor '" + key + "': dtype " + std::string(core::dtype_name(w->dtype)) + ", expected U32" + what);
    if (w->shape != with_lead({out, in * q.bits / 32}))
      return error("[weights] tensor '" + key + "': expected shape " +
                   formats::shape_to_string(with_lead({out, in * q.bits / 32})) + what + ", found " + w->shape_str());
    const TensorView* biases = find(module + ".biases");
    for (const TensorView* t : {scales, biases}) {
      const std::string name = t == scales ? module + ".scales" : module + ".biases";
      if (t == nullptr) return missing(name, formats::shape_to_string(with_lead({out, in / q.group_size})));
      if (!is_float(t->dtype))
        return error("[weights] tensor '" + name + "': dtype " + std::string(core::dtype_name(t->dtype)) + ", expected a float type");
      if (t->shape != with_lead({out, in / q.group_size}))
        return error("[weights] tensor '" + name + "': expected shape " +
                     formats::shape_to_string(with_lead({out, in / q.group_size})) + what + ", found " + t->shape_str());
    }
    if (scales->dtype != biases->dtype)
      return error("[weights] '" + module + "': scales and biases have different dtypes");
    m.type = WeightType::kAffine;
    m.bits = q.bits;
    m.group = q.group_size;
    m.data = w->data;
    m.scales = scales->data;
    m.biases = biases->data;
    m.sb_type = scales->dtype;
    account(*w, experts * out * in);
    account(*scales, 0);
    account(*biases, 0);
    return m;
  }

  void set_3d(bool v) { force_3d_ = v; }

 private:
  void account(const TensorView& t, int64_t params) {
    bytes_ += t.nbytes;
    params_ += params;
  }
  static std::vector<float> to_f32(const TensorView& t, float offset) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) {
      float x;
      switch (t.dtype) {
        case DType::kF32: std::memcpy(&x, t.data + 4 * i, 4); break;
        case DType::kF16: { uint16_t h; std::memcpy(&h, t.data + 2 * i, 2); x = core::f16_to_f32(h); break; }
        default: { uint16_t h; std::memcpy(&h, t.data + 2 * i, 2); x = core::bf16_to_f32(h); break; }
      }
      v[i] = offset + x;
    }
    return v;
  }

  const formats::TensorStore& store_;
  const ModelConfig& cfg_;
  std::string prefix_;
  size_t bytes_ = 0;
  int64_t params_ = 0;
  bool force_3d_ = false;
};

Status bind_attention(Binder& b, const ModelConfig& c, const std::string& p, float norm_offset,
                      AttentionWeights* w) {
  const int64_t H = c.hidden, nh = c.n_heads, nkv = c.n_kv_heads, hd = c.head_dim;
  QWEN35_ASSIGN_OR_RETURN(w->q_proj, b.linear(p + "q_proj", 2 * nh * hd, H));
  QWEN35_ASSIGN_OR_RETURN(w->k_proj, b.linear(p + "k_proj", nkv * hd, H));
  QWEN35_ASSIGN_OR_RETURN(w->v_proj, b.linear(p + "v_proj", nkv * hd, H));
  QWEN35_ASSIGN_OR_RETURN(w->o_proj, b.linear(p + "o_proj", H, nh * hd));
  QWEN35_ASSIGN_OR_RETURN(w->q_norm, b.vec(p + "q_norm.weight", hd, norm_offset));
  QWEN35_ASSIGN_OR_RETURN(w->k_norm, b.vec(p + "k_norm.weight", hd, norm_offset));
  return Status();
}

// conv1d weight: HF [C, 1, K] or MLX [C, K, 1] -> fp32 [C, K].
Result<std::vector<float>> conv_weight(Binder& b, const std::string& key, int64_t C, int64_t K) {
  const TensorView* t = b.find(key);
  if (t == nullptr) return b.missing(key, shp({C, 1, K}));
  const bool hf = t->shape == std::vector<int64_t>{C, 1, K};
  const bool mlx = t->shape == std::vector<int64_t>{C, K, 1};
  if (!hf && !mlx)
    return error("[weights] tensor '" + key + "': expected shape " + shp({C, 1, K}) + " (HF) or " + shp({C, K, 1}) +
                 " (MLX), found " + t->shape_str());
  if (!is_float(t->dtype)) return error("[weights] tensor '" + key + "': expected a float dtype");
  // Both layouts are C-major with the K taps contiguous: the flat data is already [C, K].
  std::vector<float> v(static_cast<size_t>(C * K));
  for (int64_t i = 0; i < C * K; ++i) {
    if (t->dtype == DType::kF32) std::memcpy(&v[i], t->data + 4 * i, 4);
    else {
      uint16_t h;
      std::memcpy(&h, t->data + 2 * i, 2);
      v[i] = t->dtype == DType::kF16 ? core::f16_to_f32(h) : core::bf16_to_f32(h);
    }
  }
  return v;
}

Status bind_deltanet(Binder& b, const ModelConfig& c, const std::string& p, DeltaNetWeights* w) {
  const int64_t H = c.hidden, nv = c.n_v_heads, dv = c.d_v, C = c.conv_channels();
  QWEN35_ASSIGN_OR_RETURN(w->in_proj_qkv, b.linear(p + "in_proj_qkv", C, H));
  QWEN35_ASSIGN_OR_RETURN(w->in_proj_z, b.linear(p + "in_proj_z", nv * dv, H));
  QWEN35_ASSIGN_OR_RETURN(w->in_proj_b, b.linear(p + "in_proj_b", nv, H));
  QWEN35_ASSIGN_OR_RETURN(w->in_proj_a, b.linear(p + "in_proj_a", nv, H));
  QWEN35_ASSIGN_OR_RETURN(w->out_proj, b.linear(p + "out_proj", H, nv * dv));
  QWEN35_ASSIGN_OR_RETURN(w->conv, conv_weight(b, p + "conv1d.weight", C, c.conv_kernel));
  QWEN35_ASSIGN_OR_RETURN(w->a_log, b.vec(p + "A_log", nv));
  QWEN35_ASSIGN_OR_RETURN(w->dt_bias, b.vec(p + "dt_bias", nv));
  QWEN35_ASSIGN_OR_RETURN(w->norm, b.vec(p + "norm.weight", dv));  // plain weight in both dialects
  return Status();
}

Status bind_mlp(Binder& b, const std::string& p, int64_t H, int64_t I, MlpWeights* w) {
  QWEN35_ASSIGN_OR_RETURN(w->gate_proj, b.linear(p + "gate_proj", I, H));
  QWEN35_ASSIGN_OR_RETURN(w->up_proj, b.linear(p + "up_proj", I, H));
  QWEN35_ASSIGN_OR_RETURN(w->down_proj, b.linear(p + "down_proj", H, I));
  return Status();
}

Status bind_moe(Binder& b, const ModelConfig& c, const std::string& p, MoeWeights* w) {
  const int64_t H = c.hidden, E = c.n_experts, I = c.moe_intermediate;
  QWEN35_ASSIGN_OR_RETURN(w->router, b.linear(p + "gate", E, H));
  w->experts.resize(size_t(E));
  if (b.find(p + "experts.gate_up_proj") != nullptr) {  // HF fused [E, 2I, H], gate rows first
    b.set_3d(true);
    auto gu = b.stacked(p + "experts.gate_up_proj", p + "experts.gate_up_proj", E, 2 * I, H);
    auto dn = gu.ok() ? b.stacked(p + "experts.down_proj", p + "experts.down_proj", E, H, I) : gu;
    b.set_3d(false);
    if (!gu.ok()) return gu.status();
    if (!dn.ok()) return dn.status();
    for (int64_t e = 0; e < E; ++e) {
      w->experts[e].gate_proj = gu->row_slice(e * 2 * I, I);
      w->experts[e].up_proj = gu->row_slice(e * 2 * I + I, I);
      w->experts[e].down_proj = dn->row_slice(e * H, H);
    }
  } else if (b.find(p + "switch_mlp.gate_proj.weight") != nullptr) {  // MLX SwitchGLU
    b.set_3d(true);
    Matrix g, u, d;
    auto rg = b.stacked(p + "switch_mlp.gate_proj.weight", p + "switch_mlp.gate_proj", E, I, H);
    auto ru = rg.ok() ? b.stacked(p + "switch_mlp.up_proj.weight", p + "switch_mlp.up_proj", E, I, H) : rg;
    auto rd = ru.ok() ? b.stacked(p + "switch_mlp.down_proj.weight", p + "switch_mlp.down_proj", E, H, I) : ru;
    b.set_3d(false);
    if (!rd.ok()) return rd.status();
    for (int64_t e = 0; e < E; ++e) {
      w->experts[e].gate_proj = rg->row_slice(e * I, I);
      w->experts[e].up_proj = ru->row_slice(e * I, I);
      w->experts[e].down_proj = rd->row_slice(e * H, H);
    }
  } else {
    return b.missing(p + "experts.gate_up_proj", "HF fused experts or MLX switch_mlp.* tensors");
  }
  if (c.shared_intermediate > 0) {
    w->has_shared = true;
    QWEN35_RETURN_IF_ERROR(bind_mlp(b, p + "shared_expert.", H, c.shared_intermediate, &w->shared));
    if (b.find(p + "shared_expert_gate.weight") != nullptr) {
      w->has_shared_gate = true;
      QWEN35_ASSIGN_OR_RETURN(w->shared_gate, b.linear(p + "shared_expert_gate", 1, H));
    }
  }
  return Status();
}

}  // namespace

Result<std::unique_ptr<ModelWeights>> load_weights(const std::string& dir, core::LoadMode mode) {
  QWEN35_ASSIGN_OR_RETURN(formats::HfConfig hf, formats::load_hf_config(dir));
  QWEN35_ASSIGN_OR_RETURN(ModelConfig cfg, make_model_config(hf));
  auto mw = std::make_unique<ModelWeights>();
  QWEN35_ASSIGN_OR_RETURN(mw->store, formats::TensorStore::open_dir(dir, mode));
  mw->config = cfg;
  const auto& store = mw->store;
  const ModelConfig& c = mw->config;

  for (const char* p : {"model.language_model.", "language_model.model.", "model.", ""})
    if (store.find(std::string(p) + "embed_tokens.weight") != nullptr) {
      mw->prefix = p;
      break;
    }
  if (store.find(mw->prefix + "embed_tokens.weight") == nullptr)
    return error("[weights] no embedding table: expected 'model.language_model.embed_tokens.weight' (HF), "
                 "'language_model.model.embed_tokens.weight' (MLX) or 'model.embed_tokens.weight'");
  // Dialect from the conv1d layout ([C,1,K] HF, [C,K,1] MLX), else from the names.
  mw->dialect = mw->prefix == "language_model.model." ? Dialect::kMlx : Dialect::kHf;
  for (size_t i = 0; i < c.layers.size(); ++i)
    if (c.layers[i] == LayerKind::kLinearAttention) {
      const TensorView* t = store.find(mw->prefix + "layers." + std::to_string(i) + ".linear_attn.conv1d.weight");
      if (t != nullptr && t->shape.size() == 3)
        mw->dialect = (t->shape[1] == 1 && t->shape[2] != 1) ? Dialect::kHf : Dialect::kMlx;
      break;
    }
  const float norm_offset = mw->dialect == Dialect::kHf ? 1.0f : 0.0f;

  Binder b(store, c, mw->prefix);
  const std::string& P = mw->prefix;
  QWEN35_ASSIGN_OR_RETURN(mw->embed, b.linear(P + "embed_tokens", c.vocab, c.hidden));
  std::string head_key;
  for (const std::string& k : {std::string("lm_head"), std::string("language_model.lm_head"), P + "lm_head"})
    if (store.find(k + ".weight") != nullptr) {
      head_key = k;
      break;
    }
  mw->tied = c.tie_word_embeddings.value_or(head_key.empty());
  if (!mw->tied && head_key.empty()) {
    QWEN35_LOG_WARN("config says tie_word_embeddings=false but there is no lm_head tensor: using the embedding");
    mw->tied = true;
  }
  if (mw->tied) {
    mw->head = mw->embed;
  } else {
    QWEN35_ASSIGN_OR_RETURN(mw->head, b.linear(head_key, c.vocab, c.hidden));
  }
  QWEN35_ASSIGN_OR_RETURN(mw->final_norm, b.vec(P + "norm.weight", c.hidden, norm_offset));
  mw->layers.resize(c.layers.size());
  for (size_t i = 0; i < c.layers.size(); ++i) {
    LayerWeights& L = mw->layers[i];
    const std::string lp = P + "layers." + std::to_string(i) + ".";
    L.kind = c.layers[i];
    QWEN35_ASSIGN_OR_RETURN(L.input_norm, b.vec(lp + "input_layernorm.weight", c.hidden, norm_offset));
    QWEN35_ASSIGN_OR_RETURN(L.post_norm, b.vec(lp + "post_attention_layernorm.weight", c.hidden, norm_offset));
    if (L.kind == LayerKind::kFullAttention)
      QWEN35_RETURN_IF_ERROR(bind_attention(b, c, lp + "self_attn.", norm_offset, &L.attn));
    else
      QWEN35_RETURN_IF_ERROR(bind_deltanet(b, c, lp + "linear_attn.", &L.gdn));
    if (c.moe) QWEN35_RETURN_IF_ERROR(bind_moe(b, c, lp + "mlp.", &L.moe));
    else QWEN35_RETURN_IF_ERROR(bind_mlp(b, lp + "mlp.", c.hidden, c.intermediate, &L.mlp));
  }
  mw->weight_bytes = b.bytes();
  mw->n_params = b.params();
  // Bytes one decoded token reads: everything but the embedding table (one row is read) and, for
  // MoE, only top_k of n_experts routed experts (on average).
  size_t expert_bytes = 0;
  for (const auto& L : mw->layers)
    for (const auto& e : L.moe.experts) expert_bytes += e.gate_proj.bytes() + e.up_proj.bytes() + e.down_proj.bytes();
  const size_t embed_bytes = mw->tied ? 0 : mw->embed.bytes();
  mw->stream_bytes = b.bytes() - embed_bytes - expert_bytes;
  if (c.moe) mw->stream_bytes += size_t(double(expert_bytes) * double(c.top_k) / double(c.n_experts));
  for (const auto& [name, _] : store.all())
    if (name.rfind("mtp.", 0) == 0) {
      mw->has_mtp = true;
      break;
    }
  return mw;
}

}  // namespace qwen35::model
