// Binding of the vision tower from safetensors checkpoints (HF "model.visual.*", MLX
// "vision_tower.*"), by walking vision_tensor_table(). A checkpoint without vision_config or
// without tower tensors is text-only; a tower that is there but cannot be bound (refused
// config, missing or misshapen tensor) leaves the text model usable and its reason in
// ModelWeights::vision_problem.
#include <string>

#include "model/st_binder.h"
#include "model/tensor_table.h"
#include "model/weights.h"

namespace qwen35::model {
namespace {

// Element (o, c, t, p1, p2) of a patch embedding, flattened, from HF [O, C, T, P, P] or the
// channels-last [O, T, P, P, C] that MLX stores convolutions in.
Result<std::vector<float>> patch_weight(Binder& b, const std::string& key, const VisionConfig& v) {
  const int64_t O = v.hidden, C = v.in_channels, T = v.temporal, P = v.patch;
  const TensorView* t = b.find(key);
  const std::vector<int64_t> hf{O, C, T, P, P}, mlx{O, T, P, P, C};
  if (t == nullptr) return b.missing(key, formats::shape_to_string(hf));
  if (!is_float(t->dtype))
    return error("[weights] tensor '" + key + "': dtype " + std::string(core::dtype_name(t->dtype)) + ", expected a float type");
  if (t->shape != hf && t->shape != mlx)
    return error("[weights] tensor '" + key + "': expected shape " + formats::shape_to_string(hf) + " (HF) or " +
                 formats::shape_to_string(mlx) + " (MLX, channels last), found " + t->shape_str());
  b.account(*t, t->numel());
  std::vector<float> raw = Binder::to_f32(*t, 0.0f);
  if (t->shape == hf) return raw;
  std::vector<float> out(raw.size());
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t f = 0; f < T; ++f)
        for (int64_t p = 0; p < P * P; ++p)
          out[size_t((((o * C + c) * T + f) * P * P) + p)] = raw[size_t(((o * T + f) * P * P + p) * C + c)];
  return out;
}

// A float table [out, in] as fp32.
Result<std::vector<float>> table(Binder& b, const std::string& key, Dims d) {
  const TensorView* t = b.find(key);
  if (t == nullptr) return b.missing(key, shp({d.out, d.in}));
  if (!is_float(t->dtype))
    return error("[weights] tensor '" + key + "': dtype " + std::string(core::dtype_name(t->dtype)) + ", expected a float type");
  if (t->shape != std::vector<int64_t>{d.out, d.in})
    return error("[weights] tensor '" + key + "': expected shape " + shp({d.out, d.in}) + ", found " + t->shape_str());
  b.account(*t, d.out * d.in);
  return Binder::to_f32(*t, 0.0f);
}

Status bind_entry(Binder& b, const ModelConfig& c, Dialect d, const Tensor& t, int64_t layer, VisionWeights* w) {
  const std::string name = vision_tensor_prefix(t, d, layer) + t.name(d);
  const Dims dims = t.dims(c);
  const Slot s = t.vslot(*w, layer >= 0 ? &w->blocks[size_t(layer)] : nullptr);
  switch (t.form) {
    case Form::kMatrix: {
      QWEN35_ASSIGN_OR_RETURN(*s.matrix, b.stacked(name, module_of(name), 1, dims.out, dims.in, false));
      return Status();
    }
    case Form::kPatch: {
      QWEN35_ASSIGN_OR_RETURN(*s.floats, patch_weight(b, name, c.vision));
      return Status();
    }
    case Form::kTable: {
      QWEN35_ASSIGN_OR_RETURN(*s.floats, table(b, name, dims));
      return Status();
    }
    case Form::kVector: {
      QWEN35_ASSIGN_OR_RETURN(*s.floats, b.vec(name, dims.out));
      return Status();
    }
    default: return error("[weights] tensor '" + name + "': no binding for its form (a table bug)");
  }
}

}  // namespace

void VisionWeights::finish() {
  patch = Matrix{};
  patch.type = WeightType::kF32;
  patch.rows = config.hidden;
  patch.cols = config.patch_dim();
  patch.data = patch_w.data();
}

bool has_vision_tensors(const formats::TensorStore& store, Dialect* d) {
  for (const auto& [name, _] : store.all()) {
    if (name.rfind(kHfVisual, 0) == 0) {
      *d = Dialect::kHf;
      return true;
    }
    if (name.rfind(kMlxVisual, 0) == 0) {
      *d = Dialect::kMlx;
      return true;
    }
  }
  return false;
}

Result<std::unique_ptr<VisionWeights>> bind_vision(const formats::TensorStore& store, const ModelConfig& c, Dialect d) {
  auto w = std::make_unique<VisionWeights>();
  w->config = c.vision;
  w->blocks.resize(size_t(c.vision.depth));
  Binder b(store, c, "");
  Status st;
  for_each_vision_tensor(c, [&](const Tensor& t, int64_t layer) {
    if (st.ok()) st = bind_entry(b, c, d, t, layer, w.get());
  });
  QWEN35_RETURN_IF_ERROR(st);
  w->finish();
  w->bytes = b.bytes();
  w->n_params = b.params();
  w->source = d == Dialect::kMlx ? "MLX vision_tower.*" : "HF model.visual.*";
  return w;
}

Result<VisionConfig> vision_config_of(const formats::HfConfig& hf, int64_t text_hidden) {
  if (!hf.vision) return error("no vision tower: config.json has no vision_config");
  QWEN35_ASSIGN_OR_RETURN(VisionConfig v, make_vision_config(*hf.vision, text_hidden));
  v.image_token_id = hf.image_token_id;
  v.video_token_id = hf.video_token_id;
  v.vision_start_token_id = hf.vision_start_token_id;
  v.vision_end_token_id = hf.vision_end_token_id;
  return v;
}

Result<std::unique_ptr<VisionWeights>> load_vision_weights(const std::string& dir, core::LoadMode mode) {
  QWEN35_ASSIGN_OR_RETURN(formats::HfConfig hf, formats::load_hf_config(dir));
  ModelConfig c;
  c.hidden = hf.hidden_size;
  QWEN35_ASSIGN_OR_RETURN(c.vision, vision_config_of(hf, hf.hidden_size));
  c.quantization = hf.quantization;
  QWEN35_ASSIGN_OR_RETURN(formats::TensorStore store, formats::TensorStore::open_dir(dir, mode));
  auto owned = std::make_shared<const formats::TensorStore>(std::move(store));
  Dialect d = Dialect::kHf;
  if (!has_vision_tensors(*owned, &d))
    return error("[weights] '" + dir + "': no vision tower tensors ('" + kHfVisual + "*' or '" + kMlxVisual + "*')");
  QWEN35_ASSIGN_OR_RETURN(std::unique_ptr<VisionWeights> w, bind_vision(*owned, c, d));
  w->store = std::move(owned);
  return w;
}

void attach_vision(const formats::HfConfig& hf, ModelWeights& w) {
  Dialect d = Dialect::kHf;
  const bool tensors = has_vision_tensors(w.store, &d);
  Result<VisionConfig> v = vision_config_of(hf, w.config.hidden);
  if (!v.ok()) {
    w.vision_problem = v.message();
  } else if (!tensors) {
    w.vision_problem = std::string("no vision tower: the checkpoint has no '") + kHfVisual + "*' (HF) or '" +
                       kMlxVisual + "*' (MLX) tensors";
  } else {
    w.config.vision = *v;
    Result<std::unique_ptr<VisionWeights>> r = bind_vision(w.store, w.config, d);
    if (r.ok()) {
      w.vision = std::move(*r);
      return;
    }
    w.vision_problem = r.message();
  }
  // Not logged: the text model is what loading promises; inspect shows the reason, and an image
  // request is refused with it (the test fixtures carry partial placeholder towers, too).
  w.config.vision = VisionConfig{};
}

}  // namespace qwen35::model
