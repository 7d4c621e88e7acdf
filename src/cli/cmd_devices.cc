// qwen35 devices: the Vulkan devices this machine has, what we read of each, and whether we can
// run on it. No loader, no device, or a build without the backend: one line, exit 0.
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cli/device_select.h"
#include "cli/flags.h"
#ifdef QWEN35_HAVE_VULKAN
#include "vulkan/instance.h"
#endif

namespace qwen35::cli {

namespace {
#ifdef QWEN35_HAVE_VULKAN
std::string size_text(uint64_t bytes) {
  char buf[32];
  if (bytes >= (1ull << 30))
    std::snprintf(buf, sizeof buf, "%.1f GiB", double(bytes) / double(1ull << 30));
  else
    std::snprintf(buf, sizeof buf, "%llu MiB", static_cast<unsigned long long>(bytes >> 20));
  return buf;
}

const char* yes(bool b) { return b ? "yes" : "no"; }

void print(const vulkan::DeviceInfo& d) {
  std::printf("device %d: %s (%s, Vulkan %s)\n", d.index, d.name.c_str(), d.type.c_str(),
              d.api_string().c_str());
  std::printf("  driver: %s\n", d.driver.empty() ? "(not reported)" : d.driver.c_str());
  std::printf("  memory heaps:");
  for (size_t i = 0; i < d.heaps.size(); ++i)
    std::printf("%s %s%s", i ? "," : "", size_text(d.heaps[i].bytes).c_str(),
                d.heaps[i].device_local ? " device-local" : "");
  std::printf("\n  subgroup size: %u\n", d.subgroup_size);
  std::printf(
      "  features: int8 storage %s, fp16 storage %s, fp16 arithmetic %s, int8 arithmetic %s, "
      "integer dot product %s, cooperative matrix %s\n",
      yes(d.storage_8bit), yes(d.storage_16bit), yes(d.float16), yes(d.int8),
      yes(d.integer_dot_product), yes(d.cooperative_matrix));
  std::printf("  limits: storage binding %s, allocation %s, shared memory %u KiB\n",
              size_text(d.max_storage_buffer_range).c_str(),
              d.max_allocation_bytes ? size_text(d.max_allocation_bytes).c_str() : "(not reported)",
              d.max_shared_memory / 1024);
  // What the bandwidth probe times with (vulkan/probe.h): the device's clock, or the host's.
  if (d.timestamp_bits > 0)
    std::printf("  timestamps: %u bits, %g ns a tick\n", d.timestamp_bits,
                double(d.timestamp_period));
  else
    std::printf("  timestamps: none on the compute queue\n");
  if (d.unusable.empty())
    std::printf("  usable: yes\n");
  else
    std::printf("  usable: no (%s)\n", d.unusable.c_str());
}
#endif
}  // namespace

int cmd_devices(int argc, char** argv) {
  flags::App app("List the Vulkan devices, their features, and whether qwen35 can run on each",
                 "qwen35 devices");
  try {
    app.parse(argc, argv);
  } catch (const flags::ParseError& e) {
    return app.exit(e);
  }
#ifdef QWEN35_HAVE_VULKAN
  auto inst = vulkan::Instance::create();
  if (!inst.ok()) {
    std::printf("%s\n", inst.message().c_str());
    return 0;
  }
  auto devices = (*inst)->devices();
  if (!devices.ok()) {
    std::printf("%s\n", devices.message().c_str());
    return 0;
  }
  if (devices->empty()) {
    std::printf("no Vulkan device found\n");
    return 0;
  }
  for (const vulkan::DeviceInfo& d : *devices) print(d);
  return 0;
#else
  std::printf(
      "this build has no Vulkan backend (it was built without the Vulkan headers or glslc)\n");
  return 0;
#endif
}

}  // namespace qwen35::cli
