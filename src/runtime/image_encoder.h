// Client images to PromptImages (docs/design.md "Images through the server"): the encoded bytes
// are decoded within ImageLimits (image/image.h) and preprocessed with the checkpoint's
// preprocessor_config (image/processor.h) into patch rows. With `threads` > 1 one image at a time
// is resized on the encoder's own pool (a mutex: `qwen35 run`); with 1 each caller decodes on its
// own thread, several at once (the server's image lane, server/image_lane.h, bounds how many).
// The vision tower is not run here: the engine runs it in its steps
// when a prompt's prefill reaches the image (runtime/stepper.h), so an image takes its share of
// the machine like a prompt does, and an image the prefix cache already holds costs nothing.
// PromptImages are kept in an LRU cache bounded in bytes and keyed by the content hash, so that a
// conversation that repeats an image shares its PendingImage: the tower runs once for it.
//
// plan() reads an image's header only: its tokens and the memory decoding it will take, so a
// request is refused (too long, over its memory bound) or admitted (runtime/image_budget.h)
// before any pixel is decoded; encode(bytes, plan) then decodes within what the plan counted.
//
// The content hash is the first 8 bytes of SHA-256 over the processor settings and the encoded
// bytes. The prefix cache shares state between clients by it, so it must resist collisions made
// on purpose; the LRU itself is keyed by the whole digest.
//
// Thread-safety: plan() and encode() may be called from any number of threads at once; a cache
// hit does not wait for a tower run in progress.
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
  int threads = 1;  // resizing one image (1: the caller's thread alone; 0: hardware threads)
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

  using Digest = std::array<uint8_t, 32>;
  // What an image will cost, from its header (or the cache): its prompt tokens, and unless the
  // cache holds it, the bytes its patch rows keep and the bytes decoding and resizing it hold at
  // their peak (the patch rows included).
  struct Plan {
    Digest digest{};
    std::optional<PromptImage> cached;  // set: the cache holds it, nothing is decoded
    int64_t tokens = 0;
    int64_t width = 0, height = 0;      // as the header declares them
    int64_t rows_bytes = 0;             // the patch rows (0 when cached)
    int64_t peak_bytes = 0;             // decoding + resizing + the rows (0 when cached)
  };
  // Errors are one line for a 400, as encode()'s: the decoder's for the header ("PNG: image has
  // 7000 × 7000 pixels, more than the limit of ..."), the processor's, or why_not().
  core::Result<Plan> plan(std::string_view encoded_bytes);

  // One image: its PromptImage (grid, hash, and the patch rows in `pending`, or the merged
  // rows where the engine has run the tower already), from the cache when these bytes came
  // before. Errors are one line for a 400: the decoder's ("PNG: image is truncated"), the
  // processor's, or why_not(). With a plan (of these bytes), the decoder is held to the
  // plan's pixels.
  core::Result<PromptImage> encode(std::string_view encoded_bytes);
  core::Result<PromptImage> encode(std::string_view encoded_bytes, const Plan& plan);
  int64_t tokens(const PromptImage& im) const;  // t·(h/merge)·(w/merge)

  struct Stats {
    int64_t hits = 0, misses = 0;  // encode() calls answered from the cache, and by the processor
    size_t cached_bytes = 0;
  };
  Stats stats() const;

 private:
  Digest digest(std::string_view bytes) const;
  std::optional<PromptImage> lookup(const Digest& d);
  void insert(const Digest& d, const PromptImage& im);
  core::Result<PromptImage> prepare(std::string_view bytes, uint64_t hash, const image::ImageLimits& limits);
  core::Result<PromptImage> miss(std::string_view bytes, const Digest& d, const image::ImageLimits& limits);
  size_t bytes_of(const PromptImage& im) const;  // what a cache entry may hold at most

  const model::Model& model_;
  ImageEncoderOptions opts_;
  image::ProcessorConfig processor_;
  std::string why_not_;

  std::mutex prepare_mu_;  // with threads > 1: one image through the processor at a time (the pool)
  std::unique_ptr<core::ThreadPool> pool_;

  // An LRU entry keeps the bytes it was charged at insert: its rows change size when the engine
  // runs the tower (patch rows, then merged rows), and eviction must give back what insert took,
  // or the gauge drifts and every insert past the bound empties the cache.
  struct Entry {
    Digest digest;
    PromptImage image;
    size_t charged = 0;
  };
  mutable std::mutex cache_mu_;  // the LRU below and the stats
  std::list<Entry> lru_;         // most recent first
  std::map<Digest, std::list<Entry>::iterator> index_;
  Stats stats_;
};

}  // namespace qwen35::runtime
