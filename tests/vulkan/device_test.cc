// The Vulkan foundation on lavapipe: device enumeration, buffers and staging, one submission for
// many dispatches, the errors (a binding past the limit, an unknown shader or device index, a
// lost device, memory that cannot be had), and the CLI's `devices` and --device.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "test_util.h"
#include "formats/npy.h"
#include "vk_test.h"
#include "vulkan/ops.h"
#include "vulkan/recorder.h"
#include "vulkan/shaders.h"

namespace qwen35::vulkan {
namespace {

TEST(VulkanDevice, ListsTheTestDeviceWithItsFeatures) {
  std::string why;
  auto inst = test_instance(&why);
  if (!inst) GTEST_SKIP() << "no Vulkan device: " << why;
  auto devs = inst->devices();
  ASSERT_TRUE(devs.ok()) << devs.message();
  ASSERT_FALSE(devs->empty());
  const DeviceInfo& d = devs->front();
  std::printf("device 0: %s, %s, subgroup %u, binding limit %llu\n", d.name.c_str(),
              d.driver.c_str(), d.subgroup_size,
              static_cast<unsigned long long>(d.max_storage_buffer_range));
  EXPECT_TRUE(d.unusable.empty()) << d.unusable;
  EXPECT_GT(d.subgroup_size, 0u);
  EXPECT_FALSE(d.heaps.empty());
  EXPECT_GE(d.compute_queue_family, 0);
  if (test_icd().find("lvp_icd") != std::string::npos) {
    // lavapipe, as issue 48 records it: 128 MiB bindings, 8/16-bit storage, integer dot
    // products, no cooperative matrices.
    EXPECT_NE(d.name.find("llvmpipe"), std::string::npos) << d.name;
    EXPECT_EQ(d.max_storage_buffer_range, 128ull << 20);
    EXPECT_TRUE(d.storage_8bit && d.storage_16bit && d.integer_dot_product);
    EXPECT_FALSE(d.cooperative_matrix);
  }
  auto bad = Device::open(inst, int(devs->size()));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("no Vulkan device " + std::to_string(devs->size())),
            std::string::npos)
      << bad.message();
}

TEST(VulkanDevice, UploadAndDownloadRoundTripThroughStaging) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  // Odd sizes, and one larger than a staging chunk (4 MiB), at an offset.
  for (uint64_t bytes : {1ull, 7ull, 4096ull, (5ull << 20) + 3}) {
    std::vector<uint8_t> src(bytes), back(bytes, 0);
    for (uint64_t i = 0; i < bytes; ++i) src[i] = uint8_t(i * 131 + 7);
    auto buf = dev->buffer(bytes + 16, MemoryKind::kDevice);
    ASSERT_TRUE(buf.ok()) << buf.message();
    ASSERT_TRUE(dev->upload(*buf, 8, src.data(), bytes).ok());
    ASSERT_TRUE(dev->download(*buf, 8, back.data(), bytes).ok());
    EXPECT_EQ(src, back) << bytes << " bytes";
  }
  auto small = dev->buffer(16, MemoryKind::kDevice);
  ASSERT_TRUE(small.ok());
  uint8_t b[32] = {};
  auto st = dev->upload(*small, 8, b, 32);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("past the end"), std::string::npos) << st.message();
}

// A hundred dispatches, staged input and output, one vkQueueSubmit: y = x added 100 times, the
// same bits as the host's float sums in the same order.
TEST(VulkanDevice, ManyDispatchesInOneSubmission) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  const int64_t n = 3, dim = 101;
  std::vector<float> x(size_t(n * dim)), y(x.size(), 0.0f), want(x.size(), 0.0f), got(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) * 0.37f - 11.0f;
  auto bx = dev->buffer(x.size() * 4, MemoryKind::kDevice);
  auto by = dev->buffer(x.size() * 4, MemoryKind::kDevice);
  ASSERT_TRUE(bx.ok() && by.ok());
  Recorder rec(*dev);
  ASSERT_TRUE(rec.begin().ok());
  rec.stage_in(x.data(), x.size() * 4, {&*bx});
  rec.stage_in(y.data(), y.size() * 4, {&*by});
  for (int i = 0; i < 100; ++i) record_add_rows(rec, {&*bx}, nullptr, n, dim, {&*by});
  rec.stage_out({&*by}, got.size() * 4, got.data());
  EXPECT_EQ(rec.commands(), 103u);
  ASSERT_TRUE(rec.submit().ok()) << rec.status().message();
  EXPECT_EQ(rec.submissions(), 1u);
  for (int i = 0; i < 100; ++i)
    for (size_t j = 0; j < want.size(); ++j) want[j] += x[j];
  EXPECT_EQ(got, want);
  // The recorder is reused for the next step.
  ASSERT_TRUE(rec.begin().ok());
  record_add_rows(rec, {&*bx}, nullptr, n, dim, {&*by});
  rec.stage_out({&*by}, got.size() * 4, got.data());
  ASSERT_TRUE(rec.submit().ok());
  EXPECT_EQ(rec.submissions(), 2u);
  for (size_t j = 0; j < want.size(); ++j) EXPECT_EQ(got[j], want[j] + x[j]);
}

TEST(VulkanDevice, RecordingErrorsAreOneLineAndSubmitNothing) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, (DeviceOptions{.max_binding_bytes = 1024}));
  EXPECT_EQ(dev->binding_limit(), 1024u);
  auto big = dev->buffer(4096, MemoryKind::kDevice);
  ASSERT_TRUE(big.ok());
  Recorder rec(*dev);
  ASSERT_TRUE(rec.begin().ok());
  record_add_rows(rec, {&*big}, nullptr, 1, 1024, {&*big});  // 4 KiB bindings past a 1 KiB limit
  auto st = rec.submit();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("exceeds the device's limit of 1024"), std::string::npos)
      << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos);
  EXPECT_EQ(rec.submissions(), 0u);
  // The next step starts clean.
  ASSERT_TRUE(rec.begin().ok());
  uint32_t push[4] = {};
  rec.dispatch("no_such_shader", {{&*big, 0, 1024}}, push, sizeof push, 1);
  st = rec.submit();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("no shader 'no_such_shader'"), std::string::npos) << st.message();
  ASSERT_TRUE(rec.begin().ok());
  rec.dispatch("add_rows", {{&*big, 0, 1024}}, push, sizeof push, 1);  // add_rows takes 3 bindings
  st = rec.submit();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("takes 3 bindings, given 1"), std::string::npos) << st.message();
}

TEST(VulkanDevice, MemoryThatCannotBeHadIsAnError) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  const uint64_t too_big =
      dev->info().max_allocation_bytes ? dev->info().max_allocation_bytes + 4096 : (1ull << 50);
  auto b = dev->buffer(too_big, MemoryKind::kDevice);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.message().find("[vulkan]"), std::string::npos) << b.message();
  auto ok = dev->buffer(64, MemoryKind::kDevice);  // and the device is still fine
  EXPECT_TRUE(ok.ok()) << ok.message();
}

// A lost device: one clear line from the step that meets it and from every call after; another
// device opens and runs meanwhile.
TEST(VulkanDevice, ALostDeviceStaysLostWithOneLine) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  auto buf = dev->buffer(64, MemoryKind::kDevice);
  ASSERT_TRUE(buf.ok());
  Recorder rec(*dev);
  ASSERT_TRUE(rec.begin().ok());
  record_add_rows(rec, {&*buf}, nullptr, 1, 16, {&*buf});
  dev->simulate_loss();
  auto st = rec.submit();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("VK_ERROR_DEVICE_LOST"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos);
  EXPECT_FALSE(rec.begin().ok());
  EXPECT_FALSE(dev->buffer(64, MemoryKind::kDevice).ok());
  EXPECT_FALSE(dev->pipeline("add_rows").ok());
  QWEN35_VK_DEVICE_OR_SKIP(other, {});
  float v[4] = {1, 2, 3, 4}, w[4] = {};
  auto b2 = other->buffer(16, MemoryKind::kDevice);
  ASSERT_TRUE(b2.ok());
  ASSERT_TRUE(other->upload(*b2, 0, v, 16).ok());
  ASSERT_TRUE(other->download(*b2, 0, w, 16).ok());
  EXPECT_EQ(std::memcmp(v, w, 16), 0);
}

TEST(VulkanShaders, EveryEmbeddedShaderDeclaresItsBindings) {
  ASSERT_FALSE(embedded_shaders().empty());
  for (const EmbeddedShader& s : embedded_shaders()) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s.data.data()) % 4, 0u) << s.name;
    const uint32_t b = spirv_bindings(s.data);
    EXPECT_GE(b, 1u) << s.name;
    EXPECT_LE(b, kMaxBindings) << s.name;
  }
  EXPECT_EQ(spirv_bindings(shader_spirv("matmul_affine")), 5u);
  EXPECT_EQ(spirv_bindings(shader_spirv("matmul_q4_0")), 3u);
  EXPECT_EQ(spirv_bindings(shader_spirv("rms_norm")), 4u);
  EXPECT_EQ(spirv_bindings("not spir-v"), 0u);
}

// The CLI: `devices` lists the test device; without a loader it says so in one line and exits
// 0; --device with an unknown index, or what the device does not run yet (--fast, serve), is one
// line and exit 1 before any weight is read; a compressed --kv-type runs on it; the binary does
// not link libvulkan.
TEST(VulkanCli, DevicesAndTheDeviceFlag) {
  std::string why;
  const bool have = test_instance(&why) != nullptr;
  auto r = testing::run_qwen35("devices");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (have) {
    EXPECT_NE(r.out.find("device 0: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("subgroup size: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("timestamps: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("usable: yes"), std::string::npos) << r.out;
  }
  setenv("QWEN35_VULKAN_LOADER", "/nonexistent/libvulkan.so.1", 1);
  r = testing::run_qwen35("devices");
  unsetenv("QWEN35_VULKAN_LOADER");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("no Vulkan loader"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;

  const std::string model = testing::source_dir() + "/models/qwen35-tiny-kjv";
  r = testing::run_qwen35("logits -m " + model +
                          " --tokens 1,2 --out /dev/null --device vulkan:4095");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no Vulkan device 4095"), std::string::npos) << r.err;
  r = testing::run_qwen35("run -m " + model + " -p hi -n 1 --device vulkan:x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("expected cpu, vulkan or vulkan:N"), std::string::npos) << r.err;
  if (have) {
    // The command line on the device: logits within the reference tolerance of the CPU's, the
    // terminal run, and one line for what the device does not run yet.
    const std::string dir = ::testing::TempDir();
    r = testing::run_qwen35("logits -m " + model + " --tokens 1,20,300,4000,50,6 --out " + dir +
                            "/vk.npy --device vulkan");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = testing::run_qwen35("logits -m " + model + " --tokens 1,20,300,4000,50,6 --out " + dir +
                            "/cpu.npy");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto a = formats::read_npy(dir + "/vk.npy"), b = formats::read_npy(dir + "/cpu.npy");
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->data.size(), b->data.size());
    for (size_t i = 0; i < a->data.size(); ++i) ASSERT_NEAR(a->data[i], b->data[i], 1e-3) << i;
    r = testing::run_qwen35("run -m " + model + " -p hi -n 3 --device vulkan");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    // A compressed KV cache: the device's logits within the same tolerance of the CPU's with the
    // same --kv-type (both encode the same rows: a code moves only where a key sits on a
    // rounding boundary, which these rows do not).
    for (const char* where : {" --device vulkan", ""}) {
      r = testing::run_qwen35("logits -m " + model + " --tokens 1,20,300,4000,50,6 --kv-type q8_0,turbo4 --out " +
                              dir + (*where ? "/vkq.npy" : "/cpuq.npy") + where);
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    auto qa = formats::read_npy(dir + "/vkq.npy"), qb = formats::read_npy(dir + "/cpuq.npy");
    ASSERT_TRUE(qa.ok() && qb.ok());
    ASSERT_EQ(qa->data.size(), qb->data.size());
    for (size_t i = 0; i < qa->data.size(); ++i) ASSERT_NEAR(qa->data[i], qb->data[i], 1e-3) << i;
    r = testing::run_qwen35("logits -m " + model + " --tokens 1,2 --out /dev/null --device vulkan --fast");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("--device vulkan: "), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    // serve refuses what the device does not run as the other commands do
    // (tests/server/vulkan_serve_test.cc serves on it).
    r = testing::run_qwen35("serve -m " + model + " --device vulkan --port 0 --fast");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("--device vulkan: --fast does not run on a Vulkan device"), std::string::npos) << r.err;
  }
  r = testing::run_qwen35("inspect -m " + model + " --device cpu");
  EXPECT_EQ(r.exit_code, 0) << r.err;

  const std::string ldd = "ldd " + std::string(QWEN35_BINARY) + " 2>&1";
  FILE* p = popen(ldd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string libs;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) libs += buf;
  pclose(p);
  EXPECT_NE(libs.find("libc.so"), std::string::npos) << libs;
  EXPECT_EQ(libs.find("libvulkan"), std::string::npos) << libs;
}

}  // namespace
}  // namespace qwen35::vulkan
