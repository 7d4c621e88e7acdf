#include "tools/synth/gguf_synth.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "model/tensor_table.h"

#include "core/dtype.h"
#include "tools/synth/gguf_encode.h"
#include "tools/synth/gguf_layout.h"
#include "tools/synth/gguf_writer.h"
#include "tools/synth/st_writer.h"

namespace qwen35::tools {

using core::Result;
using core::Status;

namespace {

constexpr int64_t kChunkElems = int64_t(1) << 21;  // values per chunk (8 MiB of f32)

// Scratch for one tensor's chunks: the HF bytes, their f32 values, one row, the encoded bytes.
struct Buffers {
  std::vector<uint8_t> raw;
  std::vector<float> values;
  std::vector<float> row;
  std::vector<uint8_t> encoded;
};

// HF elements [begin, begin + n) of `src` as f32.
void hf_values(const TensorSpec& src, uint64_t seed, uint64_t begin, uint64_t n, Buffers* b,
               float* out) {
  const size_t width = core::dtype_size(src.dtype);
  if (b->raw.size() < n * width) b->raw.resize(n * width);
  fill_tensor(src, seed, begin, n, b->raw.data());
  if (src.dtype == core::DType::kBF16) {
    for (uint64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, b->raw.data() + 2 * i, 2);
      out[i] = core::bf16_to_f32(h);
    }
  } else {
    std::memcpy(out, b->raw.data(), n * 4);
  }
}

// GGUF elements [e0, e0 + n) of `t` (whole units), read in runs of consecutive HF units.
void gguf_values(const GgufTensorSpec& t, uint64_t seed, int64_t e0, int64_t n, Buffers* b) {
  const int64_t u = t.unit;
  const auto map = [&](int64_t k) { return t.unit_map ? t.unit_map(k) : k; };
  for (int64_t k = e0 / u, end = (e0 + n) / u; k < end;) {
    int64_t run = 1;
    while (k + run < end && map(k + run) == map(k) + run) ++run;
    hf_values(*t.src, seed, uint64_t(map(k) * u), uint64_t(run * u), b,
              b->values.data() + (k * u - e0));
    k += run;
  }
  float* v = b->values.data();
  if (!t.col_perm.empty()) {
    const int64_t cols = t.ne[0];
    b->row.resize(size_t(cols));
    for (int64_t r = 0; r < n / cols; ++r) {
      float* x = v + r * cols;
      std::copy(x, x + cols, b->row.begin());
      for (int64_t c = 0; c < cols; ++c) x[c] = b->row[size_t(t.col_perm[size_t(c)])];
    }
  }
  // The same f32 arithmetic the HF binder does at load time (1 + w; -exp(A_log)), so the two
  // layouts hold equal values.
  if (t.values == ValueMap::kPlusOne)
    for (int64_t i = 0; i < n; ++i) v[i] = 1.0f + v[i];
  if (t.values == ValueMap::kNegExp)
    for (int64_t i = 0; i < n; ++i) v[i] = -std::exp(v[i]);
}

Status write_tensor(GgufWriter* w, const GgufTensorSpec& t, uint64_t seed, Buffers* b,
                    Progress* progress) {
  const int64_t cols = t.ne[0], rows = t.numel() / cols;
  const int64_t chunk_rows = std::max<int64_t>(1, kChunkElems / cols);
  const uint64_t row_bytes = gguf_row_bytes(t.type, cols);
  b->values.resize(size_t(std::min(rows, chunk_rows) * cols));
  b->encoded.resize(size_t(uint64_t(std::min(rows, chunk_rows)) * row_bytes));
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t n = std::min(chunk_rows, rows - r0);
    gguf_values(t, seed, r0 * cols, n * cols, b);
    for (int64_t r = 0; r < n; ++r)
      gguf_encode_row(t.type, b->values.data() + r * cols, cols, b->encoded.data() + uint64_t(r) * row_bytes);
    QWEN35_RETURN_IF_ERROR(w->write(b->encoded.data(), size_t(uint64_t(n) * row_bytes)));
    progress->add(uint64_t(n) * row_bytes);
  }
  return core::ok_status();
}

// The mmproj tensors llama.cpp's converter writes for the tower of `hf` (model/gguf_vision.cc
// reads them): names of vision_tensor_table(), ggml ne the HF shape reversed, the Conv3d patch
// embedding split into one [out, C, P, P] tensor per frame (".weight", ".weight.1"). Vectors stay
// F32; matrices are `type` where their rows are whole blocks of it, else F16. As llama.cpp's
// converter writes them: the patch kernels F16 in an F16 file and F32 otherwise, the position
// table always F32 (its loader interpolates the table as F32 and refuses any other type).
Result<std::vector<GgufTensorSpec>> mmproj_tensors(const Preset& preset, const TensorPlan& hf, formats::GgmlType type) {
  const model::ModelConfig& c = preset.config;
  std::map<std::string, const TensorSpec*> by_name;
  for (const TensorSpec& t : hf.tensors) by_name[t.name] = &t;
  std::vector<GgufTensorSpec> out;
  Status st;
  const formats::GgmlType patch_type = type == formats::GgmlType::kF16 ? type : formats::GgmlType::kF32;
  model::for_each_vision_tensor(c, [&](const model::Tensor& e, int64_t layer) {
    const std::string src = model::vision_tensor_prefix(e, model::Dialect::kHf, layer) + e.hf;
    const auto it = by_name.find(src);
    if (it == by_name.end()) {
      if (st.ok()) st = core::error("[synth] the HF plan has no '" + src + "' for the mmproj file");
      return;
    }
    const model::Dims d = e.dims(c);
    GgufTensorSpec t;
    t.name = model::vision_tensor_prefix(e, model::Dialect::kGguf, layer) + e.gguf;
    t.src = it->second;
    if (e.form == model::Form::kPatch) {
      const model::VisionConfig& v = c.vision;
      for (int64_t f = 0; f < v.temporal; ++f) {
        GgufTensorSpec p = t;
        if (f > 0) p.name.append(".").append(std::to_string(f));
        p.ne = {v.patch, v.patch, v.in_channels, v.hidden};
        p.type = patch_type;
        // Unit k = o·C + c of P·P values is HF unit (o·C + c)·T + f.
        p.unit = v.patch * v.patch;
        p.unit_map = [T = v.temporal, f](int64_t k) { return k * T + f; };
        out.push_back(std::move(p));
      }
      return;
    }
    t.ne = d.in > 0 ? std::vector<int64_t>{d.in, d.out} : std::vector<int64_t>{d.out};
    t.unit = t.ne[0];
    t.type = t.ne.size() == 1 || type == formats::GgmlType::kF32 || e.form == model::Form::kTable
                 ? formats::GgmlType::kF32
             : gguf_row_fits(type, t.ne[0]) ? type
                                            : formats::GgmlType::kF16;
    out.push_back(std::move(t));
  });
  QWEN35_RETURN_IF_ERROR(st);
  return out;
}

// The clip.* metadata of a Qwen3.5 tower's mmproj file.
void add_mmproj_metadata(GgufWriter* w, const Preset& preset) {
  const model::VisionConfig& v = preset.config.vision;
  w->add_string("general.architecture", "clip");
  w->add_string("general.type", "mmproj");
  w->add_string("general.name", std::string("qwen35-synth-").append(preset.name));
  w->add_string("clip.projector_type", "qwen3vl_merger");
  w->add_bool("clip.has_vision_encoder", true);
  w->add_bool("clip.use_gelu", true);
  w->add_u32("clip.vision.image_size", uint32_t(v.grid_side * v.patch));
  w->add_u32("clip.vision.patch_size", uint32_t(v.patch));
  w->add_u32("clip.vision.embedding_length", uint32_t(v.hidden));
  w->add_u32("clip.vision.feed_forward_length", uint32_t(v.intermediate));
  w->add_u32("clip.vision.projection_dim", uint32_t(v.out_hidden));
  w->add_u32("clip.vision.block_count", uint32_t(v.depth));
  w->add_u32("clip.vision.attention.head_count", uint32_t(v.n_heads));
  w->add_f32("clip.vision.attention.layer_norm_epsilon", float(v.eps));
  w->add_u32("clip.vision.spatial_merge_size", uint32_t(v.merge));
  // The processor's normalization (preprocessor_config.json's, config_gen.cc), which llama.cpp's
  // converter copies into the file and its loader requires; and the converter's per-block
  // DeepStack flags (none in Qwen3.5).
  w->add_f32s("clip.vision.image_mean", {0.5f, 0.5f, 0.5f});
  w->add_f32s("clip.vision.image_std", {0.5f, 0.5f, 0.5f});
  w->add_bools("clip.vision.is_deepstack_layers", std::vector<bool>(size_t(v.depth), false));
}

// Writes the tower of the HF plan `plan` as an mmproj file at `path`.
Result<SynthSummary> write_mmproj(const std::string& path, const Preset& preset, const TensorPlan& plan,
                                  formats::GgmlType type, uint64_t seed, bool show_progress) {
  QWEN35_ASSIGN_OR_RETURN(const std::vector<GgufTensorSpec> tensors, mmproj_tensors(preset, plan, type));
  GgufWriter w;
  add_mmproj_metadata(&w, preset);
  for (const GgufTensorSpec& t : tensors) w.add_tensor(t.name, t.ne, t.type, t.nbytes());
  QWEN35_RETURN_IF_ERROR(w.begin(path));
  Progress progress(w.data_bytes(), show_progress);
  Buffers b;
  for (const GgufTensorSpec& t : tensors) QWEN35_RETURN_IF_ERROR(write_tensor(&w, t, seed, &b, &progress));
  progress.finish();
  QWEN35_RETURN_IF_ERROR(w.finish());
  SynthSummary s;
  s.n_tensors = int64_t(tensors.size());
  s.total_bytes = w.data_bytes();
  s.n_files = 1;
  return s;
}

}  // namespace

std::string mmproj_path_for(const std::string& model_gguf) {
  const std::filesystem::path p(model_gguf);
  return (p.parent_path() / std::string("mmproj-").append(p.filename().string())).string();
}

Result<SynthSummary> write_synthetic_gguf(const SynthOptions& opts, const Preset& preset,
                                          const PlanOptions& plan_opts) {
  const std::string& path = opts.out_dir;
  if (std::filesystem::path(path).extension() != ".gguf")
    return core::error("[synth] --format gguf writes one file: --out must name a .gguf file, got '" + path + "'");
  QWEN35_ASSIGN_OR_RETURN(const formats::GgmlType type,
                          gguf_outtype(opts.outtype.empty() ? "f16" : opts.outtype));
  if (const auto parent = std::filesystem::path(path).parent_path(); !parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) return core::error("[synth] cannot create '" + parent.string() + "': " + ec.message());
  }
  const TensorPlan plan = build_tensor_plan(preset, plan_opts);
  QWEN35_ASSIGN_OR_RETURN(const std::vector<GgufTensorSpec> tensors, gguf_tensors(preset, plan, type));
  GgufWriter w;
  const bool mtp = plan.has_mtp && preset.config.family != model::Family::kQwen3Next;  // see gguf_tensors
  add_gguf_metadata(&w, preset, mtp ? preset.config.mtp_layers : 0, type);
  for (const GgufTensorSpec& t : tensors) w.add_tensor(t.name, t.ne, t.type, t.nbytes());
  QWEN35_RETURN_IF_ERROR(w.begin(path));
  Progress progress(w.data_bytes(), opts.progress);
  Buffers b;
  for (const GgufTensorSpec& t : tensors) QWEN35_RETURN_IF_ERROR(write_tensor(&w, t, opts.seed, &b, &progress));
  progress.finish();
  QWEN35_RETURN_IF_ERROR(w.finish());
  SynthSummary s;
  s.n_tensors = int64_t(tensors.size());
  s.total_bytes = w.data_bytes();
  s.n_files = 1;
  if (plan.has_vision) {
    QWEN35_ASSIGN_OR_RETURN(const SynthSummary m,
                            write_mmproj(mmproj_path_for(path), preset, plan, type, opts.seed, opts.progress));
    s.n_tensors += m.n_tensors;
    s.total_bytes += m.total_bytes;
    s.n_files += 1;
  }
  return s;
}

}  // namespace qwen35::tools
