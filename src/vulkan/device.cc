#include "vulkan/device.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "vulkan/recorder.h"
#include "vulkan/shaders.h"

namespace qwen35::vulkan {

namespace {
std::string mib(uint64_t bytes) { return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB"; }
}  // namespace

// ---- Buffer ----

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& o) noexcept { *this = std::move(o); }

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    dev_ = o.dev_;
    buffer_ = o.buffer_;
    memory_ = o.memory_;
    bytes_ = o.bytes_;
    charged_ = o.charged_;
    mapped_ = o.mapped_;
    o.dev_ = nullptr;
    o.buffer_ = VK_NULL_HANDLE;
    o.memory_ = VK_NULL_HANDLE;
    o.bytes_ = 0;
    o.charged_ = 0;
    o.mapped_ = nullptr;
  }
  return *this;
}

void Buffer::release() {
  if (!dev_) return;
  const DeviceApi& api = dev_->api();
  if (mapped_) api.vkUnmapMemory(dev_->handle(), memory_);
  if (buffer_ != VK_NULL_HANDLE) api.vkDestroyBuffer(dev_->handle(), buffer_, nullptr);
  if (memory_ != VK_NULL_HANDLE) api.vkFreeMemory(dev_->handle(), memory_, nullptr);
  dev_->allocated_ -= charged_;
  charged_ = 0;
  dev_ = nullptr;
  buffer_ = VK_NULL_HANDLE;
  memory_ = VK_NULL_HANDLE;
  mapped_ = nullptr;
  bytes_ = 0;
}

// ---- Device ----

core::Result<std::unique_ptr<Device>> Device::open(std::shared_ptr<Instance> instance, int index,
                                                   DeviceOptions options) {
  QWEN35_ASSIGN_OR_RETURN(VkPhysicalDevice pd, instance->physical(index));
  QWEN35_ASSIGN_OR_RETURN(auto infos, instance->devices());
  const DeviceInfo& info = infos[size_t(index)];
  if (!info.unusable.empty())
    return core::error("[vulkan] device " + std::to_string(index) + " (" + info.name +
                       ") cannot run qwen35: " + info.unusable);
  std::unique_ptr<Device> d(new Device);
  d->instance_ = std::move(instance);
  d->info_ = info;
  d->options_ = options;
  d->physical_ = pd;
  d->queue_family_ = uint32_t(info.compute_queue_family);
  const InstanceApi& ia = d->instance_->api();
  ia.vkGetPhysicalDeviceMemoryProperties(pd, &d->memory_);

  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qi{};
  qi.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
  qi.queueFamilyIndex = d->queue_family_;
  qi.queueCount = 1;
  qi.pQueuePriorities = &priority;
  VkDeviceCreateInfo ci{};
  ci.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
  ci.queueCreateInfoCount = 1;
  ci.pQueueCreateInfos = &qi;
  QWEN35_RETURN_IF_ERROR(check(ia.vkCreateDevice(pd, &ci, nullptr, &d->device_),
                               "vkCreateDevice (" + info.name + ")"));
  bool missing = false;
  std::string which;
#define QWEN35_VK_FETCH(f)                                                       \
  d->api_.f = reinterpret_cast<PFN_##f>(ia.vkGetDeviceProcAddr(d->device_, #f)); \
  if (!d->api_.f && !missing) {                                                  \
    missing = true;                                                              \
    which = #f;                                                                  \
  }
  QWEN35_VK_DEVICE_FNS(QWEN35_VK_FETCH)
#undef QWEN35_VK_FETCH
  if (missing) return core::error("[vulkan] the driver of " + info.name + " gives no " + which);
  d->api_.vkGetDeviceQueue(d->device_, d->queue_family_, 0, &d->queue_);

  // One binding covers at most maxStorageBufferRange bytes, and one allocation at most
  // maxMemoryAllocationSize; a whole number of words.
  uint64_t limit = info.max_storage_buffer_range;
  if (info.max_allocation_bytes) limit = std::min(limit, info.max_allocation_bytes);
  if (options.max_binding_bytes) limit = std::min(limit, options.max_binding_bytes);
  d->binding_limit_ = limit & ~uint64_t(3);
  d->part_limit_ = options.max_part_bytes ? std::min(options.max_part_bytes, limit) & ~uint64_t(3)
                                          : d->binding_limit_;
  d->group_limit_ = info.max_workgroup_count[0];
  if (options.max_groups) d->group_limit_ = std::min(d->group_limit_, options.max_groups);
  if (d->part_limit_ < 4 || d->group_limit_ == 0)
    return core::error("[vulkan] device options leave no room: a binding of " +
                       std::to_string(d->binding_limit_) + " bytes, " +
                       std::to_string(d->group_limit_) + " workgroups a dispatch");

  VkPipelineCacheCreateInfo pc{};
  pc.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO;
  QWEN35_RETURN_IF_ERROR(check(d->api_.vkCreatePipelineCache(d->device_, &pc, nullptr, &d->cache_),
                               "vkCreatePipelineCache"));
  return d;
}

Device::~Device() {
  if (device_ == VK_NULL_HANDLE) return;
  if (api_.vkDeviceWaitIdle && lost_.empty()) api_.vkDeviceWaitIdle(device_);
  for (auto& [name, p] : pipelines_) {
    api_.vkDestroyPipeline(device_, p->pipeline, nullptr);
    api_.vkDestroyPipelineLayout(device_, p->layout, nullptr);
    api_.vkDestroyDescriptorSetLayout(device_, p->set_layout, nullptr);
  }
  if (cache_ != VK_NULL_HANDLE) api_.vkDestroyPipelineCache(device_, cache_, nullptr);
  if (api_.vkDestroyDevice) api_.vkDestroyDevice(device_, nullptr);
}

core::Status Device::healthy() const {
  return lost_.empty() ? core::ok_status() : core::error(lost_);
}

core::Status Device::note(VkResult r, const std::string& what) {
  core::Status st = check(r, what);
  if (r == VK_ERROR_DEVICE_LOST && lost_.empty()) {
    lost_ = st.message();
    lost_flag_.store(true, std::memory_order_release);
  }
  return st;
}

core::Status Device::before_submit() {
  QWEN35_RETURN_IF_ERROR(healthy());
  if (++submitted_ == lose_at_) simulate_loss();
  return healthy();
}

void Device::simulate_loss() {
  if (lost_.empty()) {
    lost_ = check(VK_ERROR_DEVICE_LOST,
                  "device " + std::to_string(info_.index) + " (" + info_.name + ")")
                .message();
    lost_flag_.store(true, std::memory_order_release);
  }
}

int Device::memory_type(uint32_t type_bits, MemoryKind kind) const {
  const VkMemoryPropertyFlags want =
      kind == MemoryKind::kDevice
          ? VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
          : VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  // Host staging prefers cached memory (downloads read it); device buffers take any device-local
  // type.
  const VkMemoryPropertyFlags nice =
      kind == MemoryKind::kHost ? VK_MEMORY_PROPERTY_HOST_CACHED_BIT : 0;
  int found = -1;
  for (uint32_t i = 0; i < memory_.memoryTypeCount; ++i) {
    if (!(type_bits & (1u << i))) continue;
    const VkMemoryPropertyFlags f = memory_.memoryTypes[i].propertyFlags;
    if ((f & want) != want) continue;
    if ((f & nice) == nice) return int(i);
    if (found < 0) found = int(i);
  }
  return found;
}

core::Result<Buffer> Device::buffer(uint64_t bytes, MemoryKind kind) {
  QWEN35_RETURN_IF_ERROR(healthy());
  const uint64_t size = std::max<uint64_t>(4, (bytes + 3) & ~uint64_t(3));
  if (info_.max_allocation_bytes && size > info_.max_allocation_bytes)
    return core::error("[vulkan] a buffer of " + mib(size) +
                       " exceeds the device's largest allocation (" +
                       mib(info_.max_allocation_bytes) + ")");
  Buffer b;
  b.dev_ = this;
  b.bytes_ = size;
  VkBufferCreateInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  bi.size = size;
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
             VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  QWEN35_RETURN_IF_ERROR(note(api_.vkCreateBuffer(device_, &bi, nullptr, &b.buffer_),
                              "vkCreateBuffer (" + mib(size) + ")"));
  VkMemoryRequirements req{};
  api_.vkGetBufferMemoryRequirements(device_, b.buffer_, &req);
  const int type = memory_type(req.memoryTypeBits, kind);
  if (type < 0)
    return core::error(std::string("[vulkan] ") + info_.name + " has no " +
                       (kind == MemoryKind::kDevice ? "device-local" : "host-visible coherent") +
                       " memory for a buffer");
  if (kind == MemoryKind::kDevice &&
      ((options_.memory_limit_bytes && allocated_.load() + req.size > options_.memory_limit_bytes) ||
       ++allocations_ == fail_alloc_at_))
    return check(VK_ERROR_OUT_OF_DEVICE_MEMORY, std::string("vkAllocateMemory (") + mib(req.size) +
                                                   " of device memory)");
  VkMemoryAllocateInfo ai{};
  ai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = uint32_t(type);
  QWEN35_RETURN_IF_ERROR(
      note(api_.vkAllocateMemory(device_, &ai, nullptr, &b.memory_),
           std::string("vkAllocateMemory (") + mib(req.size) +
               (kind == MemoryKind::kDevice ? " of device memory)" : " of host-visible memory)")));
  if (kind == MemoryKind::kDevice) {
    b.charged_ = req.size;
    allocated_ += req.size;
  }
  QWEN35_RETURN_IF_ERROR(
      note(api_.vkBindBufferMemory(device_, b.buffer_, b.memory_, 0), "vkBindBufferMemory"));
  if (kind == MemoryKind::kHost)
    QWEN35_RETURN_IF_ERROR(
        note(api_.vkMapMemory(device_, b.memory_, 0, VK_WHOLE_SIZE, 0, &b.mapped_), "vkMapMemory"));
  return b;
}

core::Result<const Pipeline*> Device::pipeline(std::string_view shader) {
  QWEN35_RETURN_IF_ERROR(healthy());
  if (auto it = pipelines_.find(shader); it != pipelines_.end())
    return static_cast<const Pipeline*>(it->second.get());
  const std::string_view spirv = shader_spirv(shader);
  if (spirv.empty())
    return core::error("[vulkan] no shader '" + std::string(shader) + "' in this build");
  const uint32_t nb = spirv_bindings(spirv);
  if (nb == 0 || nb > kMaxBindings)
    return core::error("[vulkan] shader '" + std::string(shader) + "' declares " +
                       std::to_string(nb) + " bindings");
  auto p = std::make_unique<Pipeline>();
  p->bindings = nb;
  p->readonly = spirv_readonly_bindings(spirv);
  // On failure, the handles made so far are destroyed here (p is not kept).
  auto cleanup = [&]() {
    if (p->pipeline != VK_NULL_HANDLE) api_.vkDestroyPipeline(device_, p->pipeline, nullptr);
    if (p->layout != VK_NULL_HANDLE) api_.vkDestroyPipelineLayout(device_, p->layout, nullptr);
    if (p->set_layout != VK_NULL_HANDLE)
      api_.vkDestroyDescriptorSetLayout(device_, p->set_layout, nullptr);
  };
  std::vector<VkDescriptorSetLayoutBinding> binds(nb);
  for (uint32_t i = 0; i < nb; ++i) {
    binds[i] = {};
    binds[i].binding = i;
    binds[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    binds[i].descriptorCount = 1;
    binds[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo dl{};
  dl.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
  dl.bindingCount = nb;
  dl.pBindings = binds.data();
  core::Status st = note(api_.vkCreateDescriptorSetLayout(device_, &dl, nullptr, &p->set_layout),
                         "vkCreateDescriptorSetLayout");
  VkPushConstantRange push{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes};
  if (st.ok()) {
    VkPipelineLayoutCreateInfo pl{};
    pl.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
    pl.setLayoutCount = 1;
    pl.pSetLayouts = &p->set_layout;
    pl.pushConstantRangeCount = 1;
    pl.pPushConstantRanges = &push;
    st = note(api_.vkCreatePipelineLayout(device_, &pl, nullptr, &p->layout),
              "vkCreatePipelineLayout");
  }
  VkShaderModule module = VK_NULL_HANDLE;
  if (st.ok()) {
    VkShaderModuleCreateInfo sm{};
    sm.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
    sm.codeSize = spirv.size();
    sm.pCode = reinterpret_cast<const uint32_t*>(spirv.data());  // embedded 4-byte aligned
    st = note(api_.vkCreateShaderModule(device_, &sm, nullptr, &module),
              "vkCreateShaderModule (" + std::string(shader) + ")");
  }
  if (st.ok()) {
    VkComputePipelineCreateInfo cp{};
    cp.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
    cp.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    cp.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    cp.stage.module = module;
    cp.stage.pName = "main";
    cp.layout = p->layout;
    st = note(api_.vkCreateComputePipelines(device_, cache_, 1, &cp, nullptr, &p->pipeline),
              "vkCreateComputePipelines (" + std::string(shader) + ")");
  }
  if (module != VK_NULL_HANDLE) api_.vkDestroyShaderModule(device_, module, nullptr);
  if (!st.ok()) {
    cleanup();
    return st;
  }
  const Pipeline* out = p.get();
  pipelines_.emplace(std::string(shader), std::move(p));
  return out;
}

namespace {
constexpr uint64_t kTransferChunk = 64ull << 20;
}

core::Status Device::upload(const Buffer& dst, uint64_t offset, const void* src, uint64_t bytes) {
  if (offset + bytes > dst.bytes())
    return core::error("[vulkan] upload of " + std::to_string(bytes) + " bytes at " +
                       std::to_string(offset) + " past the end of a buffer of " +
                       std::to_string(dst.bytes()));
  Recorder rec(*this);
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(kTransferChunk, bytes - done);
    QWEN35_RETURN_IF_ERROR(rec.begin());
    rec.stage_in(static_cast<const uint8_t*>(src) + done, n, {&dst, offset + done, n});
    QWEN35_RETURN_IF_ERROR(rec.submit());
    done += n;
  }
  return core::ok_status();
}

core::Status Device::download(const Buffer& src, uint64_t offset, void* dst, uint64_t bytes) {
  if (offset + bytes > src.bytes())
    return core::error("[vulkan] download of " + std::to_string(bytes) + " bytes at " +
                       std::to_string(offset) + " past the end of a buffer of " +
                       std::to_string(src.bytes()));
  Recorder rec(*this);
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(kTransferChunk, bytes - done);
    QWEN35_RETURN_IF_ERROR(rec.begin());
    rec.stage_out({&src, offset + done, n}, n, static_cast<uint8_t*>(dst) + done);
    QWEN35_RETURN_IF_ERROR(rec.submit());
    done += n;
  }
  return core::ok_status();
}

}  // namespace qwen35::vulkan
