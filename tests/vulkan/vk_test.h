// The Vulkan tests' device: lavapipe, picked explicitly through the loader's ICD variables before
// the loader is opened (QWEN35_VULKAN_TEST_ICD names another ICD file, e.g. a GPU's, to run the
// same tests there). A test skips, printing why, only where no Vulkan device exists.
#pragma once

#include <glob.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "vulkan/device.h"
#include "vulkan/instance.h"

namespace qwen35::vulkan {

// The ICD file the tests use ("" when there is none to pick: the loader's default).
inline const std::string& test_icd() {
  static const std::string icd = [] {
    std::string path;
    if (const char* e = std::getenv("QWEN35_VULKAN_TEST_ICD"); e && *e) {
      path = e;
    } else {
      glob_t g{};
      if (glob("/usr/share/vulkan/icd.d/lvp_icd*.json", 0, nullptr, &g) == 0 && g.gl_pathc > 0)
        path = g.gl_pathv[0];
      globfree(&g);
    }
    if (!path.empty()) {
      // The 1.3.234+ loader reads VK_DRIVER_FILES; older ones VK_ICD_FILENAMES.
      setenv("VK_DRIVER_FILES", path.c_str(), 1);
      setenv("VK_ICD_FILENAMES", path.c_str(), 1);
    }
    return path;
  }();
  return icd;
}

// An instance, or null with the reason (no loader, no driver, no device).
inline std::shared_ptr<Instance> test_instance(std::string* why) {
  test_icd();
  auto inst = Instance::create();
  if (!inst.ok()) {
    *why = inst.message();
    return nullptr;
  }
  auto devs = (*inst)->devices();
  if (!devs.ok() || devs->empty()) {
    *why = devs.ok() ? "no Vulkan device" : devs.message();
    return nullptr;
  }
  return *inst;
}

// Device 0 of the test ICD with `o`; null (with the reason in *why) only where there is no
// device. A device that exists and does not open fails the test.
inline std::unique_ptr<Device> test_device(std::string* why, DeviceOptions o = {}) {
  auto inst = test_instance(why);
  if (!inst) return nullptr;
  auto dev = Device::open(inst, 0, o);
  EXPECT_TRUE(dev.ok()) << dev.message();
  if (!dev.ok()) {
    *why = dev.message();
    return nullptr;
  }
  return std::move(*dev);
}


// A device buffer holding `bytes` of host data (an empty Buffer, and a test failure, when the
// device refuses).
inline Buffer put(Device& dev, const void* data, uint64_t bytes) {
  auto b = dev.buffer(bytes, MemoryKind::kDevice);
  EXPECT_TRUE(b.ok()) << b.message();
  if (!b.ok()) return Buffer();
  EXPECT_TRUE(dev.upload(*b, 0, data, bytes).ok());
  return std::move(*b);
}
template <typename T>
Buffer put(Device& dev, const std::vector<T>& v) {
  return put(dev, v.data(), v.size() * sizeof(T));
}

}  // namespace qwen35::vulkan

// Declares `name`, device 0 with options `opts`, or skips the test with the printed reason.
#define QWEN35_VK_DEVICE_OR_SKIP(name, opts)                             \
  std::string name##_why;                                                \
  auto name = ::qwen35::vulkan::test_device(&name##_why, opts);          \
  if (!name) {                                                           \
    if (::testing::Test::HasFailure()) return;                           \
    std::printf("SKIPPED: no Vulkan device (%s)\n", name##_why.c_str()); \
    GTEST_SKIP() << "no Vulkan device: " << name##_why;                  \
  }
