#include "vkmodel/snapshots.h"

#include <algorithm>
#include <span>
#include <utility>
#include <vector>

namespace qwen35::vkmodel {

class DeviceSnapshots::Stored final : public Snapshot {
 public:
  Stored(std::shared_ptr<vulkan::Device> dev, vulkan::Buffer buf, uint64_t bytes,
         std::shared_ptr<std::atomic<uint64_t>> held)
      : dev_(std::move(dev)), buf_(std::move(buf)), bytes_(bytes), held_(std::move(held)) {
    *held_ += buf_.bytes();
  }
  ~Stored() override { *held_ -= buf_.bytes(); }
  uint64_t bytes() const override { return bytes_; }
  const vulkan::Buffer& buffer() const { return buf_; }

 private:
  std::shared_ptr<vulkan::Device> dev_;  // destroyed after the buffer
  vulkan::Buffer buf_;
  uint64_t bytes_;
  std::shared_ptr<std::atomic<uint64_t>> held_;
};

DeviceSnapshots::DeviceSnapshots(std::shared_ptr<vulkan::Device> dev, Residency& res)
    : dev_(std::move(dev)), res_(res), held_(std::make_shared<std::atomic<uint64_t>>(0)) {}

std::shared_ptr<const model::SnapshotStore::Snapshot> DeviceSnapshots::keep(
    const model::SequenceState& state) {
  if (!res_.current(state.mirror())) return nullptr;
  std::vector<std::span<const float>> parts;
  state.recurrent_buffers(&parts);
  const uint64_t bytes = state.recurrent_bytes();
  auto buf = dev_->buffer(std::max<uint64_t>(bytes, 4), vulkan::MemoryKind::kDevice);
  if (!buf.ok()) return nullptr;  // out of device memory: the cache keeps a host copy
  std::vector<std::pair<vulkan::Binding, vulkan::Binding>> copies;
  uint64_t at = 0;
  for (std::span<const float> p : parts) {
    const vulkan::Binding from = res_.mirrored(p.data(), p.size_bytes());
    if (!from.buffer) return nullptr;
    copies.push_back({from, {&*buf, at, p.size_bytes()}});
    at += p.size_bytes();
  }
  if (!res_.submit_copies(copies)) return nullptr;
  return std::make_shared<Stored>(dev_, std::move(*buf), bytes, held_);
}

std::shared_ptr<model::SnapshotStore::Snapshot> DeviceSnapshots::make(uint64_t bytes) {
  auto buf = dev_->buffer(std::max<uint64_t>(bytes, 4), vulkan::MemoryKind::kDevice);
  if (!buf.ok()) return nullptr;  // out of device memory: the capture goes to host memory
  return std::make_shared<Stored>(dev_, std::move(*buf), bytes, held_);
}

vulkan::Binding DeviceSnapshots::binding(const Snapshot& s, uint64_t at, uint64_t bytes) {
  const auto& st = static_cast<const Stored&>(s);
  if (at > st.bytes() || bytes > st.bytes() - at) return {};
  return {&st.buffer(), at, bytes};
}

bool DeviceSnapshots::restore(const Snapshot& s, model::SequenceState& state) {
  const auto& st = static_cast<const Stored&>(s);
  if (st.bytes() != state.recurrent_bytes() || !res_.synced_once(state.mirror())) return false;
  std::vector<std::span<const float>> parts;
  state.recurrent_buffers(&parts);
  std::vector<std::pair<vulkan::Binding, vulkan::Binding>> copies;
  uint64_t at = 0;
  for (std::span<const float> p : parts) {
    const vulkan::Binding to = res_.mirrored(p.data(), p.size_bytes());
    if (!to.buffer) return false;
    copies.push_back({{&st.buffer(), at, p.size_bytes()}, to});
    at += p.size_bytes();
  }
  if (!res_.submit_copies(copies)) return false;
  res_.mark_current(state.mirror());
  return true;
}

core::Status DeviceSnapshots::read(const Snapshot& s, float* out) {
  const auto& st = static_cast<const Stored&>(s);
  return dev_->download(st.buffer(), 0, out, st.bytes());
}

}  // namespace qwen35::vkmodel
