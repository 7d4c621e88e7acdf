// The device's prefix-cache snapshots (model/snapshot_store.h, serve --cache-device-mb): a
// state's conv and recurrent state and MTP row, copied on the device from its mirrored twins
// into a buffer of their own (save_recurrent's layout), and back into a state's twins on a
// resume, which then hold its current bits (its host copy stale until pulled). Or an empty
// buffer that a step fills (make, VulkanExecutor::copy_to_snapshot: the prefill's captures).
#pragma once

#include <atomic>
#include <memory>

#include "model/snapshot_store.h"
#include "vkmodel/residency.h"
#include "vulkan/device.h"

namespace qwen35::vkmodel {

class DeviceSnapshots final : public model::SnapshotStore {
 public:
  // `res` and the device outlive the store; snapshots keep the device alive and may outlive the
  // store (their bytes are counted in a counter they share).
  DeviceSnapshots(std::shared_ptr<vulkan::Device> dev, Residency& res);

  std::shared_ptr<const Snapshot> keep(const model::SequenceState& state) override;
  std::shared_ptr<Snapshot> make(uint64_t bytes) override;
  bool restore(const Snapshot& s, model::SequenceState& state) override;
  core::Status read(const Snapshot& s, float* out) override;
  uint64_t bytes() const override { return held_->load(); }
  // [at, at + bytes) of a snapshot of this store's, for a step's copy into it
  // (VulkanExecutor::copy_to_snapshot); empty where the range is not inside it.
  static vulkan::Binding binding(const Snapshot& s, uint64_t at, uint64_t bytes);

 private:
  class Stored;
  std::shared_ptr<vulkan::Device> dev_;
  Residency& res_;
  std::shared_ptr<std::atomic<uint64_t>> held_;
};

}  // namespace qwen35::vkmodel
