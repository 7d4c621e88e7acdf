// libFuzzer: the tokenizer on arbitrary bytes. Encodes the input as text (invalid UTF-8 must be
// an error), checks the round trip decode(encode(x)) == NFC(x) for valid input, and streams the
// input bytes as token ids through decode and the incremental decoder.
#include <utf8proc.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tokenizer/tokenizer.h"

using qwen35::tokenizer::Tokenizer;

static const Tokenizer& tok() {
  static Tokenizer* t = [] {
    auto r = Tokenizer::load(QWEN35_FUZZ_TOKENIZER_DIR);
    if (!r.ok()) std::abort();
    return new Tokenizer(std::move(*r));
  }();
  return *t;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& t = tok();
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto ids = t.encode(text);
  if (ids.ok()) {
    for (int32_t id : *ids)
      if (!t.is_valid_id(id)) std::abort();
    const std::string back = t.decode(*ids, false);
    utf8proc_uint8_t* nfc = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(text.c_str()));
    // Text with NUL bytes is cut short by utf8proc's C-string API; compare only without them.
    if (nfc != nullptr && text.find('\0') == std::string::npos && back != reinterpret_cast<char*>(nfc)) std::abort();
    std::free(nfc);
  }
  // The bytes as ids: decode and stream them; the stream never emits broken UTF-8.
  std::vector<int32_t> raw;
  for (size_t i = 0; i + 1 < size; i += 2) raw.push_back(int32_t(data[i] | (data[i + 1] << 8)) - 100);
  (void)t.decode(raw, true);
  qwen35::tokenizer::StreamDecoder dec(t);
  std::string streamed;
  for (int32_t id : raw)
    if (t.is_valid_id(id)) streamed += dec.push(id);
  streamed += dec.flush();
  for (size_t i = 0; i < streamed.size();) {
    utf8proc_int32_t cp;
    const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(streamed.data() + i),
                                    utf8proc_ssize_t(streamed.size() - i), &cp);
    if (n <= 0) std::abort();
    i += size_t(n);
  }
  return 0;
}
