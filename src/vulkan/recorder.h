// Records many dispatches and copies into ONE command buffer and submits it once: a whole step
// (every layer, every sequence's rows) is one vkQueueSubmit, with the host's inputs staged in
// and its outputs staged out inside the same submission (docs/design.md "Vulkan backend").
//
// Hazards: the recorder tracks the byte ranges each command reads and writes (a dispatch's
// bindings, read-only where the shader declares them `readonly`, Pipeline::readonly; a copy's
// source and destination; a fill's destination) since the last barrier. A command that writes
// what one of those touched, or touches what one of those wrote, gets a full memory barrier
// (compute and transfer writes → compute and transfer reads and writes) before it, which also
// orders it after everything recorded earlier; commands that touch nothing in common share one
// segment. So each command sees every earlier write to what it reads, and no command overwrites
// bytes an earlier one still reads or writes.
//
// Errors are sticky: the first failure while recording (a binding past the device's limit, a
// missing shader, out of memory) turns every later call into a no-op, and begin()/submit() return
// it. Callers record a whole step and check once. One Recorder per caller; it reuses its command
// buffer, descriptor pools and staging memory from one submission to the next. A Recorder, like
// every Buffer, must not outlive its Device; the buffers it binds must outlive its submit().
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "vulkan/device.h"

namespace qwen35::vulkan {

// A range of a buffer bound to a shader: `bytes` from `offset` (0: to the end of the buffer).
struct Binding {
  const Buffer* buffer = nullptr;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

class Recorder {
 public:
  explicit Recorder(Device& dev);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  Device& device() const { return dev_; }

  // Starts a new command buffer (waits for nothing: submit() has already waited).
  core::Status begin();
  // Records `shader` over groups_x × groups_y workgroups. `push` (at most kPushBytes) begins with
  // a uint32 that the recorder sets to the first x group of each dispatch: a grid wider than the
  // device's limit (Device::group_limit) is cut into several dispatches along x, which changes
  // no result (each output's arithmetic is fixed by its own index).
  void dispatch(std::string_view shader, std::initializer_list<Binding> bindings, const void* push,
                uint32_t push_bytes, uint64_t groups_x, uint32_t groups_y = 1);
  // Copies bytes between device buffers.
  void copy(const Binding& src, const Binding& dst, uint64_t bytes);
  // Copies `rows` runs of `bytes`, src_stride and dst_stride bytes apart, as one command.
  void copy_rows(const Binding& src, uint64_t src_stride, const Binding& dst, uint64_t dst_stride,
                 uint64_t rows, uint64_t bytes);
  // Zeroes bytes (a multiple of 4, at an offset that is one) of a device buffer.
  void zero(const Binding& dst, uint64_t bytes);
  // Host bytes into a device buffer: copied to staging memory now, onto the device in order with
  // the commands around it.
  void stage_in(const void* src, uint64_t bytes, const Binding& dst);
  // Device bytes to host memory `dst`, which receives them when submit() returns OK.
  void stage_out(const Binding& src, uint64_t bytes, void* dst);
  // Timestamp queries (the bandwidth probe, vulkan/probe.h): resets queries [first, first +
  // count) of `pool`, and writes the device's clock into query `query` once every command
  // recorded before it has finished (after a reset recorded before it).
  void reset_queries(VkQueryPool pool, uint32_t first, uint32_t count);
  void timestamp(VkQueryPool pool, uint32_t query);
  // Records the first error of the step (the later ones are dropped), for the ops' own checks.
  void fail(core::Status st);
  const core::Status& status() const { return status_; }

  // Ends the command buffer, submits it once and waits for it; then delivers the staged outputs.
  core::Status submit();

  // Counters for the tests: commands recorded since begin(), the barriers recorded between them
  // since begin(), submissions since construction.
  uint32_t commands() const { return commands_; }
  uint32_t barriers() const { return barriers_; }
  uint32_t submissions() const { return submissions_; }
  // Bytes staged out (stage_out) since construction: what the steps brought back to the host.
  uint64_t staged_out_bytes() const { return staged_out_bytes_; }

 private:
  struct Pending {
    const uint8_t* from;
    void* to;
    uint64_t bytes;
  };
  // A byte range [lo, hi) of a buffer that a command reads or writes.
  struct Access {
    VkBuffer buffer;
    uint64_t lo, hi;
    bool write;
  };
  bool recording() const { return status_.ok() && open_; }
  // Before a command with these accesses: a barrier where one conflicts with an access since the
  // last barrier (the same buffer, overlapping bytes, one of the two a write); then notes them.
  void order(const Access* a, size_t n);
  void order(std::initializer_list<Access> a) { order(a.begin(), a.size()); }
  // `bytes` of host staging memory (4-byte aligned): its buffer and offset there.
  bool staging(uint64_t bytes, const Buffer** buf, uint64_t* offset);
  VkDescriptorSet descriptor_set(VkDescriptorSetLayout layout);
  bool resolve(const Binding& b, VkDescriptorBufferInfo* out);

  Device& dev_;
  core::Status status_;
  bool open_ = false;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  std::vector<VkDescriptorPool> desc_pools_;
  size_t desc_pool_ = 0;       // the pool sets are taken from now
  std::vector<Buffer> stage_;  // host staging chunks, reused
  size_t stage_chunk_ = 0;
  uint64_t stage_used_ = 0;
  std::vector<Pending> outputs_;
  std::vector<Access> since_barrier_;  // the accesses of the commands since the last barrier
  uint32_t commands_ = 0, barriers_ = 0, submissions_ = 0;
  uint64_t staged_out_bytes_ = 0;
  // QWEN35_VULKAN_PROFILE=1: a timestamp after each dispatch, summed by shader over the
  // process and printed to stderr at exit (where a step's device time goes). Off: no queries.
  VkQueryPool profile_pool_ = VK_NULL_HANDLE;
  std::vector<std::string> profiled_;  // the shader of each query after the first
};

}  // namespace qwen35::vulkan
