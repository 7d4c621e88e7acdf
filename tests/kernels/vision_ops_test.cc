// The vision tower's ops of the CPU backend (layer_norm, gelu, add_bias, vision_attention) against
// their scalar references (float64 inside) and the float64 formulas: odd sizes, every SIMD target
// this CPU runs, 1 vs 2 threads bit for bit, and batch invariance (a row's bits do not depend on
// the other rows). Each tolerance is derived from the float arithmetic the kernel does; the
// comments say how.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/vision_attention.h"
#include "kernels/ops.h"
#include "test_matrices.h"
#include "vision_ops_reference.h"

namespace qwen35::kernels {
namespace {

const Ops& ref = ref_ops();
const Ops& cpu = cpu_ops();
using qwen35::testing::Expectation;
using qwen35::testing::gelu_erf64;
using qwen35::testing::gelu_tanh64;
using qwen35::testing::expect_gelu_within_bound;
using qwen35::testing::gelu_inputs;
using qwen35::testing::gelu_tol;
using qwen35::testing::layer_norm_tolerance;
using qwen35::testing::expected_rows;
using qwen35::testing::rotary_tables;

constexpr double kEps = qwen35::testing::kVisionEps;  // float's unit roundoff

std::vector<float> offset(std::vector<float> v, float by) {
  for (auto& x : v) x += by;
  return v;
}

void layer_norm_checks() {
  core::ThreadPool pool(2);
  uint32_t seed = 1;
  for (int64_t dim : {1, 3, 17, 37, 700, 768, 1152})
    for (int64_t n : {1, 3, 37, 700}) {
      if (n == 700 && dim > 37) continue;  // 700 rows once per narrow width is enough
      // Rows with a mean offset (3) larger than their spread (2): the two-pass variance must not
      // cancel.
      const auto x = offset(randn(size_t(n * dim), seed++, 2.0f), 3.0f);
      const auto w = randn(size_t(dim), seed++), b = randn(size_t(dim), seed++);
      std::vector<float> r(x.size()), one(x.size()), two(x.size());
      ref.layer_norm({}, x.data(), n, dim, w.data(), b.data(), 1e-6f, r.data());
      cpu.layer_norm({}, x.data(), n, dim, w.data(), b.data(), 1e-6f, one.data());
      cpu.layer_norm({&pool}, x.data(), n, dim, w.data(), b.data(), 1e-6f, two.data());
      ASSERT_EQ(one, two) << "thread count changed the bits, dim " << dim;
      for (int64_t t = 0; t < n; ++t) {
        const float* xr = x.data() + t * dim;
        const std::vector<double> tol = layer_norm_tolerance(xr, dim, w.data(), b.data(), 1e-6);
        for (int64_t i = 0; i < dim; ++i) {
          const size_t k = size_t(t * dim + i);
          ASSERT_LE(std::fabs(double(one[k]) - r[k]), tol[size_t(i)]) << "dim " << dim << " row " << t << " at " << i;
        }
        std::vector<float> alone(static_cast<size_t>(dim));
        cpu.layer_norm({&pool}, xr, 1, dim, w.data(), b.data(), 1e-6f, alone.data());
        for (int64_t i = 0; i < dim; ++i) ASSERT_EQ(alone[size_t(i)], one[size_t(t * dim + i)]) << "batch invariance";
      }
      std::vector<float> in_place = x;  // out may be x
      cpu.layer_norm({}, in_place.data(), n, dim, w.data(), b.data(), 1e-6f, in_place.data());
      ASSERT_EQ(in_place, one);
    }
}

TEST(VisionOps, LayerNormMatchesReferenceOnEveryTarget) {
  on_every_target([](const std::string&) { layer_norm_checks(); });
}

TEST(VisionOps, LayerNormOfAConstantRowIsItsBias) {
  // var = 0: (x − mean) is exactly 0 and the output is b whatever eps; hand-computed.
  const std::vector<float> x(37, 2.5f), w(37, 3.0f), b(37, -1.25f);
  std::vector<float> out(37);
  cpu.layer_norm({}, x.data(), 1, 37, w.data(), b.data(), 1e-6f, out.data());
  for (float v : out) EXPECT_EQ(v, -1.25f);
}

// The float64 formulas as the issue states them, with std::tanh / std::erf.
double gelu_tanh_formula(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double gelu_erf_formula(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

TEST(VisionOps, GeluFormsWithoutCancellationAreTheStatedFormulas) {
  for (int i = -30000; i <= 30000; ++i) {
    const double x = i * 0.001;
    ASSERT_NEAR(gelu_tanh64(x), gelu_tanh_formula(x), 1e-15 * (1 + std::fabs(x))) << x;
    ASSERT_NEAR(gelu_erf64(x), gelu_erf_formula(x), 1e-15 * (1 + std::fabs(x))) << x;
  }
}

void gelu_checks() {
  const std::vector<float> x = gelu_inputs();
  const int64_t n = int64_t(x.size());
  for (bool tanh_form : {true, false}) {
    std::vector<float> y = x;
    cpu.gelu({}, y.data(), 1, n, tanh_form);
    expect_gelu_within_bound(x, y, tanh_form);
    // The reference op (float64 inside) agrees with the formulas, and batch and thread invariance
    // over rows of odd width.
    core::ThreadPool pool(2);
    for (int64_t dim : {1, 3, 17, 37, 700}) {
      const int64_t rows = dim == 700 ? 5 : 700;
      const auto v = randn(size_t(rows * dim), uint32_t(dim), 3.0f);
      std::vector<float> r = v, a = v, b = v;
      ref.gelu({}, r.data(), rows, dim, tanh_form);
      cpu.gelu({}, a.data(), rows, dim, tanh_form);
      cpu.gelu({&pool}, b.data(), rows, dim, tanh_form);
      ASSERT_EQ(a, b) << "thread count changed the bits";
      for (size_t i = 0; i < v.size(); ++i) {
        const double want = tanh_form ? gelu_tanh64(v[i]) : gelu_erf64(v[i]);
        ASSERT_EQ(r[i], float(want));
        ASSERT_LE(std::fabs(a[i] - want), gelu_tol(v[i], want, tanh_form)) << "at " << i;
      }
      for (int64_t t = 0; t < rows; ++t) {
        std::vector<float> alone(v.begin() + t * dim, v.begin() + (t + 1) * dim);
        cpu.gelu({}, alone.data(), 1, dim, tanh_form);
        for (int64_t i = 0; i < dim; ++i) ASSERT_EQ(alone[size_t(i)], a[size_t(t * dim + i)]) << "batch invariance";
      }
    }
  }
}

TEST(VisionOps, GeluBothFormsMatchTheFloat64FormulasOnEveryTarget) {
  on_every_target([](const std::string&) { gelu_checks(); });
}

TEST(VisionOps, GeluKnownValues) {
  // Hand-checked points: GELU(0) = 0, GELU(x) → x for large x, → −0 for very negative x, and the
  // erf form at 1: 0.5·(1 + erf(1/√2)) = Φ(1) = 0.8413447460685429.
  std::vector<float> x = {0.0f, 1.0f, 50.0f, -50.0f};
  std::vector<float> e = x, t = x;
  cpu.gelu({}, e.data(), 1, 4, false);
  cpu.gelu({}, t.data(), 1, 4, true);
  EXPECT_EQ(e[0], 0.0f);
  EXPECT_NEAR(e[1], 0.8413447460685429, 2e-7);
  EXPECT_EQ(e[2], 50.0f);
  EXPECT_EQ(t[2], 50.0f);
  EXPECT_EQ(e[3], 0.0f);
  EXPECT_EQ(t[3], 0.0f);
}

// One float add per element, as in the reference: the same bits.
TEST(VisionOps, AddBiasIsTheScalarSum) {
  core::ThreadPool pool(2);
  on_every_target([&](const std::string&) {
    for (int64_t dim : {1, 3, 17, 37, 700})
      for (int64_t n : {1, 3, 37, 700}) {
        const auto y0 = randn(size_t(n * dim), uint32_t(n + dim)), bias = randn(size_t(dim), 7);
        std::vector<float> r = y0, a = y0, b = y0;
        ref.add_bias({}, r.data(), n, dim, bias.data());
        cpu.add_bias({}, a.data(), n, dim, bias.data());
        cpu.add_bias({&pool}, b.data(), n, dim, bias.data());
        ASSERT_EQ(r, a);
        ASSERT_EQ(a, b);
        ASSERT_EQ(a.back(), y0.back() + bias.back());
      }
  });
}

// One image: its inputs, the reference op's output and the float64 expectation, made once for
// all targets.
struct AttentionCase {
  int64_t n, n_heads, head_dim;
  std::vector<float> qkv, cos, sin, ref_out;
  Expectation e;
};

AttentionCase make_case(int64_t n, int64_t nh, int64_t hd, uint32_t seed) {
  AttentionCase c{n, nh, hd, {}, {}, {}, {}, {}};
  // q and k of scale 1.5: scores of spread ~2.25 after 1/√hd, so the softmax is neither flat nor
  // one-hot.
  c.qkv = randn(size_t(n * 3 * nh * hd), seed, 1.5f);
  rotary_tables(n, hd, 24, c.cos, c.sin);
  c.ref_out.resize(size_t(n * nh * hd));
  ref.vision_attention({}, {nh, hd}, c.qkv.data(), n, c.cos.data(), c.sin.data(), c.ref_out.data());
  std::vector<int64_t> rows(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) rows[size_t(t)] = t;
  c.e = expected_rows(c.qkv.data(), c.cos.data(), c.sin.data(), n, nh, hd, rows);
  return c;
}

const std::vector<AttentionCase>& attention_cases() {
  static const std::vector<AttentionCase> cases = [] {
    std::vector<AttentionCase> v;
    uint32_t seed = 50;
    for (int64_t hd : {64, 72, 80, 96})
      for (int64_t n : {1, 3, 37, 65}) v.push_back(make_case(n, hd == 72 ? 16 : hd == 64 ? 12 : 3, hd, seed++));
    // 700 rows: 11 key blocks and 6 query blocks, the last ones partial.
    v.push_back(make_case(700, 2, 72, seed++));
    v.push_back(make_case(700, 3, 64, seed++));
    return v;
  }();
  return cases;
}

// The CPU backend against the reference, with 1, 2 and 3 threads (the same bits).
void vision_attention_checks() {
  core::ThreadPool two(2), three(3);
  for (const AttentionCase& c : attention_cases()) {
    const Ops::VisionAttentionParams p{c.n_heads, c.head_dim};
    std::vector<float> one(c.ref_out.size()), two_out(one.size()), three_out(one.size());
    cpu.vision_attention({}, p, c.qkv.data(), c.n, c.cos.data(), c.sin.data(), one.data());
    cpu.vision_attention({&two}, p, c.qkv.data(), c.n, c.cos.data(), c.sin.data(), two_out.data());
    cpu.vision_attention({&three}, p, c.qkv.data(), c.n, c.cos.data(), c.sin.data(), three_out.data());
    ASSERT_EQ(one, two_out) << "2 threads changed the bits";
    ASSERT_EQ(one, three_out) << "3 threads changed the bits";
    for (size_t o = 0; o < one.size(); ++o) {
      // The reference is the float64 result rounded once.
      ASSERT_LE(std::fabs(c.ref_out[o] - c.e.want[o]), 1.001 * kEps * std::fabs(c.e.want[o]) + 1e-40);
      ASSERT_LE(std::fabs(double(one[o]) - c.ref_out[o]), c.e.tol[o])
          << "n " << c.n << " heads " << c.n_heads << " head_dim " << c.head_dim << " at " << o;
    }
  }
}

TEST(VisionOps, VisionAttentionMatchesReferenceOnEveryTarget) {
  on_every_target([](const std::string&) { vision_attention_checks(); });
}

// The attention in parts (Ops::vision_kv_rows over row ranges in any order, then query rows in
// tiles of any size: the vision tower's pieces) gives vision_attention's bits, on both backends
// and every target, with 1 and 2 threads.
void attention_in_parts(const Ops& ops, const AttentionCase& c, const Context& ctx) {
  const Ops::VisionAttentionParams p{c.n_heads, c.head_dim};
  const int64_t width = c.n_heads * c.head_dim;
  std::vector<float> whole(c.ref_out.size());
  ops.vision_attention(ctx, p, c.qkv.data(), c.n, c.cos.data(), c.sin.data(), whole.data());
  std::vector<float> kv(ops.vision_kv_floats(p, c.n), -1.0f);  // garbage where nothing is written
  for (int64_t r1 = c.n; r1 > 0; r1 -= 50)  // key rows in ranges of 50, the last range first
    ops.vision_kv_rows(ctx, p, c.qkv.data(), c.n, c.cos.data(), c.sin.data(), std::max<int64_t>(0, r1 - 50), r1, kv.data());
  for (int64_t tile : {int64_t(1), int64_t(7), int64_t(130)}) {
    std::vector<float> parts(whole.size(), 0.0f), out(size_t(tile * width));
    for (int64_t q0 = 0; q0 < c.n; q0 += tile) {
      const int64_t q1 = std::min(c.n, q0 + tile);
      ops.vision_attend_rows(ctx, p, c.qkv.data(), c.n, c.cos.data(), c.sin.data(), kv.data(), q0, q1, out.data());
      std::copy(out.begin(), out.begin() + (q1 - q0) * width, parts.begin() + q0 * width);
    }
    ASSERT_EQ(parts, whole) << ops.name() << ": n " << c.n << ", query tiles of " << tile;
  }
}

TEST(VisionOps, VisionAttentionInPartsHasTheWholeCallsBits) {
  for (const AttentionCase& c : attention_cases())
    if (c.n < 100) attention_in_parts(ref, c, {});
  on_every_target([](const std::string&) {
    core::ThreadPool two(2);
    for (const AttentionCase& c : attention_cases()) {
      attention_in_parts(cpu, c, {});
      attention_in_parts(cpu, c, {&two});
    }
  });
}

// The largest image before max_pixels caps it (1344² pixels: 84² = 7056 patch rows, 111 key
// blocks, the last partial) on the best target, sampled rows against float64 (the reference op
// would take minutes at this size).
TEST(VisionOps, VisionAttentionOfALargeImageMatchesFloat64OnSampledRows) {
  const int64_t n = 7056, nh = 2, hd = 72;
  const auto qkv = randn(size_t(n * 3 * nh * hd), 77, 1.5f);
  std::vector<float> cos, sin, out(size_t(n * nh * hd));
  rotary_tables(n, hd, 84, cos, sin);
  core::ThreadPool pool(2);
  cpu.vision_attention({&pool}, {nh, hd}, qkv.data(), n, cos.data(), sin.data(), out.data());
  const std::vector<int64_t> rows = {0, 1, 63, 64, 3000, n - 17, n - 1};
  const Expectation e = expected_rows(qkv.data(), cos.data(), sin.data(), n, nh, hd, rows);
  for (size_t r = 0; r < rows.size(); ++r)
    for (int64_t i = 0; i < nh * hd; ++i) {
      const size_t o = r * size_t(nh * hd) + size_t(i);
      ASSERT_LE(std::fabs(out[size_t(rows[r] * nh * hd + i)] - e.want[o]), e.tol[o]) << "row " << rows[r] << " at " << i;
    }
}

// A query row's bits do not depend on which rows share its work item: rows computed in any
// sub-range of a query block equal the whole block's.
TEST(VisionOps, VisionAttentionRowsDoNotDependOnTheirWorkItem) {
  const int64_t n = 150, nh = 2, hd = 72, row = 3 * nh * hd;
  const auto qkv = randn(size_t(n * row), 9, 1.5f);
  std::vector<float> cos, sin;
  rotary_tables(n, hd, 10, cos, sin);
  const int64_t vs = cpu::vision_value_stride(hd);
  const cpu::VisionKv shape{n, nh, hd, vs, nullptr, nullptr};
  std::vector<float> kv_store(shape.kt_floats() + shape.v_floats());
  cpu::VisionKv kv = shape;
  kv.kt = kv_store.data();
  kv.v = kv.kt + kv.kt_floats();
  cpu::vision_prepare_rows(qkv.data(), cos.data(), sin.data(), kv, 0, kv.blocks() * cpu::kVisionKeyBlock);
  std::vector<float> scratch(size_t(cpu::vision_scratch_floats(hd, vs)));
  std::vector<float> whole(size_t(n * nh * hd)), part(whole.size());
  for (int64_t h = 0; h < nh; ++h)
    for (int64_t q0 = 0; q0 < n; q0 += cpu::kVisionQueryBlock)
      cpu::vision_attend_rows(kv, qkv.data(), cos.data(), sin.data(), h, q0,
                              std::min(n, q0 + cpu::kVisionQueryBlock), scratch.data(), whole.data());
  for (int64_t h = 0; h < nh; ++h)
    for (int64_t q0 = 0; q0 < n; q0 += 7)  // ranges of 7 rows: other tiles and remainders
      cpu::vision_attend_rows(kv, qkv.data(), cos.data(), sin.data(), h, q0, std::min(n, q0 + 7), scratch.data(),
                              part.data());
  EXPECT_EQ(whole, part);
  std::vector<float> via_ops(whole.size());
  cpu.vision_attention({}, {nh, hd}, qkv.data(), n, cos.data(), sin.data(), via_ops.data());
  EXPECT_EQ(whole, via_ops);
}

// Hand-computed: with all keys equal the weights are uniform and each output is the mean of the
// values; with one row it is that row's value (the rotation does not touch v).
TEST(VisionOps, VisionAttentionUniformWeightsAverageTheValues) {
  const int64_t n = 5, nh = 2, hd = 4, row = 3 * nh * hd;
  std::vector<float> qkv(size_t(n * row), 0.0f), cos(size_t(n * 2), 1.0f), sin(size_t(n * 2), 0.0f);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < nh * hd; ++i) {
      qkv[size_t(t * row + i)] = float(t + i);             // queries differ
      qkv[size_t(t * row + nh * hd + i)] = 0.5f;          // keys all equal
      qkv[size_t(t * row + 2 * nh * hd + i)] = float(t);  // values 0..4: mean 2
    }
  std::vector<float> out(size_t(n * nh * hd));
  cpu.vision_attention({}, {nh, hd}, qkv.data(), n, cos.data(), sin.data(), out.data());
  for (float v : out) EXPECT_NEAR(v, 2.0f, 1e-6f);
  cpu.vision_attention({}, {nh, hd}, qkv.data(), 1, cos.data(), sin.data(), out.data());
  for (int64_t i = 0; i < nh * hd; ++i) EXPECT_EQ(out[size_t(i)], 0.0f);
}

// Shapes the ops cannot run are broken invariants of the caller (the tower validates its config
// first): both backends stop naming the parameter instead of reading out of bounds.
TEST(VisionOps, ImpossibleShapesStopNamingTheParameter) {
  std::vector<float> qkv(3 * 2 * 6, 0.5f), cs(4, 1.0f), out(2 * 6);
  std::vector<float> w(4, 1.0f);
  for (const Ops* ops : {&ref, &cpu}) {
    EXPECT_DEATH(ops->vision_attention({}, {2, 5}, qkv.data(), 1, cs.data(), cs.data(), out.data()), "head_dim");
    EXPECT_DEATH(ops->vision_attention({}, {0, 6}, qkv.data(), 1, cs.data(), cs.data(), out.data()), "n_heads");
    EXPECT_DEATH(ops->layer_norm({}, w.data(), 1, 0, w.data(), w.data(), 1e-6f, out.data()), "dim");
  }
}

}  // namespace
}  // namespace qwen35::kernels
