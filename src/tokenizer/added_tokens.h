// Added tokens (special and not): found in the text before the model sees it, as Hugging Face
// tokenizers' AddedVocabulary does: leftmost-longest, non-overlapping matches; a match that fails
// its `single_word` test is dropped (not retried shorter); `lstrip` / `rstrip` widen the match
// over adjacent white space.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace qwen35::tokenizer {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// A byte range [begin, end) of a text.
struct TextRange {
  size_t begin, end;
};

// One segment of the text: an added token (id >= 0) or plain text (id == -1).
struct Segment {
  size_t begin, end;
  int32_t id;
};

class AddedTokenMatcher {
 public:
  // `tokens` are the tokens this matcher looks for (all normalized, or all not normalized).
  void init(const std::vector<const AddedToken*>& tokens);
  bool empty() const { return tokens_.empty(); }
  // Appends the segments of `text`, offset by `base`. Plain segments are never empty.
  // `literal` (sorted, disjoint, in the same offsets as the segments): where a special token
  // would overlap one, it is not a candidate, as if special tokens were unknown there (Hugging
  // Face's split_special_tokens); tokens not flagged special still match.
  void split(std::string_view text, size_t base, std::vector<Segment>* out,
             std::span<const TextRange> literal = {}) const;

 private:
  std::vector<AddedToken> tokens_;
  // Indices into tokens_ by first byte, longest first.
  std::array<std::vector<uint32_t>, 256> by_first_byte_;
};

}  // namespace qwen35::tokenizer
