// The vision tower of a GGUF model, from llama.cpp's mmproj file (general.architecture "clip",
// projector type "qwen3vl_merger", which its converter writes for Qwen3.5 towers too): the
// geometry from the clip.vision.* metadata through the same gate as vision_config, the tensors
// under the mmproj names of vision_tensor_table(). What the converter changed is undone here:
//   - the Conv3d patch embedding is stored as one [out, C, P, P] tensor per frame,
//     "v.patch_embd.weight" (frame 0) and "v.patch_embd.weight.1" (frame 1): put back together as
//     [out, C·T·P·P] rows in (C, T, P, P) order;
//   - the position table is stored ne [hidden, positions], i.e. [positions, hidden] rows;
//   - the file has no hidden_act: every Qwen3.5 tower's block MLP is gelu_pytorch_tanh (the
//     merger's GELU is the erf form, as for every dialect).
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "model/gguf_binder.h"
#include "model/tensor_table.h"
#include "model/weights.h"

namespace qwen35::model {

using core::Status;

namespace {

constexpr const char* kProjector = "qwen3vl_merger";

// vision_config's fields from the metadata.
Result<formats::HfVisionConfig> mmproj_config(const GgufModel& g, int64_t text_hidden) {
  QWEN35_ASSIGN_OR_RETURN(std::string arch, g.get_string("general.architecture"));
  if (arch != "clip")
    return error("[gguf] '" + g.path() + "': architecture '" + arch + "' is not an mmproj file (expected 'clip')");
  std::string proj;
  for (const char* key : {"clip.vision.projector_type", "clip.projector_type"})
    if (g.find_value(key) != nullptr) {
      QWEN35_ASSIGN_OR_RETURN(proj, g.get_string(key));
      break;
    }
  if (proj != kProjector)
    return error("[gguf] '" + g.path() + "': projector type '" + proj + "' is not a Qwen3.5 tower (expected '" +
                 kProjector + "')");
  formats::HfVisionConfig v;
  QWEN35_ASSIGN_OR_RETURN(v.depth, g.get_int("clip.vision.block_count"));
  QWEN35_ASSIGN_OR_RETURN(v.hidden_size, g.get_int("clip.vision.embedding_length"));
  QWEN35_ASSIGN_OR_RETURN(v.intermediate_size, g.get_int("clip.vision.feed_forward_length"));
  QWEN35_ASSIGN_OR_RETURN(v.num_heads, g.get_int("clip.vision.attention.head_count"));
  // Without projection_dim, mm.2's shape is checked against the text hidden size instead.
  QWEN35_ASSIGN_OR_RETURN(v.out_hidden_size, g.get_int_or("clip.vision.projection_dim", text_hidden));
  QWEN35_ASSIGN_OR_RETURN(v.patch_size, g.get_int("clip.vision.patch_size"));
  QWEN35_ASSIGN_OR_RETURN(v.spatial_merge_size, g.get_int_or("clip.vision.spatial_merge_size", 2));
  // The converter writes image_size = sqrt(num_position_embeddings) · patch_size.
  QWEN35_ASSIGN_OR_RETURN(int64_t image_size, g.get_int("clip.vision.image_size"));
  if (v.patch_size <= 0 || image_size <= 0 || image_size % v.patch_size != 0)
    return error("[gguf] '" + g.path() + "': clip.vision.image_size " + std::to_string(image_size) +
                 " is not a multiple of clip.vision.patch_size " + std::to_string(v.patch_size));
  v.num_position_embeddings = (image_size / v.patch_size) * (image_size / v.patch_size);
  if (const formats::GgufValue* ds = g.find_value("clip.vision.is_deepstack_layers"); ds && ds->is_array())
    for (size_t i = 0; i < ds->ints.size(); ++i)
      if (ds->ints[i] != 0) v.deepstack_visual_indexes.push_back(int64_t(i));
  return v;
}

// The two frames' [out, C, P, P] kernels (ne [P, P, C, out]) as [out, C·T·P·P] rows.
Result<std::vector<float>> patch_weight(GgufBinder& b, const std::string& name, const VisionConfig& v) {
  const int64_t O = v.hidden, C = v.in_channels, T = v.temporal, P = v.patch;
  std::vector<float> out(size_t(O * C * T * P * P));
  for (int64_t f = 0; f < T; ++f) {
    const std::string n = f == 0 ? name : name + "." + std::to_string(f);
    const GgufTensor* t = b.model().find(n);
    if (t == nullptr) return error("[weights] missing tensor '" + n + "' (expected ggml shape " + ne_str({P, P, C, O}) + ")");
    if (t->ne != std::vector<int64_t>{P, P, C, O})
      return error("[weights] tensor '" + n + "': expected ggml shape " + ne_str({P, P, C, O}) + ", found " + t->shape_str());
    QWEN35_ASSIGN_OR_RETURN(std::vector<float> frame, b.floats(*t, n, O * C, P * P));
    for (int64_t o = 0; o < O; ++o)
      for (int64_t c = 0; c < C; ++c)
        std::copy_n(frame.begin() + (o * C + c) * P * P, P * P, out.begin() + ((o * C + c) * T + f) * P * P);
  }
  return out;
}

Status bind_entry(GgufBinder& b, const ModelConfig& c, const Tensor& t, int64_t layer, VisionWeights* w) {
  const std::string name = vision_tensor_prefix(t, Dialect::kGguf, layer) + t.gguf;
  const Dims d = t.dims(c);
  const Slot s = t.vslot(*w, layer >= 0 ? &w->blocks[size_t(layer)] : nullptr);
  switch (t.form) {
    case Form::kMatrix: {
      QWEN35_ASSIGN_OR_RETURN(*s.matrix, b.matrix(name, d.out, d.in));
      return Status();
    }
    case Form::kPatch: {
      QWEN35_ASSIGN_OR_RETURN(*s.floats, patch_weight(b, name, c.vision));
      return Status();
    }
    case Form::kTable: {
      const GgufTensor* g = b.model().find(name);
      if (g == nullptr) return error("[weights] missing tensor '" + name + "' (expected ggml shape " + ne_str({d.in, d.out}) + ")");
      if (g->ne != std::vector<int64_t>{d.in, d.out})
        return error("[weights] tensor '" + name + "': expected ggml shape " + ne_str({d.in, d.out}) + ", found " + g->shape_str());
      QWEN35_ASSIGN_OR_RETURN(*s.floats, b.floats(*g, name, d.out, d.in));
      return Status();
    }
    case Form::kVector: {
      QWEN35_ASSIGN_OR_RETURN(*s.floats, b.vec(name, d.out));
      return Status();
    }
    default: return error("[weights] tensor '" + name + "': no binding for its form (a table bug)");
  }
}

}  // namespace

Result<std::unique_ptr<VisionWeights>> load_mmproj(const std::string& path, const ModelConfig& text,
                                                   core::LoadMode mode) {
  QWEN35_ASSIGN_OR_RETURN(std::shared_ptr<GgufModel> g, GgufModel::open(path, mode));
  QWEN35_ASSIGN_OR_RETURN(formats::HfVisionConfig hv, mmproj_config(*g, text.hidden));
  ModelConfig c;
  c.hidden = text.hidden;
  QWEN35_ASSIGN_OR_RETURN(c.vision, make_vision_config(hv, text.hidden));
  if (const formats::GgufValue* eps = g->find_value("clip.vision.attention.layer_norm_epsilon"); eps && eps->is_float())
    c.vision.eps = eps->f;
  auto w = std::make_unique<VisionWeights>();
  w->config = c.vision;
  w->blocks.resize(size_t(c.vision.depth));
  GgufBinder b(*g);
  Status st;
  for_each_vision_tensor(c, [&](const Tensor& t, int64_t layer) {
    if (st.ok()) st = bind_entry(b, c, t, layer, w.get());
  });
  QWEN35_RETURN_IF_ERROR(st);
  w->finish();
  w->bytes = b.bytes();
  w->n_params = b.params();
  w->source = "mmproj " + std::filesystem::path(path).filename().string();
  w->gguf = std::move(g);
  return w;
}

Result<std::string> find_mmproj(const std::string& model_gguf) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::path(model_gguf).parent_path().empty() ? fs::path(".") : fs::path(model_gguf).parent_path();
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("mmproj", 0) == 0 && e.path().extension() == ".gguf" && e.is_regular_file(ec))
      found.push_back(e.path().string());
  }
  if (ec) return error("[gguf] cannot list '" + dir.string() + "': " + ec.message());
  std::sort(found.begin(), found.end());
  if (found.size() > 1) {
    std::string names;
    for (const std::string& f : found) names += (names.empty() ? "" : ", ") + fs::path(f).filename().string();
    return error("[gguf] several mmproj files beside '" + model_gguf + "' (" + names + "): name one with --mmproj");
  }
  return found.empty() ? std::string() : found.front();
}

void attach_mmproj(ModelWeights& w, const std::string& path) {
  Result<std::unique_ptr<VisionWeights>> r = load_mmproj(path, w.config);
  if (!r.ok()) {
    w.vision.reset();
    w.config.vision = VisionConfig{};
    w.vision_problem = r.message();
    return;
  }
  w.vision = std::move(*r);
  w.config.vision = w.vision->config;
  w.vision_problem.clear();
}

}  // namespace qwen35::model
