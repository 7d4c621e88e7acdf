// The fast mode's int8 form of the ggml block types (kernels/int8_form.h): the form holds the
// block's weights (exactly where its scales are exact in f16 or stored as f32, within f16 rounding
// of the scales otherwise), the CPU backend offers it where its int8 kernels take the shape, and a
// fast matmul on it stays within the int8 rounding bound of the exact one, with the bits of fast
// mode's equalities (threads, batch, SIMD target).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/int8_form.h"
#include "kernels/matrix.h"
#include "kernels/ops.h"
#include "test_matrices.h"

namespace qwen35::kernels {
namespace {

constexpr WeightType kFormTypes[] = {
    WeightType::kQ8_0, WeightType::kQ4_0,    WeightType::kQ4_K,   WeightType::kQ5_K,    WeightType::kQ6_K,
    WeightType::kIQ4_NL, WeightType::kIQ4_XS, WeightType::kQ4_1,  WeightType::kQ5_0,    WeightType::kQ5_1,
    WeightType::kQ2_K, WeightType::kQ3_K,    WeightType::kIQ2_XXS, WeightType::kIQ2_XS, WeightType::kIQ3_XXS,
    WeightType::kIQ3_S};

// The types whose forms keep the blocks' own f16 scales (and mins as biases): exact.
bool exact_form(WeightType t) {
  return t == WeightType::kQ8_0 || t == WeightType::kQ4_0 || t == WeightType::kIQ4_NL || t == WeightType::kQ4_1 ||
         t == WeightType::kQ5_0 || t == WeightType::kQ5_1;
}
bool has_mins(WeightType t) {
  return t == WeightType::kQ4_K || t == WeightType::kQ5_K || t == WeightType::kQ4_1 || t == WeightType::kQ5_1 ||
         t == WeightType::kQ2_K;
}

// The bound of the form's weight (r, c) against the block's: the f16 rounding of its scale and bias
// (a relative 2^-11, or 2^-25 where subnormal) on s·q and b (for the types without mins the bias
// −zero·s is of the rounded scale, so s·u + b moves by the scale's rounding times q = u − zero
// only), plus the float rounding of s·u + b.
double weight_bound(const Matrix& block, const Int8Form& f, int64_t r, int64_t c) {
  const BlockFormat bf = block_format(block.type);
  const uint8_t* blk = static_cast<const uint8_t*>(block.data) + r * block_row_bytes(block) + c / bf.elements * bf.bytes;
  int8_t q[256];
  float s[16], mn[16];
  split_block(block.type, blk, q, s, mn);
  const int64_t i = c % bf.elements, g = i / block_group(block.type);
  const double u = double(q[i]) + f.m.zero, as = std::fabs(s[g]), am = std::fabs(mn[g]);
  double ds = 0, dm = 0;
  if (f.m.sb_type == core::DType::kF16) {
    ds = std::max(0x1p-11 * as, 0x1p-25);
    dm = f.m.biases ? std::max(0x1p-11 * am, 0x1p-25) : 0.0;
  }
  return ds * std::fabs(double(q[i])) + dm + 0x1p-22 * (as * (u + f.m.zero) + am);
}

TEST(Int8Form, HoldsTheBlocksWeights) {
  core::ThreadPool pool(2);
  uint32_t seed = 7000;
  for (WeightType t : kFormTypes)
  for (int64_t R : {19, 32}) {  // 32: scales in tile-major order
    TestMatrix w = make_matrix(t, R, 512, seed++);
    auto f = make_int8_form(w.m, &pool);
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->m.type, WeightType::kAffine);
    EXPECT_EQ(f->m.sb_tiled, R % 16 == 0);
    EXPECT_EQ(f->m.codes_tiled, R % 16 == 0);
    EXPECT_EQ(f->m.rows, R);
    EXPECT_EQ(f->m.cols, 512);
    EXPECT_EQ(f->m.group, block_group(t));
    EXPECT_EQ(f->m.sb_type, core::DType::kF16);
    EXPECT_EQ(f->m.biases != nullptr, has_mins(t));
    EXPECT_EQ(f->m.book != nullptr, t == WeightType::kIQ4_NL || t == WeightType::kIQ4_XS || t == WeightType::kIQ2_XXS ||
                                        t == WeightType::kIQ2_XS || t == WeightType::kIQ3_XXS || t == WeightType::kIQ3_S);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < 512; ++c) {
        const float a = matrix_at(f->m, r, c), b = matrix_at(w.m, r, c);
        // Q8_0, Q4_0, IQ4_NL, Q4_1, Q5_0 and Q5_1 scales (and mins) are the blocks' own f16
        // values: their forms are exact.
        if (exact_form(t))
          ASSERT_EQ(a, b) << int(t) << " at " << r << "," << c;
        else ASSERT_LE(std::fabs(a - b), weight_bound(w.m, *f, r, c)) << int(t) << " at " << r << "," << c;
      }
    // decode_row (the reference's matmul) reads the same weights.
    std::vector<float> row(512);
    decode_row(f->m, 18, row.data());
    for (int64_t c = 0; c < 512; ++c) ASSERT_EQ(row[size_t(c)], matrix_at(f->m, 18, c));
    if (R == 32) {  // a slice from row 16 reads the second tile's scales
      const Matrix tail = f->m.row_slice(16, 16);
      for (int64_t c = 0; c < 512; c += 7) ASSERT_EQ(matrix_at(tail, 2, c), matrix_at(f->m, 18, c));
    }
  }
}

// A scale past f16's range makes the whole matrix store f32 scales: the weights are then those of
// the blocks exactly (Q4_K: the same two operations, s·q − m; Q6_K: s·(q+32) − 32·s is s·q, every
// product exact in f32).
TEST(Int8Form, FallsBackToF32ScalesExactly) {
  for (WeightType t : {WeightType::kQ4_K, WeightType::kQ6_K}) {
    TestMatrix w = make_matrix(t, 16, 256, 77);
    const uint16_t big = core::f32_to_f16(4096.0f);  // the first block's d: d·sc passes 65504
    std::memcpy(w.data.data() + (t == WeightType::kQ6_K ? 208 : 0), &big, 2);
    w.data[t == WeightType::kQ6_K ? 192 : 4] = 63;
    auto f = make_int8_form(w.m, nullptr);
    EXPECT_EQ(f->m.sb_type, core::DType::kF32);
    for (int64_t r = 0; r < 16; ++r)
      for (int64_t c = 0; c < 256; ++c) ASSERT_EQ(matrix_at(f->m, r, c), matrix_at(w.m, r, c)) << int(t);
  }
}

TEST(Int8Form, OfferedWhereTheInt8KernelsTakeTheShape) {
  const Ops& cpu = cpu_ops();
  for (WeightType t : kFormTypes) {
    TestMatrix w = make_matrix(t, 16, 512, 5);
    EXPECT_NE(cpu.int8_form(w.m, nullptr), nullptr) << int(t);
    EXPECT_EQ(ref_ops().int8_form(w.m, nullptr), nullptr) << "the scalar reference has no fast mode";
  }
  // The 5-bit tile reads rows in blocks of 80 words (512 elements): Q5_K rows of 256 stay exact.
  EXPECT_EQ(cpu.int8_form(make_matrix(WeightType::kQ5_K, 16, 256, 5).m, nullptr), nullptr);
  EXPECT_NE(cpu.int8_form(make_matrix(WeightType::kQ6_K, 16, 256, 5).m, nullptr), nullptr);
  for (WeightType t : {WeightType::kF32, WeightType::kBF16})
    EXPECT_EQ(cpu.int8_form(make_matrix(t, 16, 512, 5).m, nullptr), nullptr) << int(t);
  EXPECT_EQ(cpu.int8_form(make_matrix(WeightType::kAffine, 16, 512, 5, 4, 64).m, nullptr), nullptr);
}

// y_fast against the exact y of the block matrix: |Δ| <= Σ_k |w_k|·step_k/2 (the int8 rounding of
// the activations, step = max|x| of the group / 127) + Σ_k |x_k|·Δw_k (the form's weights), plus
// float rounding. The same bits with one or three threads, a row alone or in the batch, and on
// every SIMD target.
TEST(Int8Form, FastMatmulIsWithinTheInt8BoundWithItsEqualities) {
  core::ThreadPool pool(3);
  const Ops& cpu = cpu_ops();
  uint32_t seed = 8000;
  for (WeightType t : kFormTypes)
  for (int64_t rows : {37, 48}) {  // row-major scales and a scalar tail; tile-major scales
    const int64_t cols = 1024;
    TestMatrix w = make_matrix(t, rows, cols, seed++);
    auto f = cpu.int8_form(w.m, &pool);
    ASSERT_NE(f, nullptr);
    const int64_t G = f->m.group;
    for (int64_t n : {1, 5}) {
      std::vector<float> x = randn(size_t(n * cols), seed++);
      std::vector<float> exact(size_t(n * rows)), fast(exact.size()), fast1(exact.size());
      cpu.matmul({&pool}, x.data(), n, w.m, exact.data());
      cpu.matmul({&pool, true}, x.data(), n, f->m, fast.data());
      cpu.matmul({nullptr, true}, x.data(), n, f->m, fast1.data());
      EXPECT_EQ(fast, fast1) << "thread count";
      for (int64_t r = 0; r < n; ++r) {
        std::vector<float> one(static_cast<size_t>(rows));
        cpu.matmul({&pool, true}, x.data() + r * cols, 1, f->m, one.data());
        for (int64_t o = 0; o < rows; ++o) ASSERT_EQ(one[size_t(o)], fast[size_t(r * rows + o)]) << "batch";
      }
      for (int64_t r = 0; r < n; ++r)
        for (int64_t o = 0; o < rows; ++o) {
          double bound = 0, a = 0;
          for (int64_t g = 0; g < cols / G; ++g) {
            double mx = 0, wsum = 0;
            for (int64_t c = g * G; c < (g + 1) * G; ++c) {
              const double xv = x[size_t(r * cols + c)], wv = matrix_at(w.m, o, c);
              mx = std::max(mx, std::fabs(xv));
              wsum += std::fabs(wv);
              a += std::fabs(xv * wv);
              bound += std::fabs(xv) * weight_bound(w.m, *f, o, c);
            }
            bound += wsum * mx / 254.0;
          }
          const size_t i = size_t(r * rows + o);
          ASSERT_LE(std::fabs(fast[i] - exact[i]), bound + 1e-5 * a) << "type " << int(t) << " at " << i;
          EXPECT_LT(bound, 0.02 * a) << "the bound is not vacuous, type " << int(t);
        }
    }
    std::vector<float> x = randn(size_t(7 * cols), seed++), first;
    on_every_target([&](const std::string& name) {
      std::vector<float> y(size_t(7 * rows));
      cpu.matmul({nullptr, true}, x.data(), 7, f->m, y.data());
      if (first.empty()) first = y;
      else EXPECT_EQ(y, first) << name << ", type " << int(t);
    });
  }
}

}  // namespace
}  // namespace qwen35::kernels
