// --device for the commands that run a model (run, serve, bench, logits, inspect): checked before
// any weight is read.
#pragma once

#include <string>

#include "core/result.h"

namespace qwen35::cli {

// OK for cpu. vulkan[:N] fails in one line: this build has no Vulkan backend, or there is no
// loader or no device N, or (until the forward pass is on the device, issue 48) that it is not
// there yet, rather than running on the CPU unasked. With `plan_only` (inspect, which plans
// device memory and runs nothing) a device we can run on is OK.
core::Status check_device(const std::string& value, bool plan_only = false);

// Whether this binary was built with the Vulkan backend.
bool has_vulkan_backend();

}  // namespace qwen35::cli
