#include "model/fused_proj.h"

#include <cstring>

#include "core/check.h"

namespace qwen35::model {

int64_t fused_rows(const ModelConfig& c, Fused part) {
  if (part == Fused::kB || part == Fused::kA) return 2 * c.n_v_heads;
  return 2 * c.n_k_heads * c.d_k + 2 * c.n_v_heads * c.d_v;
}

std::vector<RowRun> fused_part_runs(const ModelConfig& c, Fused part) {
  const int64_t nk = c.n_k_heads, dk = c.d_k, rv = c.n_v_heads / c.n_k_heads * c.d_v;
  const int64_t r = c.n_v_heads / c.n_k_heads;
  std::vector<RowRun> runs;
  if (part == Fused::kB || part == Fused::kA) {
    for (int64_t g = 0; g < nk; ++g) runs.push_back({g * 2 * r + (part == Fused::kA ? r : 0), r});
    return runs;
  }
  const int64_t group = 2 * dk + 2 * rv;
  // Offsets within a key head's group: q, k, v, z.
  const int64_t at[4] = {0, dk, 2 * dk, 2 * dk + rv}, len[4] = {dk, dk, rv, rv};
  const std::vector<int> pieces = part == Fused::kQkv ? std::vector<int>{0, 1, 2} : std::vector<int>{3};
  for (int piece : pieces)
    for (int64_t g = 0; g < nk; ++g) runs.push_back({g * group + at[piece], len[piece]});
  return runs;
}

namespace {

// Copies rows `runs` of an array of `row_bytes`-byte rows into a new buffer of `owned`.
const void* gather(const void* src, size_t row_bytes, const std::vector<RowRun>& runs, int64_t rows,
                   OwnedBuffers* owned) {
  auto buf = std::make_unique<std::vector<uint8_t>>(size_t(rows) * row_bytes);
  uint8_t* out = buf->data();
  for (const RowRun& run : runs) {
    const size_t n = size_t(run.count) * row_bytes;
    std::memcpy(out, static_cast<const uint8_t*>(src) + size_t(run.first) * row_bytes, n);
    out += n;
  }
  owned->push_back(std::move(buf));
  return owned->back()->data();
}

}  // namespace

kernels::Matrix gather_rows(const kernels::Matrix& m, const std::vector<RowRun>& runs, OwnedBuffers* owned) {
  using kernels::WeightType;
  QWEN35_CHECK(m.rows > 0 && !m.sb_tiled && !m.codes_tiled);  // regrouped at load, before any int8 form
  int64_t rows = 0;
  for (const RowRun& run : runs) {
    QWEN35_CHECK(run.first >= 0 && run.count >= 0 && run.first + run.count <= m.rows);
    rows += run.count;
  }
  kernels::Matrix out = m;
  out.rows = rows;
  switch (m.type) {
    case WeightType::kF32: out.data = gather(m.data, size_t(m.cols) * 4, runs, rows, owned); break;
    case WeightType::kF16:
    case WeightType::kBF16: out.data = gather(m.data, size_t(m.cols) * 2, runs, rows, owned); break;
    case WeightType::kAffine: {
      out.data = gather(m.data, size_t(m.cols * m.bits / 32) * 4, runs, rows, owned);  // packed words
      const size_t sb_row = size_t(m.cols / m.group) * core::dtype_size(m.sb_type);
      out.scales = gather(m.scales, sb_row, runs, rows, owned);
      if (m.biases != nullptr) out.biases = gather(m.biases, sb_row, runs, rows, owned);
      break;
    }
    default: out.data = gather(m.data, m.bytes() / size_t(m.rows), runs, rows, owned); break;  // ggml blocks
  }
  return out;
}

}  // namespace qwen35::model
