#include "vulkan/shaders.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace qwen35::vulkan {

std::string_view shader_spirv(std::string_view name) {
  for (const EmbeddedShader& s : embedded_shaders())
    if (s.name == name) return s.data;
  return {};
}

uint32_t spirv_bindings(std::string_view spirv) {
  constexpr uint32_t kMagic = 0x07230203, kOpDecorate = 71, kDecorationBinding = 33;
  if (spirv.size() < 20 || spirv.size() % 4 != 0) return 0;
  auto word = [&](size_t i) {
    uint32_t w;
    std::memcpy(&w, spirv.data() + 4 * i, 4);
    return w;
  };
  if (word(0) != kMagic) return 0;
  const size_t n = spirv.size() / 4;
  uint32_t bindings = 0;
  for (size_t i = 5; i < n;) {  // instructions follow the 5-word header
    const uint32_t len = word(i) >> 16, op = word(i) & 0xFFFF;
    if (len == 0 || i + len > n) return 0;
    if (op == kOpDecorate && len >= 4 && word(i + 2) == kDecorationBinding)
      bindings = std::max(bindings, word(i + 3) + 1);
    i += len;
  }
  return bindings;
}

}  // namespace qwen35::vulkan
