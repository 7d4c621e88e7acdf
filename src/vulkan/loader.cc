#include "vulkan/loader.h"

#include <dlfcn.h>

#include <cstdlib>

namespace qwen35::vulkan {

core::Result<std::unique_ptr<Loader>> Loader::open() {
  const char* env = std::getenv("QWEN35_VULKAN_LOADER");
  const std::string path = env && *env ? env : "libvulkan.so.1";
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* why = dlerror();
    return core::error("[vulkan] no Vulkan loader: cannot open " + path + " (" +
                       (why ? why : "unknown reason") + "; install libvulkan1)");
  }
  std::unique_ptr<Loader> l(new Loader);
  l->handle_ = h;
  l->path_ = path;
  l->api_.vkGetInstanceProcAddr =
      reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(h, "vkGetInstanceProcAddr"));
  if (!l->api_.vkGetInstanceProcAddr)
    return core::error("[vulkan] " + path + " has no vkGetInstanceProcAddr: not a Vulkan loader");
  const auto gipa = l->api_.vkGetInstanceProcAddr;
#define QWEN35_VK_FETCH(f) l->api_.f = reinterpret_cast<PFN_##f>(gipa(nullptr, #f));
  QWEN35_VK_GLOBAL_FNS(QWEN35_VK_FETCH)
#undef QWEN35_VK_FETCH
  if (!l->api_.vkCreateInstance)
    return core::error("[vulkan] the loader " + path + " gives no vkCreateInstance");
  // vkEnumerateInstanceVersion is absent from Vulkan 1.0 loaders, which we do not run on.
  if (!l->api_.vkEnumerateInstanceVersion)
    return core::error("[vulkan] the loader " + path +
                       " is Vulkan 1.0; Vulkan 1.1 or later is needed");
  return l;
}

Loader::~Loader() {
  if (handle_) dlclose(handle_);
}

const char* result_name(VkResult r) {
  switch (r) {
    case VK_SUCCESS:
      return "VK_SUCCESS";
    case VK_NOT_READY:
      return "VK_NOT_READY";
    case VK_TIMEOUT:
      return "VK_TIMEOUT";
    case VK_INCOMPLETE:
      return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY:
      return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
      return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED:
      return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST:
      return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED:
      return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT:
      return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT:
      return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT:
      return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS:
      return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FORMAT_NOT_SUPPORTED:
      return "VK_ERROR_FORMAT_NOT_SUPPORTED";
    case VK_ERROR_FRAGMENTED_POOL:
      return "VK_ERROR_FRAGMENTED_POOL";
    case VK_ERROR_OUT_OF_POOL_MEMORY:
      return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_ERROR_INVALID_SHADER_NV:
      return "VK_ERROR_INVALID_SHADER_NV";
    default:
      return nullptr;
  }
}

core::Status check(VkResult r, const std::string& what) {
  if (r == VK_SUCCESS) return core::ok_status();
  const char* name = result_name(r);
  std::string msg =
      "[vulkan] " + what + ": " + (name ? name : "VkResult " + std::to_string(int(r)));
  if (r == VK_ERROR_DEVICE_LOST)
    msg += " (the device was lost: its driver reset it or it hung)";
  else if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY)
    msg += " (device memory is full)";
  else if (r == VK_ERROR_OUT_OF_HOST_MEMORY)
    msg += " (host memory is full)";
  return core::error(msg);
}

}  // namespace qwen35::vulkan
