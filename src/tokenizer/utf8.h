// UTF-8 helpers for the tokenizer: validation, lossy decoding (maximal-subpart replacement, the
// rule of Rust's String::from_utf8_lossy that Hugging Face tokenizers uses), NFC, and the GPT-2
// byte-level alphabet.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.h"

namespace qwen35::tokenizer {

// Classification of the UTF-8 sequence that starts at bytes[0].
struct Utf8Step {
  enum Kind { kValid, kInvalid, kIncomplete } kind;
  // kValid: length of the sequence. kInvalid: length of the maximal subpart to replace with one
  // U+FFFD (>= 1). kIncomplete: every byte up to the end of the input is a valid prefix.
  size_t len;
};
Utf8Step utf8_step(std::string_view bytes);

// Returns the offset of the first invalid or incomplete byte, or bytes.size() when valid.
size_t utf8_valid_prefix(std::string_view bytes);

// Appends `bytes` to `out`, replacing each maximal invalid subpart with U+FFFD. When `final` is
// false, a trailing incomplete (but so far valid) sequence is not consumed: the return value is
// the number of bytes consumed, so the caller keeps the rest for later.
size_t append_lossy(std::string_view bytes, bool final, std::string* out);

// NFC of valid UTF-8 `text` appended to `out`. Fast path: text without any byte >= 0xCC (all code
// points below U+0300) is already NFC and is copied.
core::Status append_nfc(std::string_view text, std::string* out);

// The GPT-2 byte-level alphabet: each byte maps to one code point (printable Latin-1 bytes map to
// themselves, the rest to U+0100 upwards).
struct ByteLevelAlphabet {
  ByteLevelAlphabet();
  std::array<uint32_t, 256> byte_to_cp;
  // Inverse over U+0000..U+01FF; -1 where the code point is not in the alphabet.
  std::array<int16_t, 512> cp_to_byte;
  // Maps every code point of `token` back to its byte; false if one is outside the alphabet or
  // the token is not valid UTF-8 (then *out is unspecified).
  bool decode(std::string_view token, std::string* out) const;
};

// Decodes one code point from valid UTF-8 at s[*i], advancing *i.
uint32_t next_code_point(std::string_view s, size_t* i);
void append_utf8(uint32_t cp, std::string* out);

}  // namespace qwen35::tokenizer
