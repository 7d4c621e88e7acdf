// config.json and generation_config.json of a synthetic checkpoint, shaped like the real
// Qwen3_5ForConditionalGeneration / Qwen3_5MoeForConditionalGeneration configs (and the fixtures).
#pragma once

#include <string>

#include "tools/synth/presets.h"
#include "tools/synth/tensor_plan.h"

namespace qwen35::tools {

std::string make_config_json(const Preset& preset, const PlanOptions& opts, const TensorPlan& plan);
std::string make_generation_config_json(const Preset& preset);
// preprocessor_config.json: the image processor's settings (patch, merge and temporal sizes of
// the preset's tower, normalization, pixel bounds).
std::string make_preprocessor_config_json(const Preset& preset);

}  // namespace qwen35::tools
