// The Vulkan loader, opened at run time. dlopen("libvulkan.so.1") (or the file named by
// QWEN35_VULKAN_LOADER, e.g. a loader unpacked from Debian's libvulkan1 onto a bare machine), then
// vkGetInstanceProcAddr, through which everything else is fetched (vulkan/api.h). A machine
// without a loader is an ordinary error: the binary never links libvulkan.
#pragma once

#include <memory>
#include <string>

#include "core/result.h"
#include "vulkan/api.h"

namespace qwen35::vulkan {

class Loader {
 public:
  // Opens the loader library and fetches the global entry points. The error is one line that
  // names the library and dlopen's reason.
  static core::Result<std::unique_ptr<Loader>> open();
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  const GlobalApi& api() const { return api_; }
  const std::string& path() const { return path_; }

 private:
  Loader() = default;
  void* handle_ = nullptr;
  std::string path_;
  GlobalApi api_;
};

}  // namespace qwen35::vulkan
