#include "cli/device_select.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cli/flags.h"
#ifdef QWEN35_HAVE_VULKAN
#include "vkmodel/memory_plan.h"
#include "vkmodel/vulkan_executor.h"
#include "vulkan/device.h"
#include "vulkan/instance.h"
#include "vulkan/probe.h"
#endif

namespace qwen35::cli {

bool has_vulkan_backend() {
#ifdef QWEN35_HAVE_VULKAN
  return true;
#else
  return false;
#endif
}

core::Status check_device(const std::string& value) {
  QWEN35_ASSIGN_OR_RETURN(flags::DeviceChoice d, flags::parse_device(value));
  if (!d.vulkan) return core::ok_status();
#ifdef QWEN35_HAVE_VULKAN
  auto inst = vulkan::Instance::create();
  if (!inst.ok()) return core::error("--device " + value + ": " + inst.message());
  auto devices = (*inst)->devices();
  if (!devices.ok()) return core::error("--device " + value + ": " + devices.message());
  if (devices->empty()) return core::error("--device " + value + ": no Vulkan device found");
  if (size_t(d.index) >= devices->size())
    return core::error("--device " + value + ": no Vulkan device " + std::to_string(d.index) +
                       " (" +
                       (devices->size() == 1 ? std::string("one device, 0")
                                             : std::to_string(devices->size()) + " devices, 0.." +
                                                   std::to_string(devices->size() - 1)) +
                       "; `qwen35 devices` lists them)");
  const vulkan::DeviceInfo& info = (*devices)[size_t(d.index)];
  if (!info.unusable.empty())
    return core::error("--device " + value + ": " + info.name +
                       " cannot run qwen35: " + info.unusable);
  return core::ok_status();
#else
  return core::error("--device " + value +
                     ": this build has no Vulkan backend (it was built without the "
                     "Vulkan headers or glslc)");
#endif
}

#ifdef QWEN35_HAVE_VULKAN
namespace {

uint64_t env_u64(const char* name, uint64_t scale) {
  const char* e = std::getenv(name);
  return e && *e ? uint64_t(std::strtoull(e, nullptr, 10)) * scale : 0;
}

class VulkanLink final : public DeviceLink {
 public:
  VulkanLink(std::shared_ptr<vulkan::Device> dev, vkmodel::VulkanExecutor* ex,
             const model::ModelWeights& w, kernels::KvTypes kv)
      : dev_(std::move(dev)), ex_(ex), w_(w), kv_(kv) {}
  std::string failure() const override { return dev_->lost() ? dev_->lost_message() : ""; }
  std::string metrics() const override {
    const vkmodel::VulkanExecutor::Memory m = ex_->memory();
    std::string out =
        "# HELP qwen35_device_memory_bytes device memory held, by use (allocated: every live "
        "device allocation)\n# TYPE qwen35_device_memory_bytes gauge\n";
    for (const auto& [use, v] : {std::pair<const char*, uint64_t>{"weights", m.weights},
                                 {"kv", m.kv},
                                 {"states", m.states},
                                 {"snapshots", m.snapshots},
                                 {"workspace", m.workspace},
                                 {"allocated", m.allocated}})
      out += std::string("qwen35_device_memory_bytes{use=\"") + use + "\"} " + std::to_string(v) +
             "\n";
    return out;
  }
  core::Status check_serving(int64_t kv_positions, int64_t parallel, int64_t step_tokens,
                             bool mtp, uint64_t snapshot_bytes) const override {
    // The plan's KV counts ctx positions for each of `parallel` sequences: the pool's positions
    // spread over them.
    const int64_t ctx = (kv_positions + parallel - 1) / std::max<int64_t>(parallel, 1);
    vkmodel::DeviceMemoryPlan plan =
        vkmodel::plan_device_memory(w_, ctx, parallel, step_tokens, mtp, dev_->part_limit(), kv_);
    plan.snapshots = snapshot_bytes;
    vulkan::DeviceInfo info = dev_->info();
    if (const uint64_t cap = dev_->options().memory_limit_bytes; cap) {  // the test hook's device
      for (auto& h : info.heaps) h.bytes = std::min<uint64_t>(h.bytes, cap);
    }
    return vkmodel::check_fits(plan, info);
  }

 private:
  std::shared_ptr<vulkan::Device> dev_;
  vkmodel::VulkanExecutor* ex_;  // owned by the model, which outlives the link's users
  const model::ModelWeights& w_;
  kernels::KvTypes kv_;
};

}  // namespace
#endif

core::Result<std::shared_ptr<DeviceLink>> use_device(const std::string& value, model::Model& m,
                                                     bool fast) {
  QWEN35_ASSIGN_OR_RETURN(flags::DeviceChoice d, flags::parse_device(value));
  if (!d.vulkan) return std::shared_ptr<DeviceLink>();
#ifdef QWEN35_HAVE_VULKAN
  if (fast)
    return core::error("--device " + value +
                       ": --fast does not run on a Vulkan device yet (the device runs the exact mode)");
  auto inst = vulkan::Instance::create();
  if (!inst.ok()) return core::error("--device " + value + ": " + inst.message());
  vulkan::DeviceOptions opts;
  opts.memory_limit_bytes = env_u64("QWEN35_TEST_VULKAN_MEMORY_MB", 1ull << 20);
  auto dev = vulkan::Device::open(*inst, d.index, opts);
  if (!dev.ok()) return core::error("--device " + value + ": " + dev.message());
  std::shared_ptr<vulkan::Device> shared = std::move(*dev);
  // Refused before anything is uploaded: the weights, one sequence's state and a step's
  // workspace (inspect --device vulkan plans a context and slots; serve checks its own).
  const vkmodel::DeviceMemoryPlan plan =
      vkmodel::plan_device_memory(m.weights(), 0, 1, 256, false, shared->part_limit(), m.kv_types());
  vulkan::DeviceInfo info = shared->info();
  if (opts.memory_limit_bytes)
    for (auto& h : info.heaps) h.bytes = std::min<uint64_t>(h.bytes, opts.memory_limit_bytes);
  if (auto st = vkmodel::check_fits(plan, info); !st.ok())
    return core::error("--device " + value + ": " + st.message());
  // Test hook: the Nth device allocation of the upload fails (memory the plan said was there).
  if (const uint64_t n = env_u64("QWEN35_TEST_VULKAN_FAIL_UPLOAD_AT", 1)) shared->fail_allocation_at(n);
  auto ex = vkmodel::VulkanExecutor::create(shared, m.weights());
  if (!ex.ok()) return core::error("--device " + value + ": " + ex.message());
  if (const uint64_t n = env_u64("QWEN35_TEST_VULKAN_LOSE_AT", 1)) shared->lose_at(n);
  if (const uint64_t n = env_u64("QWEN35_TEST_VULKAN_FAIL_ALLOC_AT", 1)) shared->fail_allocation_at(n);
  auto link = std::make_shared<VulkanLink>(shared, ex->get(), m.weights(), m.kv_types());
  m.replace_executor(std::move(*ex));
  return std::shared_ptr<DeviceLink>(std::move(link));
#else
  (void)m, (void)fast;
  QWEN35_RETURN_IF_ERROR(check_device(value));
  return std::shared_ptr<DeviceLink>();
#endif
}

namespace {
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t p = 0;
  for (size_t c; (c = s.find(',', p)) != std::string::npos; p = c + 1) out.push_back(s.substr(p, c - p));
  out.push_back(s.substr(p));
  return out;
}

// "vulkan:0,1" → {"vulkan:0", "vulkan:1"}: a bare number after a vulkan item is another device.
core::Result<std::vector<std::string>> device_list(const std::string& value) {
  std::vector<std::string> items = split_commas(value);
  bool after_vulkan = false;
  for (std::string& it : items) {
    if (after_vulkan && !it.empty() && it.find_first_not_of("0123456789") == std::string::npos)
      it = "vulkan:" + it;
    auto d = flags::parse_device(it);
    if (!d.ok()) return core::error(items.size() > 1 ? "--device '" + value + "': " + d.message() : d.message());
    after_vulkan = d->vulkan;
  }
  return items;
}
}  // namespace

core::Result<std::string> device_for_rank(const std::string& value, int rank, int world) {
  QWEN35_ASSIGN_OR_RETURN(std::vector<std::string> items, device_list(value));
  const std::string& mine = items[size_t(std::max(rank, 0)) % items.size()];
#ifdef QWEN35_HAVE_VULKAN
  if (mine == "vulkan" && world > 1) {
    auto inst = vulkan::Instance::create();
    if (!inst.ok()) return core::error("--device vulkan: " + inst.message());
    auto devices = (*inst)->devices();
    if (!devices.ok()) return core::error("--device vulkan: " + devices.message());
    if (devices->empty()) return core::error("--device vulkan: no Vulkan device found");
    return "vulkan:" + std::to_string(rank % int(devices->size()));
  }
#endif
  (void)world;
  return mine;
}

std::string device_identity(const std::string& value) {
  if (value.find(',') != std::string::npos) {
    auto items = device_list(value);
    if (!items.ok()) return value;
    std::string joined;
    for (const std::string& it : *items) joined += (joined.empty() ? "" : ",") + device_identity(it);
    return joined;
  }
  auto d = flags::parse_device(value);
  if (!d.ok() || !d->vulkan) return "cpu";
#ifdef QWEN35_HAVE_VULKAN
  auto inst = vulkan::Instance::create();
  if (inst.ok()) {
    auto devices = (*inst)->devices();
    if (devices.ok() && size_t(d->index) < devices->size()) {
      const vulkan::DeviceInfo& i = (*devices)[size_t(d->index)];
      char ids[32];
      std::snprintf(ids, sizeof ids, " %04x:%04x", i.vendor_id, i.device_id);
      return "vulkan " + i.name + " " + i.driver + ids;
    }
  }
#endif
  return value;
}

core::Result<std::pair<std::string, double>> device_bandwidth(const std::string& value) {
  QWEN35_ASSIGN_OR_RETURN(flags::DeviceChoice d, flags::parse_device(value));
#ifdef QWEN35_HAVE_VULKAN
  if (d.vulkan) {
    auto inst = vulkan::Instance::create();
    if (!inst.ok()) return core::error("--device " + value + ": " + inst.message());
    auto dev = vulkan::Device::open(*inst, d.index);
    if (!dev.ok()) return core::error("--device " + value + ": " + dev.message());
    auto bw = vulkan::probe_bandwidth(**dev, 256ull << 20);
    if (!bw.ok()) return core::error("--device " + value + ": " + bw.message());
    return std::make_pair((*dev)->info().name, *bw / 1e9);
  }
#else
  (void)d;  // parsed for its error alone: no device is built in
#endif
  return core::error("--device " + value + ": not a Vulkan device");
}

}  // namespace qwen35::cli
