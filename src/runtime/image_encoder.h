// Client images to PromptImages (docs/design.md "Images through the server"): the encoded bytes
// are decoded within ImageLimits (image/image.h), preprocessed with the checkpoint's
// preprocessor_config (image/processor.h) and run through the vision tower, on the encoder's own
// thread pool and kernel workspace (never the engine's: the engine thread keeps running while an
// image is encoded), one image at a time (a mutex). Merged rows are kept in an LRU cache bounded
// in bytes and keyed by the content hash, so that a conversation that repeats an image does not
// run the tower again.
//
// The content hash is the first 8 bytes of SHA-256 over the processor settings and the encoded
// bytes. The prefix cache shares state between clients by it, so it must resist collisions made
// on purpose; the LRU itself is keyed by the whole digest.
//
// Thread-safety: encode() may be called from any number of threads at once; a cache hit does not
// wait for a tower run in progress.
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "core/result.h"
#include "core/thread_pool.h"
#include "image/image.h"
#include "image/processor.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/vision.h"
#include "runtime/generation_request.h"

namespace qwen35::runtime {

struct ImageEncoderOptions {
  int threads = 0;                            // the tower's pool (0: hardware threads)
  size_t cache_bytes = size_t{256} << 20;     // merged rows kept (0: no cache)
  image::ImageLimits limits;                  // on the encoded bytes and the declared pixels
  // The checkpoint's preprocessor_config.json (read_processor_config); unset: Qwen3.5's
  // published settings with the tower's own patch, merge and temporal sizes.
  std::optional<image::ProcessorConfig> processor;
  bool fast = false;  // the tower's matmuls in fast mode (kernels::Context::int8_activations)
};

// The preprocessor_config.json (or processor_config.json) of a checkpoint: in `model_path` when
// it is a directory, else beside the file (a GGUF). Unset when there is none; an error when one
// is there but invalid.
core::Result<std::optional<image::ProcessorConfig>> read_processor_config(const std::string& model_path);

class ImageEncoder {
 public:
  // The model (and its weights) must outlive the encoder. Nothing runs until encode().
  ImageEncoder(const model::Model& model, const ImageEncoderOptions& opts);
  ~ImageEncoder();

  bool available() const { return why_not_.empty(); }
  // Why images cannot be encoded: the model's vision_problem ("no vision tower ..."), or a
  // processor config that disagrees with the tower. Empty when available().
  const std::string& why_not() const { return why_not_; }
  const image::ProcessorConfig& processor() const { return processor_; }
  const image::ImageLimits& limits() const { return opts_.limits; }

  // One image: its PromptImage (grid, hash, rows [tokens, hidden]), from the cache when these
  // bytes were encoded before. Errors are one line for a 400: the decoder's ("PNG: image is
  // truncated"), the processor's, or why_not().
  core::Result<PromptImage> encode(std::string_view encoded_bytes);
  int64_t tokens(const PromptImage& im) const;  // t·(h/merge)·(w/merge)

  struct Stats {
    int64_t hits = 0, misses = 0;  // encode() calls answered from the cache, and by the tower
    size_t cached_bytes = 0;
  };
  Stats stats() const;

 private:
  using Digest = std::array<uint8_t, 32>;
  Digest digest(std::string_view bytes) const;
  std::optional<PromptImage> lookup(const Digest& d);
  void insert(const Digest& d, const PromptImage& im);
  core::Result<PromptImage> run_tower(std::string_view bytes, uint64_t hash);

  const model::Model& model_;
  ImageEncoderOptions opts_;
  image::ProcessorConfig processor_;
  std::string why_not_;

  std::mutex tower_mu_;  // one image through the tower at a time (the pool and scratch below)
  std::unique_ptr<core::ThreadPool> pool_;
  std::unique_ptr<kernels::Workspace> workspace_;
  std::unique_ptr<model::VisionTower> tower_;

  mutable std::mutex cache_mu_;  // the LRU below and the stats
  std::list<std::pair<Digest, PromptImage>> lru_;  // most recent first
  std::map<Digest, std::list<std::pair<Digest, PromptImage>>::iterator> index_;
  Stats stats_;
};

}  // namespace qwen35::runtime
