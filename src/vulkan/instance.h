// A Vulkan instance and what it sees: each physical device with the properties, limits and
// features this backend reads (`qwen35 devices` prints them), and whether we can run on it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "vulkan/api.h"
#include "vulkan/loader.h"

namespace qwen35::vulkan {

struct MemoryHeap {
  uint64_t bytes = 0;
  bool device_local = false;
};

struct DeviceInfo {
  int index = 0;  // in vkEnumeratePhysicalDevices order: the N of --device vulkan:N
  std::string name;
  std::string type;          // "discrete GPU", "integrated GPU", "virtual GPU", "CPU", "other"
  std::string driver;        // driver name and info ("llvmpipe", "Mesa 22.3.6 (LLVM 15.0.6)")
  uint32_t api_version = 0;  // VK_MAKE_API_VERSION
  uint32_t vendor_id = 0, device_id = 0;
  std::vector<MemoryHeap> heaps;
  uint32_t subgroup_size = 0;
  // Optional features, reported for the shaders to come (none is required yet).
  bool storage_8bit = false;   // storageBuffer8BitAccess
  bool storage_16bit = false;  // storageBuffer16BitAccess
  bool float16 = false;        // shaderFloat16
  bool int8 = false;           // shaderInt8
  bool integer_dot_product =
      false;  // shaderIntegerDotProduct (1.3 or VK_KHR_shader_integer_dot_product)
  bool cooperative_matrix = false;  // VK_KHR_cooperative_matrix or VK_NV_cooperative_matrix
  // Limits the backend plans with.
  uint64_t max_storage_buffer_range = 0;  // bytes one storage binding may cover
  uint64_t max_allocation_bytes = 0;      // maxMemoryAllocationSize
  uint32_t max_shared_memory = 0;
  uint32_t max_workgroup_invocations = 0;
  uint32_t max_workgroup_count[3] = {0, 0, 0};
  uint32_t max_push_constants = 0;
  uint64_t storage_offset_alignment = 0;  // minStorageBufferOffsetAlignment: a binding's offset
  int compute_queue_family = -1;          // -1: none
  // Timestamp queries on the compute queue (the bandwidth probe, vulkan/probe.h): the valid bits
  // of its timestamps (timestampValidBits; 0: none) and nanoseconds per tick (timestampPeriod).
  uint32_t timestamp_bits = 0;
  float timestamp_period = 0;
  // Why we cannot run on it, in one phrase; empty: we can.
  std::string unusable;

  // "1.3.230"
  std::string api_string() const;
};

// What the backend needs of a device. Checked by Instance::devices() (DeviceInfo::unusable) and
// again by Device::open. Every compute shader here is Vulkan 1.1 SPIR-V with at most
// kMaxBindings storage buffers, kPushBytes of push constants and kWorkgroup invocations.
inline constexpr uint32_t kMaxBindings = 8;
inline constexpr uint32_t kPushBytes = 128;  // the minimum maxPushConstantsSize
inline constexpr uint32_t kWorkgroup = 64;   // the fixed reduction width (docs/design.md)

class Instance {
 public:
  // Opens the loader and creates an instance (Vulkan 1.1 or later). The error is one line.
  static core::Result<std::shared_ptr<Instance>> create();
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  // Every physical device, described; an empty list when there is none.
  core::Result<std::vector<DeviceInfo>> devices() const;

  VkInstance handle() const { return instance_; }
  const InstanceApi& api() const { return api_; }
  const GlobalApi& global() const { return loader_->api(); }
  uint32_t api_version() const { return version_; }
  // The physical device of DeviceInfo::index.
  core::Result<VkPhysicalDevice> physical(int index) const;

 private:
  Instance() = default;
  DeviceInfo describe(VkPhysicalDevice pd, int index) const;

  std::unique_ptr<Loader> loader_;
  VkInstance instance_ = VK_NULL_HANDLE;
  uint32_t version_ = 0;
  InstanceApi api_;
};

}  // namespace qwen35::vulkan
