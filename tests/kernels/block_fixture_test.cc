// The low-bit ggml block types (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, IQ2_XXS, IQ2_XS, IQ3_XXS, IQ3_S)
// against the float64 dequantizer written from the format (tools/fixtures/ggml_lowbit.py), on
// blocks of random bytes with random finite f16 scales (tests/fixtures/ggml_blocks): the decoded
// values bit for bit, and the exact matmul through them equal to the scalar twin's sum over those
// values, on every SIMD target.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "formats/npy.h"
#include "kernels/cpu/block_matmul.h"
#include "kernels/matrix.h"
#include "kernels/ops.h"
#include "test_matrices.h"
#include "test_util.h"

namespace qwen35::kernels {
namespace {

struct Fixture {
  const char* name;
  WeightType type;
};
constexpr Fixture kLowBit[] = {{"Q4_1", WeightType::kQ4_1},     {"Q5_0", WeightType::kQ5_0},
                               {"Q5_1", WeightType::kQ5_1},     {"Q2_K", WeightType::kQ2_K},
                               {"Q3_K", WeightType::kQ3_K},     {"IQ2_XXS", WeightType::kIQ2_XXS},
                               {"IQ2_XS", WeightType::kIQ2_XS}, {"IQ3_XXS", WeightType::kIQ3_XXS},
                               {"IQ3_S", WeightType::kIQ3_S}};

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The fixture's blocks (bytes) and values; the blocks as a matrix of `rows` rows.
struct Blocks {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
  Matrix m;
};

Blocks load(const Fixture& f, int64_t rows) {
  const std::string dir = qwen35::testing::source_dir() + "/tests/fixtures/ggml_blocks/";
  auto b = formats::read_npy(dir + f.name + ".blocks.npy");
  auto v = formats::read_npy(dir + f.name + ".values.npy");
  EXPECT_TRUE(b.ok() && v.ok()) << f.name << ": " << (b.ok() ? v.message() : b.message());
  Blocks out;
  if (!b.ok() || !v.ok()) return out;
  const BlockFormat bf = block_format(f.type);
  EXPECT_EQ(b->shape.at(1), bf.bytes) << f.name;
  EXPECT_EQ(v->shape.at(1), bf.elements) << f.name;
  for (int64_t x : b->ints) out.bytes.push_back(uint8_t(x));
  out.values = v->data;
  out.m.type = f.type;
  out.m.rows = rows;
  out.m.cols = int64_t(out.values.size()) / rows;
  out.m.data = out.bytes.data();
  return out;
}

TEST(LowBitBlocks, DecodeToTheFloat64DequantizersValues) {
  for (const Fixture& f : kLowBit) {
    SCOPED_TRACE(f.name);
    Blocks b = load(f, 3);
    ASSERT_FALSE(b.values.empty());
    const BlockFormat bf = block_format(f.type);
    const size_t nb = b.bytes.size() / size_t(bf.bytes);
    std::vector<float> y(size_t(bf.elements));
    for (size_t k = 0; k < nb; ++k) {
      decode_block(f.type, b.bytes.data() + k * size_t(bf.bytes), y.data());
      for (int64_t i = 0; i < bf.elements; ++i)
        ASSERT_EQ(bits_of(y[size_t(i)]), bits_of(b.values[k * size_t(bf.elements) + size_t(i)]))
            << "block " << k << " element " << i << ": " << y[size_t(i)] << " vs "
            << b.values[k * size_t(bf.elements) + size_t(i)];
    }
    // Rows of several blocks: decode_row and matrix_at read the same values.
    std::vector<float> row(size_t(b.m.cols));
    for (int64_t r = 0; r < b.m.rows; ++r) {
      decode_row(b.m, r, row.data());
      for (int64_t c = 0; c < b.m.cols; ++c) {
        const float want = b.values[size_t(r * b.m.cols + c)];
        ASSERT_EQ(bits_of(row[size_t(c)]), bits_of(want)) << r << "," << c;
        ASSERT_EQ(bits_of(matrix_at(b.m, r, c)), bits_of(want)) << r << "," << c;
      }
    }
  }
}

// Exact mode: each output is the scalar twin's fixed-order sum over the dequantized row. 19 rows
// (row r the fixture's row r % 3): a tile of 16 and a tail.
TEST(LowBitBlocks, ExactMatmulIsTheScalarSumOverTheDequantizedRows) {
  const Ops& cpu = cpu_ops();
  for (const Fixture& f : kLowBit) {
    SCOPED_TRACE(f.name);
    Blocks b = load(f, 3);
    ASSERT_FALSE(b.values.empty());
    const int64_t n = 4, K = b.m.cols, R = 19;
    const size_t row_bytes = size_t(block_row_bytes(b.m));
    std::vector<uint8_t> bytes;
    std::vector<float> values;
    for (int64_t r = 0; r < R; ++r) {
      const size_t s = size_t(r % 3);
      bytes.insert(bytes.end(), b.bytes.begin() + long(s * row_bytes),
                   b.bytes.begin() + long((s + 1) * row_bytes));
      values.insert(values.end(), b.values.begin() + long(s * size_t(K)),
                    b.values.begin() + long((s + 1) * size_t(K)));
    }
    b.bytes.swap(bytes);
    b.values.swap(values);
    b.m.rows = R;
    b.m.data = b.bytes.data();
    const std::vector<float> x = randn(size_t(n * K), 31);
    on_every_target([&](const std::string& target) {
      std::vector<float> y(size_t(n * R));
      cpu.matmul({}, x.data(), n, b.m, y.data());
      for (int64_t t = 0; t < n; ++t)
        for (int64_t o = 0; o < R; ++o)
          ASSERT_EQ(
              bits_of(y[size_t(t * R + o)]),
              bits_of(cpu::block_row_dot_scalar(b.values.data() + o * K, x.data() + t * K, K)))
              << target << " row " << t << " output " << o;
    });
  }
}

}  // namespace
}  // namespace qwen35::kernels
