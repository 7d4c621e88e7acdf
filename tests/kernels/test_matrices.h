// Test helpers of the kernel tests: random activations and weight matrices of every stored type
// (with their storage), a tolerance check scaled per element, and a loop over the SIMD targets.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "kernels/matrix.h"
#include "kernels/ops.h"

namespace qwen35::kernels {

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

inline constexpr WeightType kBlockTypes[] = {
    WeightType::kQ8_0,  WeightType::kQ4_0,    WeightType::kIQ4_NL, WeightType::kQ4_K,    WeightType::kQ5_K,
    WeightType::kQ6_K,  WeightType::kIQ4_XS,  WeightType::kQ4_1,   WeightType::kQ5_0,    WeightType::kQ5_1,
    WeightType::kQ2_K,  WeightType::kQ3_K,    WeightType::kIQ2_XXS, WeightType::kIQ2_XS, WeightType::kIQ3_XXS,
    WeightType::kIQ3_S};

// Where a block type keeps its f16 d, its f16 dmin or m (-1: none), and the size of d against the
// step of a weight (so that the largest code times d is a few steps).
struct BlockScales {
  int d_at, min_at;
  float d_factor;
};
inline BlockScales block_scales(WeightType t) {
  switch (t) {
    case WeightType::kQ8_0: return {0, -1, 1.0f / 16};
    case WeightType::kQ4_K:
    case WeightType::kQ5_K: return {0, 2, 1.0f / 4};
    case WeightType::kQ6_K: return {208, -1, 1.0f / 4};
    case WeightType::kQ4_1:
    case WeightType::kQ5_1: return {0, 2, 1.0f / 2};
    case WeightType::kQ5_0: return {0, -1, 1.0f / 2};
    case WeightType::kQ2_K: return {80, 82, 1.0f / 4};
    case WeightType::kQ3_K: return {108, -1, 1.0f / 16};
    case WeightType::kIQ2_XXS:
    case WeightType::kIQ2_XS: return {0, -1, 1.0f / 64};
    case WeightType::kIQ3_XXS:
    case WeightType::kIQ3_S: return {0, -1, 1.0f / 128};
    default: return {0, -1, 1.0f};
  }
}

// Owns the storage of a random matrix of any type.
struct TestMatrix {
  Matrix m;
  std::vector<uint8_t> data, scales, biases;
};

inline TestMatrix make_matrix(WeightType type, int64_t rows, int64_t cols, uint32_t seed, int bits = 4,
                       int group = 64, core::DType sb = core::DType::kBF16) {
  TestMatrix t;
  t.m.type = type;
  t.m.rows = rows;
  t.m.cols = cols;
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f / std::sqrt(float(cols)));
  auto put16 = [](std::vector<uint8_t>& v, size_t i, uint16_t h) { std::memcpy(&v[2 * i], &h, 2); };
  const size_t n = size_t(rows * cols);
  switch (type) {
    case WeightType::kF32:
      t.data.resize(n * 4);
      for (size_t i = 0; i < n; ++i) {
        float f = nd(g);
        std::memcpy(&t.data[4 * i], &f, 4);
      }
      break;
    case WeightType::kF16:
    case WeightType::kBF16:
      t.data.resize(n * 2);
      for (size_t i = 0; i < n; ++i)
        put16(t.data, i, type == WeightType::kF16 ? core::f32_to_f16(nd(g)) : core::f32_to_bf16(nd(g)));
      break;
    case WeightType::kAffine: {
      t.m.bits = bits;
      t.m.group = group;
      t.m.sb_type = sb;
      const size_t words = size_t(rows * cols * bits / 32);
      t.data.resize(words * 4);
      for (auto& b : t.data) b = uint8_t(g());
      const size_t ng = size_t(rows * (cols / group));
      const size_t es = core::dtype_size(sb);
      t.scales.resize(ng * es);
      t.biases.resize(ng * es);
      for (size_t i = 0; i < ng; ++i) {
        float s = nd(g) / float(1 << bits), b = nd(g);  // scales may be negative
        if (sb == core::DType::kF32) {
          std::memcpy(&t.scales[4 * i], &s, 4);
          std::memcpy(&t.biases[4 * i], &b, 4);
        } else {
          put16(t.scales, i, sb == core::DType::kF16 ? core::f32_to_f16(s) : core::f32_to_bf16(s));
          put16(t.biases, i, sb == core::DType::kF16 ? core::f32_to_f16(b) : core::f32_to_bf16(b));
        }
      }
      t.m.scales = t.scales.data();
      t.m.biases = t.biases.data();
      break;
    }
    default: {  // ggml blocks: random codes and scale bytes, then sane f16 block scales
      const BlockFormat f = block_format(type);
      const size_t blocks = size_t(rows * cols / f.elements);
      t.data.resize(blocks * size_t(f.bytes));
      for (auto& b : t.data) b = uint8_t(g());
      const float step = 1.0f / (std::sqrt(float(cols)) * 8.0f);
      for (size_t i = 0; i < blocks; ++i) {
        uint8_t* blk = t.data.data() + i * size_t(f.bytes);
        auto set = [&](size_t off, float v) {
          const uint16_t h = core::f32_to_f16(v);
          std::memcpy(blk + off, &h, 2);
        };
        const BlockScales bs = block_scales(type);
        const float scale = step * bs.d_factor;
        set(size_t(bs.d_at), scale * (0.5f + float(g() % 1000) / 1000.0f));
        if (bs.min_at >= 0) set(size_t(bs.min_at), scale * float(g() % 1000) / 2000.0f);
      }
      break;
    }
  }
  t.m.data = t.data.data();
  return t;
}

// |a - b| <= tol * scale elementwise.
inline void expect_close(const float* a, const float* b, size_t n, float tol, const char* what,
                  const std::vector<float>* scale = nullptr) {
  for (size_t i = 0; i < n; ++i) {
    const float s = scale ? (*scale)[i] : 1.0f;
    ASSERT_LE(std::fabs(a[i] - b[i]), tol * s + 1e-7f) << what << " at " << i << ": " << a[i] << " vs " << b[i];
  }
}

// Runs fn(target name) with dispatch pinned to each SIMD target this build compiled and this CPU
// supports (AVX-512, AVX2, SSE4, ...), then restores the default.
template <typename F>
void on_every_target(F fn) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    fn(std::string(hwy::TargetName(target)));
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace qwen35::kernels
