// libFuzzer: image::decode on arbitrary bytes under small limits, then preprocess of what it
// accepts. An accepted image holds exactly width·height·3 bytes and, being within the decode
// limits (aspect ratio included), always preprocesses into rows of the size its grid says.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "image/image.h"
#include "image/processor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qwen35;
  image::ImageLimits limits;
  limits.max_bytes = size_t{1} << 20;
  limits.max_pixels = int64_t{1} << 20;
  limits.max_jpeg_scans = 64;
  auto img = image::decode(std::string_view(reinterpret_cast<const char*>(data), size), limits);
  if (!img.ok()) {
    if (img.message().empty()) std::abort();  // an error must say what is wrong
    return 0;
  }
  if (img->width <= 0 || img->height <= 0 || img->width * img->height > limits.max_pixels ||
      img->rgb.size() != static_cast<size_t>(img->width * img->height * 3)) {
    std::abort();
  }
  image::ProcessorConfig config;
  config.min_pixels = 1024;
  config.max_pixels = 16384;
  auto p = image::preprocess(*img, config);
  if (!p.ok()) std::abort();
  if (p->rows.size() !=
      static_cast<size_t>(p->grid_t * p->grid_h * p->grid_w * config.row_size())) {
    std::abort();
  }
  return 0;
}
