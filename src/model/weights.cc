#include "model/weights.h"

#include <cmath>
#include <cstring>

#include "core/log.h"

namespace qwen35::model {

using core::DType;
using core::error;
using core::Result;
using core::Status;
using formats::TensorView;
using kernels::WeightType;
using namespace names;  // module names: kQProj, kMlp, ...

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
    return stacked(module + kWeight, module, 1, out, in);
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
    const TensorView* scales = find(module + kScales);
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
    const TensorView* biases = find(module + kBiases);
    for (const TensorView* t : {scales, biases}) {
      const std::string name = module + (t == scales ? kScales : kBiases);
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
  QWEN35_ASSIGN_OR_RETURN(w->q_proj, b.linear(p + kQProj, 2 * nh * hd, H));
  QWEN35_ASSIGN_OR_RETURN(w->k_proj, b.linear(p + kKProj, nkv * hd, H));
  QWEN35_ASSIGN_OR_RETURN(w->v_proj, b.linear(p + kVProj, nkv * hd, H));
  QWEN35_ASSIGN_OR_RETURN(w->o_proj, b.linear(p + kOProj, H, nh * hd));
  QWEN35_ASSIGN_OR_RETURN(w->q_norm, b.vec(p + kQNorm + kWeight, hd, norm_offset));
  QWEN35_ASSIGN_OR_RETURN(w->k_norm, b.vec(p + kKNorm + kWeight, hd, norm_offset));
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
  QWEN35_ASSIGN_OR_RETURN(w->in_proj_qkv, b.linear(p + kInProjQkv, C, H));
  QWEN35_ASSIGN_OR_RETURN(w->in_proj_z, b.linear(p + kInProjZ, nv * dv, H));
  QWEN35_ASSIGN_OR_RETURN(w->in_proj_b, b.linear(p + kInProjB, nv, H));
  QWEN35_ASSIGN_OR_RETURN(w->in_proj_a, b.linear(p + kInProjA, nv, H));
  QWEN35_ASSIGN_OR_RETURN(w->out_proj, b.linear(p + kOutProj, H, nv * dv));
  QWEN35_ASSIGN_OR_RETURN(w->conv, conv_weight(b, p + kConv1d + kWeight, C, c.conv_kernel));
  QWEN35_ASSIGN_OR_RETURN(w->decay, b.vec(p + kALog, nv));
  for (float& a : w->decay) a = -std::exp(a);
  QWEN35_ASSIGN_OR_RETURN(w->dt_bias, b.vec(p + kDtBias, nv));
  // Plain weight in both dialects.
  QWEN35_ASSIGN_OR_RETURN(w->norm, b.vec(p + kGatedNorm + kWeight, dv));
  return Status();
}

Status bind_mlp(Binder& b, const std::string& p, int64_t H, int64_t I, MlpWeights* w) {
  QWEN35_ASSIGN_OR_RETURN(w->gate_proj, b.linear(p + kGateProj, I, H));
  QWEN35_ASSIGN_OR_RETURN(w->up_proj, b.linear(p + kUpProj, I, H));
  QWEN35_ASSIGN_OR_RETURN(w->down_proj, b.linear(p + kDownProj, H, I));
  return Status();
}

// HF fuses the routed experts: gate_up [E, 2I, H] (gate rows first) and down [E, H, I].
Status bind_fused_experts(Binder& b, const std::string& p, int64_t E, int64_t H, int64_t I,
                          MoeWeights* w) {
  const std::string gate_up = p + kHfExpertsGateUp, down = p + kHfExpertsDown;
  b.set_3d(true);
  auto gu = b.stacked(gate_up, gate_up, E, 2 * I, H);
  auto dn = gu.ok() ? b.stacked(down, down, E, H, I) : gu;
  b.set_3d(false);
  if (!gu.ok()) return gu.status();
  if (!dn.ok()) return dn.status();
  for (int64_t e = 0; e < E; ++e) {
    w->experts[e].gate_proj = gu->row_slice(e * 2 * I, I);
    w->experts[e].up_proj = gu->row_slice(e * 2 * I + I, I);
    w->experts[e].down_proj = dn->row_slice(e * H, H);
  }
  return Status();
}

// MLX SwitchGLU: switch_mlp.{gate,up,down}_proj modules of stacked [E, out, in] weights.
Status bind_switch_mlp(Binder& b, const std::string& p, int64_t E, int64_t H, int64_t I,
                       MoeWeights* w) {
  const std::string sp = p + kMlxSwitchMlp;
  auto stacked = [&](const char* module, int64_t out, int64_t in) {
    return b.stacked(sp + module + kWeight, sp + module, E, out, in);
  };
  b.set_3d(true);
  auto rg = stacked(kGateProj, I, H);
  auto ru = rg.ok() ? stacked(kUpProj, I, H) : rg;
  auto rd = ru.ok() ? stacked(kDownProj, H, I) : ru;
  b.set_3d(false);
  if (!rd.ok()) return rd.status();
  for (int64_t e = 0; e < E; ++e) {
    w->experts[e].gate_proj = rg->row_slice(e * I, I);
    w->experts[e].up_proj = ru->row_slice(e * I, I);
    w->experts[e].down_proj = rd->row_slice(e * H, H);
  }
  return Status();
}

Status bind_moe(Binder& b, const ModelConfig& c, const std::string& p, MoeWeights* w) {
  const int64_t H = c.hidden, E = c.n_experts, I = c.moe_intermediate;
  QWEN35_ASSIGN_OR_RETURN(w->router, b.linear(p + kRouter, E, H));
  w->experts.resize(size_t(E));
  if (b.find(p + kHfExpertsGateUp) != nullptr) {
    QWEN35_RETURN_IF_ERROR(bind_fused_experts(b, p, E, H, I, w));
  } else if (b.find(p + kMlxSwitchMlp + kGateProj + kWeight) != nullptr) {
    QWEN35_RETURN_IF_ERROR(bind_switch_mlp(b, p, E, H, I, w));
  } else {
    return b.missing(p + kHfExpertsGateUp, "HF fused experts or MLX switch_mlp.* tensors");
  }
  if (c.shared_intermediate > 0) {
    w->has_shared = true;
    QWEN35_RETURN_IF_ERROR(bind_mlp(b, p + kSharedExpert, H, c.shared_intermediate, &w->shared));
    if (b.find(p + kSharedExpertGate + kWeight) != nullptr) {
      w->has_shared_gate = true;
      QWEN35_ASSIGN_OR_RETURN(w->shared_gate, b.linear(p + kSharedExpertGate, 1, H));
    }
  }
  return Status();
}

// The text model's prefix: the first under which an embedding table exists.
Result<std::string> find_prefix(const formats::TensorStore& store) {
  for (const char* p : {kHfNames.prefix, kMlxNames.prefix, kTextOnlyPrefix, kBarePrefix})
    if (store.find(std::string(p) + kEmbed + kWeight) != nullptr) return std::string(p);
  auto quoted = [](const char* p) { return std::string("'") + p + kEmbed + kWeight + "'"; };
  return error("[weights] no embedding table: expected " + quoted(kHfNames.prefix) + " (HF), " +
               quoted(kMlxNames.prefix) + " (MLX) or " + quoted(kTextOnlyPrefix));
}

// The dialect from the conv1d layout ([C,1,K] HF, [C,K,1] MLX), else from the prefix.
Dialect detect_dialect(const formats::TensorStore& store, const ModelConfig& c,
                       const std::string& prefix) {
  Dialect d = prefix == kMlxNames.prefix ? Dialect::kMlx : Dialect::kHf;
  for (size_t i = 0; i < c.layers.size(); ++i)
    if (c.layers[i] == LayerKind::kLinearAttention) {
      const TensorView* t =
          store.find(layer(prefix, int64_t(i)) + kLinearAttn + kConv1d + kWeight);
      if (t != nullptr && t->shape.size() == 3)
        d = (t->shape[1] == 1 && t->shape[2] != 1) ? Dialect::kHf : Dialect::kMlx;
      break;
    }
  return d;
}

// The untied output head's module, or "" when the checkpoint has none.
std::string find_head(const formats::TensorStore& store, const std::string& prefix) {
  for (const std::string& k : {std::string(kHfNames.lm_head), std::string(kMlxNames.lm_head),
                               prefix + kHfNames.lm_head})
    if (store.find(k + kWeight) != nullptr) return k;
  return "";
}

Status bind_layer(Binder& b, const ModelConfig& c, const std::string& lp, LayerKind kind,
                  float norm_offset, LayerWeights* L) {
  L->kind = kind;
  QWEN35_ASSIGN_OR_RETURN(L->input_norm, b.vec(lp + kInputNorm + kWeight, c.hidden, norm_offset));
  QWEN35_ASSIGN_OR_RETURN(L->post_norm, b.vec(lp + kPostNorm + kWeight, c.hidden, norm_offset));
  if (kind == LayerKind::kFullAttention)
    QWEN35_RETURN_IF_ERROR(bind_attention(b, c, lp + kSelfAttn, norm_offset, &L->attn));
  else
    QWEN35_RETURN_IF_ERROR(bind_deltanet(b, c, lp + kLinearAttn, &L->gdn));
  if (c.moe) return bind_moe(b, c, lp + kMlp, &L->moe);
  return bind_mlp(b, lp + kMlp, c.hidden, c.intermediate, &L->mlp);
}

// The MTP head: fc, its three norms and one full-attention layer (mtp.layers.0), bound like a
// trunk layer. Outside the text prefix (names.h).
Status bind_mtp(Binder& b, const ModelConfig& c, float norm_offset, MtpWeights* m) {
  const int64_t H = c.hidden;
  QWEN35_ASSIGN_OR_RETURN(m->fc, b.linear(kMtpFc, H, 2 * H));
  QWEN35_ASSIGN_OR_RETURN(m->norm_embedding,
                          b.vec(std::string(kMtpPreFcNormEmbedding) + kWeight, H, norm_offset));
  QWEN35_ASSIGN_OR_RETURN(m->norm_hidden,
                          b.vec(std::string(kMtpPreFcNormHidden) + kWeight, H, norm_offset));
  QWEN35_ASSIGN_OR_RETURN(m->norm, b.vec(std::string(kMtpNorm) + kWeight, H, norm_offset));
  return bind_layer(b, c, kMtpLayer, LayerKind::kFullAttention, norm_offset, &m->layer);
}

}  // namespace

void ModelWeights::prefault(const std::function<void(size_t, size_t)>& progress) const {
  if (gguf) gguf->prefault(progress);
  else store.prefault(progress);
}

Result<std::unique_ptr<ModelWeights>> load_weights(const std::string& dir, core::LoadMode mode) {
  if (formats::is_gguf_path(dir)) return load_gguf_weights(dir, mode);
  QWEN35_ASSIGN_OR_RETURN(formats::HfConfig hf, formats::load_hf_config(dir));
  QWEN35_ASSIGN_OR_RETURN(ModelConfig cfg, make_model_config(hf));
  auto mw = std::make_unique<ModelWeights>();
  QWEN35_ASSIGN_OR_RETURN(mw->store, formats::TensorStore::open_dir(dir, mode));
  mw->config = cfg;
  const auto& store = mw->store;
  const ModelConfig& c = mw->config;
  QWEN35_ASSIGN_OR_RETURN(mw->prefix, find_prefix(store));
  mw->dialect = detect_dialect(store, c, mw->prefix);
  const float norm_offset = mw->dialect == Dialect::kHf ? 1.0f : 0.0f;

  Binder b(store, c, mw->prefix);
  const std::string& P = mw->prefix;
  QWEN35_ASSIGN_OR_RETURN(mw->embed, b.linear(P + kEmbed, c.vocab, c.hidden));
  const std::string head_key = find_head(store, P);
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
  QWEN35_ASSIGN_OR_RETURN(mw->final_norm, b.vec(P + kFinalNorm + kWeight, c.hidden, norm_offset));
  mw->layers.resize(c.layers.size());
  for (size_t i = 0; i < c.layers.size(); ++i)
    QWEN35_RETURN_IF_ERROR(
        bind_layer(b, c, layer(P, int64_t(i)), c.layers[i], norm_offset, &mw->layers[i]));
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
    if (name.rfind(kMtp, 0) == 0) {
      mw->has_mtp = true;
      break;
    }
  // The MTP head only drafts: one that cannot be bound leaves the model usable without it.
  if (mw->has_mtp) {
    if (c.mtp_layers != 1) {
      mw->mtp_problem = "the MTP head has " + std::to_string(c.mtp_layers) +
                        " layers (mtp_num_hidden_layers); drafting supports 1";
    } else {
      Binder mb(store, c, "");
      auto m = std::make_unique<MtpWeights>();
      if (const Status st = bind_mtp(mb, c, norm_offset, m.get()); st.ok()) {
        mw->mtp = std::move(m);
        mw->mtp_bytes = mb.bytes();
      } else {
        mw->mtp_problem = st.message();
      }
    }
    if (!mw->mtp_problem.empty())
      QWEN35_LOG_WARN("the checkpoint's MTP head is not usable for drafting: %s",
                      mw->mtp_problem.c_str());
  }
  return mw;
}

}  // namespace qwen35::model
