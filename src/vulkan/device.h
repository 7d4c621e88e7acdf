// A logical Vulkan device with one compute queue: buffers (device-local, and host-visible for
// staging), the pipelines made from the embedded SPIR-V, and uploads/downloads. Commands are
// recorded by vulkan/recorder.h and submitted once per step.
//
// Errors are core::Status values with one line ("[vulkan] vkAllocateMemory (12 MiB): ..."), never
// an abort. A lost device (VK_ERROR_DEVICE_LOST) stays lost: every later call fails at once with
// the same line. Thread-safety: one caller at a time per Device (as per Model).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "core/result.h"
#include "vulkan/api.h"
#include "vulkan/instance.h"

namespace qwen35::vulkan {

class Device;

// Where a buffer lives: device-local (weights, activations, state), or host-visible and coherent
// (staging of uploads and downloads).
enum class MemoryKind { kDevice, kHost };

// A VkBuffer with its own memory. Move-only; frees both on destruction. Sizes are rounded up to
// whole 32-bit words (shaders read every buffer as words).
class Buffer {
 public:
  Buffer() = default;
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  bool valid() const { return buffer_ != VK_NULL_HANDLE; }
  uint64_t bytes() const { return bytes_; }
  VkBuffer handle() const { return buffer_; }
  // Host buffers: their mapping (persistent); null for device buffers.
  void* mapped() const { return mapped_; }

 private:
  friend class Device;
  void release();
  const Device* dev_ = nullptr;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  VkDeviceMemory memory_ = VK_NULL_HANDLE;
  uint64_t bytes_ = 0;
  uint64_t charged_ = 0;  // device-local bytes counted in Device::allocated()
  void* mapped_ = nullptr;
};

// A compute pipeline of one embedded shader: `bindings` storage buffers in set 0 (bindings 0..n-1)
// and kPushBytes of push constants.
struct Pipeline {
  VkPipeline pipeline = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  uint32_t bindings = 0;
  uint32_t readonly = 0;  // bit i: binding i is only read (spirv_readonly_bindings)
};

struct DeviceOptions {
  // The most bytes one storage binding may cover: 0 takes the device's limit
  // (min(maxStorageBufferRange, maxMemoryAllocationSize)); a smaller value lowers it (tests).
  uint64_t max_binding_bytes = 0;
  // The most bytes one part of a weight matrix holds (vulkan/matrix.h): 0 takes the binding
  // limit; a smaller value makes the tests split small matrices across bindings as a device
  // splits those past its limit.
  uint64_t max_part_bytes = 0;
  // Workgroups per dispatch along x: 0 takes the device's limit; a smaller value makes every
  // large dispatch several (the tests check that this changes no bit).
  uint32_t max_groups = 0;
  // How long a submission may run before the device is given up as hung (lost).
  uint64_t submit_timeout_ns = 600ull * 1000 * 1000 * 1000;
  // Test hooks (serve's fault tests set it through QWEN35_TEST_VULKAN_MEMORY_MB,
  // cli/device_select.cc): device-local allocations past memory_limit_bytes fail as the device's
  // running out of memory would (0: no limit).
  uint64_t memory_limit_bytes = 0;
};

class Device {
 public:
  // Opens device `index` of `instance` (DeviceInfo::index). Fails in one line for an unknown
  // index or a device we cannot run on (DeviceInfo::unusable says why).
  static core::Result<std::unique_ptr<Device>> open(std::shared_ptr<Instance> instance, int index,
                                                    DeviceOptions options = {});
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceInfo& info() const { return info_; }
  const DeviceOptions& options() const { return options_; }
  const DeviceApi& api() const { return api_; }
  VkDevice handle() const { return device_; }
  VkQueue queue() const { return queue_; }
  uint32_t queue_family() const { return queue_family_; }
  // The bytes one storage binding may cover (DeviceOptions::max_binding_bytes), a multiple of 4.
  uint64_t binding_limit() const { return binding_limit_; }
  // The bytes one part of a weight matrix may hold (DeviceOptions::max_part_bytes), a multiple
  // of 4.
  uint64_t part_limit() const { return part_limit_; }
  // Workgroups per dispatch along x.
  uint32_t group_limit() const { return group_limit_; }

  core::Result<Buffer> buffer(uint64_t bytes, MemoryKind kind);
  // The pipeline of an embedded shader, made at its first use (through this device's
  // VkPipelineCache) and kept.
  core::Result<const Pipeline*> pipeline(std::string_view shader);

  // Copies between host memory and a buffer, through staging buffers, one submission per
  // 64 MiB (for weights and tests; a step stages its inputs and outputs in its own submission).
  core::Status upload(const Buffer& dst, uint64_t offset, const void* src, uint64_t bytes);
  core::Status download(const Buffer& src, uint64_t offset, void* dst, uint64_t bytes);

  // OK until the device is lost; then the line that says so.
  core::Status healthy() const;
  // Whether the device is lost, and then the line, from any thread (serve's /health).
  bool lost() const { return lost_flag_.load(std::memory_order_acquire); }
  std::string lost_message() const { return lost() ? lost_ : std::string(); }
  // check(r, what), and a lost device stays lost (healthy() fails from then on).
  core::Status note(VkResult r, const std::string& what);
  // Test hook: the device behaves as lost from now on, as after VK_ERROR_DEVICE_LOST.
  void simulate_loss();
  // Test hooks: the `n`th queue submission from now (n >= 1) finds the device lost; the `n`th
  // device-local allocation from now fails as on an exhausted device (once).
  void lose_at(uint64_t n) { lose_at_ = submitted_ + n; }
  void fail_allocation_at(uint64_t n) { fail_alloc_at_ = allocations_ + n; }
  // Called before each queue submission (recorder.h): OK, or the line of a lost device.
  core::Status before_submit();
  // Device-local bytes allocated now (every live buffer of MemoryKind::kDevice).
  uint64_t allocated() const { return allocated_.load(); }

 private:
  friend class Buffer;
  Device() = default;
  int memory_type(uint32_t type_bits, MemoryKind kind) const;

  std::shared_ptr<Instance> instance_;
  DeviceInfo info_;
  DeviceOptions options_;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkPhysicalDeviceMemoryProperties memory_{};
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  uint64_t binding_limit_ = 0, part_limit_ = 0;
  uint32_t group_limit_ = 0;
  DeviceApi api_;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  std::map<std::string, std::unique_ptr<Pipeline>, std::less<>> pipelines_;
  std::string lost_;  // non-empty once the device is lost: the line every call returns
  std::atomic<bool> lost_flag_{false};  // set once lost_ is written, which then stays
  mutable std::atomic<uint64_t> allocated_{0};  // Buffer::release() gives back
  uint64_t submitted_ = 0, lose_at_ = 0, allocations_ = 0, fail_alloc_at_ = 0;
};

}  // namespace qwen35::vulkan
