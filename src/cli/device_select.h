// --device for the commands that run a model (run, serve, bench, logits, inspect): checked before
// any weight is read.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "core/result.h"
#include "model/model.h"

namespace qwen35::cli {

// The device of rank `rank` of `world` processes (mpirun; 0 of 1 alone) for a --device value:
//   - a comma-separated list takes item rank mod its length ("cpu,vulkan:0": rank 0 on the CPU,
//     rank 1 on device 0; after a vulkan item a bare number is another device: "vulkan:0,1");
//   - "vulkan" alone, under mpirun with several devices, takes device rank mod their count;
//   - anything else is itself.
// An item that is not a device is the usual one-line error.
core::Result<std::string> device_for_rank(const std::string& value, int rank, int world);

// OK for cpu, and for vulkan[:N] where that device can run us. Else one line: this build has no
// Vulkan backend, or there is no loader, no device N, or it lacks what we need.
core::Status check_device(const std::string& value);

// The device a model runs on, as serve watches it. Every member may be called from any thread
// while the model runs steps.
class DeviceLink {
 public:
  virtual ~DeviceLink() = default;
  // Empty while the device works; once it is lost, the line that says so (it stays lost).
  virtual std::string failure() const = 0;
  // Prometheus lines:
  // qwen35_device_memory_bytes{use="weights|kv|states|snapshots|workspace|allocated"}.
  virtual std::string metrics() const = 0;
  // OK when the weights (uploaded), `parallel` states, the KV pool of `kv_positions`, a step of
  // `step_tokens` rows and `snapshot_bytes` of prefix-cache snapshots fit the device's memory;
  // else one line with the numbers.
  virtual core::Status check_serving(int64_t kv_positions, int64_t parallel, int64_t step_tokens,
                                     bool mtp, uint64_t snapshot_bytes = 0) const = 0;
};

// After the model is made: for vulkan[:N], opens the device, uploads the weights and puts the
// forward on it (vkmodel/vulkan_executor.h). Refuses in one line what the device does not run
// yet (fast mode, a KV type other than f32) or what does not fit. Null for cpu.
//
// Test hooks, read here: QWEN35_TEST_VULKAN_MEMORY_MB caps the device memory allocated (an
// allocation past it fails as an exhausted device does); QWEN35_TEST_VULKAN_LOSE_AT=N loses the
// device at the Nth submission after the weights' upload (a step's, vulkan::Device::lose_at);
// QWEN35_TEST_VULKAN_FAIL_ALLOC_AT=N fails the Nth device allocation after it, once.
core::Result<std::shared_ptr<DeviceLink>> use_device(const std::string& value, model::Model& m,
                                                     bool fast);

// What a state's bits depend on beyond the checkpoint: "cpu", or the device's name and driver
// ("vulkan llvmpipe (LLVM 15.0.6, 256 bits) Mesa 22.3.6"), so that `vulkan` and `vulkan:0` name
// one device, and two devices of one kind share their prefix-cache files. A list: each item's,
// joined.
std::string device_identity(const std::string& value);

// vulkan[:N]: the device's name and its memory read bandwidth in GB/s, measured by the probe
// shader over 256 MiB (vulkan/probe.h), for bench's roofline.
core::Result<std::pair<std::string, double>> device_bandwidth(const std::string& value);

// Whether this binary was built with the Vulkan backend.
bool has_vulkan_backend();

}  // namespace qwen35::cli
