// `qwen35 synth --format gguf`: the GGUF file of a synthetic checkpoint (layout: gguf_layout.h).
// Tensor values are generated, mapped and encoded in chunks of whole rows, so peak memory is a
// few chunk buffers whatever the preset.
#pragma once

#include "core/result.h"
#include "tools/synth/presets.h"
#include "tools/synth/synth.h"
#include "tools/synth/tensor_plan.h"

namespace qwen35::tools {

// Writes opts.out_dir (a path ending in .gguf) from the HF plan `plan_opts` describes; when the
// plan holds the vision tower, also its mmproj file beside it (mmproj_path_for), as llama.cpp's
// converter writes it with --mmproj.
// "DIR/mmproj-NAME.gguf" for the model file DIR/NAME.gguf.
std::string mmproj_path_for(const std::string& model_gguf);

core::Result<SynthSummary> write_synthetic_gguf(const SynthOptions& opts, const Preset& preset,
                                                const PlanOptions& plan_opts);

}  // namespace qwen35::tools
