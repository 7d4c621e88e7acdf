// `inspect --device vulkan[:N]`: the model's device memory plan (vkmodel/memory_plan.h) against
// device N, without uploading anything.
#pragma once

#include <cstdint>
#include <string>

#include "model/weights.h"

namespace qwen35::cli {

struct DevicePlanFlags {
  int64_t ctx = 4096, parallel = 1, step_tokens = 256;
  bool mtp = false;
  std::string kv_type = "f32";  // --kv-type K[,V]: the KV cache's formats counted
  double fit_mb = 0;  // --fit-mb: > 0, also what fits in this many MiB of the device
};

// Prints the device, the plan and whether it fits; with fit_mb, the longest context at 1, 2, 4,
// ... sequences and the most sequences at `ctx` that fit in min(fit_mb MiB, the device's
// memory). 0 when the plan fits (and with fit_mb, when one sequence of one block fits the
// budget); 1 with the one-line refusal (or why the device cannot be had) on stderr otherwise. `device` is a --device value that
// check_device accepted for planning.
int print_device_plan(const model::ModelWeights& w, const std::string& device,
                      const DevicePlanFlags& f);

}  // namespace qwen35::cli
