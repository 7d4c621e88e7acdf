// libFuzzer: formats::SafetensorsFile::parse on arbitrary bytes. Every accepted tensor must lie
// inside the input; reading all of it lets ASan catch any view past the end.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using qwen35::formats::SafetensorsFile;
  auto r = SafetensorsFile::parse(data, size, "fuzz.safetensors");
  if (!r.ok()) {
    if (r.message().empty()) std::abort();  // an error must say what is wrong
    return 0;
  }
  volatile uint8_t sink = 0;
  for (const auto& [name, v] : (*r)->tensors()) {
    if (v.nbytes > 0 && (v.data < data || v.data + v.nbytes > data + size)) std::abort();
    if (v.numel() < 0) std::abort();
    for (size_t i = 0; i < v.nbytes; ++i) sink = sink ^ v.data[i];
    (void)v.shape_str();
  }
  (void)sink;
  return 0;
}
