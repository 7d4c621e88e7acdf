#include "vulkan/matrix.h"

#include <algorithm>

#include "kernels/iq_grids.h"
#include "kernels/matrix.h"

namespace qwen35::vulkan {

using kernels::WeightType;

const char* shader_type(WeightType t) {
  switch (t) {
    case WeightType::kF32:
      return "f32";
    case WeightType::kF16:
      return "f16";
    case WeightType::kBF16:
      return "bf16";
    case WeightType::kAffine:
      return "affine";
    case WeightType::kQ8_0:
      return "q8_0";
    case WeightType::kQ4_0:
      return "q4_0";
    case WeightType::kQ4_1:
      return "q4_1";
    case WeightType::kQ5_0:
      return "q5_0";
    case WeightType::kQ5_1:
      return "q5_1";
    case WeightType::kIQ4_NL:
      return "iq4_nl";
    case WeightType::kQ4_K:
      return "q4_k";
    case WeightType::kQ5_K:
      return "q5_k";
    case WeightType::kQ6_K:
      return "q6_k";
    case WeightType::kIQ4_XS:
      return "iq4_xs";
    case WeightType::kQ2_K:
      return "q2_k";
    case WeightType::kQ3_K:
      return "q3_k";
    case WeightType::kIQ2_XXS:
      return "iq2_xxs";
    case WeightType::kIQ2_XS:
      return "iq2_xs";
    case WeightType::kIQ3_XXS:
      return "iq3_xxs";
    case WeightType::kIQ3_S:
      return "iq3_s";
    default:
      return nullptr;
  }
}

uint64_t row_bytes(const kernels::Matrix& m) {
  switch (m.type) {
    case WeightType::kF32:
      return uint64_t(m.cols) * 4;
    case WeightType::kF16:
    case WeightType::kBF16:
      return uint64_t(m.cols) * 2;
    case WeightType::kAffine:
      return uint64_t(kernels::affine_row_words(m)) * 4;
    default:
      return uint64_t(kernels::block_row_bytes(m));
  }
}

bool has_grid(WeightType t) {
  return t == WeightType::kIQ2_XXS || t == WeightType::kIQ2_XS || t == WeightType::kIQ3_XXS ||
         t == WeightType::kIQ3_S;
}

namespace {

// Bytes of one stored row's group scales (or biases) of an MLX affine matrix; 0 for the others.
uint64_t sb_row_bytes(const kernels::Matrix& m) {
  return m.type == WeightType::kAffine && m.group > 0
             ? uint64_t(m.cols / m.group) * core::dtype_size(m.sb_type)
             : 0;
}

// Rows per part: the largest count whose codes (and scales) fit `limit` bytes. Rows of 16-bit
// elements with an odd column count end mid-word: parts then hold an even number of rows, so
// each part starts on a word. 0: a row does not fit.
uint64_t rows_per_part(const kernels::Matrix& m, uint64_t limit) {
  const uint64_t rb = row_bytes(m);
  uint64_t per = limit / std::max(rb, sb_row_bytes(m));
  if (rb % 4 != 0) per &= ~uint64_t(1);
  return per;
}

// A buffer's bytes as Device::buffer makes it: whole words, at least one.
uint64_t buffer_bytes(uint64_t bytes) { return std::max<uint64_t>(4, (bytes + 3) & ~uint64_t(3)); }

uint64_t grid_bytes(WeightType t) {
  return (t == WeightType::kIQ2_XXS || t == WeightType::kIQ3_XXS ? 256 : 512) * 2;
}

}  // namespace

uint64_t planned_bytes(const kernels::Matrix& m, uint64_t part_limit) {
  if (m.rows <= 0 || m.cols <= 0) return 0;
  const uint64_t rb = row_bytes(m), sb = sb_row_bytes(m);
  uint64_t per = part_limit ? rows_per_part(m, part_limit) : uint64_t(m.rows);
  if (per == 0) per = uint64_t(m.rows);  // upload_matrix refuses such a matrix; count it whole
  uint64_t b = has_grid(m.type) ? buffer_bytes(grid_bytes(m.type)) : 0;
  for (int64_t r0 = 0; r0 < m.rows; r0 += int64_t(per)) {
    const uint64_t n = uint64_t(std::min<int64_t>(int64_t(per), m.rows - r0));
    b += buffer_bytes(n * rb);
    if (m.type == WeightType::kAffine) b += buffer_bytes(n * sb) * (m.biases ? 2 : 1);
  }
  return b;
}

uint64_t DeviceMatrix::bytes() const {
  uint64_t b = grid.bytes();
  for (const MatrixPart& p : parts) b += p.data.bytes() + p.scales.bytes() + p.biases.bytes();
  return b;
}

core::Result<DeviceMatrix> upload_matrix(Device& dev, const kernels::Matrix& m) {
  const char* st = shader_type(m.type);
  if (!st)
    return core::error("[vulkan] weight type " + std::to_string(int(m.type)) +
                       " has no device shader yet");
  if (m.book || m.codes_tiled || m.sb_tiled)
    return core::error(
        "[vulkan] the CPU's int8 forms (tile-major or code-book) do not go to the device");
  if (m.rows <= 0 || m.cols <= 0 || !m.data) return core::error("[vulkan] an empty matrix");
  const bool affine = m.type == WeightType::kAffine;
  if (affine && (m.bits < 2 || m.bits > 8 || m.group <= 0 || m.cols % m.group != 0 ||
                 m.cols * m.bits % 32 != 0 || !m.scales))
    return core::error("[vulkan] an affine matrix with bits " + std::to_string(m.bits) +
                       ", group " + std::to_string(m.group) + " and " + std::to_string(m.cols) +
                       " columns");
  if (kernels::is_block_type(m.type) && m.cols % kernels::block_format(m.type).elements != 0)
    return core::error("[vulkan] a block-type matrix whose rows are not whole blocks");

  DeviceMatrix d;
  d.type = m.type;
  d.rows = m.rows;
  d.cols = m.cols;
  d.bits = m.bits;
  d.group = m.group;
  d.zero = m.zero;
  d.sb_type = m.sb_type;
  d.has_biases = affine && m.biases != nullptr;
  const uint64_t rb = row_bytes(m);
  const uint64_t sb_row = sb_row_bytes(m);
  const uint64_t limit = dev.part_limit();
  const uint64_t per = rows_per_part(m, limit);
  if (per == 0)
    return core::error("[vulkan] a row of " + std::to_string(rb) +
                       " bytes exceeds the device's binding limit of " + std::to_string(limit) +
                       " bytes");
  if (has_grid(m.type)) {
    const uint16_t* points = m.type == WeightType::kIQ2_XXS   ? kernels::kIq2xxsPoints
                             : m.type == WeightType::kIQ2_XS  ? kernels::kIq2xsPoints
                             : m.type == WeightType::kIQ3_XXS ? kernels::kIq3xxsPoints
                                                              : kernels::kIq3sPoints;
    const uint64_t bytes = grid_bytes(m.type);
    QWEN35_ASSIGN_OR_RETURN(d.grid, dev.buffer(bytes, MemoryKind::kDevice));
    QWEN35_RETURN_IF_ERROR(dev.upload(d.grid, 0, points, bytes));
  }
  const uint8_t* codes = static_cast<const uint8_t*>(m.data);
  for (int64_t r0 = 0; r0 < m.rows; r0 += int64_t(per)) {
    const int64_t n = std::min<int64_t>(int64_t(per), m.rows - r0);
    MatrixPart p;
    p.row0 = r0;
    p.rows = n;
    QWEN35_ASSIGN_OR_RETURN(p.data, dev.buffer(uint64_t(n) * rb, MemoryKind::kDevice));
    QWEN35_RETURN_IF_ERROR(dev.upload(p.data, 0, codes + uint64_t(r0) * rb, uint64_t(n) * rb));
    if (affine) {
      const uint8_t* sc = static_cast<const uint8_t*>(m.scales);
      QWEN35_ASSIGN_OR_RETURN(p.scales, dev.buffer(uint64_t(n) * sb_row, MemoryKind::kDevice));
      QWEN35_RETURN_IF_ERROR(
          dev.upload(p.scales, 0, sc + uint64_t(r0) * sb_row, uint64_t(n) * sb_row));
      if (m.biases) {
        const uint8_t* bi = static_cast<const uint8_t*>(m.biases);
        QWEN35_ASSIGN_OR_RETURN(p.biases, dev.buffer(uint64_t(n) * sb_row, MemoryKind::kDevice));
        QWEN35_RETURN_IF_ERROR(
            dev.upload(p.biases, 0, bi + uint64_t(r0) * sb_row, uint64_t(n) * sb_row));
      }
    }
    d.parts.push_back(std::move(p));
  }
  return d;
}

}  // namespace qwen35::vulkan
