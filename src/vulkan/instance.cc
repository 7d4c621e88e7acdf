#include "vulkan/instance.h"

#include <algorithm>
#include <cstring>

namespace qwen35::vulkan {

std::string DeviceInfo::api_string() const {
  return std::to_string(VK_API_VERSION_MAJOR(api_version)) + "." +
         std::to_string(VK_API_VERSION_MINOR(api_version)) + "." +
         std::to_string(VK_API_VERSION_PATCH(api_version));
}

core::Result<std::shared_ptr<Instance>> Instance::create() {
  QWEN35_ASSIGN_OR_RETURN(auto loader, Loader::open());
  const GlobalApi& g = loader->api();
  uint32_t version = 0;
  QWEN35_RETURN_IF_ERROR(
      check(g.vkEnumerateInstanceVersion(&version), "vkEnumerateInstanceVersion"));
  if (version < VK_API_VERSION_1_1)
    return core::error("[vulkan] the loader is Vulkan " +
                       std::to_string(VK_API_VERSION_MAJOR(version)) + "." +
                       std::to_string(VK_API_VERSION_MINOR(version)) + "; 1.1 or later is needed");
  // The newest version whose structures we read; a 1.1 loader gets 1.1.
  version = std::min<uint32_t>(version, VK_API_VERSION_1_3);
  VkApplicationInfo app{};
  app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  app.pApplicationName = "qwen35";
  app.pEngineName = "qwen35.cpp";
  app.apiVersion = version;
  VkInstanceCreateInfo ci{};
  ci.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  ci.pApplicationInfo = &app;
  std::shared_ptr<Instance> inst(new Instance);
  inst->loader_ = std::move(loader);
  inst->version_ = version;
  VkResult r = inst->loader_->api().vkCreateInstance(&ci, nullptr, &inst->instance_);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
    return core::error(
        "[vulkan] no Vulkan driver (vkCreateInstance: VK_ERROR_INCOMPATIBLE_DRIVER; install "
        "mesa-vulkan-drivers or a GPU driver)");
  QWEN35_RETURN_IF_ERROR(check(r, "vkCreateInstance"));
  const auto gipa = inst->loader_->api().vkGetInstanceProcAddr;
  bool missing = false;
  std::string which;
#define QWEN35_VK_FETCH(f)                                             \
  inst->api_.f = reinterpret_cast<PFN_##f>(gipa(inst->instance_, #f)); \
  if (!inst->api_.f && !missing) {                                     \
    missing = true;                                                    \
    which = #f;                                                        \
  }
  QWEN35_VK_INSTANCE_FNS(QWEN35_VK_FETCH)
#undef QWEN35_VK_FETCH
  if (missing) {
    if (inst->api_.vkDestroyInstance) inst->api_.vkDestroyInstance(inst->instance_, nullptr);
    inst->instance_ = VK_NULL_HANDLE;
    return core::error("[vulkan] the loader gives no " + which);
  }
  return inst;
}

Instance::~Instance() {
  if (instance_ != VK_NULL_HANDLE && api_.vkDestroyInstance)
    api_.vkDestroyInstance(instance_, nullptr);
}

core::Result<VkPhysicalDevice> Instance::physical(int index) const {
  uint32_t n = 0;
  QWEN35_RETURN_IF_ERROR(
      check(api_.vkEnumeratePhysicalDevices(instance_, &n, nullptr), "vkEnumeratePhysicalDevices"));
  std::vector<VkPhysicalDevice> pds(n);
  QWEN35_RETURN_IF_ERROR(check(api_.vkEnumeratePhysicalDevices(instance_, &n, pds.data()),
                               "vkEnumeratePhysicalDevices"));
  if (index < 0 || uint32_t(index) >= n)
    return core::error("[vulkan] no Vulkan device " + std::to_string(index) + " (" +
                       std::to_string(n) + (n == 1 ? " device" : " devices") +
                       " found; `qwen35 devices` lists them)");
  return pds[size_t(index)];
}

core::Result<std::vector<DeviceInfo>> Instance::devices() const {
  uint32_t n = 0;
  VkResult r = api_.vkEnumeratePhysicalDevices(instance_, &n, nullptr);
  if (r == VK_ERROR_INITIALIZATION_FAILED)
    return std::vector<DeviceInfo>{};  // no driver, no device
  QWEN35_RETURN_IF_ERROR(check(r, "vkEnumeratePhysicalDevices"));
  std::vector<VkPhysicalDevice> pds(n);
  QWEN35_RETURN_IF_ERROR(check(api_.vkEnumeratePhysicalDevices(instance_, &n, pds.data()),
                               "vkEnumeratePhysicalDevices"));
  std::vector<DeviceInfo> out;
  for (uint32_t i = 0; i < n; ++i) out.push_back(describe(pds[i], int(i)));
  return out;
}

namespace {
// A Vulkan structure with its sType set and every other member zero.
template <typename T>
T typed(VkStructureType t) {
  T v{};
  v.sType = t;
  return v;
}

const char* type_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return "CPU";
    default:
      return "other";
  }
}
}  // namespace

DeviceInfo Instance::describe(VkPhysicalDevice pd, int index) const {
  DeviceInfo d;
  d.index = index;
  VkPhysicalDeviceProperties base{};
  api_.vkGetPhysicalDeviceProperties(pd, &base);
  // Structures of a version are read only where both the instance and the device have it.
  const uint32_t v = std::min(base.apiVersion, version_);
  d.api_version = base.apiVersion;
  d.name = base.deviceName;
  d.type = type_name(base.deviceType);
  d.vendor_id = base.vendorID;
  d.device_id = base.deviceID;
  const VkPhysicalDeviceLimits& lim = base.limits;
  d.max_storage_buffer_range = lim.maxStorageBufferRange;
  d.max_shared_memory = lim.maxComputeSharedMemorySize;
  d.max_workgroup_invocations = lim.maxComputeWorkGroupInvocations;
  for (int i = 0; i < 3; ++i) d.max_workgroup_count[i] = lim.maxComputeWorkGroupCount[i];
  d.max_push_constants = lim.maxPushConstantsSize;
  d.storage_offset_alignment = lim.minStorageBufferOffsetAlignment;

  uint32_t n_ext = 0;
  std::vector<VkExtensionProperties> exts;
  if (api_.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n_ext, nullptr) == VK_SUCCESS) {
    exts.resize(n_ext);
    if (api_.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n_ext, exts.data()) != VK_SUCCESS)
      exts.clear();
    exts.resize(n_ext);
  }
  auto has_ext = [&](const char* name) {
    for (const auto& e : exts)
      if (std::strcmp(e.extensionName, name) == 0) return true;
    return false;
  };

  if (v >= VK_API_VERSION_1_1) {
    auto p2 = typed<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
    auto sub = typed<VkPhysicalDeviceSubgroupProperties>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES);
    auto m3 = typed<VkPhysicalDeviceMaintenance3Properties>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES);
    auto drv = typed<VkPhysicalDeviceDriverProperties>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES);
    p2.pNext = &sub;
    sub.pNext = &m3;
    if (v >= VK_API_VERSION_1_2) m3.pNext = &drv;
    api_.vkGetPhysicalDeviceProperties2(pd, &p2);
    d.subgroup_size = sub.subgroupSize;
    d.max_allocation_bytes = m3.maxMemoryAllocationSize;
    if (v >= VK_API_VERSION_1_2) {
      d.driver = drv.driverName;
      if (drv.driverInfo[0]) d.driver += std::string(" (") + drv.driverInfo + ")";
    }

    auto f2 = typed<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
    auto s16 = typed<VkPhysicalDevice16BitStorageFeatures>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES);
    auto s8 = typed<VkPhysicalDevice8BitStorageFeatures>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES);
    auto fi = typed<VkPhysicalDeviceShaderFloat16Int8Features>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES);
    auto dot = typed<VkPhysicalDeviceShaderIntegerDotProductFeatures>(
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES);
    f2.pNext = &s16;
    void** tail = &s16.pNext;
    if (v >= VK_API_VERSION_1_2) {
      *tail = &s8;
      s8.pNext = &fi;
      tail = &fi.pNext;
    }
    const bool dot_known = v >= VK_API_VERSION_1_3 || has_ext("VK_KHR_shader_integer_dot_product");
    if (dot_known) *tail = &dot;
    api_.vkGetPhysicalDeviceFeatures2(pd, &f2);
    d.storage_16bit = s16.storageBuffer16BitAccess;
    if (v >= VK_API_VERSION_1_2) {
      d.storage_8bit = s8.storageBuffer8BitAccess;
      d.float16 = fi.shaderFloat16;
      d.int8 = fi.shaderInt8;
    }
    d.integer_dot_product = dot_known && dot.shaderIntegerDotProduct;
  }
  d.cooperative_matrix =
      has_ext("VK_KHR_cooperative_matrix") || has_ext("VK_NV_cooperative_matrix");

  VkPhysicalDeviceMemoryProperties mem{};
  api_.vkGetPhysicalDeviceMemoryProperties(pd, &mem);
  for (uint32_t i = 0; i < mem.memoryHeapCount; ++i)
    d.heaps.push_back({mem.memoryHeaps[i].size,
                       (mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0});

  uint32_t nq = 0;
  api_.vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qs(nq);
  api_.vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, qs.data());
  // A compute queue; one without graphics first (a dedicated compute family, where there is one).
  for (int pass = 0; pass < 2 && d.compute_queue_family < 0; ++pass)
    for (uint32_t i = 0; i < nq; ++i) {
      const VkQueueFlags f = qs[i].queueFlags;
      if ((f & VK_QUEUE_COMPUTE_BIT) && qs[i].queueCount > 0 &&
          (pass == 1 || !(f & VK_QUEUE_GRAPHICS_BIT))) {
        d.compute_queue_family = int(i);
        break;
      }
    }
  if (d.compute_queue_family >= 0) {
    d.timestamp_bits = qs[size_t(d.compute_queue_family)].timestampValidBits;
    d.timestamp_period = lim.timestampPeriod;
  }

  if (v < VK_API_VERSION_1_1)
    d.unusable = "Vulkan " + d.api_string() + "; 1.1 or later is needed";
  else if (d.compute_queue_family < 0)
    d.unusable = "no compute queue";
  else if (d.max_push_constants < kPushBytes)
    d.unusable = "push constants below 128 bytes";
  else if (d.max_workgroup_invocations < kWorkgroup)
    d.unusable = "workgroups below 64 invocations";
  else if (d.max_shared_memory < 32768)  // the chunked delta rule holds a 64×64 matrix and more
    d.unusable = "shared memory below 32 KiB";
  return d;
}

}  // namespace qwen35::vulkan
