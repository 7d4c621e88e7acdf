// Every op of the CPU backend against its scalar reference: sizes (1, odd, SIMD width ±1),
// misaligned pointers, every weight type and affine bit width × group, 1 vs N threads (bit for
// bit), and batch invariance (a row's result does not depend on the other rows), with tolerances
// derived from the inputs' magnitudes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "hwy/targets.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/conv1d.h"
#include "kernels/cpu/delta_rule.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/matrix.h"
#include "kernels/ops.h"
#include "test_kv.h"
#include "test_matrices.h"

namespace qwen35::kernels {
namespace {

const Ops& ref = ref_ops();
const Ops& cpu = cpu_ops();

TEST(Matrix, AffineCodesStraddleWords) {
  // 3-bit codes 0..7 repeated: code j = j % 8, packed LSB first.
  std::vector<uint32_t> row(3, 0);
  for (int j = 0; j < 32; ++j) {
    const uint64_t off = uint64_t(j) * 3;
    const uint64_t v = uint64_t(j % 8) << (off % 32);
    row[off / 32] |= uint32_t(v);
    if (off % 32 + 3 > 32) row[off / 32 + 1] |= uint32_t(v >> 32);
  }
  for (int j = 0; j < 32; ++j) EXPECT_EQ(affine_code(row.data(), j, 3), uint32_t(j % 8)) << j;
}

void matmul_every_weight_type();
void matmul_int8_mode();

// Every SIMD target this build compiled and this CPU supports (AVX2, AVX-512, SSE4, ...).
TEST(Ops, MatmulEveryWeightTypeMatchesReferenceOnEveryTarget) {
  std::vector<std::string> seen;
  on_every_target([&](const std::string& name) {
    seen.push_back(cpu::simd_target());
    EXPECT_EQ(seen.back(), name);
    matmul_every_weight_type();
    matmul_int8_mode();
  });
  EXPECT_GE(seen.size(), 2u);  // at least the best target and a baseline
  std::string all;
  for (const auto& t : seen) all += t + " ";
  std::printf("matmul checked on SIMD targets: %s\n", all.c_str());
}

void matmul_every_weight_type() {
  core::ThreadPool pool(3);
  struct Shape {
    int64_t rows, cols;
  };
  std::vector<std::tuple<WeightType, int, int, core::DType>> types = {
      {WeightType::kF32, 0, 0, core::DType::kF32},
      {WeightType::kF16, 0, 0, core::DType::kF32},
      {WeightType::kBF16, 0, 0, core::DType::kF32}};
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int group : {32, 64, 128}) types.push_back({WeightType::kAffine, bits, group, core::DType::kBF16});
  types.push_back({WeightType::kAffine, 4, 64, core::DType::kF16});
  types.push_back({WeightType::kAffine, 5, 32, core::DType::kF32});
  for (WeightType t : kBlockTypes) types.push_back({t, 0, 0, core::DType::kF32});
  uint32_t seed = 1;
  for (auto [type, bits, group, sb] : types) {
    for (Shape s : {Shape{1, 128}, Shape{7, 256}, Shape{33, 384}, Shape{9, 7}, Shape{5, 17}, Shape{40, 512}}) {
      if (type == WeightType::kAffine && s.cols % group != 0) continue;
      if (is_block_type(type) && s.cols % block_format(type).elements != 0) continue;
      TestMatrix w = make_matrix(type, s.rows, s.cols, seed++, bits, group, sb);
      for (int64_t n : {1, 2, 9}) {
        // Misaligned activations: start one float into the buffer.
        std::vector<float> xb = randn(size_t(n * s.cols) + 1, seed++);
        const float* x = xb.data() + 1;
        std::vector<float> yr(size_t(n * s.rows)), y1(yr.size()), yn(yr.size()), scale(yr.size());
        ref.matmul({}, x, n, w.m, yr.data());
        cpu.matmul({}, x, n, w.m, y1.data());
        cpu.matmul({&pool}, x, n, w.m, yn.data());
        for (int64_t t = 0; t < n; ++t)
          for (int64_t o = 0; o < s.rows; ++o) {
            double a = 0;
            for (int64_t c = 0; c < s.cols; ++c) a += std::fabs(x[t * s.cols + c] * matrix_at(w.m, o, c));
            scale[size_t(t * s.rows + o)] = float(a);
          }
        expect_close(y1.data(), yr.data(), yr.size(), 1e-5f, "matmul", &scale);
        EXPECT_EQ(y1, yn) << "thread count changed the bits";
        // Batch invariance: each row alone gives the same bits.
        for (int64_t t = 0; t < n; ++t) {
          std::vector<float> one(size_t(s.rows));
          cpu.matmul({&pool}, x + t * s.cols, 1, w.m, one.data());
          for (int64_t o = 0; o < s.rows; ++o) ASSERT_EQ(one[size_t(o)], yn[size_t(t * s.rows + o)]);
        }
      }
    }
  }
}

// Fast mode (int8 activations): close to the reference, and still thread- and batch-invariant.
void matmul_int8_mode() {
  core::ThreadPool pool(3);
  uint32_t seed = 100;
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int group : {32, 64, 128})
      for (int64_t n : {1, 3, 9}) {
        // 3/5/6-bit: 1024 columns take their int8 tile (whole blocks), 512 only for 6-bit.
        const int64_t rows = 37, cols = bits == 3 || bits == 5 ? 1024 : 512;
        TestMatrix w = make_matrix(WeightType::kAffine, rows, cols, seed++, bits, group);
        std::vector<float> x = randn(size_t(n * cols), seed++);
        std::vector<float> yr(size_t(n * rows)), yf(yr.size()), yf1(yr.size());
        ref.matmul({}, x.data(), n, w.m, yr.data());
        Context fast{&pool, true}, fast1{nullptr, true};
        cpu.matmul(fast, x.data(), n, w.m, yf.data());
        cpu.matmul(fast1, x.data(), n, w.m, yf1.data());
        // The bound of int8 rounding: each activation moves by at most half a step (max|x| of its
        // group / 254), so |y - y_ref| <= sum_k |w_k| * step_k / 2, plus float rounding.
        for (int64_t t = 0; t < n; ++t)
          for (int64_t o = 0; o < rows; ++o) {
            double bound = 0, a = 0;
            for (int64_t g = 0; g < cols / group; ++g) {
              double mx = 0, wsum = 0;
              for (int64_t c = g * group; c < (g + 1) * group; ++c) {
                mx = std::max(mx, double(std::fabs(x[t * cols + c])));
                wsum += std::fabs(matrix_at(w.m, o, c));
                a += std::fabs(x[t * cols + c] * matrix_at(w.m, o, c));
              }
              bound += wsum * mx / 254.0;
            }
            const size_t i = size_t(t * rows + o);
            ASSERT_LE(std::fabs(yf[i] - yr[i]), bound + 1e-5 * a) << "int8 matmul at " << i << " bits " << bits;
            // And it is not vacuous: the bound is a small fraction of the magnitude.
            EXPECT_LT(bound, 0.02 * a);
          }
        EXPECT_EQ(yf, yf1);
        for (int64_t t = 0; t < n; ++t) {
          std::vector<float> one(static_cast<size_t>(rows));
          cpu.matmul(fast, x.data() + t * cols, 1, w.m, one.data());
          for (int64_t o = 0; o < rows; ++o) ASSERT_EQ(one[size_t(o)], yf[size_t(t * rows + o)]);
        }
      }
}

// The ggml block types (GGUF) accumulate one fused multiply-add per element in k order in tiles of
// 16 rows and in the scalar twin of the tail rows alike: the same bits on every target, for rows in
// a tile or not (a slice one row down moves every row between the two).
TEST(Ops, BlockTypesAreIdenticalOnEveryTargetAndInTheScalarTwin) {
  uint32_t seed = 900;
  for (WeightType type : kBlockTypes) {
    const int64_t rows = 37, cols = 512, n = 5;
    TestMatrix w = make_matrix(type, rows, cols, seed++);
    std::vector<float> x = randn(size_t(n * cols), seed++);
    std::vector<float> first;
    std::string first_target;
    on_every_target([&](const std::string& name) {
      std::vector<float> y(size_t(n * rows)), ys(size_t(n * (rows - 1)));
      cpu.matmul({}, x.data(), n, w.m, y.data());
      const Matrix shifted = w.m.row_slice(1, rows - 1);
      cpu.matmul({}, x.data(), n, shifted, ys.data());
      for (int64_t t = 0; t < n; ++t)
        for (int64_t o = 1; o < rows; ++o)
          ASSERT_EQ(ys[size_t(t * (rows - 1) + o - 1)], y[size_t(t * rows + o)]) << name << " row " << o;
      if (first.empty()) {
        first = y;
        first_target = name;
      } else {
        EXPECT_EQ(y, first) << name << " vs " << first_target << ", type " << int(type);
      }
    });
  }
}

// decode_block against the element rules of each type, on hand-made blocks.
TEST(Matrix, BlockDecodingFollowsTheGgmlLayouts) {
  auto half = [](float v) { return core::f32_to_f16(v); };
  auto put = [](uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); };
  float y[256];
  {  // Q4_0: low nibbles are elements 0..15, high nibbles 16..31, value (q - 8) * d.
    uint8_t b[18] = {};
    put(b, half(0.5f));
    b[2] = 0x1F;  // element 0: 15 -> 3.5; element 16: 1 -> -3.5
    decode_block(WeightType::kQ4_0, b, y);
    EXPECT_EQ(y[0], 3.5f);
    EXPECT_EQ(y[16], -3.5f);
    EXPECT_EQ(y[1], -4.0f);
  }
  {  // IQ4_NL: the same nibbles through the code book.
    uint8_t b[18] = {};
    put(b, half(2.0f));
    b[3] = 0xF0;  // element 1: code 0 -> -127; element 17: code 15 -> 113
    decode_block(WeightType::kIQ4_NL, b, y);
    EXPECT_EQ(y[1], -254.0f);
    EXPECT_EQ(y[17], 226.0f);
  }
  {  // Q4_K: group j's 6-bit scale/min; groups 2c and 2c+1 share 32 bytes (low, high nibbles).
    uint8_t b[144] = {};
    put(b, half(1.0f));
    put(b + 2, half(0.5f));
    b[4 + 0] = 3;               // scale of group 0
    b[4 + 4] = 2;               // min of group 0
    b[4 + 1] = 5 | (1 << 6);    // scale of group 1 = 5; bit 6 is the high bits of group 5's scale
    b[4 + 8] = 0x47;            // group 4: scale low 7, min low 4
    b[4 + 0] |= 2 << 6;         // group 4: scale high bits 2 -> 7 | 32 = 39
    b[16 + 0] = 0xA6;           // element 0: 6, element 32: 10
    b[16 + 64] = 0x01;          // element 128 (group 4): 1
    decode_block(WeightType::kQ4_K, b, y);
    EXPECT_EQ(y[0], 3.0f * 6 - 0.5f * 2);
    EXPECT_EQ(y[32], 5.0f * 10 - 0.0f);
    EXPECT_EQ(y[128], 39.0f * 1 - 0.5f * 4);
  }
  {  // Q6_K: ql low/high nibbles and qh bit pairs make 6-bit codes, minus 32, times d·scale.
    uint8_t b[210] = {};
    put(b + 208, half(0.25f));
    b[192 + 0] = 4;     // scale of elements 0..15
    b[192 + 6] = -2;    // scale of elements 96..111
    b[0] = 0x3F;        // element 0 low nibble 15; element 64 low nibble 3
    b[128] = 0x03 | (0x02 << 6);  // element 0: high bits 3 -> 63; element 96: high bits 2
    b[32] = 0x50;       // element 96: low nibble 5 (the high nibble of byte 32)
    decode_block(WeightType::kQ6_K, b, y);
    EXPECT_EQ(y[0], 0.25f * 4 * float(63 - 32));
    EXPECT_EQ(y[96], 0.25f * -2 * float(5 + 32 - 32));
  }
  {  // IQ4_XS: 6-bit scales from scales_l nibbles and scales_h bit pairs, minus 32.
    uint8_t b[136] = {};
    put(b, half(1.0f));
    const uint16_t sh = uint16_t(1 << 2);  // sub-block 1: high bits 1
    std::memcpy(b + 2, &sh, 2);
    b[4] = 0x21;       // sub-block 0: low 1; sub-block 1: low 2 -> 2 | 16 = 18
    b[8] = 0x0F;       // element 0: code 15 (113); element 16: code 0 (-127)
    b[8 + 16] = 0x08;  // element 32: code 8 (1)
    decode_block(WeightType::kIQ4_XS, b, y);
    EXPECT_EQ(y[0], float(1 - 32) * 113);
    EXPECT_EQ(y[16], float(1 - 32) * -127);
    EXPECT_EQ(y[32], float(18 - 32) * 1);
  }
}

// Fast mode performs the same integer sums and the same float operations per (row, group) on every
// target (tile kernels with one output row per lane, scalar loop elsewhere), so its bits do not
// depend on the machine.
TEST(Ops, MatmulFastModeIsIdenticalOnEveryTarget) {
  uint32_t seed = 500;
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int group : {16, 64, 128}) {
      const int64_t rows = 45, cols = bits == 3 || bits == 5 ? 1536 : 768, n = 11;
      TestMatrix w = make_matrix(WeightType::kAffine, rows, cols, seed++, bits, group);
      std::vector<float> x = randn(size_t(n * cols), seed++);
      std::vector<float> first;
      std::string first_target;
      on_every_target([&](const std::string& name) {
        std::vector<float> y(size_t(n * rows));
        cpu.matmul({nullptr, true}, x.data(), n, w.m, y.data());
        if (first.empty()) {
          first = y;
          first_target = name;
        } else {
          EXPECT_EQ(y, first) << name << " vs " << first_target << ", bits " << bits << " group " << group;
        }
      });
    }
}

// matmul_many (q/k/v, gate/up, ...) gives the bits of separate matmul calls, shared or not, in
// both modes, with threads.
TEST(Ops, MatmulManyEqualsSeparateCalls) {
  core::ThreadPool pool(3);
  uint32_t seed = 700;
  struct Case {
    std::vector<std::tuple<int64_t, int, int>> mats;  // rows, bits, group
  };
  const std::vector<Case> cases = {
      {{{64, 4, 64}, {32, 4, 64}, {16, 4, 64}, {16, 4, 64}}},  // shared: one pass
      {{{48, 8, 32}, {80, 8, 32}}},                           // shared, 8-bit
      {{{40, 4, 64}, {16, 4, 64}}},                           // rows not a multiple of 16: separate
      {{{32, 4, 64}, {32, 8, 64}}},                           // different widths: separate
      {{{32, 5, 32}, {32, 4, 32}}},                           // a 5-bit matrix: separate
      {{{32, 6, 64}, {48, 6, 64}}}};                          // 6-bit: shared in fast mode
  for (const auto& c : cases)
    for (bool fast : {false, true})
      for (int64_t n : {1, 5}) {
        const int64_t cols = 256;
        std::vector<TestMatrix> ms;
        for (auto [rows, bits, group] : c.mats) ms.push_back(make_matrix(WeightType::kAffine, rows, cols, seed++, bits, group));
        std::vector<float> x = randn(size_t(n * cols), seed++);
        std::vector<std::vector<float>> sep(ms.size()), many(ms.size());
        std::vector<const Matrix*> ws;
        std::vector<float*> ys;
        for (size_t i = 0; i < ms.size(); ++i) {
          sep[i].resize(size_t(n * ms[i].m.rows));
          many[i].resize(sep[i].size());
          cpu.matmul({&pool, fast}, x.data(), n, ms[i].m, sep[i].data());
          ws.push_back(&ms[i].m);
          ys.push_back(many[i].data());
        }
        cpu.matmul_many({&pool, fast}, x.data(), n, ws.data(), ys.data(), int(ws.size()));
        for (size_t i = 0; i < ms.size(); ++i) EXPECT_EQ(many[i], sep[i]) << "matrix " << i << " fast " << fast;
      }
}

// bf16 tiles of output rows give the scalar row's bits at any even width, a multiple of the
// tile's words or not (the large vision towers' MLP is 4304 wide): the last rows of a 40-row
// matrix run the scalar loop, and the same rows run in a tile of a slice that starts 24 rows in.
TEST(Ops, Bf16TilesEqualTheScalarRowsAtAnyWidth) {
  for (int64_t cols : {64, 66, 200, 4304}) {
    TestMatrix w = make_matrix(WeightType::kBF16, 40, cols, 11, 0, 0, core::DType::kF32);
    const std::vector<float> x = randn(size_t(3 * cols), 12);
    std::vector<float> full(3 * 40), part(3 * 16);
    cpu.matmul({}, x.data(), 3, w.m, full.data());
    cpu.matmul({}, x.data(), 3, w.m.row_slice(24, 16), part.data());
    for (int64_t t = 0; t < 3; ++t)
      for (int64_t i = 0; i < 16; ++i)
        ASSERT_EQ(part[size_t(t * 16 + i)], full[size_t(t * 40 + 24 + i)]) << cols << " " << t << " " << i;
  }
}

TEST(Ops, MatmulRowSliceAndZeroRows) {
  TestMatrix w = make_matrix(WeightType::kAffine, 12, 64, 5, 5, 32);
  Matrix s = w.m.row_slice(4, 5);
  std::vector<float> x = randn(64, 6), full(12), part(5);
  cpu.matmul({}, x.data(), 1, w.m, full.data());
  cpu.matmul({}, x.data(), 1, s, part.data());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(part[size_t(i)], full[size_t(4 + i)]);
  cpu.matmul({}, x.data(), 0, w.m, nullptr);  // no rows: nothing happens
}

TEST(Ops, EmbedDequantizesRows) {
  for (WeightType type : {WeightType::kBF16, WeightType::kF32, WeightType::kAffine}) {
    TestMatrix e = make_matrix(type, 50, 64, 9, 6, 32);
    std::vector<int32_t> toks = {0, 49, 7, 7};
    std::vector<float> a(4 * 64), b(4 * 64);
    ref.embed({}, e.m, toks.data(), 4, a.data());
    cpu.embed({}, e.m, toks.data(), 4, b.data());
    expect_close(a.data(), b.data(), a.size(), 1e-6f, "embed");
  }
}

TEST(Ops, NormsAndSwiglu) {
  core::ThreadPool pool(2);
  for (int64_t dim : {1, 7, 8, 9, 128, 1000}) {
    const int64_t n = 5;
    auto x = randn(size_t(n * dim), 1, 3.0f), w = randn(size_t(dim), 2), z = randn(size_t(n * dim), 3);
    std::vector<float> a(x.size()), b(x.size());
    ref.rms_norm({}, x.data(), n, dim, w.data(), 1e-6f, a.data());
    cpu.rms_norm({&pool}, x.data(), n, dim, w.data(), 1e-6f, b.data());
    expect_close(a.data(), b.data(), a.size(), 1e-5f, "rms_norm");
    a = x;
    b = x;
    ref.gated_rms_norm({}, a.data(), z.data(), n, dim, w.data(), 1e-6f);
    cpu.gated_rms_norm({&pool}, b.data(), z.data(), n, dim, w.data(), 1e-6f);
    expect_close(a.data(), b.data(), a.size(), 1e-5f, "gated_rms_norm");
    std::vector<float> sa(size_t(n * dim)), sb(sa.size());
    ref.swiglu({}, x.data(), z.data(), n, dim, dim, sa.data());
    cpu.swiglu({&pool}, x.data(), z.data(), n, dim, dim, sb.data());
    expect_close(sa.data(), sb.data(), sa.size(), 1e-6f, "swiglu");
  }
}

// Elementwise float ops in the same order as the reference: the same bits.
TEST(Ops, AddRowsAndMoeCombine) {
  core::ThreadPool pool(2);
  for (int64_t dim : {1, 7, 16, 17, 1000}) {
    for (int64_t n : {1, 5}) {
      auto x = randn(size_t(n * dim), 11), y0 = randn(size_t(n * dim), 12), s = randn(size_t(n), 13);
      for (const float* scale : {static_cast<const float*>(nullptr), static_cast<const float*>(s.data())}) {
        std::vector<float> a = y0, b = y0;
        ref.add_rows({}, x.data(), scale, n, dim, a.data());
        cpu.add_rows({&pool}, x.data(), scale, n, dim, b.data());
        EXPECT_EQ(a, b) << "add_rows dim " << dim;
        if (!scale) { EXPECT_EQ(a[0], y0[0] + x[0]); }
      }
      const int64_t k = 3;
      auto eo = randn(size_t(n * k * dim), 14), w = randn(size_t(n * k), 15);
      std::vector<float> a(size_t(n * dim), 7.0f), b(a.size(), -7.0f);  // overwritten, not added to
      ref.moe_combine({}, eo.data(), w.data(), n, k, dim, a.data());
      cpu.moe_combine({&pool}, eo.data(), w.data(), n, k, dim, b.data());
      EXPECT_EQ(a, b) << "moe_combine dim " << dim;
      EXPECT_EQ(a[0], ((0.0f + w[0] * eo[0]) + w[1] * eo[size_t(dim)]) + w[2] * eo[size_t(2 * dim)]);
    }
  }
}

// A workspace serves only the backend that made it; every op works without one too.
TEST(Ops, WorkspaceBelongsToItsBackend) {
  auto ws = cpu.new_workspace();
  EXPECT_EQ(ws->owner(), &cpu);
  auto x = randn(64, 1);
  TestMatrix w = make_matrix(WeightType::kAffine, 32, 64, 3, 4, 32);
  std::vector<float> with(32), without(32);
  Context c{nullptr, false, ws.get()};
  cpu.matmul(c, x.data(), 1, w.m, with.data());
  cpu.matmul({}, x.data(), 1, w.m, without.data());
  EXPECT_EQ(with, without);
  auto other = ref.new_workspace();
  Context wrong{nullptr, false, other.get()};
  EXPECT_DEATH(cpu.matmul(wrong, x.data(), 1, w.m, with.data()), "");
}

// Long enough (260 positions) for several 64-key blocks of the online softmax; on every target.
// The CPU kernel reads a scattered block table with the bits of a contiguous one.
void attention_checks() {
  core::ThreadPool pool(3);
  for (auto [nh, nkv, hd, rd] : {std::tuple{4, 2, 256, 64}, std::tuple{6, 3, 64, 32}, std::tuple{2, 1, 32, 2}}) {
    Ops::AttentionParams p{nh, nkv, hd, rd, 1e7f, 1e-6f, nullptr, nullptr};
    auto qn = randn(size_t(hd), 1, 0.1f), kn = randn(size_t(hd), 2, 0.1f);
    for (auto& v : qn) v += 1;
    for (auto& v : kn) v += 1;
    p.q_norm = qn.data();
    p.k_norm = kn.data();
    const int64_t cap = 260;
    TestKv c_ref(cap, nkv * hd, false), c_cpu(cap, nkv * hd, false), c_scattered(cap, nkv * hd, true);
    int64_t pos = 0;
    for (int64_t n : {5, 1, 13, 1, 130, 1, 100}) {
      auto qg = randn(size_t(n * nh * 2 * hd), uint32_t(10 + pos)), k = randn(size_t(n * nkv * hd), uint32_t(20 + pos)),
           v = randn(size_t(n * nkv * hd), uint32_t(30 + pos));
      std::vector<float> o1(size_t(n * nh * hd)), o2(o1.size()), o3(o1.size());
      ref.attention({}, p, qg.data(), k.data(), v.data(), n, pos, c_ref.view(), o1.data());
      cpu.attention({&pool}, p, qg.data(), k.data(), v.data(), n, pos, c_cpu.view(), o2.data());
      cpu.attention({&pool}, p, qg.data(), k.data(), v.data(), n, pos, c_scattered.view(), o3.data());
      expect_close(o1.data(), o2.data(), o1.size(), 2e-5f, "attention");
      EXPECT_EQ(o2, o3) << "scattered blocks, position " << pos;
      const auto k1 = c_ref.keys(pos + n), k2 = c_cpu.keys(pos + n);
      expect_close(k1.data(), k2.data(), k1.size(), 1e-5f, "k cache");
      EXPECT_EQ(k2, c_scattered.keys(pos + n));
      pos += n;
    }
  }
}

// The work items' size follows the call's rows and the threads (cpu_ops.cc positions_per_item:
// 4 positions for a decode row, up to 64 for a long call): a row's output must not depend on it.
// One call of 300 rows with no pool, the same with a pool of three, and the rows one call each
// give the same bits.
void item_size_checks() {
  const int64_t nh = 8, nkv = 2, hd = 64, n = 300;
  auto qn = randn(size_t(hd), 1, 0.1f), kn = randn(size_t(hd), 2, 0.1f);
  Ops::AttentionParams p{nh, nkv, hd, hd, 1e6f, 1e-6f, qn.data(), kn.data()};
  auto qg = randn(size_t(n * nh * 2 * hd), 41), k = randn(size_t(n * nkv * hd), 42), v = randn(size_t(n * nkv * hd), 43);
  core::ThreadPool pool(3);
  std::vector<float> whole(size_t(n * nh * hd)), pooled(whole.size()), rows(whole.size());
  TestKv c1(n, nkv * hd, false), c2(n, nkv * hd, false), c3(n, nkv * hd, true);
  cpu.attention({}, p, qg.data(), k.data(), v.data(), n, 0, c1.view(), whole.data());
  cpu.attention({&pool}, p, qg.data(), k.data(), v.data(), n, 0, c2.view(), pooled.data());
  for (int64_t t = 0; t < n; ++t)
    cpu.attention({&pool}, p, qg.data() + t * nh * 2 * hd, k.data() + t * nkv * hd, v.data() + t * nkv * hd, 1, t,
                  c3.view(), rows.data() + t * nh * hd);
  EXPECT_EQ(whole, pooled);
  EXPECT_EQ(whole, rows);
}

// Attention without the output gate (Qwen3): the query rows alone, [n, n_heads, hd]. Independent
// expectation: the gated op with every gate at 30 (sigmoid(30) rounds to 1.0f, so the factor is
// exact) on the same queries interleaved with those gates, bit for bit, in both backends; and the
// CPU kernel within the usual bound of the reference.
void ungated_attention_checks() {
  core::ThreadPool pool(3);
  const int64_t nh = 4, nkv = 2, hd = 64, cap = 140;
  auto qn = randn(size_t(hd), 1, 0.1f), kn = randn(size_t(hd), 2, 0.1f);
  Ops::AttentionParams gated{nh, nkv, hd, hd, 1e6f, 1e-6f, qn.data(), kn.data()};
  Ops::AttentionParams plain = gated;
  plain.gated = false;
  for (const Ops* ops : {&ref, &cpu}) {
    TestKv c_gated(cap, nkv * hd, false), c_plain(cap, nkv * hd, false);
    int64_t pos = 0;
    for (int64_t n : {7, 1, 70, 1}) {
      auto q = randn(size_t(n * nh * hd), uint32_t(70 + pos)), k = randn(size_t(n * nkv * hd), uint32_t(80 + pos)),
           v = randn(size_t(n * nkv * hd), uint32_t(90 + pos));
      std::vector<float> qg(size_t(n * nh * 2 * hd), 30.0f);
      for (int64_t r = 0; r < n * nh; ++r) std::copy_n(q.data() + r * hd, hd, qg.data() + r * 2 * hd);
      std::vector<float> o_gated(size_t(n * nh * hd)), o_plain(o_gated.size()), o_ref(o_gated.size());
      const Context ctx{ops == &cpu ? &pool : nullptr};
      ops->attention(ctx, gated, qg.data(), k.data(), v.data(), n, pos, c_gated.view(), o_gated.data());
      ops->attention(ctx, plain, q.data(), k.data(), v.data(), n, pos, c_plain.view(), o_plain.data());
      EXPECT_EQ(o_plain, o_gated) << ops->name() << ", position " << pos;
      pos += n;
    }
  }
  // The CPU kernel against the reference, ungated, over several calls.
  TestKv c_ref(cap, nkv * hd, false), c_cpu(cap, nkv * hd, false);
  int64_t pos = 0;
  for (int64_t n : {5, 1, 66}) {
    auto q = randn(size_t(n * nh * hd), uint32_t(100 + pos)), k = randn(size_t(n * nkv * hd), uint32_t(110 + pos)),
         v = randn(size_t(n * nkv * hd), uint32_t(120 + pos));
    std::vector<float> o1(size_t(n * nh * hd)), o2(o1.size());
    ref.attention({}, plain, q.data(), k.data(), v.data(), n, pos, c_ref.view(), o1.data());
    cpu.attention({&pool}, plain, q.data(), k.data(), v.data(), n, pos, c_cpu.view(), o2.data());
    expect_close(o1.data(), o2.data(), o1.size(), 2e-5f, "ungated attention");
    pos += n;
  }
}

// first_key: attention that skips the cache's first positions. Independent expectation: RoPE is
// relative, so rows written at positions f.. and attended from f equal the same rows written at
// 0.. and attended from 0 (to rounding), whatever the skipped positions hold; the CPU kernel
// agrees with the reference, across the first 64-key block and beyond it.
void first_key_checks() {
  core::ThreadPool pool(2);
  const int64_t nh = 4, nkv = 2, hd = 64, rd = 32, cap = 200;
  auto qn = randn(size_t(hd), 1, 0.1f), kn = randn(size_t(hd), 2, 0.1f);
  for (auto& v : qn) v += 1;
  for (auto& v : kn) v += 1;
  for (int64_t f : {1, 63, 70}) {
    Ops::AttentionParams p0{nh, nkv, hd, rd, 1e4f, 1e-6f, qn.data(), kn.data()};
    Ops::AttentionParams pf = p0;
    pf.first_key = f;
    TestKv shifted(cap, nkv * hd, true), plain(cap, nkv * hd, false), c_cpu(cap, nkv * hd, false);
    // Junk at the skipped positions (large, so reading them would show).
    auto jq = randn(size_t(f * nh * 2 * hd), 3), jk = randn(size_t(f * nkv * hd), 4, 30.0f),
         jv = randn(size_t(f * nkv * hd), 5, 30.0f);
    std::vector<float> junk(size_t(f * nh * hd));
    ref.attention({}, p0, jq.data(), jk.data(), jv.data(), f, 0, shifted.view(), junk.data());
    cpu.attention({&pool}, p0, jq.data(), jk.data(), jv.data(), f, 0, c_cpu.view(), junk.data());
    int64_t done = 0;
    for (int64_t n : {1, 9, 1, 70}) {
      auto qg = randn(size_t(n * nh * 2 * hd), uint32_t(40 + done)), k = randn(size_t(n * nkv * hd), uint32_t(50 + done)),
           v = randn(size_t(n * nkv * hd), uint32_t(60 + done));
      std::vector<float> o_shift(size_t(n * nh * hd)), o_plain(o_shift.size()), o_cpu(o_shift.size());
      ref.attention({}, pf, qg.data(), k.data(), v.data(), n, f + done, shifted.view(), o_shift.data());
      ref.attention({}, p0, qg.data(), k.data(), v.data(), n, done, plain.view(), o_plain.data());
      cpu.attention({&pool}, pf, qg.data(), k.data(), v.data(), n, f + done, c_cpu.view(), o_cpu.data());
      expect_close(o_plain.data(), o_shift.data(), o_plain.size(), 1e-4f, "first_key (shifted positions)");
      expect_close(o_shift.data(), o_cpu.data(), o_shift.size(), 2e-5f, "first_key (cpu)");
      done += n;
    }
  }
}

// Several queries over one cache together (attend_many: the heads sharing a key/value head, at
// several positions) give each query the bits of attend alone.
void attend_many_checks() {
  for (int64_t hd : {256, 64, 40}) {
    const int64_t stride = 3 * hd, len = 200;  // keys interleaved with two other heads' rows
    auto k = randn(size_t(len * stride), 7), v = randn(size_t(len * stride), 8), q = randn(size_t(6 * hd), 9);
    const int64_t n_pos[6] = {1, 64, 65, 130, 200, 3};
    std::vector<float> many(size_t(6 * hd)), s(6 * 64), m(12);
    const float* qp[6];
    float* op[6];
    for (int i = 0; i < 6; ++i) {
      qp[i] = q.data() + i * hd;
      op[i] = many.data() + i * hd;
    }
    const auto kb = cpu::contiguous_blocks(k.data(), len, stride), vb = cpu::contiguous_blocks(v.data(), len, stride);
    cpu::attend_many(qp, n_pos, 6, {kb.data(), vb.data(), 0, stride}, hd, 0.125f, s.data(), m.data(), op);
    for (int i = 0; i < 6; ++i) {
      std::vector<float> one(static_cast<size_t>(hd));
      cpu::attend(qp[i], k.data(), v.data(), stride, n_pos[i], hd, 0.125f, s.data(), one.data());
      for (int64_t d = 0; d < hd; ++d) ASSERT_EQ(one[size_t(d)], many[size_t(i * hd + d)]) << "query " << i;
    }
  }
}

void conv_checks() {
  core::ThreadPool pool(2);
  for (int64_t kernel : {1, 2, 4, 5, 9})
  for (int64_t ch : {67, 160}) {
    auto w = randn(size_t(ch * kernel), 3, 0.5f);
    std::vector<float> s1(size_t((kernel - 1) * ch)), s2(s1.size()), s3(s1.size());
    auto x = randn(size_t(9 * ch), 4);
    std::vector<float> o1(x.size()), o2(x.size()), o3(x.size());
    ref.conv1d_silu({}, x.data(), 9, ch, w.data(), kernel, s1.data(), o1.data());
    cpu.conv1d_silu({&pool}, x.data(), 9, ch, w.data(), kernel, s2.data(), o2.data());
    expect_close(o1.data(), o2.data(), o1.size(), 1e-5f, "conv");
    expect_close(s1.data(), s2.data(), s1.size(), 0.0f, "conv state");
    // 4 rows then 5 rows with the carried state == 9 rows at once, bit for bit.
    cpu.conv1d_silu({}, x.data(), 4, ch, w.data(), kernel, s3.data(), o3.data());
    cpu.conv1d_silu({}, x.data() + 4 * ch, 5, ch, w.data(), kernel, s3.data(), o3.data() + 4 * ch);
    EXPECT_EQ(o2, o3);
    EXPECT_EQ(s2, s3);
  }
}

void delta_checks() {
  core::ThreadPool pool(3);
  for (auto [nk, nv, dk, dv] : {std::tuple{2, 4, 128, 128}, std::tuple{1, 3, 16, 24}, std::tuple{3, 3, 8, 5}}) {
    const int64_t ch = 2 * nk * dk + nv * dv;
    auto decay = randn(size_t(nv), 5, 0.5f), dtb = randn(size_t(nv), 6, 0.3f);
    for (float& a : decay) a = -std::exp(a);
    Ops::DeltaParams p{nk, nv, dk, dv, decay.data(), dtb.data()};
    for (int64_t n : {1, 2, 7, 64}) {
      auto qkv = randn(size_t(n * ch), uint32_t(n)), a = randn(size_t(n * nv), uint32_t(n + 1)),
           b = randn(size_t(n * nv), uint32_t(n + 2));
      auto s0 = randn(size_t(nv * dk * dv), 9, 0.1f);  // a non-zero initial state
      std::vector<float> o[4], s[4];
      for (int i = 0; i < 4; ++i) {
        o[i].resize(size_t(n * nv * dv));
        s[i] = s0;
      }
      ref.gated_delta({}, p, qkv.data(), a.data(), b.data(), n, false, s[0].data(), o[0].data());
      cpu.gated_delta({&pool}, p, qkv.data(), a.data(), b.data(), n, false, s[1].data(), o[1].data());
      ref.gated_delta({}, p, qkv.data(), a.data(), b.data(), n, true, s[2].data(), o[2].data());
      cpu.gated_delta({&pool}, p, qkv.data(), a.data(), b.data(), n, true, s[3].data(), o[3].data());
      for (int i = 1; i < 4; ++i) {
        expect_close(o[0].data(), o[i].data(), o[0].size(), 2e-5f, "delta out");
        expect_close(s[0].data(), s[i].data(), s[0].size(), 2e-5f, "delta state");
      }
      // Thread count does not change the bits.
      std::vector<float> o1(o[3].size()), s1 = s0;
      cpu.gated_delta({}, p, qkv.data(), a.data(), b.data(), n, true, s1.data(), o1.data());
      EXPECT_EQ(o1, o[3]);
      EXPECT_EQ(s1, s[3]);
      // Out of place (state_in, speculative verification): the bits of the in-place run, the
      // starting state untouched, in both implementations.
      Ops::DeltaParams po = p;
      po.state_in = s0.data();
      const std::vector<float> s0_copy = s0;
      for (const Ops* ops : {&ref, &cpu}) {
        std::vector<float> oo(o[1].size()), so(s0.size(), -7.0f);
        ops->gated_delta({&pool}, po, qkv.data(), a.data(), b.data(), n, false, so.data(), oo.data());
        EXPECT_EQ(oo, ops == &ref ? o[0] : o[1]);
        EXPECT_EQ(so, ops == &ref ? s[0] : s[1]);
        EXPECT_EQ(s0, s0_copy);
      }
      // Tiled value heads (GGUF): the same heads stored in tiled order (grouped head g·r + j at
      // j·nk + g) give the same outputs in that order, bit for bit.
      const int64_t r = nv / nk;
      auto tiled = [&](int64_t h) { return (h % r) * nk + h / r; };  // grouped head -> tiled slot
      std::vector<float> qkv_t = qkv, a_t = a, b_t = b, dec_t = decay, dtb_t = dtb, s_t = s0;
      for (int64_t h = 0; h < nv; ++h) {
        const int64_t j = tiled(h);
        for (int64_t t = 0; t < n; ++t) {
          std::copy_n(qkv.begin() + t * ch + 2 * nk * dk + h * dv, dv, qkv_t.begin() + t * ch + 2 * nk * dk + j * dv);
          a_t[size_t(t * nv + j)] = a[size_t(t * nv + h)];
          b_t[size_t(t * nv + j)] = b[size_t(t * nv + h)];
        }
        dec_t[size_t(j)] = decay[size_t(h)];
        dtb_t[size_t(j)] = dtb[size_t(h)];
        std::copy_n(s0.begin() + h * dk * dv, dk * dv, s_t.begin() + j * dk * dv);
      }
      Ops::DeltaParams pt{nk, nv, dk, dv, dec_t.data(), dtb_t.data()};
      pt.tiled_v_heads = true;
      for (int i = 0; i < 4; ++i) {
        const Ops* ops = i % 2 ? &cpu : &ref;
        std::vector<float> ot(o[0].size()), st = s_t;
        ops->gated_delta({&pool}, pt, qkv_t.data(), a_t.data(), b_t.data(), n, i >= 2, st.data(), ot.data());
        for (int64_t h = 0; h < nv; ++h)
          for (int64_t t = 0; t < n; ++t)
            for (int64_t e = 0; e < dv; ++e)
              ASSERT_EQ(ot[size_t((t * nv + tiled(h)) * dv + e)], o[i][size_t((t * nv + h) * dv + e)]) << "tiled " << i;
      }
    }
  }
}

TEST(Ops, AttentionWithCacheMatchesReferenceOnEveryTarget) {
  on_every_target([](const std::string&) {
    attention_checks();
    attend_many_checks();
    item_size_checks();
    first_key_checks();
    ungated_attention_checks();
  });
}

// The SIMD conv and recurrent delta step on every compiled target this CPU supports.
TEST(Ops, ConvMatchesReferenceAndCarriesStateOnEveryTarget) {
  on_every_target([](const std::string&) { conv_checks(); });
}

TEST(Ops, GatedDeltaRecurrentAndChunkedFormsOnEveryTarget) {
  on_every_target([](const std::string&) { delta_checks(); });
}

TEST(Ops, RouterTopK) {
  const int64_t n = 6, ne = 9, k = 3;
  auto l = randn(size_t(n * ne), 4);
  l[0] = l[1] = 5.0f;  // a tie: the lower index first
  std::vector<int32_t> i1(size_t(n * k)), i2(i1.size());
  std::vector<float> w1(i1.size()), w2(i1.size());
  ref.router_topk(Context{}, l.data(), n, ne, k, true, i1.data(), w1.data());
  cpu.router_topk(Context{}, l.data(), n, ne, k, true, i2.data(), w2.data());
  EXPECT_EQ(i1, i2);
  EXPECT_EQ(i1[0], 0);
  EXPECT_EQ(i1[1], 1);
  expect_close(w1.data(), w2.data(), w1.size(), 1e-6f, "router weights");
  for (int64_t t = 0; t < n; ++t) EXPECT_NEAR(w2[size_t(t * k)] + w2[size_t(t * k + 1)] + w2[size_t(t * k + 2)], 1.0f, 1e-6f);
}

}  // namespace
}  // namespace qwen35::kernels
