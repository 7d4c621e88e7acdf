// The compute shaders' SPIR-V, compiled from src/vulkan/shaders/*.comp by glslc at build time and
// embedded into the binary (cmake/vulkan.cmake writes embedded_shaders()).
#pragma once

#include <span>
#include <string_view>

namespace qwen35::vulkan {

struct EmbeddedShader {
  std::string_view name;  // "matmul_q4_0", "rms_norm", ...
  std::string_view data;  // SPIR-V words, 4-byte aligned
};

std::span<const EmbeddedShader> embedded_shaders();

// The shader named `name`; empty data when there is none.
std::string_view shader_spirv(std::string_view name);

// Storage-buffer bindings a SPIR-V module declares (one past the highest binding number), read
// from its OpDecorate ... Binding instructions; 0 for a malformed module.
uint32_t spirv_bindings(std::string_view spirv);

// The bindings a SPIR-V module only reads: bit i set where binding i's variable, or every member
// of its block, is decorated NonWritable (GLSL `readonly`). The recorder orders a command after
// an earlier one only where one of them writes what the other touches (vulkan/recorder.h).
uint32_t spirv_readonly_bindings(std::string_view spirv);

}  // namespace qwen35::vulkan
