#include "runtime/image_encoder.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "core/sha256.h"

namespace qwen35::runtime {
namespace {

// The settings that change an image's rows, spelled exactly (the hash covers them: the same bytes
// under another processor are another image).
std::string describe(const image::ProcessorConfig& p) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "qwen35-image-v1 patch=%lld temporal=%lld merge=%lld pixels=%lld..%lld mean=%.9g,%.9g,%.9g "
                "std=%.9g,%.9g,%.9g rescale=%.17g flags=%d%d%d;",
                (long long)p.patch_size, (long long)p.temporal_patch_size, (long long)p.merge_size,
                (long long)p.min_pixels, (long long)p.max_pixels, p.image_mean[0], p.image_mean[1], p.image_mean[2],
                p.image_std[0], p.image_std[1], p.image_std[2], p.rescale_factor, int(p.do_resize),
                int(p.do_rescale), int(p.do_normalize));
  return buf;
}

// The processor settings the tower was trained with: patch, merge and temporal sizes agree.
std::string mismatch(const image::ProcessorConfig& p, const model::VisionConfig& v) {
  const auto field = [](const char* name, int64_t got, int64_t want) {
    return "preprocessor_config " + std::string(name) + " is " + std::to_string(got) + " but the vision tower's is " +
           std::to_string(want);
  };
  if (p.patch_size != v.patch) return field("patch_size", p.patch_size, v.patch);
  if (p.temporal_patch_size != v.temporal) return field("temporal_patch_size", p.temporal_patch_size, v.temporal);
  if (p.merge_size != v.merge) return field("merge_size", p.merge_size, v.merge);
  return "";
}

}  // namespace

core::Result<std::optional<image::ProcessorConfig>> read_processor_config(const std::string& model_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::is_directory(model_path, ec) ? fs::path(model_path) : fs::path(model_path).parent_path();
  for (const char* name : {"preprocessor_config.json", "processor_config.json"}) {
    const fs::path p = dir / name;
    if (!fs::is_regular_file(p, ec)) continue;
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    if (!f) return core::error("[image] cannot read " + p.string());
    auto cfg = image::parse_processor_config(ss.str());
    if (!cfg.ok()) return core::error("[image] " + p.string() + ": " + cfg.message());
    return std::optional<image::ProcessorConfig>(*cfg);
  }
  return std::optional<image::ProcessorConfig>();
}

ImageEncoder::ImageEncoder(const model::Model& model, const ImageEncoderOptions& opts) : model_(model), opts_(opts) {
  if (opts_.threads <= 0) opts_.threads = core::ThreadPool::hardware_threads();
  const model::ModelWeights& w = model.weights();
  if (!w.vision) {
    why_not_ = w.vision_problem.empty() ? "no vision tower" : w.vision_problem;
    return;
  }
  const model::VisionConfig& v = w.vision->config;
  if (opts.processor) {
    processor_ = *opts.processor;
  } else {
    processor_.patch_size = v.patch;
    processor_.temporal_patch_size = v.temporal;
    processor_.merge_size = v.merge;
  }
  why_not_ = mismatch(processor_, v);
}

ImageEncoder::~ImageEncoder() = default;

int64_t ImageEncoder::tokens(const PromptImage& im) const {
  const int64_t m = processor_.merge_size;
  return im.grid[0] * (im.grid[1] / m) * (im.grid[2] / m);
}

ImageEncoder::Digest ImageEncoder::digest(std::string_view bytes) const {
  core::Sha256 s;
  s.update(describe(processor_));
  s.update(bytes);
  return s.finish();
}

std::optional<PromptImage> ImageEncoder::lookup(const Digest& d) {
  std::lock_guard<std::mutex> lock(cache_mu_);
  auto it = index_.find(d);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);  // now the most recent
  ++stats_.hits;
  return it->second->image;
}

// The patch rows until the engine runs the tower, then the merged rows: the larger of the two,
// from the grid alone (the patch rows are gone once the tower has run), so the same image is
// charged the same at any time.
size_t ImageEncoder::bytes_of(const PromptImage& im) const {
  const size_t merged = size_t(tokens(im) * model_.config().hidden);
  const size_t patches = size_t(im.grid[0] * im.grid[1] * im.grid[2] * processor_.row_size());
  return std::max(merged, patches) * sizeof(float);
}

void ImageEncoder::insert(const Digest& d, const PromptImage& im) {
  const size_t bytes = bytes_of(im);
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (bytes > opts_.cache_bytes || index_.count(d)) return;
  while (stats_.cached_bytes + bytes > opts_.cache_bytes && !lru_.empty()) {
    stats_.cached_bytes -= lru_.back().charged;
    index_.erase(lru_.back().digest);
    lru_.pop_back();
  }
  lru_.push_front(Entry{d, im, bytes});
  index_[d] = lru_.begin();
  stats_.cached_bytes += bytes;
}

ImageEncoder::Stats ImageEncoder::stats() const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  return stats_;
}

core::Result<ImageEncoder::Plan> ImageEncoder::plan(std::string_view bytes) {
  if (!available()) return core::error(why_not_);
  if (bytes.size() > opts_.limits.max_bytes)  // before hashing a huge body
    return core::error("image is " + std::to_string(bytes.size()) + " bytes, over the limit of " +
                       std::to_string(opts_.limits.max_bytes));
  Plan p;
  p.digest = digest(bytes);
  {
    std::lock_guard<std::mutex> lock(cache_mu_);  // a peek: the hit is counted by encode()
    if (auto it = index_.find(p.digest); it != index_.end()) p.cached = it->second->image;
  }
  if (p.cached) {
    p.tokens = tokens(*p.cached);
    return p;
  }
  QWEN35_ASSIGN_OR_RETURN(const image::ImageHeader h, image::probe(bytes, opts_.limits));
  p.width = h.width;
  p.height = h.height;
  // EXIF orientation may swap the sides; smart_resize's token count does not depend on which
  // is which, and neither does any size below.
  int64_t rh = h.height, rw = h.width;
  if (processor_.do_resize) {
    QWEN35_ASSIGN_OR_RETURN(std::tie(rh, rw), image::smart_resize(h.height, h.width, processor_.factor(),
                                                                  processor_.min_pixels, processor_.max_pixels));
  } else if (rh % processor_.factor() != 0 || rw % processor_.factor() != 0) {
    return core::error("preprocess: without resizing, the image's sides must be multiples of " +
                       std::to_string(processor_.factor()));
  }
  const int64_t patches = (rh / processor_.patch_size) * (rw / processor_.patch_size);
  p.tokens = patches / (processor_.merge_size * processor_.merge_size);
  p.rows_bytes = patches * processor_.row_size() * int64_t(sizeof(float));
  // The resize's two passes (the wider of the sides' orders: rw × height, then rw × rh, RGB8)
  // beside the decoded image; then the rows beside the resized image.
  const int64_t resize = std::max(rw * h.height, rh * h.width) * 3 + rw * rh * 3;
  p.peak_bytes = std::max(h.peak_bytes, h.width * h.height * 3 + resize) + p.rows_bytes;
  return p;
}

core::Result<PromptImage> ImageEncoder::encode(std::string_view bytes) {
  QWEN35_ASSIGN_OR_RETURN(const Plan p, plan(bytes));
  return encode(bytes, p);
}

core::Result<PromptImage> ImageEncoder::encode(std::string_view bytes, const Plan& p) {
  if (!available()) return core::error(why_not_);
  if (auto hit = lookup(p.digest)) return *hit;
  image::ImageLimits limits = opts_.limits;
  if (!p.cached && p.width > 0) limits.max_pixels = std::min(limits.max_pixels, p.width * p.height);
  if (opts_.threads <= 1) return miss(bytes, p.digest, limits);
  std::lock_guard<std::mutex> lock(prepare_mu_);
  if (auto hit = lookup(p.digest)) return *hit;  // prepared by another caller while this one waited
  return miss(bytes, p.digest, limits);
}

core::Result<PromptImage> ImageEncoder::miss(std::string_view bytes, const Digest& d, const image::ImageLimits& limits) {
  uint64_t hash = 0;
  for (int i = 0; i < 8; ++i) hash = hash << 8 | d[i];
  QWEN35_ASSIGN_OR_RETURN(PromptImage im, prepare(bytes, hash, limits));
  {
    std::lock_guard<std::mutex> c(cache_mu_);
    ++stats_.misses;
  }
  insert(d, im);
  return im;
}

// Under prepare_mu_ when threads > 1 (the pool takes one caller at a time).
core::Result<PromptImage> ImageEncoder::prepare(std::string_view bytes, uint64_t hash, const image::ImageLimits& limits) {
  QWEN35_ASSIGN_OR_RETURN(image::Image img, image::decode(bytes, limits));
  if (opts_.threads > 1 && !pool_) {
    pool_ = std::make_unique<core::ThreadPool>(opts_.threads);
  }
  image::Patches p;
  try {
    QWEN35_ASSIGN_OR_RETURN(p, image::preprocess(img, processor_, pool_.get()));
  } catch (const std::bad_alloc&) {
    return core::error("[image] out of memory resizing the image");
  }
  const model::VisionConfig& v = model_.weights().vision->config;
  QWEN35_RETURN_IF_ERROR(model::VisionTower(*model_.weights().vision, model_.ops()).check_grid(p.grid_t, p.grid_h, p.grid_w));
  if (int64_t(p.rows.size()) != model::VisionTower::rows(p.grid_t, p.grid_h, p.grid_w) * v.patch_dim())
    return core::error("[image] the processor made " + std::to_string(p.rows.size()) +
                       " values for a patch grid the tower reads differently");
  PromptImage im;
  im.grid = {p.grid_t, p.grid_h, p.grid_w};
  im.hash = hash;
  im.pending = std::make_shared<PendingImage>(std::move(p.rows));
  return im;
}

}  // namespace qwen35::runtime
