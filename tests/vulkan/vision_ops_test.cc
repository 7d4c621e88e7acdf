// The vision tower's ops on the device (vulkan/vision_ops.h) against the scalar reference on
// lavapipe, with the CPU op tests' tolerances (tests/kernels/vision_ops_test.cc derives them);
// and what the tower's pieces rely on, bit for bit: a row's result alone equals its result among
// others, the attention's keys prepared in any ranges and its queries in any tiles equal one
// call, and cutting the dispatches changes nothing.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <vector>

#include "../kernels/test_matrices.h"
#include "kernels/ops.h"
#include "vk_test.h"
#include "vulkan/recorder.h"
#include "vulkan/vision_ops.h"
#include "vision_ops_reference.h"

// A namespace of its own: the test binary compiles as one unit (tests/CMakeLists.txt).
namespace qwen35::vulkan::vision_ops {
namespace {

using kernels::randn;
using qwen35::testing::expect_gelu_within_bound;
using qwen35::testing::expected_rows;
using qwen35::testing::gelu_inputs;
using qwen35::testing::gelu_erf64;
using qwen35::testing::gelu_tanh64;
using qwen35::testing::gelu_tol;
using qwen35::testing::layer_norm_tolerance;
using qwen35::testing::rotary_tables;

const kernels::Ops& ref = kernels::ref_ops();
constexpr double kEps = qwen35::testing::kVisionEps;  // float's unit roundoff

std::vector<float> get(Device& dev, const Buffer& b, size_t floats) {
  std::vector<float> v(floats);
  EXPECT_TRUE(dev.download(b, 0, v.data(), floats * 4).ok());
  return v;
}

std::vector<float> layer_norm_on(Device& dev, const std::vector<float>& x, int64_t n, int64_t dim,
                                 const std::vector<float>& w, const std::vector<float>& b) {
  Buffer bx = put(dev, x), bw = put(dev, w), bb = put(dev, b);
  Buffer bo = put(dev, std::vector<float>(x.size(), -1.0f));
  Recorder rec(dev);
  EXPECT_TRUE(rec.begin().ok());
  record_layer_norm(rec, {&bx}, n, dim, {&bw}, {&bb}, 1e-6f, {&bo});
  EXPECT_TRUE(rec.submit().ok()) << rec.status().message();
  return get(dev, bo, x.size());
}

TEST(VulkanVisionOps, LayerNormMatchesTheReference) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  QWEN35_VK_DEVICE_OR_SKIP(cut, (DeviceOptions{.max_groups = 1}));
  uint32_t seed = 1;
  for (int64_t dim : {1, 3, 17, 64, 100, 768})
    for (int64_t n : {1, 5}) {
      // Rows whose mean (3) is larger than their spread (2): the two passes must not cancel.
      auto x = randn(size_t(n * dim), seed++, 2.0f);
      for (float& v : x) v += 3.0f;
      const auto w = randn(size_t(dim), seed++), b = randn(size_t(dim), seed++);
      std::vector<float> r(x.size());
      ref.layer_norm({}, x.data(), n, dim, w.data(), b.data(), 1e-6f, r.data());
      const std::vector<float> got = layer_norm_on(*dev, x, n, dim, w, b);
      SCOPED_TRACE("dim " + std::to_string(dim) + " rows " + std::to_string(n));
      for (int64_t t = 0; t < n; ++t) {
        const float* xr = x.data() + t * dim;
        const std::vector<double> tol = layer_norm_tolerance(xr, dim, w.data(), b.data(), 1e-6);  // the CPU's
        for (int64_t i = 0; i < dim; ++i) {
          const size_t k = size_t(t * dim + i);
          ASSERT_LE(std::fabs(double(got[k]) - r[k]), tol[size_t(i)]) << "row " << t << " at " << i;
        }
        // A row alone has the bits it has among others.
        std::vector<float> one(xr, xr + dim);
        EXPECT_EQ(layer_norm_on(*dev, one, 1, dim, w, b),
                  std::vector<float>(got.begin() + t * dim, got.begin() + (t + 1) * dim));
      }
      EXPECT_EQ(layer_norm_on(*cut, x, n, dim, w, b), got) << "dispatches cut";
    }
  // A constant row: (x − mean) is exactly 0 and the output is b.
  const std::vector<float> x(37, 2.5f), w(37, 3.0f), b(37, -1.25f);
  for (float v : layer_norm_on(*dev, x, 1, 37, w, b)) EXPECT_EQ(v, -1.25f);
}

// One float add per element, as in the reference: the same bits.
TEST(VulkanVisionOps, AddBiasIsTheScalarSum) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  for (int64_t dim : {1, 17, 130})
    for (int64_t n : {1, 7}) {
      const auto y0 = randn(size_t(n * dim), uint32_t(n + dim)), bias = randn(size_t(dim), 7);
      std::vector<float> r = y0;
      ref.add_bias({}, r.data(), n, dim, bias.data());
      Buffer by = put(*dev, y0), bb = put(*dev, bias);
      Recorder rec(*dev);
      ASSERT_TRUE(rec.begin().ok());
      record_add_bias(rec, {&by}, n, dim, {&bb});
      ASSERT_TRUE(rec.submit().ok()) << rec.status().message();
      EXPECT_EQ(get(*dev, by, r.size()), r) << "dim " << dim << " rows " << n;
    }
}

// A dense sweep of [−20, 20], the tails where the result underflows, huge magnitudes where x³
// overflows, zeros and subnormals; against the float64 formulas, and the reference op.
TEST(VulkanVisionOps, GeluBothFormsMatchTheFloat64Formulas) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  std::vector<float> x = gelu_inputs();
  const auto v = randn(7 * 37, 5, 3.0f);
  x.insert(x.end(), v.begin(), v.end());
  const int64_t n = int64_t(x.size());
  for (bool tanh_form : {true, false}) {
    Buffer bx = put(*dev, x);
    Recorder rec(*dev);
    ASSERT_TRUE(rec.begin().ok());
    record_gelu(rec, {&bx}, 1, n, tanh_form);
    ASSERT_TRUE(rec.submit().ok()) << rec.status().message();
    const std::vector<float> y = get(*dev, bx, x.size());
    std::vector<float> r = x;
    ref.gelu({}, r.data(), 1, n, tanh_form);
    expect_gelu_within_bound(x, y, tanh_form);
    for (int64_t i = 0; i < n; ++i) {  // and the scalar reference op, within the same bound
      const double xi = x[size_t(i)], want = tanh_form ? gelu_tanh64(xi) : gelu_erf64(xi);
      if (std::isinf(want)) continue;
      ASSERT_LE(std::fabs(double(y[size_t(i)]) - r[size_t(i)]), gelu_tol(xi, want, tanh_form) + 1e-37);
    }
  }
}


// The attention of one image on `dev`: the keys prepared in ranges of `key_rows` (the last range
// first, each from buffers of its own rows, as the tower's pieces bind them), then the query
// rows in tiles of `tile`.
std::vector<float> attention_on(Device& dev, const std::vector<float>& qkv, const std::vector<float>& cos,
                                const std::vector<float>& sin, int64_t n, int64_t nh, int64_t hd,
                                int64_t key_rows, int64_t tile) {
  const VisionShape s{nh, hd};
  const int64_t width = nh * hd, half = hd / 2;
  Buffer bq = put(dev, qkv), bc = put(dev, cos), bs = put(dev, sin);
  Buffer bkv = put(dev, std::vector<float>(size_t(n * width), -1.0f));
  Buffer bo = put(dev, std::vector<float>(size_t(n * width), -1.0f));
  Recorder rec(dev);
  EXPECT_TRUE(rec.begin().ok());
  std::vector<Buffer> keep;
  for (int64_t r1 = n; r1 > 0; r1 -= key_rows) {
    const int64_t r0 = std::max<int64_t>(0, r1 - key_rows), m = r1 - r0;
    keep.push_back(put(dev, std::vector<float>(qkv.begin() + r0 * 3 * width, qkv.begin() + r1 * 3 * width)));
    keep.push_back(put(dev, std::vector<float>(cos.begin() + r0 * half, cos.begin() + r1 * half)));
    keep.push_back(put(dev, std::vector<float>(sin.begin() + r0 * half, sin.begin() + r1 * half)));
    keep.push_back(put(dev, std::vector<float>(size_t(m * width), 0.0f)));
    const size_t k = keep.size();
    record_vision_kv(rec, s, {&keep[k - 4]}, m, {&keep[k - 3]}, {&keep[k - 2]}, {&keep[k - 1]});
    rec.copy({&keep[k - 1]}, {&bkv, uint64_t(r0 * width) * 4}, uint64_t(m * width) * 4);
  }
  for (int64_t q0 = 0; q0 < n; q0 += tile) {
    const int64_t q1 = std::min(n, q0 + tile);
    keep.push_back(put(dev, std::vector<float>(size_t((q1 - q0) * width), 0.0f)));
    record_vision_attend(rec, s, {&bq}, n, {&bc}, {&bs}, {&bkv}, q0, q1, {&keep.back()});
    rec.copy({&keep.back()}, {&bo, uint64_t(q0 * width) * 4}, uint64_t((q1 - q0) * width) * 4);
  }
  EXPECT_TRUE(rec.submit().ok()) << rec.status().message();
  return get(dev, bo, size_t(n * width));
}

TEST(VulkanVisionOps, AttentionMatchesTheReferenceInAnyPieces) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  QWEN35_VK_DEVICE_OR_SKIP(cut, (DeviceOptions{.max_groups = 1}));
  uint32_t seed = 50;
  struct Case {
    int64_t n, nh, hd;
  };
  for (const Case& c : {Case{1, 2, 64}, Case{3, 3, 72}, Case{37, 2, 80}, Case{65, 2, 72}, Case{130, 1, 8}}) {
    SCOPED_TRACE("n " + std::to_string(c.n) + " heads " + std::to_string(c.nh) + " head_dim " +
                 std::to_string(c.hd));
    // q and k of scale 1.5: a softmax neither flat nor one-hot.
    const auto qkv = randn(size_t(c.n * 3 * c.nh * c.hd), seed++, 1.5f);
    std::vector<float> cos, sin;
    rotary_tables(c.n, c.hd, 12, cos, sin);
    std::vector<float> r(size_t(c.n * c.nh * c.hd));
    ref.vision_attention({}, {c.nh, c.hd}, qkv.data(), c.n, cos.data(), sin.data(), r.data());
    // The float64 result and the CPU kernel's bound for each element (the device does the same
    // operations in its own order).
    std::vector<int64_t> all(static_cast<size_t>(c.n));
    for (int64_t t = 0; t < c.n; ++t) all[size_t(t)] = t;
    const auto [want, tol] = expected_rows(qkv.data(), cos.data(), sin.data(), c.n, c.nh, c.hd, all);
    const std::vector<float> whole = attention_on(*dev, qkv, cos, sin, c.n, c.nh, c.hd, c.n, c.n);
    for (size_t o = 0; o < whole.size(); ++o) {
      ASSERT_LE(std::fabs(r[o] - want[o]), 1.001 * kEps * std::fabs(want[o]) + 1e-40);
      ASSERT_LE(std::fabs(double(whole[o]) - r[o]), tol[o]) << "at " << o;
    }
    EXPECT_EQ(attention_on(*dev, qkv, cos, sin, c.n, c.nh, c.hd, 50, 7), whole) << "pieces";
    EXPECT_EQ(attention_on(*dev, qkv, cos, sin, c.n, c.nh, c.hd, 4, 1), whole) << "pieces of one row";
    EXPECT_EQ(attention_on(*cut, qkv, cos, sin, c.n, c.nh, c.hd, c.n, c.n), whole) << "dispatches cut";
  }
}

// Hand-computed: with all keys equal the weights are uniform and each output is the mean of the
// values.
TEST(VulkanVisionOps, AttentionUniformWeightsAverageTheValues) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  const int64_t n = 5, nh = 2, hd = 4, row = 3 * nh * hd;
  std::vector<float> qkv(size_t(n * row), 0.0f), cos(size_t(n * 2), 1.0f), sin(size_t(n * 2), 0.0f);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < nh * hd; ++i) {
      qkv[size_t(t * row + i)] = float(t + i);             // queries differ
      qkv[size_t(t * row + nh * hd + i)] = 0.5f;          // keys all equal
      qkv[size_t(t * row + 2 * nh * hd + i)] = float(t);  // values 0..4: mean 2
    }
  for (float v : attention_on(*dev, qkv, cos, sin, n, nh, hd, n, n)) EXPECT_NEAR(v, 2.0f, 1e-6f);
}

// Shapes the device cannot run are a clear error on the step, naming the limit.
TEST(VulkanVisionOps, ImpossibleShapesFailTheStep) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  Buffer b = put(*dev, std::vector<float>(64, 0.0f));
  for (int64_t hd : {5, 258}) {
    Recorder rec(*dev);
    ASSERT_TRUE(rec.begin().ok());
    record_vision_attend(rec, {2, hd}, {&b}, 1, {&b}, {&b}, {&b}, 0, 1, {&b});
    const core::Status st = rec.submit();
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("at most 256"), std::string::npos) << st.message();
  }
  Recorder rec(*dev);
  ASSERT_TRUE(rec.begin().ok());
  record_vision_attend(rec, {2, 8}, {&b}, 3, {&b}, {&b}, {&b}, 2, 4, {&b});
  const core::Status st = rec.submit();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("query rows [2, 4) of 3"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace qwen35::vulkan::vision_ops
