#include "core/dtype.h"

#include <array>
#include <cmath>

namespace qwen35::core {
namespace {
struct Info {
  DType t;
  std::string_view name;
  size_t size;
  bool is_float;
};
constexpr std::array<Info, 14> kInfo = {{
    {DType::kF64, "F64", 8, true},      {DType::kF32, "F32", 4, true},
    {DType::kF16, "F16", 2, true},      {DType::kBF16, "BF16", 2, true},
    {DType::kI32, "I32", 4, false},     {DType::kU32, "U32", 4, false},
    {DType::kU8, "U8", 1, false},       {DType::kI64, "I64", 8, false},
    {DType::kI8, "I8", 1, false},       {DType::kI16, "I16", 2, false},
    {DType::kU16, "U16", 2, false},     {DType::kBool, "BOOL", 1, false},
    {DType::kF8E4M3, "F8_E4M3", 1, true}, {DType::kF8E5M2, "F8_E5M2", 1, true},
}};
}  // namespace

size_t dtype_size(DType t) {
  for (const auto& i : kInfo)
    if (i.t == t) return i.size;
  return 0;
}
std::string_view dtype_name(DType t) {
  for (const auto& i : kInfo)
    if (i.t == t) return i.name;
  return "unknown";
}
DType dtype_from_name(std::string_view name) {
  for (const auto& i : kInfo)
    if (i.name == name) return i.t;
  return DType::kUnknown;
}
bool dtype_is_float(DType t) {
  for (const auto& i : kInfo)
    if (i.t == t) return i.is_float;
  return false;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: value = man * 2^-24
      float f = std::ldexp(float(man), -24);
      std::memcpy(&u, &f, 4);
      u |= sign;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow (incl. rounding) -> inf
  if (a < 0x38800000u) {                                   // subnormal or zero in f16
    // round(|f| * 2^24) to nearest even
    float af;
    std::memcpy(&af, &a, 4);
    float scaled = af * 16777216.0f;  // exact (power of two)
    float r = std::nearbyint(scaled);  // default rounding mode: nearest-even
    return uint16_t(sign | uint16_t(r));
  }
  uint32_t exp = (a >> 23) - 112;
  uint32_t man = a & 0x7fffffu;
  uint32_t h = (exp << 10) | (man >> 13);
  uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h += 1;
  return uint16_t(sign | h);
}

}  // namespace qwen35::core
