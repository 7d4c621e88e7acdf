// What the ops' recorders (ops.cc, vision_ops.cc) share to size and check a dispatch.
#pragma once

#include <cstdint>
#include <string>

#include "core/result.h"
#include "vulkan/instance.h"
#include "vulkan/recorder.h"

namespace qwen35::vulkan {

// Workgroups of kWorkgroup invocations covering `elements`, an invocation each.
inline uint64_t groups_for(uint64_t elements) { return (elements + kWorkgroup - 1) / kWorkgroup; }

// The shaders index with 32-bit words: a × b elements must fit, else the recording fails naming
// the op.
inline bool fits32(Recorder& rec, const char* op, int64_t a, int64_t b) {
  if (a < 0 || b < 0 || uint64_t(a) * uint64_t(b) >= (1ull << 32)) {
    rec.fail(core::error(std::string("[vulkan] ") + op + ": " + std::to_string(a) + " × " +
                         std::to_string(b) + " elements exceed what one dispatch indexes"));
    return false;
  }
  return true;
}

}  // namespace qwen35::vulkan
