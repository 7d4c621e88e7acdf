#include "image/processor.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "image/resample.h"

namespace qwen35::image {
namespace {

using nlohmann::json;

// A config's sizes are bounded so that one image's rows stay allocatable: 2^26 pixels (four
// times Qwen3.5's 16777216) of up to 16 frames of floats.
constexpr int64_t kMaxConfigPixels = int64_t{1} << 26;

core::Status read_int(const json& j, const char* key, int64_t lo, int64_t hi, int64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return core::ok_status();
  if (!it->is_number_integer() || it->get<int64_t>() < lo || it->get<int64_t>() > hi) {
    return core::error(std::string("'") + key + "' must be an integer in [" + std::to_string(lo) +
                       ", " + std::to_string(hi) + "], got " + it->dump());
  }
  *out = it->get<int64_t>();
  return core::ok_status();
}

core::Status read_bool(const json& j, const char* key, bool* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return core::ok_status();
  if (!it->is_boolean()) return core::error(std::string("'") + key + "' must be true or false");
  *out = it->get<bool>();
  return core::ok_status();
}

// A list of 3 numbers, or one number for every channel.
core::Status read_triple(const json& j, const char* key, bool nonzero, std::array<float, 3>* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return core::ok_status();
  const std::string bad = std::string("'") + key + "' must be 3 finite numbers" +
                          (nonzero ? ", none zero" : "") + ", got " + it->dump();
  std::array<float, 3> v{};
  for (size_t c = 0; c < 3; ++c) {
    const json* e = it->is_array() ? (it->size() == 3 ? &(*it)[c] : nullptr) : &*it;
    if (e == nullptr || !e->is_number()) return core::error(bad);
    v[c] = static_cast<float>(e->get<double>());
    if (!std::isfinite(v[c]) || (nonzero && v[c] == 0.0f)) return core::error(bad);
  }
  *out = v;
  return core::ok_status();
}

core::Status read_sizes(const json& j, ProcessorConfig& c) {
  if (auto it = j.find("size"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return core::error("'size' must be an object");
    QWEN35_RETURN_IF_ERROR(read_int(*it, "shortest_edge", 1, kMaxConfigPixels, &c.min_pixels));
    QWEN35_RETURN_IF_ERROR(read_int(*it, "longest_edge", 1, kMaxConfigPixels, &c.max_pixels));
    QWEN35_RETURN_IF_ERROR(read_int(*it, "min_pixels", 1, kMaxConfigPixels, &c.min_pixels));
    QWEN35_RETURN_IF_ERROR(read_int(*it, "max_pixels", 1, kMaxConfigPixels, &c.max_pixels));
  }
  QWEN35_RETURN_IF_ERROR(read_int(j, "min_pixels", 1, kMaxConfigPixels, &c.min_pixels));
  QWEN35_RETURN_IF_ERROR(read_int(j, "max_pixels", 1, kMaxConfigPixels, &c.max_pixels));
  if (c.min_pixels > c.max_pixels) {
    return core::error("min_pixels " + std::to_string(c.min_pixels) + " is over max_pixels " +
                       std::to_string(c.max_pixels));
  }
  return core::ok_status();
}

core::Status read_config(const json& j, ProcessorConfig& c) {
  if (!j.is_object()) return core::error("not a JSON object");
  QWEN35_RETURN_IF_ERROR(read_int(j, "patch_size", 1, 256, &c.patch_size));
  QWEN35_RETURN_IF_ERROR(read_int(j, "temporal_patch_size", 1, 16, &c.temporal_patch_size));
  QWEN35_RETURN_IF_ERROR(read_int(j, "merge_size", 1, 16, &c.merge_size));
  QWEN35_RETURN_IF_ERROR(read_sizes(j, c));
  QWEN35_RETURN_IF_ERROR(read_triple(j, "image_mean", false, &c.image_mean));
  QWEN35_RETURN_IF_ERROR(read_triple(j, "image_std", true, &c.image_std));
  if (auto it = j.find("rescale_factor"); it != j.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0) || !std::isfinite(it->get<double>())) {
      return core::error("'rescale_factor' must be a positive number, got " + it->dump());
    }
    c.rescale_factor = it->get<double>();
  }
  int64_t resample = 3;
  QWEN35_RETURN_IF_ERROR(read_int(j, "resample", 0, 5, &resample));
  if (resample != 3) {
    return core::error("'resample' is " + std::to_string(resample) +
                       ": only bicubic (3) is implemented");
  }
  QWEN35_RETURN_IF_ERROR(read_bool(j, "do_resize", &c.do_resize));
  QWEN35_RETURN_IF_ERROR(read_bool(j, "do_rescale", &c.do_rescale));
  return read_bool(j, "do_normalize", &c.do_normalize);
}

// Patch row r: rows run over merge blocks (block row, block column), then the merge × merge
// patches inside a block; a row holds its patch in (C, T, P, P) order, the T frames being the same
// image. `table` maps a channel's byte to its normalized value.
void write_row(const Image& img, const float (*table)[256], const ProcessorConfig& c,
               int64_t grid_w, int64_t r, float* dst) {
  const int64_t P = c.patch_size, T = c.temporal_patch_size, M = c.merge_size;
  const int64_t block = r / (M * M), in_block = r % (M * M);
  const int64_t bh = block / (grid_w / M), bw = block % (grid_w / M);
  const int64_t y0 = (bh * M + in_block / M) * P, x0 = (bw * M + in_block % M) * P;
  for (int64_t ch = 0; ch < 3; ++ch) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t py = 0; py < P; ++py) {
        const uint8_t* src = &img.rgb[static_cast<size_t>(((y0 + py) * img.width + x0) * 3 + ch)];
        for (int64_t px = 0; px < P; ++px) *dst++ = table[ch][src[px * 3]];
      }
    }
  }
}

// Python's round() of a float: halves to even, which rint does in the default rounding mode.
int64_t round_half_even(double x) { return static_cast<int64_t>(std::rint(x)); }

}  // namespace

core::Result<ProcessorConfig> parse_processor_config_json(const json& j) {
  ProcessorConfig c;
  const json& body = (j.is_object() && j.contains("image_processor")) ? j["image_processor"] : j;
  QWEN35_RETURN_IF_ERROR(read_config(body, c).with_context("preprocessor config"));
  return c;
}

core::Result<ProcessorConfig> parse_processor_config(std::string_view json_text) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return core::error("preprocessor config: not valid JSON");
  return parse_processor_config_json(j);
}

core::Result<std::pair<int64_t, int64_t>> smart_resize(int64_t height, int64_t width,
                                                       int64_t factor, int64_t min_pixels,
                                                       int64_t max_pixels) {
  if (height <= 0 || width <= 0 || factor <= 0) return core::error("smart_resize: empty size");
  const double h = static_cast<double>(height), w = static_cast<double>(width);
  if (std::max(h, w) / std::min(h, w) > 200) {
    return core::error("image has " + std::to_string(width) + " × " + std::to_string(height) +
                       " pixels: the aspect ratio is over 200");
  }
  const double f = static_cast<double>(factor);
  int64_t h_bar = round_half_even(h / f) * factor;
  int64_t w_bar = round_half_even(w / f) * factor;
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt((h * w) / static_cast<double>(max_pixels));
    h_bar = std::max(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (h * w));
    h_bar = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  return std::make_pair(h_bar, w_bar);
}

core::Result<Patches> preprocess(const Image& image, const ProcessorConfig& c,
                                 core::ThreadPool* pool) {
  if (image.width <= 0 || image.height <= 0 ||
      image.rgb.size() != static_cast<size_t>(image.width * image.height * 3)) {
    return core::error("preprocess: the image is empty or its pixel buffer has the wrong size");
  }
  int64_t rh = image.height, rw = image.width;
  if (c.do_resize) {
    QWEN35_ASSIGN_OR_RETURN(std::tie(rh, rw), smart_resize(image.height, image.width, c.factor(),
                                                           c.min_pixels, c.max_pixels));
  } else if (rh % c.factor() != 0 || rw % c.factor() != 0) {
    return core::error("preprocess: without resizing, the image's sides must be multiples of " +
                       std::to_string(c.factor()));
  }
  // PIL returns a copy at the same size: the image itself serves, without the copy.
  Image scaled;
  if (rw != image.width || rh != image.height) scaled = resize_bicubic(image, rw, rh, pool);
  const Image& resized = scaled.rgb.empty() ? image : scaled;
  // Every value depends on its channel and byte alone: a 3 × 256 table holds them all, computed
  // as transformers does (float64 rescale cast to float32, then float32 (x − mean) / std).
  float table[3][256];
  for (int ch = 0; ch < 3; ++ch) {
    for (int v = 0; v < 256; ++v) {
      float x = c.do_rescale ? static_cast<float>(v * c.rescale_factor) : static_cast<float>(v);
      if (c.do_normalize) x = (x - c.image_mean[ch]) / c.image_std[ch];
      table[ch][v] = x;
    }
  }
  Patches out;
  out.grid_t = 1;  // one image: its frame repeated T times fills one temporal patch
  out.grid_h = rh / c.patch_size;
  out.grid_w = rw / c.patch_size;
  const int64_t row = c.row_size();
  out.rows.resize(static_cast<size_t>(out.grid_h * out.grid_w * row));
  for_ranges(pool, out.grid_h * out.grid_w, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      write_row(resized, table, c, out.grid_w, r, &out.rows[static_cast<size_t>(r * row)]);
    }
  });
  return out;
}

}  // namespace qwen35::image
