#include "grammar/regex.h"

#include <stdexcept>
#include <string>

namespace qwen35::grammar {
namespace {

struct PatternError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

CharSet digits() { return CharSet().add('0', '9'); }
CharSet word() { return CharSet().add('0', '9').add('A', 'Z').add('a', 'z').add('_'); }
CharSet space() {  // ECMAScript WhiteSpace and LineTerminator
  CharSet s;
  s.add('\t', '\r').add(' ').add(0xA0).add(0x1680).add(0x2000, 0x200A).add(0x2028, 0x2029);
  return s.add(0x202F).add(0x205F).add(0x3000).add(0xFEFF);
}
CharSet dot() { return CharSet::any().minus(CharSet().add('\n').add('\r').add(0x2028, 0x2029)); }

class Parser {
 public:
  Parser(std::string_view p, Builder& b, CharSyms& c, Encoding e) : p_(p), b_(b), c_(c), enc_(e) {}

  Sym top() {
    std::vector<Sym> alts;
    do {
      bool start = eat('^');
      Sym s = sequence(/*top=*/true);
      bool end = false;
      if (peek() == '$') {
        ++i_;
        end = true;
      }
      if (i_ < p_.size() && peek() != '|') fail("'$' is supported only at the end of the pattern");
      std::vector<Sym> parts;
      if (!start) parts.push_back(b_.star(c_.of(CharSet::any(), enc_)));
      parts.push_back(s);
      if (!end) parts.push_back(b_.star(c_.of(CharSet::any(), enc_)));
      alts.push_back(b_.seq(std::move(parts)));
    } while (eat('|'));
    return b_.alt(std::move(alts));
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw PatternError(what + " (at offset " + std::to_string(i_) + ")");
  }
  int peek() const { return i_ < p_.size() ? (unsigned char)p_[i_] : -1; }
  bool eat(char c) {
    if (peek() != (unsigned char)c) return false;
    ++i_;
    return true;
  }
  uint32_t utf8_char() {  // one character of the pattern text (valid UTF-8 by the caller)
    const unsigned char c = (unsigned char)p_[i_++];
    if (c < 0x80) return c;
    const int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
    uint32_t cp = c & (0x3F >> n);
    for (int k = 0; k < n && i_ < p_.size(); ++k) cp = (cp << 6) | ((unsigned char)p_[i_++] & 0x3F);
    return cp;
  }
  uint32_t hex(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      const int c = peek();
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) fail("bad hexadecimal escape");
      v = v * 16 + uint32_t(d);
      ++i_;
    }
    return v;
  }
  // After a backslash: a class escape fills *set and returns true; else *c is the character.
  bool escape(CharSet* set, uint32_t* c, bool in_class) {
    if (i_ >= p_.size()) fail("a pattern cannot end with a backslash");
    const char e = p_[i_++];
    switch (e) {
      case 'd': *set = digits(); return true;
      case 'D': *set = digits().negated(); return true;
      case 'w': *set = word(); return true;
      case 'W': *set = word().negated(); return true;
      case 's': *set = space(); return true;
      case 'S': *set = space().negated(); return true;
      case 't': *c = '\t'; return false;
      case 'n': *c = '\n'; return false;
      case 'r': *c = '\r'; return false;
      case 'f': *c = '\f'; return false;
      case 'v': *c = '\v'; return false;
      case '0': *c = 0; return false;
      case 'x': *c = hex(2); return false;
      case 'u':
        if (eat('{')) {
          uint32_t v = 0;
          int n = 0;
          while (peek() != '}' && n < 7) v = v * 16 + hex(1), ++n;
          if (!eat('}') || n == 0 || v > kMaxCodePoint) fail("bad \\u{...} escape");
          *c = v;
        } else {
          *c = hex(4);
        }
        return false;
      case 'b':
        if (in_class) {
          *c = '\b';
          return false;
        }
        fail("word boundaries (\\b) are not supported in patterns");
      default:
        if ((e >= '1' && e <= '9') || e == 'k') fail("backreferences are not supported in patterns");
        if (e == 'p' || e == 'P') fail("Unicode property escapes (\\p) are not supported in patterns");
        if (e == 'B' || e == 'c') fail(std::string("the escape \\") + e + " is not supported in patterns");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z'))
          fail(std::string("unknown escape \\") + e);
        --i_;
        *c = utf8_char();
        return false;
    }
  }
  CharSet bracket() {  // after '['
    const bool neg = eat('^');
    CharSet s;
    bool first = true;
    while (peek() != ']' || first) {
      if (i_ >= p_.size()) fail("unterminated character class");
      first = false;
      CharSet cls;
      uint32_t lo = 0;
      if (eat('\\')) {
        if (escape(&cls, &lo, true)) {
          s.add(cls);
          continue;
        }
      } else {
        lo = utf8_char();
      }
      if (peek() == '-' && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        uint32_t hi = 0;
        if (eat('\\')) {
          if (escape(&cls, &hi, true)) fail("a class escape cannot end a range");
        } else {
          hi = utf8_char();
        }
        if (hi < lo) fail("a character range is out of order");
        s.add(lo, hi);
      } else {
        s.add(lo);
      }
    }
    ++i_;
    return neg ? s.negated() : s;
  }
  Sym atom() {
    const int c = peek();
    if (c == '(') {
      if (++depth_ > kMaxGroupDepth) fail("groups nest deeper than " + std::to_string(kMaxGroupDepth));
      ++i_;
      if (eat('?')) {
        if (eat(':')) {
        } else if (eat('<') && peek() != '=' && peek() != '!') {
          while (i_ < p_.size() && p_[i_] != '>') ++i_;
          if (!eat('>')) fail("unterminated group name");
        } else {
          fail("lookaround assertions are not supported in patterns");
        }
      }
      std::vector<Sym> alts;
      do alts.push_back(sequence(false));
      while (eat('|'));
      if (!eat(')')) fail("missing ')'");
      --depth_;
      return b_.alt(std::move(alts));
    }
    if (c == '[') {
      ++i_;
      return c_.of(bracket(), enc_);
    }
    if (c == '.') {
      ++i_;
      return c_.of(dot(), enc_);
    }
    if (c == '\\') {
      ++i_;
      CharSet set;
      uint32_t ch = 0;
      if (escape(&set, &ch, false)) return c_.of(set, enc_);
      return c_.of(CharSet().add(ch), enc_);
    }
    if (c == '^') fail("'^' is supported only at the start of the pattern");
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("a quantifier has nothing to repeat");
    if (c == ')') fail("unmatched ')'");
    return c_.of(CharSet().add(utf8_char()), enc_);
  }
  bool quantifier(int64_t* lo, int64_t* hi) {
    const int c = peek();
    if (c == '*') *lo = 0, *hi = -1;
    else if (c == '+') *lo = 1, *hi = -1;
    else if (c == '?') *lo = 0, *hi = 1;
    else if (c == '{') {
      const size_t save = i_;
      ++i_;
      auto number = [&](int64_t* v) {
        if (peek() < '0' || peek() > '9') return false;
        *v = 0;
        while (peek() >= '0' && peek() <= '9') {
          *v = *v * 10 + (peek() - '0');
          if (*v > kMaxRepeat) fail("a repeat count is over " + std::to_string(kMaxRepeat));
          ++i_;
        }
        return true;
      };
      if (!number(lo)) {
        i_ = save;
        fail("'{' must start a quantifier {n}, {n,} or {n,m} (escape it as \\{)");
      }
      *hi = *lo;
      if (eat(',')) {
        if (!number(hi)) *hi = -1;
      }
      if (!eat('}')) fail("unterminated quantifier");
      if (*hi >= 0 && *hi < *lo) fail("a quantifier's maximum is below its minimum");
      eat('?');
      return true;
    } else {
      return false;
    }
    ++i_;
    eat('?');
    return true;
  }
  Sym sequence(bool top) {
    std::vector<Sym> parts;
    while (i_ < p_.size() && peek() != '|' && peek() != ')') {
      if (top && peek() == '$' && (i_ + 1 == p_.size() || p_[i_ + 1] == '|')) break;
      if (peek() == '$') fail("'$' is supported only at the end of the pattern");
      Sym a = atom();
      int64_t lo = 1, hi = 1;
      while (quantifier(&lo, &hi)) a = b_.repeat(a, lo, hi);
      parts.push_back(a);
      if (b_.too_large()) fail("the pattern makes too large a grammar");
    }
    if (top && peek() == ')') fail("unmatched ')'");
    if (parts.empty()) return b_.empty();
    return b_.seq(std::move(parts));
  }

  static constexpr int kMaxGroupDepth = 64;  // the parser recurses per group
  std::string_view p_;
  size_t i_ = 0;
  int depth_ = 0;
  Builder& b_;
  CharSyms& c_;
  Encoding enc_;
};

}  // namespace

core::Result<Sym> compile_pattern(std::string_view pattern, Builder& b, CharSyms& chars,
                                  Encoding enc) {
  try {
    Parser p(pattern, b, chars, enc);
    const Sym s = p.top();
    // Checked here, not only for the whole grammar, so that the error names the pattern.
    if (const int64_t n = b.states(s); n > b.max_states())
      return core::error("the pattern is too large: " + b.too_many_states(n));
    return s;
  } catch (const PatternError& e) {
    return core::error(e.what());
  }
}

}  // namespace qwen35::grammar
