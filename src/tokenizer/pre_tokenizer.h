// The Split pre-tokenizer (behaviour "isolated"): a regex cuts normalized text into pieces; the
// matches and the gaps between them are both pieces. The pattern is written for Oniguruma (what
// Hugging Face tokenizers uses) and compiled with PCRE2 (UTF + UCP + JIT).
//
// Thread-safety: split() is const and may run concurrently; each call uses its own match data.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace qwen35::tokenizer {

// The GPT-2 pattern the ByteLevel pre-tokenizer applies when its `use_regex` is true.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Rewrites an Oniguruma pattern into PCRE2 syntax with the same meaning. `\s` / `\S` become
// explicit classes of the Unicode White_Space characters (Oniguruma's `\s`; PCRE2's differs on
// U+180E). Fails on constructs whose meaning would change (`\S` inside a class).
core::Result<std::string> translate_oniguruma(std::string_view pattern);

class RegexSplitter {
 public:
  // `pattern` is in Oniguruma syntax; `label` names it in errors.
  static core::Result<RegexSplitter> create(std::string_view pattern, const std::string& label);

  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;
  ~RegexSplitter();

  // Appends the [begin, end) byte ranges of the pieces of valid UTF-8 `text` (matches and
  // non-empty gaps, in order). Fails only on a PCRE2 run-time error.
  core::Status split(std::string_view text, std::vector<std::pair<size_t, size_t>>* pieces) const;

 private:
  struct Impl;
  explicit RegexSplitter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace qwen35::tokenizer
