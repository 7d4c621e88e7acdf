#include "tools/synth/gguf_synth.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

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

}  // namespace

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
  add_gguf_metadata(&w, preset, plan.has_mtp ? preset.config.mtp_layers : 0, type);
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
  return s;
}

}  // namespace qwen35::tools
