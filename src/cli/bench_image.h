// bench --image WxH (cli/bench_image.cc): one image of that size through the image path that
// serves: the checkpoint's image processor (image::preprocess), the vision tower
// (Model::encode_image, the model's pool), and time to first token of an image + question, the
// expanded chat prompt read by the engine's own step (runtime::Stepper).
#pragma once

#include <cstdint>
#include <string>

#include "cli/model_loader.h"
#include "model/model.h"

namespace qwen35::cli {

struct ImageBenchOptions {
  int64_t width = 0, height = 0;  // of the synthetic image, before the processor's resize
  int reps = 3;
  std::string question = "What is in this image?";
  bool json = false;
};

// Parses "WxH" (e.g. 448x448); false when it is not two positive integers.
bool parse_image_size(const std::string& s, int64_t* width, int64_t* height);

// `pool`: the model's (the processor runs on it between the model's calls, as the tower does).
// Returns the exit code: 2 when the checkpoint has no usable tower.
int bench_image(model::Model& m, const LoadOptions& lo, core::ThreadPool* pool, const ImageBenchOptions& o);

}  // namespace qwen35::cli
