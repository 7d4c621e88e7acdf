// bench --image WxH (cli/bench_image.cc): one image of that size through the image path that
// serves: the checkpoint's image processor (image::preprocess), the vision tower
// (Model::encode_image, the model's pool), and time to first token of an image + question, the
// expanded chat prompt read by the engine's own step (runtime::Stepper). With --neighbour
// (cli/bench_image_pause.cc): what the image costs a text stream decoding beside it.
#pragma once

#include <cstdint>
#include <string>

#include "cli/model_loader.h"
#include "core/result.h"
#include "image/image.h"
#include "image/processor.h"
#include "model/model.h"
#include "runtime/generation_request.h"

namespace qwen35::tokenizer {
class Tokenizer;
}
namespace qwen35::tmpl {
class ChatTemplate;
}

namespace qwen35::cli {

struct ImageBenchOptions {
  int64_t width = 0, height = 0;  // of the synthetic image, before the processor's resize
  int reps = 3;
  std::string question = "What is in this image?";
  bool json = false;
  bool neighbour = false;  // --neighbour: a text stream's pauses while the image goes through (bench_image_pause.cc)
  int64_t step_tokens = 256;  // the engine's step budget (serve's --step-tokens) in that mode
};

// Parses "WxH" (e.g. 448x448); false when it is not two positive integers.
bool parse_image_size(const std::string& s, int64_t* width, int64_t* height);

// `pool`: the model's (the processor runs on it between the model's calls, as the tower does).
// Returns the exit code: 2 when the checkpoint has no usable tower.
int bench_image(model::Model& m, const LoadOptions& lo, core::ThreadPool* pool, const ImageBenchOptions& o);

// A deterministic image with detail at every scale (gradients and a hashed speckle).
image::Image synthetic_image(int64_t w, int64_t h);
// The chat prompt of one user message, `image` (of `tokens` tokens) then `question`, its
// placeholder expanded; greedy, max_tokens unset.
core::Result<runtime::GenerationRequest> image_request(const tokenizer::Tokenizer& tok, const tmpl::ChatTemplate& t,
                                                       const model::Model& m, const std::string& question,
                                                       const runtime::PromptImage& image, int64_t tokens);

// bench --image WxH --neighbour: a text request decodes in a Stepper of serve's options; after
// its first 16 tokens the image + question arrives, its patch rows for the engine's tower (as
// serve hands them over), and both run until the image's first token. Reports the gaps between
// the text request's tokens: their median before the image, and while the image goes through the
// tower and its prefill the median and the longest; the steps' work (the tower's, and any step's
// with its rows' attention) against their budget (runtime::Stepper::step_budget); and what the
// step of the longest gap ran. bench_image calls it with the checkpoint's processor settings, tokenizer and template.
int bench_image_neighbour(model::Model& m, const LoadOptions& lo, core::ThreadPool* pool,
                          const image::ProcessorConfig& pc, const tokenizer::Tokenizer& tok,
                          const tmpl::ChatTemplate& t, const ImageBenchOptions& o);

}  // namespace qwen35::cli
