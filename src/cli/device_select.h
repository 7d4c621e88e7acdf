// --device for the commands that run a model (run, serve, bench, logits, inspect): checked before
// any weight is read.
#pragma once

#include <string>
#include <utility>

#include "core/result.h"
#include "model/model.h"

namespace qwen35::cli {

// OK for cpu, and for vulkan[:N] where that device can run us. Else one line: this build has no
// Vulkan backend, or there is no loader, no device N, or it lacks what we need.
core::Status check_device(const std::string& value);

// After the model is made: for vulkan[:N], opens the device, uploads the weights and puts the
// forward on it (vkmodel/vulkan_executor.h). Refuses in one line what the device does not run
// yet (fast mode, a KV type other than f32) or what does not fit. Nothing for cpu.
core::Status use_device(const std::string& value, model::Model& m, bool fast);

// vulkan[:N]: the device's name and its memory read bandwidth in GB/s, measured by the probe
// shader over 256 MiB (vulkan/probe.h), for bench's roofline.
core::Result<std::pair<std::string, double>> device_bandwidth(const std::string& value);

// Whether this binary was built with the Vulkan backend.
bool has_vulkan_backend();

}  // namespace qwen35::cli
