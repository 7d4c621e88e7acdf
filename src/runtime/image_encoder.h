// Client images to PromptImages (docs/design.md "Images through the server"): the encoded bytes
// are decoded within ImageLimits (image/image.h) and preprocessed with the checkpoint's
// preprocessor_config (image/processor.h) into patch rows, on the encoder's own thread pool, one
// image at a time (a mutex). The vision tower is not run here: the engine runs it in its steps
// when a prompt's prefill reaches the image (runtime/stepper.h), so an image takes its share of
// the machine like a prompt does, and an image the prefix cache already holds costs nothing.
// PromptImages are kept in an LRU cache bounded in bytes and keyed by the content hash, so that a
// conversation that repeats an image shares its PendingImage: the tower runs once for it.
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
  int threads = 0;                            // decoding and resizing (0: hardware threads)
  size_t cache_bytes = size_t{256} << 20;     // images kept (0: no cache)
  image::ImageLimits limits;                  // on the encoded bytes and the declared pixels
  // The checkpoint's preprocessor_config.json (read_processor_config); unset: Qwen3.5's
  // published settings with the tower's own patch, merge and temporal sizes.
  std::optional<image::ProcessorConfig> processor;
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

  // One image: its PromptImage (grid, hash, and the patch rows in `pending`, or the merged
  // rows where the engine has run the tower already), from the cache when these bytes came
  // before. Errors are one line for a 400: the decoder's ("PNG: image is truncated"), the
  // processor's, or why_not().
  core::Result<PromptImage> encode(std::string_view encoded_bytes);
  int64_t tokens(const PromptImage& im) const;  // t·(h/merge)·(w/merge)

  struct Stats {
    int64_t hits = 0, misses = 0;  // encode() calls answered from the cache, and by the processor
    size_t cached_bytes = 0;
  };
  Stats stats() const;

 private:
  using Digest = std::array<uint8_t, 32>;
  Digest digest(std::string_view bytes) const;
  std::optional<PromptImage> lookup(const Digest& d);
  void insert(const Digest& d, const PromptImage& im);
  core::Result<PromptImage> prepare(std::string_view bytes, uint64_t hash);
  size_t bytes_of(const PromptImage& im) const;  // what a cache entry may hold at most

  const model::Model& model_;
  ImageEncoderOptions opts_;
  image::ProcessorConfig processor_;
  std::string why_not_;

  std::mutex prepare_mu_;  // one image through the processor at a time (the pool below)
  std::unique_ptr<core::ThreadPool> pool_;

  mutable std::mutex cache_mu_;  // the LRU below and the stats
  std::list<std::pair<Digest, PromptImage>> lru_;  // most recent first
  std::map<Digest, std::list<std::pair<Digest, PromptImage>>::iterator> index_;
  Stats stats_;
};

}  // namespace qwen35::runtime
