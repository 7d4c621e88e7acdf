#include "vulkan/recorder.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

namespace qwen35::vulkan {

namespace {
constexpr uint32_t kSetsPerPool = 256;
constexpr uint64_t kStageChunk = 4ull << 20;
constexpr uint32_t kProfileQueries = 8192;

bool profiling() {
  static const bool on = [] {
    const char* e = std::getenv("QWEN35_VULKAN_PROFILE");
    return e && *e && std::string(e) != "0";
  }();
  return on;
}

// Device time by shader, over every Recorder of the process; printed at exit.
struct Profile {
  std::mutex mu;
  std::map<std::string, std::pair<uint64_t, double>> by_shader;  // dispatches, seconds
  uint64_t commands = 0, barriers = 0;
  ~Profile() {
    double total = 0;
    for (const auto& [name, v] : by_shader) total += v.second;
    if (total <= 0) return;
    std::fprintf(stderr, "vulkan profile: %llu commands, %llu barriers between them\n",
                 (unsigned long long)commands, (unsigned long long)barriers);
    std::vector<std::pair<double, std::string>> rows;
    for (const auto& [name, v] : by_shader) rows.push_back({v.second, name});
    std::sort(rows.rbegin(), rows.rend());
    std::fprintf(stderr, "vulkan profile: %.3f s of device time in dispatches\n", total);
    for (const auto& [sec, name] : rows)
      std::fprintf(stderr, "  %-16s %9.3f s %5.1f%%  %llu dispatches\n", name.c_str(), sec,
                   100 * sec / total, (unsigned long long)by_shader[name].first);
  }
};
Profile& profile() {
  static Profile p;
  return p;
}
}  // namespace

Recorder::Recorder(Device& dev) : dev_(dev) {
  const DeviceApi& api = dev_.api();
  VkCommandPoolCreateInfo pi{};
  pi.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
  pi.flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
  pi.queueFamilyIndex = dev_.queue_family();
  status_ = dev_.note(api.vkCreateCommandPool(dev_.handle(), &pi, nullptr, &pool_),
                      "vkCreateCommandPool");
  if (!status_.ok()) return;
  VkCommandBufferAllocateInfo ai{};
  ai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
  ai.commandPool = pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  status_ = dev_.note(api.vkAllocateCommandBuffers(dev_.handle(), &ai, &cmd_),
                      "vkAllocateCommandBuffers");
  if (!status_.ok()) return;
  VkFenceCreateInfo fi{};
  fi.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
  status_ = dev_.note(api.vkCreateFence(dev_.handle(), &fi, nullptr, &fence_), "vkCreateFence");
  if (status_.ok() && profiling() && dev_.info().timestamp_bits > 0) {
    (void)profile();  // made before any Recorder's use, so destroyed after
    VkQueryPoolCreateInfo qi{};
    qi.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO;
    qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qi.queryCount = kProfileQueries;
    if (api.vkCreateQueryPool(dev_.handle(), &qi, nullptr, &profile_pool_) != VK_SUCCESS)
      profile_pool_ = VK_NULL_HANDLE;
  }
}

Recorder::~Recorder() {
  const DeviceApi& api = dev_.api();
  for (VkDescriptorPool p : desc_pools_) api.vkDestroyDescriptorPool(dev_.handle(), p, nullptr);
  if (fence_ != VK_NULL_HANDLE) api.vkDestroyFence(dev_.handle(), fence_, nullptr);
  if (pool_ != VK_NULL_HANDLE) api.vkDestroyCommandPool(dev_.handle(), pool_, nullptr);
  if (profile_pool_ != VK_NULL_HANDLE) api.vkDestroyQueryPool(dev_.handle(), profile_pool_, nullptr);
}

core::Status Recorder::begin() {
  // A failure of a previous step does not outlive it; a lost device does (healthy()).
  if (pool_ == VK_NULL_HANDLE || cmd_ == VK_NULL_HANDLE || fence_ == VK_NULL_HANDLE) return status_;
  status_ = dev_.healthy();
  if (!status_.ok()) return status_;
  const DeviceApi& api = dev_.api();
  status_ = dev_.note(api.vkResetCommandPool(dev_.handle(), pool_, 0), "vkResetCommandPool");
  if (!status_.ok()) return status_;
  for (VkDescriptorPool p : desc_pools_) api.vkResetDescriptorPool(dev_.handle(), p, 0);
  desc_pool_ = 0;
  stage_chunk_ = 0;
  stage_used_ = 0;
  outputs_.clear();
  commands_ = 0;
  barriers_ = 0;
  since_barrier_.clear();
  VkCommandBufferBeginInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  status_ = dev_.note(api.vkBeginCommandBuffer(cmd_, &bi), "vkBeginCommandBuffer");
  open_ = status_.ok();
  profiled_.clear();
  if (open_ && profile_pool_ != VK_NULL_HANDLE) {
    api.vkCmdResetQueryPool(cmd_, profile_pool_, 0, kProfileQueries);
    api.vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, profile_pool_, 0);
  }
  return status_;
}

void Recorder::fail(core::Status st) {
  if (status_.ok() && !st.ok()) status_ = std::move(st);
}

void Recorder::order(const Access* a, size_t n) {
  ++commands_;
  bool conflict = false;
  for (size_t i = 0; i < n && !conflict; ++i)
    for (const Access& e : since_barrier_)
      if (e.buffer == a[i].buffer && e.lo < a[i].hi && a[i].lo < e.hi && (e.write || a[i].write)) {
        conflict = true;
        break;
      }
  if (conflict) {
    since_barrier_.clear();
    ++barriers_;
    VkMemoryBarrier mb{};
    mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                       VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    const VkPipelineStageFlags stages =
        VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    dev_.api().vkCmdPipelineBarrier(cmd_, stages, stages, 0, 1, &mb, 0, nullptr, 0, nullptr);
  }
  since_barrier_.insert(since_barrier_.end(), a, a + n);
}

bool Recorder::resolve(const Binding& b, VkDescriptorBufferInfo* out) {
  if (!b.buffer || !b.buffer->valid() || b.offset >= b.buffer->bytes()) {
    fail(core::error("[vulkan] a binding outside its buffer"));
    return false;
  }
  const uint64_t bytes = b.bytes ? b.bytes : b.buffer->bytes() - b.offset;
  if (b.offset + bytes > b.buffer->bytes()) {
    fail(core::error("[vulkan] a binding of " + std::to_string(bytes) + " bytes at " +
                     std::to_string(b.offset) + " runs past its buffer of " +
                     std::to_string(b.buffer->bytes())));
    return false;
  }
  const uint64_t align = dev_.info().storage_offset_alignment;
  if (align > 1 && b.offset % align != 0) {
    fail(core::error("[vulkan] a binding at offset " + std::to_string(b.offset) +
                     ", not a multiple of the device's " + std::to_string(align)));
    return false;
  }
  if (bytes > dev_.binding_limit()) {
    fail(core::error(
        "[vulkan] a binding of " + std::to_string(bytes) + " bytes exceeds the device's limit of " +
        std::to_string(dev_.binding_limit()) + " (a tensor this large must be split)"));
    return false;
  }
  *out = {b.buffer->handle(), b.offset, bytes};
  return true;
}

VkDescriptorSet Recorder::descriptor_set(VkDescriptorSetLayout layout) {
  const DeviceApi& api = dev_.api();
  for (;; ++desc_pool_) {
    if (desc_pool_ == desc_pools_.size()) {
      VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerPool * kMaxBindings};
      VkDescriptorPoolCreateInfo pi{};
      pi.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
      pi.maxSets = kSetsPerPool;
      pi.poolSizeCount = 1;
      pi.pPoolSizes = &size;
      VkDescriptorPool p = VK_NULL_HANDLE;
      fail(dev_.note(api.vkCreateDescriptorPool(dev_.handle(), &pi, nullptr, &p),
                     "vkCreateDescriptorPool"));
      if (!status_.ok()) return VK_NULL_HANDLE;
      desc_pools_.push_back(p);
    }
    VkDescriptorSetAllocateInfo ai{};
    ai.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
    ai.descriptorPool = desc_pools_[desc_pool_];
    ai.descriptorSetCount = 1;
    ai.pSetLayouts = &layout;
    VkDescriptorSet set = VK_NULL_HANDLE;
    const VkResult r = api.vkAllocateDescriptorSets(dev_.handle(), &ai, &set);
    if (r == VK_SUCCESS) return set;
    if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL) {
      fail(dev_.note(r, "vkAllocateDescriptorSets"));
      return VK_NULL_HANDLE;
    }
    // This pool is full: the next one (made above when there is none).
  }
}

void Recorder::dispatch(std::string_view shader, std::initializer_list<Binding> bindings,
                        const void* push, uint32_t push_bytes, uint64_t groups_x,
                        uint32_t groups_y) {
  if (!recording() || groups_x == 0 || groups_y == 0) return;
  if (push_bytes < 4 || push_bytes > kPushBytes)
    return fail(core::error("[vulkan] push constants of " + std::to_string(push_bytes) + " bytes"));
  if (groups_y > dev_.info().max_workgroup_count[1])
    return fail(core::error("[vulkan] " + std::to_string(groups_y) +
                            " workgroups along y exceed the device's " +
                            std::to_string(dev_.info().max_workgroup_count[1])));
  auto pipe = dev_.pipeline(shader);
  if (!pipe.ok()) return fail(pipe.status());
  const Pipeline& p = **pipe;
  if (bindings.size() != p.bindings)
    return fail(core::error("[vulkan] shader '" + std::string(shader) + "' takes " +
                            std::to_string(p.bindings) + " bindings, given " +
                            std::to_string(bindings.size())));
  VkDescriptorBufferInfo infos[kMaxBindings];
  VkWriteDescriptorSet writes[kMaxBindings];
  const VkDescriptorSet set = descriptor_set(p.set_layout);
  if (set == VK_NULL_HANDLE) return;
  uint32_t i = 0;
  for (const Binding& b : bindings) {
    if (!resolve(b, &infos[i])) return;
    writes[i] = {};
    writes[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
    writes[i].dstSet = set;
    writes[i].dstBinding = i;
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
    ++i;
  }
  const DeviceApi& api = dev_.api();
  api.vkUpdateDescriptorSets(dev_.handle(), i, writes, 0, nullptr);
  Access acc[kMaxBindings];
  for (uint32_t j = 0; j < i; ++j)
    acc[j] = {infos[j].buffer, infos[j].offset, infos[j].offset + infos[j].range,
              ((p.readonly >> j) & 1u) == 0};
  order(acc, i);
  api.vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
  api.vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, &set, 0,
                              nullptr);
  uint8_t pc[kPushBytes] = {};
  std::memcpy(pc, push, push_bytes);
  const uint64_t step = dev_.group_limit();
  for (uint64_t g0 = 0; g0 < groups_x; g0 += step) {
    if (g0 > 0xFFFFFFFFull)
      return fail(core::error("[vulkan] a dispatch of more than 2^32 workgroups"));
    const uint32_t first = uint32_t(g0);
    std::memcpy(pc, &first, 4);
    api.vkCmdPushConstants(cmd_, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes, pc);
    api.vkCmdDispatch(cmd_, uint32_t(std::min(step, groups_x - g0)), groups_y, 1);
  }
  if (profile_pool_ != VK_NULL_HANDLE && profiled_.size() + 1 < kProfileQueries) {
    // The gap since the previous stamp: this dispatch's time where the device runs commands one
    // after another (lavapipe does); where commands without a barrier between them overlap, the
    // gaps share their time out approximately.
    profiled_.emplace_back(shader);
    api.vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, profile_pool_,
                            uint32_t(profiled_.size()));
  }
}

void Recorder::copy(const Binding& src, const Binding& dst, uint64_t bytes) {
  if (!recording() || bytes == 0) return;
  if (!src.buffer || !dst.buffer || src.offset + bytes > src.buffer->bytes() ||
      dst.offset + bytes > dst.buffer->bytes())
    return fail(
        core::error("[vulkan] a copy of " + std::to_string(bytes) + " bytes outside its buffers"));
  order({{src.buffer->handle(), src.offset, src.offset + bytes, false},
         {dst.buffer->handle(), dst.offset, dst.offset + bytes, true}});
  VkBufferCopy c{src.offset, dst.offset, bytes};
  dev_.api().vkCmdCopyBuffer(cmd_, src.buffer->handle(), dst.buffer->handle(), 1, &c);
}

void Recorder::copy_rows(const Binding& src, uint64_t src_stride, const Binding& dst,
                         uint64_t dst_stride, uint64_t rows, uint64_t bytes) {
  if (!recording() || bytes == 0 || rows == 0) return;
  if (!src.buffer || !dst.buffer || src.offset + (rows - 1) * src_stride + bytes > src.buffer->bytes() ||
      dst.offset + (rows - 1) * dst_stride + bytes > dst.buffer->bytes())
    return fail(core::error("[vulkan] a copy of " + std::to_string(rows) + " rows outside its buffers"));
  // The spans from the first run's start to the last run's end (what lies between counts too).
  order({{src.buffer->handle(), src.offset, src.offset + (rows - 1) * src_stride + bytes, false},
         {dst.buffer->handle(), dst.offset, dst.offset + (rows - 1) * dst_stride + bytes, true}});
  std::vector<VkBufferCopy> c(rows);
  for (uint64_t r = 0; r < rows; ++r) c[r] = {src.offset + r * src_stride, dst.offset + r * dst_stride, bytes};
  dev_.api().vkCmdCopyBuffer(cmd_, src.buffer->handle(), dst.buffer->handle(), uint32_t(rows), c.data());
}

void Recorder::zero(const Binding& dst, uint64_t bytes) {
  if (!recording() || bytes == 0) return;
  if (!dst.buffer || dst.offset + bytes > dst.buffer->bytes() || bytes % 4 || dst.offset % 4)
    return fail(core::error("[vulkan] a fill of " + std::to_string(bytes) + " bytes outside its buffer"));
  order({{dst.buffer->handle(), dst.offset, dst.offset + bytes, true}});
  dev_.api().vkCmdFillBuffer(cmd_, dst.buffer->handle(), dst.offset, bytes, 0u);
}

void Recorder::reset_queries(VkQueryPool pool, uint32_t first, uint32_t count) {
  if (!recording()) return;
  dev_.api().vkCmdResetQueryPool(cmd_, pool, first, count);
}

void Recorder::timestamp(VkQueryPool pool, uint32_t query) {
  if (!recording()) return;
  // Bottom of the pipe: the clock is read once all earlier commands have completed.
  dev_.api().vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool, query);
}

bool Recorder::staging(uint64_t bytes, const Buffer** buf, uint64_t* offset) {
  const uint64_t need = (bytes + 3) & ~uint64_t(3);
  while (stage_chunk_ < stage_.size() && stage_used_ + need > stage_[stage_chunk_].bytes()) {
    ++stage_chunk_;
    stage_used_ = 0;
  }
  if (stage_chunk_ == stage_.size()) {
    auto b = dev_.buffer(std::max(need, kStageChunk), MemoryKind::kHost);
    if (!b.ok()) {
      fail(b.status());
      return false;
    }
    stage_.push_back(std::move(*b));
    stage_used_ = 0;
  }
  *buf = &stage_[stage_chunk_];
  *offset = stage_used_;
  stage_used_ += need;
  return true;
}

void Recorder::stage_in(const void* src, uint64_t bytes, const Binding& dst) {
  if (!recording() || bytes == 0) return;
  const Buffer* buf;
  uint64_t off;
  if (!staging(bytes, &buf, &off)) return;
  std::memcpy(static_cast<uint8_t*>(buf->mapped()) + off, src, bytes);
  copy({buf, off, bytes}, dst, bytes);
}

void Recorder::stage_out(const Binding& src, uint64_t bytes, void* dst) {
  if (!recording() || bytes == 0) return;
  const Buffer* buf;
  uint64_t off;
  if (!staging(bytes, &buf, &off)) return;
  copy(src, {buf, off, bytes}, bytes);
  outputs_.push_back({static_cast<const uint8_t*>(buf->mapped()) + off, dst, bytes});
  staged_out_bytes_ += bytes;
}

core::Status Recorder::submit() {
  if (!open_) return status_.ok() ? core::error("[vulkan] submit without begin") : status_;
  open_ = false;
  const DeviceApi& api = dev_.api();
  if (!outputs_.empty()) {  // the staged outputs' copies, made visible to the host
    VkMemoryBarrier mb{};
    mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    api.vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1,
                             &mb, 0, nullptr, 0, nullptr);
  }
  const core::Status ended = dev_.note(api.vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
  if (!status_.ok()) return status_;  // a recording error: nothing is submitted
  QWEN35_RETURN_IF_ERROR(ended);
  QWEN35_RETURN_IF_ERROR(dev_.before_submit());
  VkSubmitInfo si{};
  si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cmd_;
  QWEN35_RETURN_IF_ERROR(dev_.note(api.vkResetFences(dev_.handle(), 1, &fence_), "vkResetFences"));
  QWEN35_RETURN_IF_ERROR(
      dev_.note(api.vkQueueSubmit(dev_.queue(), 1, &si, fence_), "vkQueueSubmit"));
  ++submissions_;
  const VkResult r =
      api.vkWaitForFences(dev_.handle(), 1, &fence_, VK_TRUE, dev_.options().submit_timeout_ns);
  if (r == VK_TIMEOUT) {
    // A hung device: given up as lost, so no later call waits on it again.
    dev_.simulate_loss();
    return core::error("[vulkan] a submission did not finish in " +
                       std::to_string(dev_.options().submit_timeout_ns / 1000000000ull) +
                       " s; the device is given up as lost");
  }
  QWEN35_RETURN_IF_ERROR(dev_.note(r, "vkWaitForFences"));
  for (const Pending& p : outputs_) std::memcpy(p.to, p.from, p.bytes);
  outputs_.clear();
  if (profile_pool_ != VK_NULL_HANDLE && !profiled_.empty()) {
    std::vector<uint64_t> t(profiled_.size() + 1);
    if (api.vkGetQueryPoolResults(dev_.handle(), profile_pool_, 0, uint32_t(t.size()),
                                  t.size() * 8, t.data(), 8,
                                  VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) == VK_SUCCESS) {
      Profile& prof = profile();
      std::lock_guard<std::mutex> lock(prof.mu);
      prof.commands += commands_;
      prof.barriers += barriers_;
      for (size_t i = 0; i < profiled_.size(); ++i) {
        auto& [count, sec] = prof.by_shader[profiled_[i]];
        ++count;
        sec += double(t[i + 1] - t[i]) * double(dev_.info().timestamp_period) * 1e-9;
      }
    }
  }
  return core::ok_status();
}

}  // namespace qwen35::vulkan
