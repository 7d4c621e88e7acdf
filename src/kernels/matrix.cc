#include "kernels/matrix.h"

#include <cstring>

#include "core/check.h"

namespace qwen35::kernels {

Matrix Matrix::row_slice(int64_t r0, int64_t n) const {
  QWEN35_CHECK(r0 >= 0 && n >= 0 && r0 + n <= rows);
  Matrix m = *this;
  m.rows = n;
  switch (type) {
    case WeightType::kF32: m.data = static_cast<const float*>(data) + r0 * cols; break;
    case WeightType::kF16:
    case WeightType::kBF16: m.data = static_cast<const uint16_t*>(data) + r0 * cols; break;
    case WeightType::kAffine: {
      m.data = static_cast<const uint32_t*>(data) + r0 * affine_row_words(*this);
      const int64_t groups = cols / group;
      const size_t esz = core::dtype_size(sb_type);
      m.scales = static_cast<const uint8_t*>(scales) + size_t(r0 * groups) * esz;
      if (biases) m.biases = static_cast<const uint8_t*>(biases) + size_t(r0 * groups) * esz;
      break;
    }
  }
  return m;
}

size_t Matrix::bytes() const {
  switch (type) {
    case WeightType::kF32: return size_t(rows * cols) * 4;
    case WeightType::kF16:
    case WeightType::kBF16: return size_t(rows * cols) * 2;
    case WeightType::kAffine: {
      const size_t sb = size_t(rows * (cols / group)) * core::dtype_size(sb_type);
      return size_t(rows * affine_row_words(*this)) * 4 + sb * (biases ? 2 : 1);
    }
  }
  return 0;
}

float matrix_at(const Matrix& m, int64_t r, int64_t c) {
  switch (m.type) {
    case WeightType::kF32: return static_cast<const float*>(m.data)[r * m.cols + c];
    case WeightType::kF16: return core::f16_to_f32(static_cast<const uint16_t*>(m.data)[r * m.cols + c]);
    case WeightType::kBF16: return core::bf16_to_f32(static_cast<const uint16_t*>(m.data)[r * m.cols + c]);
    case WeightType::kAffine: {
      const uint32_t* row = static_cast<const uint32_t*>(m.data) + r * affine_row_words(m);
      const int64_t gi = r * (m.cols / m.group) + c / m.group;
      const float s = sb_at(m.scales, m.sb_type, gi);
      const float b = m.biases ? sb_at(m.biases, m.sb_type, gi) : 0.0f;
      return s * float(affine_code(row, c, m.bits)) + b;
    }
  }
  return 0.0f;
}

void decode_row(const Matrix& m, int64_t r, float* out) {
  const int64_t n = m.cols;
  switch (m.type) {
    case WeightType::kF32:
      std::memcpy(out, static_cast<const float*>(m.data) + r * n, size_t(n) * 4);
      return;
    case WeightType::kF16: {
      const uint16_t* p = static_cast<const uint16_t*>(m.data) + r * n;
      for (int64_t i = 0; i < n; ++i) out[i] = core::f16_to_f32(p[i]);
      return;
    }
    case WeightType::kBF16: {
      const uint16_t* p = static_cast<const uint16_t*>(m.data) + r * n;
      for (int64_t i = 0; i < n; ++i) out[i] = core::bf16_to_f32(p[i]);
      return;
    }
    case WeightType::kAffine: {
      const uint32_t* row = static_cast<const uint32_t*>(m.data) + r * affine_row_words(m);
      const int64_t groups = n / m.group;
      for (int64_t g = 0; g < groups; ++g) {
        const float s = sb_at(m.scales, m.sb_type, r * groups + g);
        const float b = m.biases ? sb_at(m.biases, m.sb_type, r * groups + g) : 0.0f;
        float* o = out + g * m.group;
        const int64_t j0 = g * m.group;
        if (m.bits == 4 || m.bits == 8 || m.bits == 2) {
          // Codes never straddle words: decode word by word.
          const int per = 32 / m.bits;
          const uint32_t mask = (1u << m.bits) - 1u;
          for (int64_t j = 0; j < m.group; j += per) {
            uint32_t w = row[(j0 + j) / per];
            for (int k = 0; k < per; ++k, w >>= m.bits) o[j + k] = s * float(w & mask) + b;
          }
        } else {
          for (int64_t j = 0; j < m.group; ++j) o[j] = s * float(affine_code(row, j0 + j, m.bits)) + b;
        }
      }
      return;
    }
  }
}

}  // namespace qwen35::kernels
