#include "tokenizer/utf8.h"

#include <utf8proc.h>

#include <cstdlib>

namespace qwen35::tokenizer {

Utf8Step utf8_step(std::string_view b) {
  const auto c0 = static_cast<uint8_t>(b[0]);
  if (c0 < 0x80) return {Utf8Step::kValid, 1};
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // range of the second byte
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    need = 2;
  } else if (c0 >= 0xE0 && c0 <= 0xEF) {
    need = 3;
    if (c0 == 0xE0) lo = 0xA0;
    if (c0 == 0xED) hi = 0x9F;
  } else if (c0 >= 0xF0 && c0 <= 0xF4) {
    need = 4;
    if (c0 == 0xF0) lo = 0x90;
    if (c0 == 0xF4) hi = 0x8F;
  } else {
    return {Utf8Step::kInvalid, 1};
  }
  for (size_t k = 1; k < need; ++k) {
    if (k >= b.size()) return {Utf8Step::kIncomplete, k};
    const auto c = static_cast<uint8_t>(b[k]);
    const bool ok = k == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) return {Utf8Step::kInvalid, k};
  }
  return {Utf8Step::kValid, need};
}

size_t utf8_valid_prefix(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    if (static_cast<uint8_t>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Step st = utf8_step(bytes.substr(i));
    if (st.kind != Utf8Step::kValid) return i;
    i += st.len;
  }
  return i;
}

size_t append_lossy(std::string_view bytes, bool final, std::string* out) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  size_t i = 0;
  while (i < bytes.size()) {
    const size_t ok = i + utf8_valid_prefix(bytes.substr(i));
    out->append(bytes.data() + i, ok - i);
    i = ok;
    if (i == bytes.size()) break;
    const Utf8Step st = utf8_step(bytes.substr(i));
    if (st.kind == Utf8Step::kIncomplete && !final) return i;
    out->append(kReplacement);
    i += st.len;
  }
  return i;
}

core::Status append_nfc(std::string_view text, std::string* out) {
  bool plain = true;
  for (char c : text) {
    if (static_cast<uint8_t>(c) >= 0xCC) {
      plain = false;
      break;
    }
  }
  if (plain) {
    out->append(text);
    return core::ok_status();
  }
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &dst,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    return core::error(std::string("[tokenizer] NFC normalization failed: ") + utf8proc_errmsg(n));
  }
  out->append(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
  std::free(dst);
  return core::ok_status();
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  cp_to_byte.fill(-1);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    byte_to_cp[b] = printable ? b : next++;
    cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
  }
}

bool ByteLevelAlphabet::decode(std::string_view token, std::string* out) const {
  if (utf8_valid_prefix(token) != token.size()) return false;
  size_t i = 0;
  while (i < token.size()) {
    const uint32_t cp = next_code_point(token, &i);
    if (cp >= cp_to_byte.size() || cp_to_byte[cp] < 0) return false;
    out->push_back(static_cast<char>(cp_to_byte[cp]));
  }
  return true;
}

uint32_t next_code_point(std::string_view s, size_t* i) {
  const auto c0 = static_cast<uint8_t>(s[*i]);
  if (c0 < 0x80) {
    *i += 1;
    return c0;
  }
  const size_t len = c0 >= 0xF0 ? 4 : c0 >= 0xE0 ? 3 : 2;
  uint32_t cp = c0 & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[*i + k]) & 0x3F);
  *i += len;
  return cp;
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace qwen35::tokenizer
