#include "cli/device_select.h"

#include "cli/flags.h"
#ifdef QWEN35_HAVE_VULKAN
#include "vulkan/instance.h"
#endif

namespace qwen35::cli {

bool has_vulkan_backend() {
#ifdef QWEN35_HAVE_VULKAN
  return true;
#else
  return false;
#endif
}

core::Status check_device(const std::string& value, bool plan_only) {
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
  if (plan_only) return core::ok_status();
  return core::error("--device " + value + " (" + info.name +
                     "): the forward pass does not run on a Vulkan device yet; use --device cpu");
#else
  (void)plan_only;
  return core::error("--device " + value +
                     ": this build has no Vulkan backend (it was built without the "
                     "Vulkan headers or glslc)");
#endif
}

}  // namespace qwen35::cli
