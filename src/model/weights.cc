#include "model/weights.h"

#include <cmath>
#include <cstring>

#include "core/log.h"
#include "model/st_binder.h"
#include "model/tensor_table.h"

namespace qwen35::model {

namespace {

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

// How one layer's routed experts are stored, found at its first expert tensor: HF's fused bare
// tensors (gate_up bound once, at its gate half, and sliced for both), MLX's switch_mlp, or one
// module per expert (HF Qwen3-MoE: mlp.experts.<e>.gate_proj, ...).
struct ExpertStore {
  enum { kUnknown, kHfFused, kMlx, kHfSplit } kind = kUnknown;
  Matrix fused;  // HF gate_up [E, 2I, H] as E·2I rows
};

std::string split_expert_name(const std::string& p, int64_t e, const Tensor& t) {
  return p + "mlp.experts." + std::to_string(e) + "." + t.hf_expert;
}

Status bind_experts(Binder& b, const ModelConfig& c, const Tensor& t, const std::string& p, Slot s,
                    ExpertStore& st) {
  const int64_t E = c.n_experts;
  const Dims d = t.dims(c);
  if (st.kind == ExpertStore::kUnknown) {
    if (b.find(p + t.hf) != nullptr) st.kind = ExpertStore::kHfFused;
    else if (b.find(p + t.mlx) != nullptr) st.kind = ExpertStore::kMlx;
    else if (b.find(split_expert_name(p, 0, t)) != nullptr) st.kind = ExpertStore::kHfSplit;
    else return b.missing(p + t.hf, "HF fused experts, per-expert mlp.experts.N.* or MLX switch_mlp.* tensors");
  }
  if (st.kind == ExpertStore::kHfSplit) {
    s.experts->resize(size_t(E));
    for (int64_t e = 0; e < E; ++e) {
      const std::string name = split_expert_name(p, e, t);
      QWEN35_ASSIGN_OR_RETURN((*s.experts)[size_t(e)].*t.expert, b.stacked(name, module_of(name), 1, d.out, d.in, false));
    }
    return Status();
  }
  Matrix m;
  int64_t stride = d.out, first = 0;  // expert e's rows: [e·stride + first, +d.out)
  if (st.kind == ExpertStore::kHfFused && t.half != Half::kWhole) {
    if (t.half == Half::kGate) {
      QWEN35_ASSIGN_OR_RETURN(st.fused, b.stacked(p + t.hf, p + t.hf, E, 2 * d.out, d.in, true));
    }
    m = st.fused;
    stride = 2 * d.out;
    first = t.half == Half::kUp ? d.out : 0;
  } else {
    const std::string name = p + (st.kind == ExpertStore::kHfFused ? t.hf : t.mlx);
    QWEN35_ASSIGN_OR_RETURN(m, b.stacked(name, module_of(name), E, d.out, d.in, true));
  }
  s.experts->resize(size_t(E));
  for (int64_t e = 0; e < E; ++e) (*s.experts)[size_t(e)].*t.expert = m.row_slice(e * stride + first, d.out);
  return Status();
}

// A layer's fused DeltaNet projection (Qwen3-Next), bound at the entry of its first part and
// regrouped for each part into storage `owned` keeps.
struct FusedProj {
  Matrix whole;
  OwnedBuffers* owned = nullptr;
};

Status bind_fused(Binder& b, const ModelConfig& c, const Tensor& t, const std::string& name, Slot s, FusedProj& fp) {
  if (t.fused == Fused::kQkv || t.fused == Fused::kB) {
    QWEN35_ASSIGN_OR_RETURN(fp.whole, b.stacked(name, module_of(name), 1, fused_rows(c, t.fused), t.dims(c).in, false));
  }
  *s.matrix = gather_rows(fp.whole, fused_part_runs(c, t.fused), fp.owned);
  return Status();
}

// Binds table entry `t` under prefix `p` into its slot. Zero-centred norms get `norm_offset`
// (1 for HF, which stores w for a norm applied as 1+w).
Status bind_entry(Binder& b, const ModelConfig& c, Dialect dialect, const Tensor& t, const std::string& p,
                  float norm_offset, Slot s, ExpertStore& experts, FusedProj& fused) {
  const std::string name = p + t.name(dialect);
  const Dims d = t.dims(c);
  if (t.optional && b.find(name) == nullptr) return Status();
  switch (t.form) {
    case Form::kMatrix: {
      if (t.fused != Fused::kNone) return bind_fused(b, c, t, name, s, fused);
      QWEN35_ASSIGN_OR_RETURN(*s.matrix, b.stacked(name, module_of(name), 1, d.out, d.in, false));
      break;
    }
    case Form::kExperts: return bind_experts(b, c, t, p, s, experts);
    case Form::kConv: {
      QWEN35_ASSIGN_OR_RETURN(*s.floats, conv_weight(b, name, d.out, d.in));
      break;
    }
    case Form::kVector: {
      QWEN35_ASSIGN_OR_RETURN(*s.floats, b.vec(name, d.out, t.role == Role::kNorm ? norm_offset : 0.0f));
      if (t.role == Role::kDecay)
        for (float& a : *s.floats) a = -std::exp(a);  // A = -exp(A_log)
      break;
    }
    case Form::kPatch:
    case Form::kTable: return error("[weights] tensor '" + name + "': a vision form in the text table (a table bug)");
  }
  if (s.present != nullptr) *s.present = true;
  return Status();
}

// The text model's prefix: the first under which an embedding table exists.
Result<std::string> find_prefix(const formats::TensorStore& store, const Tensor& embed) {
  for (const char* p : {kHfNames.prefix, kMlxNames.prefix, kTextOnlyPrefix, kBarePrefix})
    if (store.find(std::string(p) + embed.hf) != nullptr) return std::string(p);
  auto quoted = [&](const char* p) { return std::string("'") + p + embed.hf + "'"; };
  return error("[weights] no embedding table: expected " + quoted(kHfNames.prefix) + " (HF), " +
               quoted(kMlxNames.prefix) + " (MLX) or " + quoted(kTextOnlyPrefix));
}

// The dialect from the conv1d layout ([C,1,K] HF, [C,K,1] MLX), else from the prefix.
Dialect detect_dialect(const formats::TensorStore& store, const ModelConfig& c,
                       const std::string& prefix) {
  Dialect d = prefix == kMlxNames.prefix ? Dialect::kMlx : Dialect::kHf;
  const Tensor& conv = table_entry(Block::kLinearAttn, Role::kConvTaps);
  for (size_t i = 0; i < c.layers.size(); ++i)
    if (c.layers[i] == LayerKind::kLinearAttention) {
      const TensorView* t = store.find(layer(prefix, int64_t(i)) + conv.hf);
      if (t != nullptr && t->shape.size() == 3)
        d = (t->shape[1] == 1 && t->shape[2] != 1) ? Dialect::kHf : Dialect::kMlx;
      break;
    }
  return d;
}

// The untied output head's tensor, or "" when the checkpoint has none.
std::string find_head(const formats::TensorStore& store, const std::string& prefix) {
  const Tensor& head = table_entry(Block::kHead, Role::kEmbedding);
  for (const std::string& k : {std::string(head.hf), std::string(head.mlx), prefix + head.hf})
    if (store.find(k) != nullptr) return k;
  return "";
}

// Binds the entries of layer `layer` (c.n_layers: the MTP head's) of kind `kind`.
Status bind_layer(Binder& b, ModelWeights& w, int64_t layer, LayerKind kind, float norm_offset, LayerWeights* L) {
  const ModelConfig& c = w.config;
  L->kind = kind;
  L->moe.has_shared = c.moe && c.shared_intermediate > 0;
  ExpertStore experts;
  FusedProj fused{.whole = {}, .owned = &w.owned};
  for (const Tensor& t : tensor_table()) {
    if (!in_layer(t, c, kind)) continue;
    const std::string p = tensor_prefix(t, w.dialect, w.prefix, c, layer);
    QWEN35_RETURN_IF_ERROR(bind_entry(b, c, w.dialect, t, p, norm_offset, t.slot(w, L), experts, fused));
  }
  return Status();
}

// The model-level entries but the head: the embedding table and the final norm.
Status bind_model(Binder& b, ModelWeights& w, float norm_offset) {
  ExpertStore unused;
  FusedProj no_fused;
  for (const Tensor& t : tensor_table())
    if (t.block == Block::kModel) {
      const std::string p = tensor_prefix(t, w.dialect, w.prefix, w.config, -1);
      QWEN35_RETURN_IF_ERROR(bind_entry(b, w.config, w.dialect, t, p, norm_offset, t.slot(w, nullptr), unused, no_fused));
    }
  return Status();
}

// The MTP head: fc, its three norms and one full-attention layer (mtp.layers.0), bound like a
// trunk layer, into w.mtp. Outside the text prefix.
Status bind_mtp(Binder& b, ModelWeights& w, float norm_offset) {
  ExpertStore unused;
  FusedProj no_fused;
  for (const Tensor& t : tensor_table())
    if (t.block == Block::kMtp) {
      const std::string p = tensor_prefix(t, w.dialect, w.prefix, w.config, w.config.n_layers);
      QWEN35_RETURN_IF_ERROR(bind_entry(b, w.config, w.dialect, t, p, norm_offset, t.slot(w, nullptr), unused, no_fused));
    }
  return bind_layer(b, w, w.config.n_layers, LayerKind::kFullAttention, norm_offset, &w.mtp->layer);
}

}  // namespace

void ModelWeights::prefault(const std::function<void(size_t, size_t)>& progress) const {
  if (gguf) gguf->prefault(progress);
  else store.prefault(progress);
}

std::vector<const core::MappedFile*> ModelWeights::mappings() const {
  std::vector<const core::MappedFile*> out;
  if (gguf) {
    for (const auto& f : gguf->files())
      if (f->mapping()) out.push_back(f->mapping());
  } else {
    for (const auto& f : store.files())
      if (f->mapping()) out.push_back(f->mapping());
  }
  return out;
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
  QWEN35_ASSIGN_OR_RETURN(mw->prefix, find_prefix(store, table_entry(Block::kModel, Role::kEmbedding)));
  mw->dialect = detect_dialect(store, c, mw->prefix);
  // Qwen3.5's and Qwen3-Next's HF norms hold w for a norm applied as 1+w; MLX and the Qwen3
  // family store the weight as applied.
  const float norm_offset = mw->dialect == Dialect::kHf && c.hf_norms_zero_centred() ? 1.0f : 0.0f;

  Binder b(store, c, mw->prefix);
  QWEN35_RETURN_IF_ERROR(bind_model(b, *mw, norm_offset));
  const std::string head_key = find_head(store, mw->prefix);
  mw->tied = c.tie_word_embeddings.value_or(head_key.empty());
  if (!mw->tied && head_key.empty()) {
    QWEN35_LOG_WARN("config says tie_word_embeddings=false but there is no lm_head tensor: using the embedding");
    mw->tied = true;
  }
  if (mw->tied) {
    mw->head = mw->embed;
  } else {
    QWEN35_ASSIGN_OR_RETURN(mw->head, b.stacked(head_key, module_of(head_key), 1, c.vocab, c.hidden, false));
  }
  mw->layers.resize(c.layers.size());
  for (size_t i = 0; i < c.layers.size(); ++i)
    QWEN35_RETURN_IF_ERROR(bind_layer(b, *mw, int64_t(i), c.layers[i], norm_offset, &mw->layers[i]));
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
  attach_vision(hf, *mw);
  // The MTP head only drafts: one that cannot be bound leaves the model usable without it.
  if (mw->has_mtp) {
    if (c.mtp_layers != 1) {
      mw->mtp_problem = "the MTP head has " + std::to_string(c.mtp_layers) +
                        " layers (mtp_num_hidden_layers); drafting supports 1";
    } else {
      Binder mb(store, c, "");
      mw->mtp = std::make_unique<MtpWeights>();
      if (const Status st = bind_mtp(mb, *mw, norm_offset); st.ok()) {
        mw->mtp_bytes = mb.bytes();
      } else {
        mw->mtp.reset();
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
