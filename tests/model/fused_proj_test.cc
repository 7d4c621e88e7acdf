// Qwen3-Next's fused DeltaNet projections regrouped (model/fused_proj.h): the row runs against
// the layout written out by hand for a small geometry, and the gather of each storage type
// (float, MLX affine with its scales and biases, ggml blocks) moving whole rows.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "model/fused_proj.h"

namespace qwen35::model {
namespace {

// Rows of part `p` listed one by one.
std::vector<int64_t> rows_of(const ModelConfig& c, Fused p) {
  std::vector<int64_t> out;
  for (const RowRun& r : fused_part_runs(c, p))
    for (int64_t i = 0; i < r.count; ++i) out.push_back(r.first + i);
  return out;
}

ModelConfig geometry() {  // 2 key heads of d_k 2, 4 value heads of d_v 1: r = 2
  ModelConfig c;
  c.n_k_heads = 2;
  c.d_k = 2;
  c.n_v_heads = 4;
  c.d_v = 1;
  return c;
}

TEST(FusedProj, RunsFollowTheLayoutPerKeyHead) {
  const ModelConfig c = geometry();
  // in_proj_qkvz rows: key head 0 = q0 q0 k0 k0 v0 v1 z0 z1 (rows 0-7), key head 1 = rows 8-15.
  EXPECT_EQ(fused_rows(c, Fused::kQkv), 16);
  EXPECT_EQ(rows_of(c, Fused::kQkv), (std::vector<int64_t>{0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13}));
  EXPECT_EQ(rows_of(c, Fused::kZ), (std::vector<int64_t>{6, 7, 14, 15}));
  // in_proj_ba rows: key head 0 = b0 b1 a0 a1, key head 1 = b2 b3 a2 a3.
  EXPECT_EQ(fused_rows(c, Fused::kB), 8);
  EXPECT_EQ(rows_of(c, Fused::kB), (std::vector<int64_t>{0, 1, 4, 5}));
  EXPECT_EQ(rows_of(c, Fused::kA), (std::vector<int64_t>{2, 3, 6, 7}));
}

TEST(FusedProj, GatherMovesWholeRowsOfEveryStorage) {
  const std::vector<RowRun> runs = {{3, 1}, {0, 2}};  // rows 3, 0, 1
  OwnedBuffers owned;
  // f32 [4, 3]: element (r, c) = 10 r + c.
  std::vector<float> f(12);
  for (int i = 0; i < 12; ++i) f[size_t(i)] = float(10 * (i / 3) + i % 3);
  kernels::Matrix m{.type = kernels::WeightType::kF32, .rows = 4, .cols = 3, .data = f.data()};
  const kernels::Matrix g = gather_rows(m, runs, &owned);
  ASSERT_EQ(g.rows, 3);
  const float* gd = static_cast<const float*>(g.data);
  EXPECT_EQ(std::vector<float>(gd, gd + 9), (std::vector<float>{30, 31, 32, 0, 1, 2, 10, 11, 12}));
  // MLX 4-bit, 64 columns (8 words a row), group 32 (2 scales and biases a row, bf16).
  std::vector<uint32_t> words(4 * 8);
  std::vector<uint16_t> scales(4 * 2), biases(4 * 2);
  for (size_t i = 0; i < words.size(); ++i) words[i] = uint32_t(i);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = uint16_t(100 + i), biases[i] = uint16_t(200 + i);
  kernels::Matrix a{.type = kernels::WeightType::kAffine, .rows = 4, .cols = 64, .data = words.data(), .bits = 4,
                    .group = 32, .sb_type = core::DType::kBF16, .scales = scales.data(), .biases = biases.data()};
  const kernels::Matrix ga = gather_rows(a, runs, &owned);
  const uint32_t* w = static_cast<const uint32_t*>(ga.data);
  EXPECT_EQ(w[0], 24u);
  EXPECT_EQ(w[8], 0u);
  EXPECT_EQ(w[23], 15u);
  const uint16_t* s = static_cast<const uint16_t*>(ga.scales);
  const uint16_t* b = static_cast<const uint16_t*>(ga.biases);
  EXPECT_EQ(std::vector<uint16_t>(s, s + 6), (std::vector<uint16_t>{106, 107, 100, 101, 102, 103}));
  EXPECT_EQ(std::vector<uint16_t>(b, b + 6), (std::vector<uint16_t>{206, 207, 200, 201, 202, 203}));
  // Q8_0, 64 columns: two 34-byte blocks a row.
  std::vector<uint8_t> q(4 * 68);
  for (size_t i = 0; i < q.size(); ++i) q[i] = uint8_t(i / 68);  // every byte holds its row
  kernels::Matrix qm{.type = kernels::WeightType::kQ8_0, .rows = 4, .cols = 64, .data = q.data()};
  const kernels::Matrix gq = gather_rows(qm, runs, &owned);
  const uint8_t* qd = static_cast<const uint8_t*>(gq.data);
  EXPECT_EQ(qd[0], 3);
  EXPECT_EQ(qd[67], 3);
  EXPECT_EQ(qd[68], 0);
  EXPECT_EQ(qd[3 * 68 - 1], 1);
  EXPECT_EQ(gq.bytes(), size_t(3 * 68));
}

}  // namespace
}  // namespace qwen35::model
