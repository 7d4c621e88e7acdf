// A context-free grammar over bytes, built from code (the JSON-schema and tool-call compilers),
// never parsed from text. A rule is a list of alternatives; an alternative is a sequence of
// symbols, each a byte set (one byte in the set) or a reference to a rule.
//
// Invariants checked by Builder::finish (an error, never a crash):
//   - no left recursion (a rule reachable from itself through leftmost, nullable-prefixed
//     symbols), which the matcher's stack expansion could not end;
//   - the root matches at least one string (a schema that admits nothing is an error);
//   - at most kMaxSymbols symbols in all (a schema cannot make the server build a huge table);
//   - at most max_states states (states() below) from the root, when the Builder has a bound.
//
// States estimate what a grammar costs the matcher before any of it is built: the positions of
// the grammar with every repeat written out and every rule reference replaced by its rule (a
// reference back into a rule being expanded counts once; a character, whatever its encodings,
// counts once: CharSyms marks its rule with unit()). Repeats multiply: x{a,b} weighs b times x,
// so nested repeats give the product of their counts; an object weighs the sum of its
// properties. A matcher configuration holds at most one parse stack per such position, and
// byte-level ambiguity (a nested repeat) is what fills configurations with stacks.
#pragma once

#include <array>
#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace qwen35::grammar {

using ByteSet = std::bitset<256>;

struct Sym {
  bool rule = false;  // a rule reference, else a byte set
  int32_t id = -1;
};

// The compiled grammar: immutable, shared by every matcher of it.
class Grammar {
 public:
  // Element at a position of the flat table: a byte set, a rule reference, or the end of an
  // alternative.
  enum Kind : uint8_t { kBytes, kRule, kEnd };
  struct Elem {
    Kind kind;
    int32_t id;  // byte-set index or rule index
  };

  int32_t root() const { return root_; }
  const Elem& at(int32_t pos) const { return elems_[size_t(pos)]; }
  const ByteSet& set(int32_t id) const { return sets_[size_t(id)]; }
  // Positions where rule r's alternatives start.
  const std::vector<int32_t>& alts(int32_t r) const { return alts_[size_t(r)]; }
  // Fewest bytes that finish the alternative from pos (its remaining symbols).
  int64_t rest(int32_t pos) const { return rest_[size_t(pos)]; }
  int64_t min_length() const { return min_len_[size_t(root_)]; }
  size_t symbols() const { return elems_.size(); }
  size_t rules() const { return alts_.size(); }
  int64_t states() const { return states_; }  // the root's (Builder::states)
  // Bytes of the tables (the matcher counts them in its own size).
  size_t bytes() const;

 private:
  friend class Builder;
  std::vector<Elem> elems_;
  std::vector<ByteSet> sets_;
  std::vector<std::vector<int32_t>> alts_;
  std::vector<int64_t> rest_, min_len_;
  int32_t root_ = -1;
  int64_t states_ = 0;
};

class Builder {
 public:
  static constexpr size_t kMaxSymbols = 1 << 21;
  static constexpr int64_t kInf = INT64_MAX / 4;

  // max_states: the most states finish() accepts (kInf: no bound).
  explicit Builder(int64_t max_states = kInf) : max_states_(max_states) {}
  int64_t max_states() const { return max_states_; }

  Sym bytes(const ByteSet& s);
  Sym byte(uint8_t b);
  Sym range(uint8_t lo, uint8_t hi);
  // A new rule with no alternatives yet (for recursion); add them with add().
  Sym rule();
  void add(Sym rule, std::vector<Sym> seq);
  // Combinators: each returns a symbol for the whole (a new rule unless trivial).
  Sym seq(std::vector<Sym> parts);
  Sym alt(std::vector<Sym> options);
  Sym literal(std::string_view text);
  Sym empty();                                 // the empty string
  Sym opt(Sym x);                              // x?
  Sym star(Sym x);                             // x*
  Sym plus(Sym x);                             // x+
  Sym repeat(Sym x, int64_t min, int64_t max);  // x{min,max}; max < 0: unbounded
  // x (sep x)*, min..max items in all (max < 0: unbounded); min 0 allows none.
  Sym list(Sym x, Sym sep, int64_t min, int64_t max);
  // Fails once the grammar has grown past kMaxSymbols (the caller reports it).
  bool too_large() const { return size_ > kMaxSymbols; }
  // Marks a rule as one state whatever it holds (a character's alternative encodings).
  void unit(Sym rule);
  // The states of s (see above; saturating at kInf). Only for symbols whose rules are complete
  // (no alternative is added to them later). Linear in the symbols reachable from s.
  int64_t states(Sym s) const;
  // Why `states` states are too many: what they count, and the bound.
  std::string too_many_states(int64_t states) const;

  core::Result<Grammar> finish(Sym root);

 private:
  std::vector<ByteSet> sets_;
  std::vector<std::vector<std::vector<Sym>>> rules_;
  std::vector<uint8_t> unit_;  // per rule: counts as one state
  size_t size_ = 0;
  Sym empty_{};
  int64_t max_states_;
};

}  // namespace qwen35::grammar
