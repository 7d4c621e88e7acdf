// Element types and the 16-bit float conversions (round-to-nearest-even, NaN preserved).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace qwen35::core {

enum class DType : uint8_t { kF64, kF32, kF16, kBF16, kI32, kU32, kU8, kI64, kI8, kI16, kU16, kBool,
                              kF8E4M3, kF8E5M2, kUnknown };

// Bytes per element (0 for kUnknown).
size_t dtype_size(DType t);
std::string_view dtype_name(DType t);            // safetensors spelling, e.g. "BF16"
DType dtype_from_name(std::string_view name);    // kUnknown when not a safetensors dtype
bool dtype_is_float(DType t);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace qwen35::core
