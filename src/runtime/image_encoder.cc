#include "runtime/image_encoder.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

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
  return it->second->second;
}

// The patch rows until the engine runs the tower, then the merged rows: the larger of the two.
size_t ImageEncoder::bytes_of(const PromptImage& im) const {
  const size_t merged = size_t(tokens(im) * model_.config().hidden);
  const size_t patches = im.pending ? im.pending->patches().size() : 0;
  return std::max(merged, patches) * sizeof(float);
}

void ImageEncoder::insert(const Digest& d, const PromptImage& im) {
  const size_t bytes = bytes_of(im);
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (bytes > opts_.cache_bytes || index_.count(d)) return;
  while (stats_.cached_bytes + bytes > opts_.cache_bytes && !lru_.empty()) {
    stats_.cached_bytes -= bytes_of(lru_.back().second);
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  lru_.emplace_front(d, im);
  index_[d] = lru_.begin();
  stats_.cached_bytes += bytes;
}

ImageEncoder::Stats ImageEncoder::stats() const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  return stats_;
}

core::Result<PromptImage> ImageEncoder::encode(std::string_view bytes) {
  if (!available()) return core::error(why_not_);
  if (bytes.size() > opts_.limits.max_bytes)  // before hashing a huge body
    return core::error("image is " + std::to_string(bytes.size()) + " bytes, over the limit of " +
                       std::to_string(opts_.limits.max_bytes));
  const Digest d = digest(bytes);
  if (auto hit = lookup(d)) return *hit;
  std::lock_guard<std::mutex> lock(prepare_mu_);
  if (auto hit = lookup(d)) return *hit;  // prepared by another caller while this one waited
  uint64_t hash = 0;
  for (int i = 0; i < 8; ++i) hash = hash << 8 | d[i];
  QWEN35_ASSIGN_OR_RETURN(PromptImage im, prepare(bytes, hash));
  {
    std::lock_guard<std::mutex> c(cache_mu_);
    ++stats_.misses;
  }
  insert(d, im);
  return im;
}

// Under prepare_mu_.
core::Result<PromptImage> ImageEncoder::prepare(std::string_view bytes, uint64_t hash) {
  QWEN35_ASSIGN_OR_RETURN(image::Image img, image::decode(bytes, opts_.limits));
  if (!pool_) pool_ = std::make_unique<core::ThreadPool>(opts_.threads);
  QWEN35_ASSIGN_OR_RETURN(image::Patches p, image::preprocess(img, processor_, pool_.get()));
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
