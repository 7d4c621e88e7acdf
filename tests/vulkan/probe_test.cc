// The bandwidth probe (vulkan/probe.h) on lavapipe: the shader's sum is the sum of every word the
// host wrote (checked here by its closed form, not by the probe's own loop), across buffers of a
// test-lowered binding limit, timed by the device's clock and by the host's; a lost device and an
// empty request are one line.
#include "vulkan/probe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "vk_test.h"

namespace qwen35::vulkan {
namespace {

// Σ_{i<n} probe_word(i) (mod 2^32) = 0x9E3779B1 · n(n−1)/2.
uint32_t probe_sum_closed_form(uint64_t words) {
  return 0x9E3779B1u * uint32_t(words * (words - 1) / 2);
}

TEST(VulkanProbe, ReadsEveryWordOfEveryBindingOnEitherClock) {
  DeviceOptions o;
  o.max_binding_bytes = 256 << 10;
  QWEN35_VK_DEVICE_OR_SKIP(dev, o);
  const uint64_t bytes = (1 << 20) + 40;  // four whole bindings and a 48-byte fifth
  for (const bool timestamps : {true, false}) {
    BandwidthOptions bo;
    bo.runs = 2;
    bo.timestamps = timestamps;
    auto r = measure_bandwidth(*dev, bytes, bo);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(r->bytes, (1u << 20) + 48);
    EXPECT_EQ(r->buffers, 5);
    EXPECT_EQ(r->sum, probe_sum_closed_form(r->bytes / 4));
    EXPECT_TRUE(std::isfinite(r->bytes_per_s)) << r->bytes_per_s;
    EXPECT_GT(r->bytes_per_s, 0);
    EXPECT_EQ(r->device_clock, timestamps && dev->info().timestamp_bits > 0);
  }
  auto bw = probe_bandwidth(*dev, 64 << 10);
  ASSERT_TRUE(bw.ok()) << bw.message();
  EXPECT_TRUE(std::isfinite(*bw) && *bw > 0) << *bw;
}

TEST(VulkanProbe, AnEmptyRequestAndALostDeviceAreOneLine) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  auto r = measure_bandwidth(*dev, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("at least one byte"), std::string::npos) << r.message();
  dev->simulate_loss();
  auto bw = probe_bandwidth(*dev, 64 << 10);
  ASSERT_FALSE(bw.ok());
  EXPECT_NE(bw.message().find("VK_ERROR_DEVICE_LOST"), std::string::npos) << bw.message();
  EXPECT_EQ(std::count(bw.message().begin(), bw.message().end(), '\n'), 0) << bw.message();
}

}  // namespace
}  // namespace qwen35::vulkan
