// The image processor of Qwen3.5 (transformers' Qwen2VLImageProcessor, the slow PIL path):
// smart_resize to multiples of patch·merge within [min_pixels, max_pixels], bicubic resize
// (resample.h), rescale and normalize, the image repeated over temporal_patch_size frames, and
// patchified into the tower's input rows in merge-block order. Deterministic and independent of
// any other image.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"
#include "core/thread_pool.h"
#include "image/image.h"

namespace qwen35::image {

// preprocessor_config.json. The defaults are Qwen3.5's published file (Qwen2VLImageProcessorFast,
// size {shortest_edge 65536, longest_edge 16777216}, patch 16, temporal 2, merge 2, mean = std =
// 0.5).
struct ProcessorConfig {
  int64_t patch_size = 16;
  int64_t temporal_patch_size = 2;
  int64_t merge_size = 2;
  int64_t min_pixels = 65536;     // size.shortest_edge
  int64_t max_pixels = 16777216;  // size.longest_edge
  std::array<float, 3> image_mean = {0.5f, 0.5f, 0.5f};
  std::array<float, 3> image_std = {0.5f, 0.5f, 0.5f};
  double rescale_factor = 1.0 / 255.0;
  bool do_resize = true;
  bool do_rescale = true;
  bool do_normalize = true;

  int64_t factor() const { return patch_size * merge_size; }
  // Values per patch row: 3 · temporal_patch_size · patch_size².
  int64_t row_size() const { return 3 * temporal_patch_size * patch_size * patch_size; }
};

// Reads a preprocessor_config.json body (or a processor_config.json with an "image_processor"
// object). Absent keys keep the defaults; "min_pixels"/"max_pixels" at the top level override
// "size", as transformers does. Values out of range are an error naming the key.
core::Result<ProcessorConfig> parse_processor_config(std::string_view json_text);
core::Result<ProcessorConfig> parse_processor_config_json(const nlohmann::json& j);

// transformers' smart_resize: (height, width) rounded to multiples of `factor`, scaled into
// [min_pixels, max_pixels] keeping the aspect ratio; an aspect ratio over 200 is an error.
core::Result<std::pair<int64_t, int64_t>> smart_resize(int64_t height, int64_t width,
                                                       int64_t factor, int64_t min_pixels,
                                                       int64_t max_pixels);

struct Patches {
  std::vector<float> rows;  // [grid_t · grid_h · grid_w, row_size], merge-block row order
  int64_t grid_t = 0, grid_h = 0, grid_w = 0;
};

// With a pool, the resize and the patch rows are split between its threads (one caller at a
// time, as ThreadPool requires); the rows are the same bits with any pool or none.
core::Result<Patches> preprocess(const Image& image, const ProcessorConfig& config,
                                 core::ThreadPool* pool = nullptr);

}  // namespace qwen35::image
