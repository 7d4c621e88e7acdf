// The scalar reference of the attention primitives over compressed KV rows (kernels/kv_format.h):
// plain loops performing the float operations the header fixes, in its order. The SIMD twins in
// kernels/cpu/kv_attention.cc must give the same bits.
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/dtype.h"
#include "kernels/kv_format.h"

namespace qwen35::kernels {
namespace {

float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
float load_f16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return core::f16_to_f32(v);
}

// The fixed halving tree of eight partials.
float tree8(const float* p) {
  return ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
}

// Element i of a row in a float type as the score and value loops read it (turbo: the centroid).
float float_value(const KvFormat& f, const uint8_t* row, int64_t i, const float* book) {
  switch (f.type) {
    case KvType::kF32:
      return load_f32(row + 4 * i);
    case KvType::kBF16: {
      uint16_t h;
      std::memcpy(&h, row + 2 * i, 2);
      return core::bf16_to_f32(h);
    }
    case KvType::kTurbo4:
      return book[(row[4 + i / 2] >> (4 * (i % 2))) & 15];
    case KvType::kTurbo3: {
      const uint8_t* g = row + 4 + i / 8 * 3;
      const uint32_t w = uint32_t(g[0]) | uint32_t(g[1]) << 8 | uint32_t(g[2]) << 16;
      return book[(w >> (3 * (i % 8))) & 7];
    }
    default:
      return 0;
  }
}

bool is_turbo(KvType t) { return t == KvType::kTurbo4 || t == KvType::kTurbo3; }

// Code i of a q8_0/q4_0 row (q4_0: nibble − 8) and the scale of its block.
int block_code(KvType t, const uint8_t* row, int64_t i) {
  if (t == KvType::kQ8_0) return int8_t(row[i / 32 * 34 + 2 + i % 32]);
  const uint8_t* qs = row + i / 32 * 18 + 2;
  return (i % 32 < 16 ? qs[i % 32] & 15 : qs[i % 16] >> 4) - 8;
}
float block_scale(KvType t, const uint8_t* row, int64_t b) {
  return load_f16(row + b * (t == KvType::kQ8_0 ? 34 : 18));
}

}  // namespace

void kv_scores_ref(const PreparedQuery& q, const uint8_t* k_rows, int64_t stride, int64_t n,
                   float scale, float* s) {
  const KvFormat& f = q.format;
  const int64_t d = f.head_dim;
  const float* book = is_turbo(f.type) ? kv_turbo_codebook(f.type, d) : nullptr;
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = k_rows + j * stride;
    float p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (f.type == KvType::kQ8_0 || f.type == KvType::kQ4_0) {
      for (int64_t b = 0; b < d / 32; ++b) {
        const float sc = q.d[size_t(b)] * block_scale(f.type, row, b);
        for (int l = 0; l < 8; ++l) {
          int32_t quad = 0;
          for (int m = 0; m < 4; ++m) {
            const int64_t i = 32 * b + 4 * l + m;
            quad += int32_t(q.q8[size_t(i)]) * block_code(f.type, row, i);
          }
          p[l] = std::fma(float(quad), sc, p[l]);
        }
      }
      s[j] = tree8(p) * scale;
      continue;
    }
    for (int64_t i = 0; i < d; ++i)
      p[i % 8] = std::fma(q.f[size_t(i)], float_value(f, row, i, book), p[i % 8]);
    const float t = tree8(p);
    s[j] = is_turbo(f.type) ? (t * load_f32(row)) * scale : t * scale;
  }
}

void kv_scores_many_ref(const PreparedQuery* const* q, int nq, const uint8_t* k_rows,
                        int64_t stride, int64_t n, float scale, float* const* s) {
  for (int i = 0; i < nq; ++i) kv_scores_ref(*q[i], k_rows, stride, n, scale, s[i]);
}

void kv_values_ref(const KvFormat& f, const float* w, const uint8_t* v_rows, int64_t stride,
                   int64_t n, float* acc) {
  const int64_t d = f.head_dim;
  const float* book = is_turbo(f.type) ? kv_turbo_codebook(f.type, d) : nullptr;
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = v_rows + j * stride;
    if (f.type == KvType::kQ8_0 || f.type == KvType::kQ4_0) {
      for (int64_t i = 0; i < d; ++i) {
        const float a = w[j] * block_scale(f.type, row, i / 32);
        acc[i] = std::fma(a, float(block_code(f.type, row, i)), acc[i]);
      }
    } else {
      const float a = is_turbo(f.type) ? w[j] * load_f32(row) : w[j];
      for (int64_t i = 0; i < d; ++i) acc[i] = std::fma(a, float_value(f, row, i, book), acc[i]);
    }
  }
}

}  // namespace qwen35::kernels
