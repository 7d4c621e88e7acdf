// Internal: the state of a loaded Tokenizer, shared by the loader and the encode/decode code.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace qwen35::tokenizer {

struct TokenizerData {
  Bpe bpe;
  bool nfc = false;
  // Applied in order; each splits every piece of the previous one (empty: no splitting).
  std::vector<RegexSplitter> splitters;
  AddedTokenMatcher raw_matcher;         // added tokens with normalized == false
  AddedTokenMatcher normalized_matcher;  // added tokens with normalized == true (NFC content)
  std::vector<AddedToken> added;         // with the ids HF assigns
  StringMap<int32_t> token_ids;          // token string (as in the file) -> id
  // Per id in [0, n_ids): token string, decoded bytes, flags. Flat buffers: token i is
  // [off[i], off[i+1]).
  size_t n_ids = 0;
  std::string text_buf, bytes_buf;
  std::vector<uint32_t> text_off, bytes_off;
  std::vector<uint8_t> flags;  // kPresent | kSpecial
  static constexpr uint8_t kPresent = 1, kSpecial = 2;
  TokenizerConfig config;
  int32_t bos_id = -1, eos_id = -1, pad_id = -1;
};

}  // namespace qwen35::tokenizer
