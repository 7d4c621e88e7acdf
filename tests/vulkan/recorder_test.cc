// The recorder's hazard tracking (vulkan/recorder.h): a barrier before a command exactly where it
// reads what an earlier command of its segment wrote, or writes what one read or wrote; none
// between commands that touch nothing in common. Lavapipe runs commands in order whatever the
// barriers, so the counts are what catches a missing one (a GPU would overlap the commands); the
// results are checked against the host's float sums all the same.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "vk_test.h"
#include "vulkan/ops.h"
#include "vulkan/recorder.h"
#include "vulkan/shaders.h"

namespace qwen35::vulkan {
namespace {

constexpr int64_t kDim = 96;  // floats a row (two workgroups of add_rows)

std::vector<float> ramp(float a, float b) {
  std::vector<float> v(kDim);
  for (int64_t i = 0; i < kDim; ++i) v[size_t(i)] = a + b * float(i);
  return v;
}

std::vector<float> plus(std::vector<float> y, const std::vector<float>& x) {
  for (size_t i = 0; i < y.size(); ++i) y[i] += x[i];
  return y;
}

TEST(VulkanRecorder, ReflectionFindsTheBindingsAShaderOnlyReads) {
  // matmul: x (0) and the weights (2) read, y (1) written; rms_norm: out (2) written only;
  // add_rows: y (2) read and written; rope turns x (0) in place.
  EXPECT_EQ(spirv_readonly_bindings(shader_spirv("matmul_bf16")), 0b101u);
  EXPECT_EQ(spirv_readonly_bindings(shader_spirv("matmul_affine")), 0b11101u);
  EXPECT_EQ(spirv_readonly_bindings(shader_spirv("rms_norm")), 0b1011u);
  EXPECT_EQ(spirv_readonly_bindings(shader_spirv("add_rows")), 0b011u);
  EXPECT_EQ(spirv_readonly_bindings(shader_spirv("rope")), 0b1110u);
  EXPECT_EQ(spirv_readonly_bindings(shader_spirv("delta_chunk")), 0b0011111u);
  EXPECT_EQ(spirv_readonly_bindings("not spir-v"), 0u);
}

// Commands that share only what they read: one segment, no barrier, each its own result.
TEST(VulkanRecorder, IndependentCommandsShareASegment) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  const uint64_t row = uint64_t(kDim) * 4;
  // Rows of one buffer at binding-aligned offsets: disjoint ranges of one buffer are independent.
  const uint64_t align = std::max<uint64_t>(dev->info().storage_offset_alignment, 4);
  const uint64_t stride = (row + align - 1) / align * align;
  const std::vector<float> x = ramp(-3.0f, 0.37f);
  std::vector<std::vector<float>> y0 = {ramp(1.0f, 0.11f), ramp(7.5f, -0.23f), ramp(0.25f, 1.7f)};
  auto bx = dev->buffer(row, MemoryKind::kDevice);
  auto by = dev->buffer(stride * 3, MemoryKind::kDevice);
  auto bz = dev->buffer(row, MemoryKind::kDevice);
  ASSERT_TRUE(bx.ok() && by.ok() && bz.ok());
  ASSERT_TRUE(dev->upload(*bx, 0, x.data(), row).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(dev->upload(*by, stride * i, y0[i].data(), row).ok());

  Recorder rec(*dev);
  ASSERT_TRUE(rec.begin().ok());
  for (int i = 0; i < 3; ++i)
    record_add_rows(rec, {&*bx, 0, row}, nullptr, 1, kDim, {&*by, stride * i, row});
  rec.copy({&*bx, 0, row}, {&*bz, 0, row}, row);  // reads x too, writes elsewhere
  EXPECT_EQ(rec.commands(), 4u);
  EXPECT_EQ(rec.barriers(), 0u);
  std::vector<std::vector<float>> got(3, std::vector<float>(kDim));
  std::vector<float> z(kDim);
  for (int i = 0; i < 3; ++i) rec.stage_out({&*by, stride * i, row}, row, got[i].data());
  rec.stage_out({&*bz, 0, row}, row, z.data());
  EXPECT_EQ(rec.barriers(), 1u) << "the outputs read what the adds wrote: one barrier for all";
  ASSERT_TRUE(rec.submit().ok()) << rec.status().message();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(got[i], plus(y0[i], x)) << "row " << i;
  EXPECT_EQ(z, x);
}

// A chain in which each command reads what the one before wrote, and the other hazards (write
// after read, write after write, overlapping ranges): each gets its barrier.
TEST(VulkanRecorder, DependentCommandsGetTheirBarrier) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  const uint64_t row = uint64_t(kDim) * 4;
  const std::vector<float> a = ramp(0.5f, 0.01f), b = ramp(-2.0f, 0.3f), c = ramp(4.0f, -0.07f),
                           d = ramp(1.25f, 0.5f);
  Buffer buf[4];
  const std::vector<float>* init[4] = {&a, &b, &c, &d};
  for (int i = 0; i < 4; ++i) {
    auto r = dev->buffer(row, MemoryKind::kDevice);
    ASSERT_TRUE(r.ok());
    buf[i] = std::move(*r);
  }
  Recorder rec(*dev);
  ASSERT_TRUE(rec.begin().ok());
  for (int i = 0; i < 4; ++i) rec.stage_in(init[i]->data(), row, {&buf[i]});
  EXPECT_EQ(rec.barriers(), 0u) << "four stagings into four buffers are independent";
  // b += a; c += b; d += c: read after write, three times.
  for (int i = 0; i < 3; ++i) record_add_rows(rec, {&buf[i]}, nullptr, 1, kDim, {&buf[i + 1]});
  EXPECT_EQ(rec.barriers(), 3u);
  std::vector<float> got_d(kDim), got_a(kDim), got_b(kDim);
  rec.stage_out({&buf[3]}, row, got_d.data());
  EXPECT_EQ(rec.barriers(), 4u) << "reading d after the add that wrote it";
  // d over a: since the last barrier d was only read (by the staging of its output) and a not
  // touched (its read by the first add lies behind barriers), so the copy needs none.
  rec.copy({&buf[3]}, {&buf[0]}, row);
  EXPECT_EQ(rec.barriers(), 4u);
  rec.stage_out({&buf[0]}, row, got_a.data());
  EXPECT_EQ(rec.barriers(), 5u) << "reading a after the copy that wrote it";
  // Write after write on overlapping, not identical, ranges of b.
  rec.zero({&buf[1], 0, 64}, 64);
  EXPECT_EQ(rec.barriers(), 5u) << "b was last touched before two barriers";
  rec.zero({&buf[1], 32, 64}, 64);
  EXPECT_EQ(rec.barriers(), 6u);
  rec.zero({&buf[1], 96, 32}, 32);
  EXPECT_EQ(rec.barriers(), 6u) << "bytes 96..128 touch neither fill";
  rec.stage_out({&buf[1]}, row, got_b.data());
  EXPECT_EQ(rec.barriers(), 7u);
  EXPECT_EQ(rec.commands(), 4u + 3u + 1u + 1u + 1u + 3u + 1u);
  ASSERT_TRUE(rec.submit().ok()) << rec.status().message();
  const std::vector<float> want_d = plus(d, plus(c, plus(b, a)));
  EXPECT_EQ(got_d, want_d);
  EXPECT_EQ(got_a, want_d);
  std::vector<float> want_b = plus(b, a);
  for (int i = 0; i < 32; ++i) want_b[size_t(i)] = 0.0f;  // bytes 0..128 zeroed
  EXPECT_EQ(got_b, want_b);
}

// An op that reads and writes one binding (add_rows' y) after a command that only read it: the
// write waits for the read.
TEST(VulkanRecorder, AWriteWaitsForAnEarlierRead) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  const uint64_t row = uint64_t(kDim) * 4;
  const std::vector<float> x = ramp(1.0f, 0.5f), y = ramp(-1.0f, 0.25f);
  auto bx = dev->buffer(row, MemoryKind::kDevice);
  auto by = dev->buffer(row, MemoryKind::kDevice);
  auto bc = dev->buffer(row, MemoryKind::kDevice);
  ASSERT_TRUE(bx.ok() && by.ok() && bc.ok());
  ASSERT_TRUE(dev->upload(*bx, 0, x.data(), row).ok());
  ASSERT_TRUE(dev->upload(*by, 0, y.data(), row).ok());
  Recorder rec(*dev);
  ASSERT_TRUE(rec.begin().ok());
  rec.copy({&*by}, {&*bc}, row);                              // reads y
  record_add_rows(rec, {&*bx}, nullptr, 1, kDim, {&*by});     // then writes it
  EXPECT_EQ(rec.barriers(), 1u);
  std::vector<float> got_c(kDim), got_y(kDim);
  rec.stage_out({&*bc}, row, got_c.data());
  rec.stage_out({&*by}, row, got_y.data());
  EXPECT_EQ(rec.barriers(), 2u) << "c's copy lies behind the barrier; y's read needs one";
  ASSERT_TRUE(rec.submit().ok()) << rec.status().message();
  EXPECT_EQ(got_c, y) << "the copy saw y before the add";
  EXPECT_EQ(got_y, plus(y, x));
}

}  // namespace
}  // namespace qwen35::vulkan
