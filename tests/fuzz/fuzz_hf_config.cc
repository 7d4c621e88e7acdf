// libFuzzer: formats::parse_hf_config on arbitrary text (config.json of HF and MLX checkpoints).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "formats/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = qwen35::formats::parse_hf_config(text, "fuzz/config.json");
  if (!r.ok()) {
    if (r.message().empty()) std::abort();
    return 0;
  }
  if (r->quantization) {
    bool unquantized = false;
    for (const char* m : {"language_model.model.layers.0.mlp.gate", "model.layers.0.mlp.gate",
                          "language_model.lm_head", ""})
      (void)r->quantization->lookup(m, &unquantized);
    for (const auto& [module, spec] : r->quantization->overrides)
      (void)r->quantization->lookup(module, &unquantized);
  }
  return 0;
}
