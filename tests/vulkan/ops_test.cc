// Every device op against the scalar reference (kernels/ref) on lavapipe, with the CPU op tests'
// tolerances, and batch invariance bit for bit: a row alone and among many, in one dispatch or
// cut into many, in one binding or split across several (a test-lowered binding limit makes
// small matrices take the path a device takes for those past maxStorageBufferRange).
#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "../kernels/test_matrices.h"
#include "kernels/matrix.h"
#include "vk_test.h"
#include "vulkan/matrix.h"
#include "vulkan/ops.h"
#include "vulkan/recorder.h"

namespace qwen35::vulkan {
namespace {

using kernels::expect_close;
using kernels::make_matrix;
using kernels::randn;
using kernels::TestMatrix;
using kernels::WeightType;

const kernels::Ops& ref = kernels::ref_ops();

struct TypeCase {
  WeightType type;
  int bits, group;
  core::DType sb;
};

// Every weight type the device reads: the float types, MLX affine at each width and group size
// (scales in bf16, f16 and f32), and the ggml block types with a device shader.
std::vector<TypeCase> device_types() {
  std::vector<TypeCase> t = {{WeightType::kF32, 0, 0, core::DType::kF32},
                             {WeightType::kF16, 0, 0, core::DType::kF32},
                             {WeightType::kBF16, 0, 0, core::DType::kF32}};
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int group : {32, 64, 128})
      t.push_back({WeightType::kAffine, bits, group, core::DType::kBF16});
  t.push_back({WeightType::kAffine, 4, 64, core::DType::kF16});
  t.push_back({WeightType::kAffine, 5, 32, core::DType::kF32});
  for (WeightType b : kernels::kBlockTypes)
    if (shader_type(b)) t.push_back({b, 0, 0, core::DType::kF32});
  return t;
}

// Device buffers holding host floats (or ints), and reading them back.
struct Host {
  Device& dev;
  Buffer put(const void* data, uint64_t bytes) {
    auto b = dev.buffer(bytes, MemoryKind::kDevice);
    EXPECT_TRUE(b.ok()) << b.message();
    if (b.ok() && bytes) {
      EXPECT_TRUE(dev.upload(*b, 0, data, bytes).ok());
    }
    return b.ok() ? std::move(*b) : Buffer();
  }
  Buffer put(const std::vector<float>& v) { return put(v.data(), v.size() * 4); }
  Buffer zeros(size_t floats) { return put(std::vector<float>(floats, 0.0f)); }
  std::vector<float> get(const Buffer& b, size_t floats) {
    std::vector<float> v(floats);
    EXPECT_TRUE(dev.download(b, 0, v.data(), floats * 4).ok());
    return v;
  }
};

// y = x · wᵀ on the device: one submission.
std::vector<float> device_matmul(Device& dev, const DeviceMatrix& w, const float* x, int64_t n) {
  Host h{dev};
  Buffer bx = h.put(x, uint64_t(n * w.cols) * 4), by = h.zeros(size_t(n * w.rows));
  Recorder rec(dev);
  EXPECT_TRUE(rec.begin().ok());
  record_matmul(rec, w, {&bx}, n, {&by});
  auto st = rec.submit();
  EXPECT_TRUE(st.ok()) << st.message();
  return h.get(by, size_t(n * w.rows));
}

// Σ|x·w| per output: the scale of the matmul tolerance (tests/kernels/ops_test.cc).
std::vector<float> magnitudes(const kernels::Matrix& m, const float* x, int64_t n) {
  std::vector<float> s(size_t(n * m.rows));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t o = 0; o < m.rows; ++o) {
      double a = 0;
      for (int64_t c = 0; c < m.cols; ++c)
        a += std::fabs(x[t * m.cols + c] * kernels::matrix_at(m, o, c));
      s[size_t(t * m.rows + o)] = float(a);
    }
  return s;
}

TEST(VulkanOps, MatmulEveryWeightTypeMatchesTheReferenceAndIsBatchInvariant) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  uint32_t seed = 1;
  int checked = 0;
  for (const TypeCase& tc : device_types()) {
    struct Shape {
      int64_t rows, cols;
    };
    for (Shape s : {Shape{5, 256}, Shape{9, 7}, Shape{37, 512}}) {
      if (tc.type == WeightType::kAffine && s.cols % tc.group != 0) continue;
      if (kernels::is_block_type(tc.type) && s.cols % kernels::block_format(tc.type).elements != 0)
        continue;
      TestMatrix w = make_matrix(tc.type, s.rows, s.cols, seed++, tc.bits, tc.group, tc.sb);
      auto dw = upload_matrix(*dev, w.m);
      ASSERT_TRUE(dw.ok()) << dw.message();
      const int64_t n = 11;  // a full group of 8 token rows and a partial one
      std::vector<float> x = randn(size_t(n * s.cols), seed++);
      std::vector<float> yr(size_t(n * s.rows));
      ref.matmul({}, x.data(), n, w.m, yr.data());
      const std::vector<float> y = device_matmul(*dev, *dw, x.data(), n);
      const std::vector<float> scale = magnitudes(w.m, x.data(), n);
      SCOPED_TRACE("type " + std::string(shader_type(tc.type)) + " bits " +
                   std::to_string(tc.bits) + " group " + std::to_string(tc.group) + " shape " +
                   std::to_string(s.rows) + "x" + std::to_string(s.cols));
      expect_close(y.data(), yr.data(), y.size(), 1e-5f, "device matmul", &scale);
      // Each row alone: the bits it has among the others.
      for (int64_t t = 0; t < n; t += 5) {
        const std::vector<float> one = device_matmul(*dev, *dw, x.data() + t * s.cols, 1);
        for (int64_t o = 0; o < s.rows; ++o)
          ASSERT_EQ(one[size_t(o)], y[size_t(t * s.rows + o)]) << "row " << t;
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 40);
}

// A matrix split across bindings (a 512-byte test limit: a part every few rows, each with its
// own scales and biases) and dispatches cut into 2 workgroups: the same bits as one binding and
// one dispatch, for the matmul and the embedding lookup.
TEST(VulkanOps, SplitAcrossBindingsAndDispatchesChangesNoBit) {
  QWEN35_VK_DEVICE_OR_SKIP(whole, {});
  QWEN35_VK_DEVICE_OR_SKIP(split, (DeviceOptions{.max_part_bytes = 512, .max_groups = 2}));
  uint32_t seed = 500;
  for (const TypeCase& tc : {TypeCase{WeightType::kQ4_0, 0, 0, core::DType::kF32},
                             TypeCase{WeightType::kAffine, 3, 32, core::DType::kBF16},
                             TypeCase{WeightType::kF16, 0, 0, core::DType::kF32},
                             TypeCase{WeightType::kQ6_K, 0, 0, core::DType::kF32}}) {
    const int64_t rows = 23, cols = tc.type == WeightType::kF16 ? 67 : 256, n = 9;
    TestMatrix w = make_matrix(tc.type, rows, cols, seed++, tc.bits, tc.group, tc.sb);
    auto a = upload_matrix(*whole, w.m), b = upload_matrix(*split, w.m);
    ASSERT_TRUE(a.ok() && b.ok());
    SCOPED_TRACE(shader_type(tc.type));
    EXPECT_EQ(a->parts.size(), 1u);
    EXPECT_GE(b->parts.size(), 3u);
    for (const MatrixPart& p : b->parts) EXPECT_LE(p.data.bytes(), 512u);
    std::vector<float> x = randn(size_t(n * cols), seed++);
    EXPECT_EQ(device_matmul(*whole, *a, x.data(), n), device_matmul(*split, *b, x.data(), n));

    std::vector<int32_t> tokens = {22, 0, 7, 7, 15, 3};
    std::vector<float> er(tokens.size() * size_t(cols));
    ref.embed({}, w.m, tokens.data(), int64_t(tokens.size()), er.data());
    for (Device* d : {whole.get(), split.get()}) {
      const DeviceMatrix& m = d == whole.get() ? *a : *b;
      Host h{*d};
      Buffer bt = h.put(tokens.data(), tokens.size() * 4), bo = h.zeros(er.size());
      Recorder rec(*d);
      ASSERT_TRUE(rec.begin().ok());
      record_embed(rec, m, {&bt}, int64_t(tokens.size()), {&bo});
      ASSERT_TRUE(rec.submit().ok()) << rec.status().message();
      EXPECT_EQ(h.get(bo, er.size()), er) << "embed: decode_row's bits";
    }
  }
}

TEST(VulkanOps, EmbedEveryWeightTypeGivesTheReferenceRows) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  uint32_t seed = 900;
  for (const TypeCase& tc : device_types()) {
    const int64_t rows = 11, cols = 256;
    if (tc.type == WeightType::kAffine && cols % tc.group != 0) continue;
    TestMatrix w = make_matrix(tc.type, rows, cols, seed++, tc.bits, tc.group, tc.sb);
    auto dw = upload_matrix(*dev, w.m);
    ASSERT_TRUE(dw.ok()) << dw.message();
    std::vector<int32_t> tokens = {0, 10, 4, 4, 9};
    std::vector<float> er(tokens.size() * size_t(cols));
    ref.embed({}, w.m, tokens.data(), int64_t(tokens.size()), er.data());
    Host h{*dev};
    Buffer bt = h.put(tokens.data(), tokens.size() * 4), bo = h.zeros(er.size());
    Recorder rec(*dev);
    ASSERT_TRUE(rec.begin().ok());
    record_embed(rec, *dw, {&bt}, int64_t(tokens.size()), {&bo});
    ASSERT_TRUE(rec.submit().ok()) << rec.status().message();
    expect_close(h.get(bo, er.size()).data(), er.data(), er.size(), 1e-6f, shader_type(tc.type));
  }
}

// rms_norm, the gated norm, SwiGLU and add_rows against the reference; the norms' rows alone and
// among many, and every op's dispatches cut into single workgroups, bit for bit.
TEST(VulkanOps, NormsSwigluAndAddRows) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  QWEN35_VK_DEVICE_OR_SKIP(cut, (DeviceOptions{.max_groups = 1}));
  for (int64_t dim : {1, 7, 64, 65, 1000}) {
    const int64_t n = 5;
    auto x = randn(size_t(n * dim), 1, 3.0f), w = randn(size_t(dim), 2),
         z = randn(size_t(n * dim), 3);
    auto s = randn(size_t(n), 4);
    x[0] = -100.0f;  // silu's e^(−x) overflows: −0, not NaN
    if (x.size() > 1) x[1] = 100.0f;
    std::vector<float> norm_r(x.size()), gated_r = x, swi_r(x.size()), add_r = z, adds_r = z;
    ref.rms_norm({}, x.data(), n, dim, w.data(), 1e-6f, norm_r.data());
    ref.gated_rms_norm({}, gated_r.data(), z.data(), n, dim, w.data(), 1e-6f);
    ref.swiglu({}, x.data(), z.data(), n, dim, dim, swi_r.data());
    ref.add_rows({}, x.data(), nullptr, n, dim, add_r.data());
    ref.add_rows({}, x.data(), s.data(), n, dim, adds_r.data());
    std::vector<std::vector<float>> runs;
    for (Device* d : {dev.get(), cut.get()}) {
      Host h{*d};
      Buffer bx = h.put(x), bw = h.put(w), bz = h.put(z), bs = h.put(s), bg = h.put(x),
             bn = h.zeros(x.size()), bsw = h.zeros(x.size()), ba = h.put(z), bas = h.put(z),
             b1 = h.zeros(size_t(dim)), bx3 = h.put(x.data() + 3 * dim, uint64_t(dim) * 4);
      Recorder rec(*d);
      ASSERT_TRUE(rec.begin().ok());
      record_rms_norm(rec, {&bx}, n, dim, {&bw}, 1e-6f, {&bn});
      record_gated_rms_norm(rec, {&bg}, {&bz}, n, dim, {&bw}, 1e-6f);
      record_swiglu(rec, {&bx}, {&bz}, n, dim, dim, {&bsw});
      record_add_rows(rec, {&bx}, nullptr, n, dim, {&ba});
      const Binding sb{&bs};
      record_add_rows(rec, {&bx}, &sb, n, dim, {&bas});
      record_rms_norm(rec, {&bx3}, 1, dim, {&bw}, 1e-6f, {&b1});  // row 3 alone
      ASSERT_TRUE(rec.submit().ok()) << rec.status().message();
      EXPECT_EQ(rec.submissions(), 1u);
      const auto norm = h.get(bn, x.size()), gated = h.get(bg, x.size()),
                 swi = h.get(bsw, x.size());
      const auto add = h.get(ba, x.size()), adds = h.get(bas, x.size()),
                 one = h.get(b1, size_t(dim));
      SCOPED_TRACE("dim " + std::to_string(dim));
      expect_close(norm.data(), norm_r.data(), x.size(), 1e-5f, "rms_norm");
      expect_close(gated.data(), gated_r.data(), x.size(), 1e-5f, "gated_rms_norm");
      expect_close(swi.data(), swi_r.data(), x.size(), 1e-6f, "swiglu");
      EXPECT_EQ(add, add_r) << "add_rows: the reference's float operations";
      EXPECT_EQ(adds, adds_r) << "add_rows with scales";
      for (int64_t i = 0; i < dim; ++i)
        ASSERT_EQ(one[size_t(i)], norm[size_t(3 * dim + i)]) << "row 3 alone";
      std::vector<float> all = norm;
      for (const auto* v : {&gated, &swi, &add, &adds}) all.insert(all.end(), v->begin(), v->end());
      runs.push_back(all);
    }
    EXPECT_EQ(runs[0], runs[1]) << "one workgroup per dispatch changed a bit";
  }
}

// The MoE experts' matmul over routed slots, one dispatch per expert: every slot gets the bits
// its row has in a plain matmul with its expert's matrix (so the reference's values too).
TEST(VulkanOps, IndexedExpertMatmulGivesEachSlotItsExpertsBits) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  uint32_t seed = 700;
  for (const TypeCase& tc : {TypeCase{WeightType::kQ4_K, 0, 0, core::DType::kF32},
                             TypeCase{WeightType::kAffine, 4, 64, core::DType::kBF16},
                             TypeCase{WeightType::kBF16, 0, 0, core::DType::kF32}}) {
    const int64_t experts = 3, rows = 11, cols = 256, n = 5, topk = 2;
    std::vector<TestMatrix> ws;
    std::vector<DeviceMatrix> dws;
    for (int64_t e = 0; e < experts; ++e) {
      ws.push_back(make_matrix(tc.type, rows, cols, seed++, tc.bits, tc.group, tc.sb));
      auto d = upload_matrix(*dev, ws.back().m);
      ASSERT_TRUE(d.ok()) << d.message();
      dws.push_back(std::move(*d));
    }
    const std::vector<int32_t> slot_expert = {2, 0, 1, 2, 0, 1, 1, 0, 2, 1};  // [n, topk]
    std::vector<float> x = randn(size_t(n * cols), seed++);
    Host h{*dev};
    Buffer bx = h.put(x), bi = h.put(slot_expert.data(), slot_expert.size() * 4),
           by = h.zeros(size_t(n * topk * rows));
    Recorder rec(*dev);
    ASSERT_TRUE(rec.begin().ok());
    for (int32_t e = 0; e < int32_t(experts); ++e)
      record_matmul_indexed(rec, dws[size_t(e)], {&bx}, n * topk, topk, {&bi}, e, {&by});
    ASSERT_TRUE(rec.submit().ok()) << rec.status().message();
    const std::vector<float> y = h.get(by, size_t(n * topk * rows));
    SCOPED_TRACE(shader_type(tc.type));
    for (int64_t s = 0; s < n * topk; ++s) {
      const int64_t t = s / topk, e = slot_expert[size_t(s)];
      const std::vector<float> one = device_matmul(*dev, dws[size_t(e)], x.data() + t * cols, 1);
      std::vector<float> want(static_cast<size_t>(rows), 0.0f);
      ref.matmul({}, x.data() + t * cols, 1, ws[size_t(e)].m, want.data());
      const std::vector<float> scale = magnitudes(ws[size_t(e)].m, x.data() + t * cols, 1);
      expect_close(y.data() + s * rows, want.data(), size_t(rows), 1e-5f, "expert matmul", &scale);
      for (int64_t o = 0; o < rows; ++o)
        ASSERT_EQ(y[size_t(s * rows + o)], one[size_t(o)]) << "slot " << s;
    }
  }
}

// Bad shapes and weights: one line, nothing submitted.
TEST(VulkanOps, UnsupportedWeightsAreRefusedInOneLine) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, (DeviceOptions{.max_part_bytes = 256}));
  TestMatrix q8 = make_matrix(WeightType::kQ8_0, 32, 64, 3);
  kernels::Matrix tiled = q8.m;
  tiled.codes_tiled = true;  // the CPU's int8 forms stay on the CPU
  auto a = upload_matrix(*dev, tiled);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.message().find("int8 forms"), std::string::npos) << a.message();
  TestMatrix wide =
      make_matrix(WeightType::kF32, 2, 100, 4);  // a 400-byte row past a 256-byte binding
  auto b = upload_matrix(*dev, wide.m);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.message().find("exceeds the device's binding limit of 256"), std::string::npos)
      << b.message();
}

}  // namespace
}  // namespace qwen35::vulkan
