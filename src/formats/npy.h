// NumPy .npy files (format 1.0/2.0): write float32 arrays; read float32/float64 and int32/int64
// little-endian C-order arrays (for tests and tools).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"

namespace qwen35::formats {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;    // float arrays, converted to float32 (empty for integer arrays)
  std::vector<int64_t> ints;  // integer arrays (<i4, <i8), as int64 (empty for float arrays)
};

core::Status write_npy_f32(const std::string& path, const float* data,
                           const std::vector<int64_t>& shape);
core::Result<NpyArray> read_npy(const std::string& path);

}  // namespace qwen35::formats
