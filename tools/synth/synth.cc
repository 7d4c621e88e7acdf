#include "tools/synth/synth.h"

namespace qwen35::tools {

core::Status write_synthetic_checkpoint(const SynthOptions& opts) {
  (void)opts;
  return core::error("[synth] not implemented yet");
}

}  // namespace qwen35::tools
