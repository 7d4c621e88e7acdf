// Tokenizer: byte-level BPE loaded from a Hugging Face `tokenizer.json` (+ `tokenizer_config.json`
// when present). Supported: model BPE (merges as "a b" strings or [a, b] pairs), normalizer NFC
// (or none), pre-tokenizer Split(regex, isolated) followed by ByteLevel(use_regex false), or
// ByteLevel(use_regex true) alone, decoder ByteLevel, added tokens with their flags. Anything else
// fails to load with an error naming the field.
//
// Ids: the added tokens get the ids Hugging Face gives them (the vocab id when the content is in
// the vocab, else the next id after the vocab), not necessarily the `id` field of the file; the
// two agree for every real checkpoint.
//
// Thread-safety: a loaded Tokenizer is immutable apart from an internal, locked merge cache; all
// const methods may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "tokenizer/added_tokens.h"

namespace qwen35::formats {
class GgufModel;
}

namespace qwen35::tokenizer {

struct TokenizerData;  // internal: tokenizer_data.h

// What tokenizer_config.json says (all optional).
struct TokenizerConfig {
  std::string bos_token, eos_token, pad_token, unk_token;  // empty when absent
  bool add_bos_token = false;
  bool add_eos_token = false;
  bool clean_up_tokenization_spaces = false;
  std::string chat_template;  // raw string; empty when absent or not a single string
};

class Tokenizer {
 public:
  // Loads `dir`/tokenizer.json and, when present, `dir`/tokenizer_config.json.
  static core::Result<Tokenizer> load(const std::string& dir);
  // Loads from the JSON texts themselves; `config_json` may be empty. `label` names the source.
  static core::Result<Tokenizer> from_json(std::string_view tokenizer_json,
                                           std::string_view config_json, const std::string& label);
  // The tokenizer a GGUF file's metadata describes (tokenizer/tokenizer_gguf.cc).
  static core::Result<Tokenizer> from_gguf(const formats::GgufModel& gguf);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text to ids, as HF `encode(text, add_special_tokens=False)`: added tokens are matched in the
  // raw text. Fails only when `text` is not valid UTF-8 (the error gives the byte offset).
  core::Result<std::vector<int32_t>> encode(std::string_view text) const;
  // Appends to *ids; same contract as encode(). `literal` (sorted, disjoint byte ranges of
  // `text`): no special added token is matched where it would overlap one, so text there that
  // spells a control token (<|im_end|>) is tokenized as the plain text it is; everywhere else,
  // and for added tokens not flagged special, the result is encode()'s.
  core::Status encode_into(std::string_view text, std::vector<int32_t>* ids,
                           std::span<const TextRange> literal = {}) const;

  // Ids to text. `skip_special` drops the added tokens flagged special (not other added tokens).
  // Ids outside [0, vocab_size()) and ids with no token are skipped, as HF does. Invalid UTF-8 in
  // the joined bytes becomes U+FFFD (one per maximal invalid subpart).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The raw bytes of one token after the byte-level decoder; empty for an unknown id.
  std::string_view token_bytes(int32_t id) const;
  // The token string as written in tokenizer.json (byte-level alphabet); empty when unknown.
  std::string_view id_to_token(int32_t id) const;
  // Id of a token string as written in tokenizer.json (added tokens included); -1 when absent.
  int32_t token_to_id(std::string_view token) const;
  bool is_special(int32_t id) const;
  bool is_valid_id(int32_t id) const { return id >= 0 && size_t(id) < vocab_size(); }
  // One past the largest id (model vocab and added tokens).
  size_t vocab_size() const;
  const std::vector<AddedToken>& added_tokens() const;
  const TokenizerConfig& config() const;
  // Ids of the config's bos / eos / pad tokens; -1 when absent.
  int32_t bos_id() const;
  int32_t eos_id() const;
  int32_t pad_id() const;

 private:
  explicit Tokenizer(std::unique_ptr<TokenizerData> d);
  static core::Result<Tokenizer> from_json_unchecked(std::string_view tokenizer_json,
                                                     std::string_view config_json,
                                                     const std::string& label);
  core::Status encode_plain(std::string_view normalized, std::vector<int32_t>* ids) const;
  std::unique_ptr<TokenizerData> d_;
};

// Incremental detokenizer for streaming: push() returns the text that is complete so far and
// never ends inside a UTF-8 sequence (incomplete trailing bytes are held back until a later
// token completes them); flush() returns what is left (an incomplete tail becomes U+FFFD). The
// concatenation of all outputs equals Tokenizer::decode() of all the ids pushed.
// Not thread-safe; the Tokenizer must outlive it.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = false)
      : tok_(&tok), skip_special_(skip_special) {}
  std::string push(int32_t id);
  std::string flush();

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::string pending_;  // at most 3 bytes of an incomplete UTF-8 sequence
};

}  // namespace qwen35::tokenizer
