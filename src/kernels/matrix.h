// Row decoding of stored weight matrices, shared by the reference and the CPU kernels.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/ops.h"

namespace qwen35::kernels {

// Scale/bias element i of an affine matrix's `scales`/`biases` array.
inline float sb_at(const void* p, core::DType t, int64_t i) {
  switch (t) {
    case core::DType::kBF16: return core::bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case core::DType::kF16: return core::f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

// Code j of an MLX packed row (little-endian bit stream).
inline uint32_t affine_code(const uint32_t* row, int64_t j, int bits) {
  const uint64_t off = uint64_t(j) * uint64_t(bits);
  const uint64_t word = off >> 5;
  const unsigned sh = unsigned(off & 31);
  uint64_t v = row[word] >> sh;
  if (sh + unsigned(bits) > 32) v |= uint64_t(row[word + 1]) << (32 - sh);
  return uint32_t(v) & ((1u << bits) - 1u);
}

// Words per packed row of an affine matrix.
inline int64_t affine_row_words(const Matrix& m) { return m.cols * m.bits / 32; }

// Dequantizes row r of m into out[m.cols].
void decode_row(const Matrix& m, int64_t r, float* out);

}  // namespace qwen35::kernels
