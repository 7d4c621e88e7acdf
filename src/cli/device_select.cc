#include "cli/device_select.h"

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

core::Status use_device(const std::string& value, model::Model& m, bool fast) {
  QWEN35_ASSIGN_OR_RETURN(flags::DeviceChoice d, flags::parse_device(value));
  if (!d.vulkan) return core::ok_status();
#ifdef QWEN35_HAVE_VULKAN
  if (fast)
    return core::error("--device " + value +
                       ": --fast does not run on a Vulkan device yet (the device runs the exact mode)");
  auto inst = vulkan::Instance::create();
  if (!inst.ok()) return core::error("--device " + value + ": " + inst.message());
  auto dev = vulkan::Device::open(*inst, d.index);
  if (!dev.ok()) return core::error("--device " + value + ": " + dev.message());
  // Refused before anything is uploaded: the weights, one sequence's state and a step's
  // workspace (inspect --device vulkan plans a context and slots).
  const vkmodel::DeviceMemoryPlan plan =
      vkmodel::plan_device_memory(m.weights(), 0, 1, 256, false, (*dev)->part_limit(), m.kv_types());
  if (auto st = vkmodel::check_fits(plan, (*dev)->info()); !st.ok())
    return core::error("--device " + value + ": " + st.message());
  auto ex = vkmodel::VulkanExecutor::create(std::move(*dev), m.weights());
  if (!ex.ok()) return core::error("--device " + value + ": " + ex.message());
  m.replace_executor(std::move(*ex));
  return core::ok_status();
#else
  (void)m, (void)fast;
  return check_device(value);
#endif
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
#endif
  return core::error("--device " + value + ": not a Vulkan device");
}

}  // namespace qwen35::cli
