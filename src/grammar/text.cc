#include "grammar/text.h"

#include <algorithm>

namespace qwen35::grammar {
namespace {

constexpr uint32_t kSurLo = 0xD800, kSurHi = 0xDFFF;

int utf8_len(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

void encode(uint32_t c, uint8_t* out) {
  switch (utf8_len(c)) {
    case 1: out[0] = uint8_t(c); break;
    case 2: out[0] = uint8_t(0xC0 | (c >> 6)), out[1] = uint8_t(0x80 | (c & 0x3F)); break;
    case 3:
      out[0] = uint8_t(0xE0 | (c >> 12)), out[1] = uint8_t(0x80 | ((c >> 6) & 0x3F));
      out[2] = uint8_t(0x80 | (c & 0x3F));
      break;
    default:
      out[0] = uint8_t(0xF0 | (c >> 18)), out[1] = uint8_t(0x80 | ((c >> 12) & 0x3F));
      out[2] = uint8_t(0x80 | ((c >> 6) & 0x3F)), out[3] = uint8_t(0x80 | (c & 0x3F));
  }
}

// Byte-range sequences whose concatenations are exactly the UTF-8 encodings of [lo, hi] (no
// surrogates in it). Splits until every position but a common prefix spans whole
// continuation ranges, the way regex engines compile Unicode classes to bytes.
using Seq = std::vector<std::pair<uint8_t, uint8_t>>;
void utf8_seqs(uint32_t lo, uint32_t hi, std::vector<Seq>* out) {
  for (uint32_t m : {0x7Fu, 0x7FFu, 0xFFFFu})
    if (lo <= m && m < hi) {
      utf8_seqs(lo, m, out);
      utf8_seqs(m + 1, hi, out);
      return;
    }
  const int n = utf8_len(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_seqs(lo, lo | m, out);
        utf8_seqs((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_seqs(lo, (hi & ~m) - 1, out);
        utf8_seqs(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  encode(lo, a);
  encode(hi, b);
  Seq s;
  for (int i = 0; i < n; ++i) s.emplace_back(a[i], b[i]);
  out->push_back(std::move(s));
}

ByteSet hex_digit(int v) {  // the digit of value v in either case
  ByteSet s;
  const char* lower = "0123456789abcdef";
  const char* upper = "0123456789ABCDEF";
  s.set(uint8_t(lower[v])).set(uint8_t(upper[v]));
  return s;
}

}  // namespace

CharSet& CharSet::add(uint32_t lo, uint32_t hi) {
  hi = std::min(hi, kMaxCodePoint);
  if (lo > hi) return *this;
  // Surrogates are left out.
  if (lo <= kSurHi && hi >= kSurLo) {
    if (lo < kSurLo) add(lo, kSurLo - 1);
    if (hi > kSurHi) add(kSurHi + 1, hi);
    return *this;
  }
  r_.emplace_back(lo, hi);
  std::sort(r_.begin(), r_.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (auto [a, b] : r_) {
    // Ranges that overlap or touch merge (never across the surrogate gap: a range holds no
    // surrogate, so it stays two ranges).
    if (!merged.empty() && a <= merged.back().second + 1) merged.back().second = std::max(merged.back().second, b);
    else merged.emplace_back(a, b);
  }
  r_ = std::move(merged);
  return *this;
}

CharSet& CharSet::add(const CharSet& o) {
  for (auto [a, b] : o.r_) add(a, b);
  return *this;
}

bool CharSet::contains(uint32_t c) const {
  if (c >= kSurLo && c <= kSurHi) return false;
  for (auto [a, b] : r_)
    if (c >= a && c <= b) return true;
  return false;
}

CharSet CharSet::negated() const {
  CharSet out;
  uint32_t next = 0;
  for (auto [a, b] : r_) {
    if (a > next) out.add(next, a - 1);
    next = b + 1;
  }
  if (next <= kMaxCodePoint) out.add(next, kMaxCodePoint);
  return out;
}

Sym CharSyms::of(const CharSet& set, Encoding enc) {
  const CharSet s = enc == Encoding::kRaw ? set.minus(CharSet().add('<')) : set;
  auto key = std::make_pair(s, int(enc));
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  std::vector<Sym> options;
  ByteSet plain;  // ASCII written as itself
  for (auto [lo, hi] : s.ranges()) {
    for (uint32_t c = lo; c <= std::min(hi, 0x7Fu); ++c) {
      if (enc == Encoding::kRaw || (c >= 0x20 && c != '"' && c != '\\')) {
        plain.set(c);
        if (enc == Encoding::kJson && c == '/') options.push_back(b_.literal("\\/"));
        continue;
      }
      // JSON escapes: the short forms, else \u00XX.
      const char* shortform = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\b' ? "\\b"
                            : c == '\f' ? "\\f" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                            : c == '\t' ? "\\t" : nullptr;
      if (shortform) options.push_back(b_.literal(shortform));
      else
        options.push_back(b_.seq({b_.literal("\\u00"), b_.bytes(hex_digit(int(c >> 4))),
                                  b_.bytes(hex_digit(int(c & 15)))}));
    }
    if (hi >= 0x80) {
      std::vector<Seq> seqs;
      utf8_seqs(std::max(lo, 0x80u), hi, &seqs);
      for (const Seq& q : seqs) {
        std::vector<Sym> parts;
        for (auto [a, b] : q) parts.push_back(b_.range(a, b));
        options.push_back(b_.seq(std::move(parts)));
      }
    }
  }
  if (plain.any()) options.insert(options.begin(), b_.bytes(plain));
  Sym r;
  if (options.empty()) {
    r = b_.rule();  // no alternative: matches nothing
  } else {
    r = b_.alt(std::move(options));
    b_.unit(r);  // one character: one state, however many encodings it has
  }
  memo_.emplace(std::move(key), r);
  return r;
}

Sym CharSyms::json_any() {
  if (json_any_.id >= 0) return json_any_;
  // Characters written as themselves or with a short escape, plus \uXXXX of any BMP character
  // but a surrogate (a lone surrogate is not a character).
  const Sym direct = of(CharSet::any(), Encoding::kJson);
  ByteSet hex, hex_not_d, lo8;
  for (int v = 0; v < 16; ++v) {
    hex |= hex_digit(v);
    if (v != 13) hex_not_d |= hex_digit(v);
    if (v < 8) lo8 |= hex_digit(v);
  }
  const Sym h = b_.bytes(hex);
  const Sym u = b_.alt({b_.seq({b_.bytes(hex_not_d), h, h, h}),
                        b_.seq({b_.bytes(hex_digit(13)), b_.bytes(lo8), h, h})});
  json_any_ = b_.alt({direct, b_.seq({b_.literal("\\u"), u})});
  b_.unit(json_any_);
  return json_any_;
}

}  // namespace qwen35::grammar
