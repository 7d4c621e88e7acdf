// libFuzzer: formats::GgufFile::parse on arbitrary bytes, then what a model load reads of an
// accepted file: the typed metadata and the tokenizer (Tokenizer::from_gguf). Every accepted
// tensor must lie inside the input; reading all of it lets ASan catch any view past the end.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace qwen35;
  auto r = formats::GgufFile::parse(data, size, "fuzz.gguf");
  if (!r.ok()) {
    if (r.message().empty()) std::abort();  // an error must say what is wrong
    return 0;
  }
  volatile uint8_t sink = 0;
  for (const auto& t : (*r)->tensors()) {
    if (t.nbytes > 0 && (t.data < data || t.data + t.nbytes > data + size)) std::abort();
    if (t.numel() <= 0) std::abort();
    for (size_t i = 0; i < t.nbytes; ++i) sink = sink ^ t.data[i];
    (void)t.shape_str();
  }
  (void)sink;
  auto m = formats::GgufModel::from_files({*r});
  if (!m.ok()) return 0;
  for (const char* key : {"general.architecture", "qwen35.block_count", "qwen35.rope.freq_base"}) {
    (void)(*m)->get_int(key);
    (void)(*m)->get_float(key);
    (void)(*m)->get_string(key);
  }
  auto tok = tokenizer::Tokenizer::from_gguf(**m);
  if (tok.ok()) {
    auto ids = tok->encode("Hello <|im_end|> world\n\n  x");
    if (ids.ok()) (void)tok->decode(*ids);
  }
  return 0;
}
