// The device's causal conv, RoPE and recurrent delta-rule step against the scalar reference on
// lavapipe, with the CPU op tests' tolerances; and what the engine relies on, bit for bit: a
// conv carried over two calls is one call, RoPE is apply_rope's bits, a delta step out of place
// (state_in) is the in-place step, and cutting the dispatches changes nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "../kernels/test_matrices.h"
#include "kernels/math.h"
#include "kernels/ops.h"
#include "kernels/rope.h"
#include "vk_test.h"
#include "vulkan/ops.h"
#include "vulkan/recorder.h"

// A namespace of its own: the test binary compiles as one unit (tests/CMakeLists.txt).
namespace qwen35::vulkan::layer_ops {
namespace {

using kernels::expect_close;
using kernels::randn;

const kernels::Ops& ref = kernels::ref_ops();

std::vector<float> get(Device& dev, const Buffer& b, size_t floats) {
  std::vector<float> v(floats);
  EXPECT_TRUE(dev.download(b, 0, v.data(), floats * 4).ok());
  return v;
}

TEST(VulkanLayerOps, CausalConvMatchesTheReferenceAndCarriesItsState) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  QWEN35_VK_DEVICE_OR_SKIP(cut, (DeviceOptions{.max_groups = 1}));
  for (int64_t kernel : {1, 2, 4, 5}) {
    for (int64_t ch : {1, 63, 130}) {
      const int64_t n = 9;
      auto x = randn(size_t(n * ch), 1), w = randn(size_t(ch * kernel), 2);
      auto s0 = randn(size_t((kernel - 1) * ch), 3);
      std::vector<float> sr = s0, outr(size_t(n * ch));
      ref.conv1d_silu({}, x.data(), n, ch, w.data(), kernel, sr.data(), outr.data());
      SCOPED_TRACE("kernel " + std::to_string(kernel) + " channels " + std::to_string(ch));
      std::vector<std::vector<float>> outs, states;
      for (Device* d : {dev.get(), cut.get()})
        for (int split : {0, 4}) {  // 9 rows at once, or 4 then 5 with the carried state
          Buffer bx = put(*d, x), bw = put(*d, w),
                 bs = put(*d, s0.empty() ? std::vector<float>{0} : s0);
          Buffer bo = put(*d, std::vector<float>(size_t(n * ch), 0.0f));
          Recorder rec(*d);
          ASSERT_TRUE(rec.begin().ok());
          if (split == 0) {
            record_conv1d_silu(rec, {&bx}, n, ch, {&bw}, kernel, {&bs}, {&bo});
          } else {
            // Sub-ranges start at rows whose offsets the device aligns: copied into buffers of
            // their own.
            std::vector<float> x2(x.begin() + split * ch, x.end());
            Buffer bx2 = put(*d, x2), bo2 = put(*d, std::vector<float>(x2.size(), 0.0f));
            record_conv1d_silu(rec, {&bx}, split, ch, {&bw}, kernel, {&bs}, {&bo});
            record_conv1d_silu(rec, {&bx2}, n - split, ch, {&bw}, kernel, {&bs}, {&bo2});
            rec.copy({&bo2}, {&bo, uint64_t(split * ch) * 4}, x2.size() * 4);
            ASSERT_TRUE(rec.submit().ok()) << rec.status().message();
            outs.push_back(get(*d, bo, size_t(n * ch)));
            states.push_back(get(*d, bs, s0.size()));
            continue;
          }
          ASSERT_TRUE(rec.submit().ok()) << rec.status().message();
          outs.push_back(get(*d, bo, size_t(n * ch)));
          states.push_back(get(*d, bs, s0.size()));
        }
      expect_close(outs[0].data(), outr.data(), outr.size(), 1e-5f, "conv");
      expect_close(states[0].data(), sr.data(), sr.size(), 0.0f, "conv state");
      for (size_t i = 1; i < outs.size(); ++i) {
        EXPECT_EQ(outs[i], outs[0]) << "run " << i;
        EXPECT_EQ(states[i], states[0]) << "run " << i;
      }
    }
  }
  Recorder rec(*dev);
  ASSERT_TRUE(rec.begin().ok());
  Buffer b = put(*dev, std::vector<float>(64, 0.0f));
  record_conv1d_silu(rec, {&b}, 1, 4, {&b}, 17, {&b}, {&b});
  auto st = rec.submit();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("17 taps"), std::string::npos) << st.message();
}

// Text (one position per row), multimodal positions with a pair-to-axis map, and query rows that
// carry a gate (rows of 2·head_dim): apply_rope's bits.
TEST(VulkanLayerOps, RopeGivesApplyRopesBits) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  const int64_t heads = 3, head_dim = 16, rotary = 8, n = 5, rows = 300;
  const double theta = 1e7;
  const std::vector<float> table = rope_table(theta, rotary, rows);
  const std::vector<uint32_t> axis_u = {0, 1, 2, 1};
  const std::vector<uint8_t> axis_b = {0, 1, 2, 1};
  for (bool mrope : {false, true})
    for (int64_t stride : {head_dim, 2 * head_dim}) {
      auto x = randn(size_t(n * heads * stride), 7);
      std::vector<int32_t> pos(size_t(n * 3));
      for (int64_t t = 0; t < n; ++t)
        for (int a = 0; a < 3; ++a)
          pos[size_t(t * 3 + a)] = int32_t(mrope ? 17 * t + 50 * a + 3 : 200 + t);
      std::vector<float> want = x;
      for (int64_t t = 0; t < n; ++t) {
        const int64_t p3[3] = {pos[size_t(t * 3)], pos[size_t(t * 3 + 1)], pos[size_t(t * 3 + 2)]};
        for (int64_t h = 0; h < heads; ++h)
          kernels::apply_rope(want.data() + (t * heads + h) * stride, rotary, theta, p3,
                              mrope ? axis_b.data() : nullptr);
      }
      Buffer bx = put(*dev, x), bp = put(*dev, pos), ba = put(*dev, axis_u), bt = put(*dev, table);
      Recorder rec(*dev);
      ASSERT_TRUE(rec.begin().ok());
      const Binding axis{&ba};
      record_rope(rec, {&bx}, n, heads, stride, rotary, {&bp}, mrope ? &axis : nullptr, {&bt},
                  rows);
      ASSERT_TRUE(rec.submit().ok()) << rec.status().message();
      EXPECT_EQ(get(*dev, bx, x.size()), want) << "mrope " << mrope << " stride " << stride;
    }
}

// The router's picks are the reference's (ties to the lower index) and its weights within the
// CPU's 1e-6; the combine is the reference's float operations, bit for bit.
TEST(VulkanLayerOps, RouterTopKAndMoeCombine) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  for (int64_t ne : {9, 64, 257}) {
    const int64_t n = 6, k = ne < 10 ? 3 : 8;
    auto l = randn(size_t(n * ne), 4);
    l[0] = l[1] = 5.0f;  // a tie: the lower index first
    for (bool renorm : {true, false}) {
      std::vector<int32_t> ir(size_t(n * k));
      std::vector<float> wr(ir.size());
      ref.router_topk({}, l.data(), n, ne, k, renorm, ir.data(), wr.data());
      Buffer bl = put(*dev, l), bi = put(*dev, std::vector<int32_t>(ir.size(), -1)),
             bw = put(*dev, std::vector<float>(wr.size()));
      Recorder rec(*dev);
      ASSERT_TRUE(rec.begin().ok());
      record_router_topk(rec, {&bl}, n, ne, k, renorm, {&bi}, {&bw});
      std::vector<int32_t> idx(ir.size());
      rec.stage_out({&bi}, idx.size() * 4, idx.data());
      ASSERT_TRUE(rec.submit().ok()) << rec.status().message();
      SCOPED_TRACE("experts " + std::to_string(ne) + " renorm " + std::to_string(renorm));
      EXPECT_EQ(idx, ir);
      EXPECT_EQ(idx[0], 0);
      EXPECT_EQ(idx[1], 1);
      expect_close(get(*dev, bw, wr.size()).data(), wr.data(), wr.size(), 1e-6f, "router weights");
    }
  }
  for (int64_t dim : {1, 17, 1000}) {
    const int64_t n = 5, k = 3;
    auto eo = randn(size_t(n * k * dim), 14), w = randn(size_t(n * k), 15);
    std::vector<float> want(size_t(n * dim), 7.0f);
    ref.moe_combine({}, eo.data(), w.data(), n, k, dim, want.data());
    Buffer be = put(*dev, eo), bw = put(*dev, w),
           by = put(*dev, std::vector<float>(want.size(), -7.0f));
    Recorder rec(*dev);
    ASSERT_TRUE(rec.begin().ok());
    record_moe_combine(rec, {&be}, {&bw}, n, k, dim, {&by});
    ASSERT_TRUE(rec.submit().ok()) << rec.status().message();
    EXPECT_EQ(get(*dev, by, want.size()), want) << "dim " << dim;
  }
}

// The shared expert's gate: the reference's sigmoid (kernels/math.h) within 1e-6 of its value.
TEST(VulkanLayerOps, Sigmoid) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  auto x = randn(1000, 21, 4.0f);
  x[0] = 90.0f;
  x[1] = -90.0f;
  std::vector<float> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = kernels::sigmoid(x[i]);
  Buffer b = put(*dev, x);
  Recorder rec(*dev);
  ASSERT_TRUE(rec.begin().ok());
  record_sigmoid(rec, {&b}, int64_t(x.size()));
  ASSERT_TRUE(rec.submit().ok()) << rec.status().message();
  const std::vector<float> got = get(*dev, b, x.size());
  std::vector<float> scale(x.size());
  for (size_t i = 0; i < x.size(); ++i) scale[i] = std::fabs(want[i]);
  expect_close(got.data(), want.data(), got.size(), 1e-6f, "sigmoid", &scale);
}

struct DeltaCase {
  int64_t nk, nv, dk, dv, n;
  bool tiled;
};

// The recurrent step against the reference (2e-5, as the CPU), over several rows; out of place
// (state_in) gives the in-place bits and leaves state_in alone; one workgroup per dispatch gives
// the same bits.
TEST(VulkanLayerOps, DeltaRuleStepMatchesTheReference) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  QWEN35_VK_DEVICE_OR_SKIP(cut, (DeviceOptions{.max_groups = 1}));
  uint32_t seed = 40;
  for (const DeltaCase& c : {DeltaCase{2, 4, 32, 48, 3, false}, DeltaCase{1, 2, 128, 128, 2, false},
                             DeltaCase{2, 4, 16, 80, 1, true}}) {
    const int64_t ch = 2 * c.nk * c.dk + c.nv * c.dv;
    auto qkv = randn(size_t(c.n * ch), seed++), a = randn(size_t(c.n * c.nv), seed++);
    auto b = randn(size_t(c.n * c.nv), seed++), dt = randn(size_t(c.nv), seed++);
    auto s0 = randn(size_t(c.nv * c.dk * c.dv), seed++, 0.1f);
    std::vector<float> decay = randn(size_t(c.nv), seed++);
    for (float& d : decay) d = -std::exp(d * 0.5f);  // A = -exp(A_log)
    kernels::Ops::DeltaParams p{c.nk, c.nv, c.dk, c.dv, decay.data(), dt.data(), nullptr, c.tiled};
    std::vector<float> sr = s0, outr(size_t(c.n * c.nv * c.dv));
    ref.gated_delta({}, p, qkv.data(), a.data(), b.data(), c.n, false, sr.data(), outr.data());
    SCOPED_TRACE("dk " + std::to_string(c.dk) + " dv " + std::to_string(c.dv) + " tiled " +
                 std::to_string(c.tiled));
    const DeltaShape shape{c.nk, c.nv, c.dk, c.dv, c.tiled};
    std::vector<std::vector<float>> outs, states;
    for (Device* d : {dev.get(), cut.get()})
      for (bool out_of_place : {false, true}) {
        Buffer bq = put(*d, qkv), ba = put(*d, a), bb = put(*d, b), bd = put(*d, decay),
               bt = put(*d, dt);
        Buffer bs = put(*d, out_of_place ? std::vector<float>(s0.size(), 9.0f) : s0),
               bin = put(*d, s0);
        Buffer bo = put(*d, std::vector<float>(outr.size(), 0.0f));
        Recorder rec(*d);
        ASSERT_TRUE(rec.begin().ok());
        const Binding in{&bin};
        record_delta_step(rec, shape, {&bq}, {&ba}, {&bb}, c.n, {&bd}, {&bt},
                          out_of_place ? &in : nullptr, {&bs}, {&bo});
        ASSERT_TRUE(rec.submit().ok()) << rec.status().message();
        outs.push_back(get(*d, bo, outr.size()));
        states.push_back(get(*d, bs, s0.size()));
        EXPECT_EQ(get(*d, bin, s0.size()), s0) << "state_in is left as it was";
      }
    expect_close(outs[0].data(), outr.data(), outr.size(), 2e-5f, "delta out");
    expect_close(states[0].data(), sr.data(), sr.size(), 2e-5f, "delta state");
    for (size_t i = 1; i < outs.size(); ++i) {
      EXPECT_EQ(outs[i], outs[0]) << "run " << i;
      EXPECT_EQ(states[i], states[0]) << "run " << i;
    }
  }
}

// The chunked (UT) form over pieces of up to 64 rows: within the CPU's 2e-5 of the reference;
// the same bits with one workgroup per dispatch; pieces in sequence carry the state.
TEST(VulkanLayerOps, DeltaRuleChunkMatchesTheReference) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  QWEN35_VK_DEVICE_OR_SKIP(cut, (DeviceOptions{.max_groups = 1}));
  uint32_t seed = 80;
  for (const DeltaCase& c :
       {DeltaCase{1, 2, 128, 128, 64, false}, DeltaCase{1, 3, 16, 24, 7, false},
        DeltaCase{3, 3, 8, 5, 2, true}, DeltaCase{2, 4, 32, 80, 64, true}}) {
    const int64_t ch = 2 * c.nk * c.dk + c.nv * c.dv;
    auto qkv = randn(size_t(c.n * ch), seed++), a = randn(size_t(c.n * c.nv), seed++);
    auto b = randn(size_t(c.n * c.nv), seed++), dt = randn(size_t(c.nv), seed++, 0.3f);
    auto s0 = randn(size_t(c.nv * c.dk * c.dv), seed++, 0.1f);
    std::vector<float> decay = randn(size_t(c.nv), seed++, 0.5f);
    for (float& d : decay) d = -std::exp(d);
    kernels::Ops::DeltaParams p{c.nk, c.nv, c.dk, c.dv, decay.data(), dt.data(), nullptr, c.tiled};
    std::vector<float> sr = s0, outr(size_t(c.n * c.nv * c.dv));
    ref.gated_delta({}, p, qkv.data(), a.data(), b.data(), c.n, false, sr.data(), outr.data());
    SCOPED_TRACE("n " + std::to_string(c.n) + " dk " + std::to_string(c.dk) + " dv " +
                 std::to_string(c.dv));
    const DeltaShape shape{c.nk, c.nv, c.dk, c.dv, c.tiled};
    std::vector<std::vector<float>> outs, states;
    // The real geometry (d_k = d_v = 128, a full piece) on one device: lavapipe takes a second
    // there.
    const bool big = c.dk == 128;
    for (Device* d : {dev.get(), cut.get()}) {
      if (big && d == cut.get()) break;
      Buffer bq = put(*d, qkv), ba = put(*d, a), bb = put(*d, b), bd = put(*d, decay),
             bt = put(*d, dt);
      Buffer bs = put(*d, s0), bo = put(*d, std::vector<float>(outr.size(), 0.0f));
      Recorder rec(*d);
      ASSERT_TRUE(rec.begin().ok());
      record_delta_chunk(rec, shape, {&bq}, {&ba}, {&bb}, c.n, {&bd}, {&bt}, {&bs}, {&bo});
      ASSERT_TRUE(rec.submit().ok()) << rec.status().message();
      outs.push_back(get(*d, bo, outr.size()));
      states.push_back(get(*d, bs, s0.size()));
    }
    expect_close(outs[0].data(), outr.data(), outr.size(), 2e-5f, "delta chunk out");
    expect_close(states[0].data(), sr.data(), sr.size(), 2e-5f, "delta chunk state");
    if (outs.size() > 1) {
      EXPECT_EQ(outs[1], outs[0]);
      EXPECT_EQ(states[1], states[0]);
    }
  }
  Recorder rec(*dev);
  ASSERT_TRUE(rec.begin().ok());
  Buffer x = put(*dev, std::vector<float>(16, 0.0f));
  record_delta_chunk(rec, {1, 1, 4, 4}, {&x}, {&x}, {&x}, 65, {&x}, {&x}, {&x}, {&x});
  auto st = rec.submit();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("a chunk of 65 rows"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace qwen35::vulkan::layer_ops
