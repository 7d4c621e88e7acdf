#include "tools/synth/gguf_encode.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"

namespace qwen35::tools {

using formats::GgmlType;

namespace {

constexpr int kBlock = 32;  // elements per Q8_0 / Q4_0 block

void put_f16(float v, uint8_t* out) {
  const uint16_t h = core::f32_to_f16(v);
  std::memcpy(out, &h, 2);
}

// One Q8_0 block: f16 d, then 32 int8 codes (34 bytes).
void q8_0_block(const float* x, uint8_t* out) {
  float amax = 0.0f;
  for (int j = 0; j < kBlock; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(d, out);
  for (int j = 0; j < kBlock; ++j) out[2 + j] = uint8_t(int8_t(std::round(x[j] * id)));
}

// One Q4_0 block: f16 d, then 16 bytes of nibble pairs (18 bytes).
void q4_0_block(const float* x, uint8_t* out) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kBlock; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(d, out);
  for (int j = 0; j < kBlock / 2; ++j) {
    // x * id lies in [-8, 8] (d carries the sign of the extreme), so + 8.5 is in [0.5, 16.5]
    // and truncation toward zero is the rounding.
    const int lo = std::min(15, int(int8_t(x[j] * id + 8.5f)));
    const int hi = std::min(15, int(int8_t(x[j + kBlock / 2] * id + 8.5f)));
    out[2 + j] = uint8_t(lo | (hi << 4));
  }
}

}  // namespace

bool gguf_row_fits(GgmlType t, int64_t n) {
  const formats::GgmlBlock b = formats::ggml_block(t);
  return b.elements > 0 && n > 0 && n % b.elements == 0;
}

uint64_t gguf_row_bytes(GgmlType t, int64_t n) {
  const formats::GgmlBlock b = formats::ggml_block(t);
  return uint64_t(n / b.elements) * uint64_t(b.bytes);
}

void gguf_encode_row(GgmlType t, const float* x, int64_t n, uint8_t* out) {
  switch (t) {
    case GgmlType::kF32:
      std::memcpy(out, x, size_t(n) * 4);
      return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) put_f16(x[i], out + 2 * i);
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = core::f32_to_bf16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case GgmlType::kQ8_0:
      for (int64_t b = 0; b < n / kBlock; ++b) q8_0_block(x + b * kBlock, out + b * 34);
      return;
    case GgmlType::kQ4_0:
      for (int64_t b = 0; b < n / kBlock; ++b) q4_0_block(x + b * kBlock, out + b * 18);
      return;
    default:
      return;  // the writer only asks for the five types above
  }
}

}  // namespace qwen35::tools
