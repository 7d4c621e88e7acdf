// Characters as grammar symbols: sets of Unicode code points, written as UTF-8 bytes either raw
// or as they appear inside a JSON string (escaped where JSON requires it).
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace qwen35::grammar {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// A set of code points as sorted, disjoint, non-adjacent closed ranges. Surrogates
// (U+D800..U+DFFF) are never members: they are not characters UTF-8 can carry.
class CharSet {
 public:
  CharSet() = default;
  static CharSet any() { return CharSet().add(0, kMaxCodePoint); }
  CharSet& add(uint32_t lo, uint32_t hi);
  CharSet& add(uint32_t c) { return add(c, c); }
  CharSet& add(const CharSet& o);
  CharSet negated() const;
  CharSet minus(const CharSet& o) const { return negated().add(o).negated(); }
  bool empty() const { return r_.empty(); }
  bool contains(uint32_t c) const;
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return r_; }
  bool operator<(const CharSet& o) const { return r_ < o.r_; }

 private:
  std::vector<std::pair<uint32_t, uint32_t>> r_;
};

enum class Encoding {
  kJson,  // inside a JSON string: " \ and control characters escaped, the rest as UTF-8
  kRaw,   // the characters' UTF-8 bytes as they are, '<' left out (it could open a closing tag)
};

// Builds character symbols, memoized per (set, encoding): one rule per distinct class.
class CharSyms {
 public:
  explicit CharSyms(Builder& b) : b_(b) {}
  // One character of `s`. Empty sets give a symbol that matches nothing (a rule with no
  // alternative), which finish() reports when it makes the whole grammar empty.
  Sym of(const CharSet& s, Encoding enc);
  // Any one character of a JSON string, every escape form included (\uXXXX for the BMP).
  Sym json_any();

 private:
  Builder& b_;
  std::map<std::pair<CharSet, int>, Sym> memo_;
  Sym json_any_{};
};

}  // namespace qwen35::grammar
