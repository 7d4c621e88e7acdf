// The Vulkan entry points this backend calls, as tables of function pointers. The binary never
// links libvulkan: the loader library is opened at run time (vulkan/loader.h) and every entry
// point is fetched through vkGetInstanceProcAddr / vkGetDeviceProcAddr. VK_NO_PROTOTYPES (set for
// the whole layer in cmake/vulkan.cmake) keeps the headers from declaring any function.
#pragma once

#ifndef VK_NO_PROTOTYPES
#define VK_NO_PROTOTYPES
#endif
#include <vulkan/vulkan.h>

#include <string>

#include "core/result.h"

namespace qwen35::vulkan {

// Before an instance exists (fetched with a null instance).
#define QWEN35_VK_GLOBAL_FNS(X) \
  X(vkCreateInstance)           \
  X(vkEnumerateInstanceVersion) \
  X(vkEnumerateInstanceExtensionProperties)

// Of an instance and its physical devices (Vulkan 1.1 core).
#define QWEN35_VK_INSTANCE_FNS(X)             \
  X(vkDestroyInstance)                        \
  X(vkEnumeratePhysicalDevices)               \
  X(vkGetPhysicalDeviceProperties)            \
  X(vkGetPhysicalDeviceProperties2)           \
  X(vkGetPhysicalDeviceFeatures2)             \
  X(vkGetPhysicalDeviceMemoryProperties)      \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkEnumerateDeviceExtensionProperties)     \
  X(vkCreateDevice)                           \
  X(vkGetDeviceProcAddr)

// Of a logical device: memory, buffers, pipelines, descriptors, commands, the queue, timestamps.
#define QWEN35_VK_DEVICE_FNS(X)    \
  X(vkDestroyDevice)               \
  X(vkGetDeviceQueue)              \
  X(vkDeviceWaitIdle)              \
  X(vkCreateBuffer)                \
  X(vkDestroyBuffer)               \
  X(vkGetBufferMemoryRequirements) \
  X(vkAllocateMemory)              \
  X(vkFreeMemory)                  \
  X(vkBindBufferMemory)            \
  X(vkMapMemory)                   \
  X(vkUnmapMemory)                 \
  X(vkCreateShaderModule)          \
  X(vkDestroyShaderModule)         \
  X(vkCreateDescriptorSetLayout)   \
  X(vkDestroyDescriptorSetLayout)  \
  X(vkCreatePipelineLayout)        \
  X(vkDestroyPipelineLayout)       \
  X(vkCreatePipelineCache)         \
  X(vkDestroyPipelineCache)        \
  X(vkCreateComputePipelines)      \
  X(vkDestroyPipeline)             \
  X(vkCreateDescriptorPool)        \
  X(vkDestroyDescriptorPool)       \
  X(vkResetDescriptorPool)         \
  X(vkAllocateDescriptorSets)      \
  X(vkUpdateDescriptorSets)        \
  X(vkCreateCommandPool)           \
  X(vkDestroyCommandPool)          \
  X(vkResetCommandPool)            \
  X(vkAllocateCommandBuffers)      \
  X(vkBeginCommandBuffer)          \
  X(vkEndCommandBuffer)            \
  X(vkCmdBindPipeline)             \
  X(vkCmdBindDescriptorSets)       \
  X(vkCmdPushConstants)            \
  X(vkCmdDispatch)                 \
  X(vkCmdPipelineBarrier)          \
  X(vkCmdCopyBuffer)               \
  X(vkCmdFillBuffer)               \
  X(vkQueueSubmit)                 \
  X(vkCreateFence)                 \
  X(vkDestroyFence)                \
  X(vkWaitForFences)               \
  X(vkResetFences)                 \
  X(vkCreateQueryPool)             \
  X(vkDestroyQueryPool)            \
  X(vkCmdResetQueryPool)           \
  X(vkCmdWriteTimestamp)           \
  X(vkGetQueryPoolResults)

#define QWEN35_VK_MEMBER(f) PFN_##f f = nullptr;
struct GlobalApi {
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  QWEN35_VK_GLOBAL_FNS(QWEN35_VK_MEMBER)
};
struct InstanceApi {
  QWEN35_VK_INSTANCE_FNS(QWEN35_VK_MEMBER)
};
struct DeviceApi {
  QWEN35_VK_DEVICE_FNS(QWEN35_VK_MEMBER)
};
#undef QWEN35_VK_MEMBER

// "VK_ERROR_DEVICE_LOST", "VK_ERROR_OUT_OF_DEVICE_MEMORY", ... (null for a result not named here).
const char* result_name(VkResult r);
// OK for VK_SUCCESS; else "[vulkan] <what>: <result name>" plus a hint for the results a user can
// act on (lost device, out of memory).
core::Status check(VkResult r, const std::string& what);

}  // namespace qwen35::vulkan
