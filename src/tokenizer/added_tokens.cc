#include "tokenizer/added_tokens.h"

#include <utf8proc.h>

#include <algorithm>

#include "tokenizer/utf8.h"

namespace qwen35::tokenizer {

namespace {

bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

// Unicode word character (Rust regex `\w`): letters, marks, decimal and letter numbers,
// connector punctuation, ZWNJ / ZWJ.
bool is_word_char(uint32_t cp) {
  if (cp == 0x200C || cp == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// The code point that ends at s[end) (s valid UTF-8, end > 0).
uint32_t last_code_point(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
  return next_code_point(s, &i);
}

// Whether [b, e) overlaps one of `r` (sorted, disjoint), from the cursor *k on: the callers ask
// with nondecreasing b, so the cursor only moves forward.
bool overlaps(std::span<const TextRange> r, size_t* k, size_t b, size_t e) {
  while (*k < r.size() && r[*k].end <= b) ++*k;
  return *k < r.size() && r[*k].begin < e;
}

}  // namespace

void AddedTokenMatcher::init(const std::vector<const AddedToken*>& tokens) {
  tokens_.clear();
  for (auto& v : by_first_byte_) v.clear();
  for (const AddedToken* t : tokens) {
    if (!t->content.empty()) tokens_.push_back(*t);
  }
  for (size_t i = 0; i < tokens_.size(); ++i) {
    by_first_byte_[static_cast<uint8_t>(tokens_[i].content[0])].push_back(uint32_t(i));
  }
  for (auto& v : by_first_byte_) {
    std::stable_sort(v.begin(), v.end(), [&](uint32_t a, uint32_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

void AddedTokenMatcher::split(std::string_view text, size_t base, std::vector<Segment>* out,
                              std::span<const TextRange> literal) const {
  size_t emitted = 0;  // end of the last segment pushed
  size_t pos = 0;
  size_t cursor = 0;  // into literal
  while (pos < text.size()) {
    const auto& cands = by_first_byte_[static_cast<uint8_t>(text[pos])];
    const AddedToken* hit = nullptr;
    for (uint32_t idx : cands) {
      const std::string& c = tokens_[idx].content;
      if (text.compare(pos, c.size(), c) == 0) {
        if (tokens_[idx].special && overlaps(literal, &cursor, base + pos, base + pos + c.size()))
          continue;
        hit = &tokens_[idx];
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + hit->content.size();
    pos = stop;
    if (hit->single_word) {
      const bool word_before = start > 0 && is_word_char(last_code_point(text, start));
      size_t j = stop;
      const bool word_after = stop < text.size() && is_word_char(next_code_point(text, &j));
      if (word_before || word_after) continue;
    }
    if (hit->lstrip) {
      size_t s = start;
      while (s > emitted && is_white_space(last_code_point(text, s))) {
        --s;
        while ((static_cast<uint8_t>(text[s]) & 0xC0) == 0x80) --s;
      }
      start = s;
    }
    if (hit->rstrip) {
      while (stop < text.size()) {
        size_t j = stop;
        if (!is_white_space(next_code_point(text, &j))) break;
        stop = j;
      }
      pos = stop;
    }
    if (start > emitted) out->push_back({base + emitted, base + start, -1});
    out->push_back({base + start, base + stop, hit->id});
    emitted = stop;
  }
  if (emitted < text.size()) out->push_back({base + emitted, base + text.size(), -1});
}

}  // namespace qwen35::tokenizer
