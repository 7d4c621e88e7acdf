// Numbers under minimum / maximum / exclusiveMinimum / exclusiveMaximum (json_schema.h).
//
// Integers are exact: the decimal strings of the integers in the range (within the 16 digits
// the grammar writes), built digit by digit, every alternative starting with a different digit
// (so the matcher never holds two readings of one prefix).
//
// Numbers are a sound subset of the range (every text written is in it), exact where the
// bounds are integers:
//   - the integers in the range, as above;
//   - decimals I.F (no exponent) whose whole interval is in the range: I.F for a non-negative
//     value lies in [I, I+1), -I.F in (-(I+1), -I];
//   - at an exclusive integer bound B, the decimals just inside it: B.F above a lower bound
//     B >= 0, -|B|.F below an upper bound B <= 0 (F ending in a non-zero digit);
//   - an inclusive integer bound B as B.0 (one to 16 zeros), an inclusive bound that is not an
//     integer as its own JSON text.
// What is left out: exponents, and the decimals between a non-integer bound and the next
// integer inside the range (for minimum 0.5: 0.5 itself and from 1 on, not 0.75).
#include <cmath>
#include <string_view>

#include "grammar/json_schema.h"
#include "grammar/schema_detail.h"

namespace qwen35::grammar {
using schema_detail::fail;
namespace {

constexpr int64_t kMaxMagnitude = 9999999999999999;  // 16 digits: the grammar's integers

// One side of a range: its value, floor and ceiling (clamped just past kMaxMagnitude, where the
// grammar's integers end), and whether it is exclusive.
struct Edge {
  bool set = false, excl = false;
  long double v = 0;
  int64_t fl = 0, ce = 0;
  const Json* json = nullptr;
  bool integral() const { return fl == ce; }
};

int64_t clamp_int(long double x) {
  constexpr long double kLim = kMaxMagnitude + 1.0L;
  if (x > kLim) return kMaxMagnitude + 1;
  if (x < -kLim) return -(kMaxMagnitude + 1);
  return int64_t(x);
}

Edge edge(const Json& v, bool excl) {
  Edge e;
  e.set = true;
  e.excl = excl;
  e.json = &v;
  if (v.is_number_integer()) {
    e.v = v.is_number_unsigned() ? (long double)v.get<uint64_t>() : (long double)v.get<int64_t>();
  } else {
    e.v = v.get<double>();
  }
  e.fl = clamp_int(std::floor(e.v));
  e.ce = clamp_int(std::ceil(e.v));
  return e;
}

// The tighter of two bounds on one side (lower: the larger value; at equal values exclusive).
Edge tighter(const Edge& a, const Edge& b, bool lower) {
  if (!a.set) return b;
  if (!b.set) return a;
  if (a.v == b.v) return a.excl ? a : b;
  return (a.v > b.v) == lower ? a : b;
}

}  // namespace

// Digit strings of x's length from x to y (inclusive; same length; leading zeros allowed).
Sym JsonSchemaCompiler::digits_between(const std::string& x, const std::string& y) {
  if (x.empty()) return b_.empty();
  if (x == y) return b_.literal(x);
  const size_t n = x.size();
  const std::string rx = x.substr(1), ry = y.substr(1);
  if (x[0] == y[0]) return b_.seq({b_.byte(uint8_t(x[0])), digits_between(rx, ry)});
  std::vector<Sym> opts;
  char a = x[0], z = y[0];
  if (rx.find_first_not_of('0') != std::string::npos) {  // x's first digit, then from rx up
    opts.push_back(b_.seq({b_.byte(uint8_t(a)), digits_between(rx, std::string(n - 1, '9'))}));
    ++a;
  }
  if (ry.find_first_not_of('9') != std::string::npos) {  // y's first digit, then up to ry
    opts.push_back(b_.seq({b_.byte(uint8_t(z)), digits_between(std::string(n - 1, '0'), ry)}));
    --z;
  }
  if (a <= z) opts.push_back(b_.seq({b_.range(uint8_t(a), uint8_t(z)), b_.repeat(b_.range('0', '9'), int64_t(n - 1), int64_t(n - 1))}));
  return b_.alt(std::move(opts));
}

// The decimal texts (no leading zero, no sign) of lo..hi, 0 <= lo <= hi <= kMaxMagnitude.
Sym JsonSchemaCompiler::natural_range(int64_t lo, int64_t hi) {
  const std::string a = std::to_string(lo), z = std::to_string(hi);
  std::vector<Sym> opts;
  for (size_t len = a.size(); len <= z.size(); ++len) {
    std::string from = a;
    if (len != a.size()) {  // 10^(len-1)
      from.assign(len, '0');
      from[0] = '1';
    }
    const std::string to = len == z.size() ? z : std::string(len, '9');
    opts.push_back(digits_between(from, to));
  }
  return b_.alt(std::move(opts));
}

// The integers lo..hi (lo <= hi, both within kMaxMagnitude) as JSON text; "-0" is not written.
Sym JsonSchemaCompiler::integer_range(int64_t lo, int64_t hi) {
  std::vector<Sym> opts;
  if (hi >= 0) opts.push_back(natural_range(std::max<int64_t>(lo, 0), hi));
  if (lo < 0) opts.push_back(b_.seq({b_.byte('-'), natural_range(std::max<int64_t>(-hi, 1), -lo)}));
  return b_.alt(std::move(opts));
}

Sym JsonSchemaCompiler::bounded_number(const std::string& t, const Json& s, const std::string& path) {
  Edge lo, hi;
  // Draft 4's boolean exclusiveMinimum/exclusiveMaximum turn minimum/maximum exclusive.
  auto excl_flag = [&](const char* k) { return s.contains(k) && s[k].is_boolean() && s[k].get<bool>(); };
  for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
    if (!s.contains(k)) continue;
    const Json& v = s[k];
    const bool draft4 = (k[0] == 'e') && v.is_boolean();
    if (draft4) continue;
    std::string where = "'";  // (built by appends: GCC 12 misreads a chain of + here)
    where.append(k).append("' at ").append(path);
    if (!v.is_number()) fail(where + " must be a number");
    if (v.is_number_float() && !std::isfinite(v.get<double>())) fail(where + " must be a finite number");
    const bool lower = k == std::string_view("minimum") || k == std::string_view("exclusiveMinimum");
    const bool excl = k[0] == 'e' || excl_flag(lower ? "exclusiveMinimum" : "exclusiveMaximum");
    if (lower) lo = tighter(lo, edge(v, excl), true);
    else hi = tighter(hi, edge(v, excl), false);
  }
  constexpr int64_t kM = kMaxMagnitude;
  // Integers: exact.
  const int64_t ilo = std::max(-kM, !lo.set ? -kM : lo.excl ? lo.fl + 1 : lo.ce);
  const int64_t ihi = std::min(kM, !hi.set ? kM : hi.excl ? hi.ce - 1 : hi.fl);
  std::vector<Sym> opts;
  if (ilo <= ihi) opts.push_back(integer_range(ilo, ihi));
  if (t == "number") {
    const Sym digit = b_.range('0', '9');
    const Sym frac = b_.seq({b_.byte('.'), b_.repeat(digit, 1, 16)});
    const Sym nonzero_frac = b_.seq({b_.byte('.'), b_.repeat(digit, 0, 15), b_.range('1', '9')});
    // Non-negative decimals I.F, v in [I, I+1): I >= lo (> lo when exclusive), I + 1 <= hi.
    const int64_t plo = std::max<int64_t>(0, !lo.set ? 0 : lo.excl ? lo.fl + 1 : lo.ce);
    const int64_t phi = std::min(kM, !hi.set ? kM : hi.fl - 1);
    if (plo <= phi) opts.push_back(b_.seq({natural_range(plo, phi), frac}));
    // Negative decimals -I.F, v in (-(I+1), -I]: -(I+1) >= lo, -I <= hi (< hi when exclusive).
    const int64_t nlo = std::max<int64_t>(0, !hi.set ? 0 : hi.excl ? 1 - hi.ce : -hi.fl);
    const int64_t nhi = std::min(kM, !lo.set ? kM : -lo.ce - 1);
    if (nlo <= nhi) opts.push_back(b_.seq({b_.byte('-'), natural_range(nlo, nhi), frac}));
    // Just inside an exclusive integer bound: B.F (B >= 0) above, -|B|.F (B <= 0) below, when
    // the interval beside B is in the other bound.
    if (lo.set && lo.excl && lo.integral() && lo.fl >= 0 && lo.fl <= kM && (!hi.set || lo.fl + 1 <= hi.fl))
      opts.push_back(b_.seq({natural_range(lo.fl, lo.fl), nonzero_frac}));
    if (hi.set && hi.excl && hi.integral() && hi.fl <= 0 && -hi.fl <= kM && (!lo.set || -hi.fl <= -lo.ce - 1))
      opts.push_back(b_.seq({b_.byte('-'), natural_range(-hi.fl, -hi.fl), nonzero_frac}));
    // An inclusive integer bound with a zero fraction (B.0, which the intervals above leave out
    // at an upper bound B >= 0 or a lower bound B <= 0).
    const Sym zeros = b_.seq({b_.byte('.'), b_.repeat(b_.byte('0'), 1, 16)});
    for (const Edge* e : {&lo, &hi})
      if (e->set && !e->excl && e->integral() && e->fl >= ilo && e->fl <= ihi &&
          !(e == &hi && lo.set && lo.v == hi.v))  // minimum == maximum: once
        opts.push_back(e->fl < 0 ? b_.seq({b_.byte('-'), natural_range(-e->fl, -e->fl), zeros})
                                 : b_.seq({natural_range(e->fl, e->fl), zeros}));
    // An inclusive bound that is not an integer is itself a value in the range.
    auto in_range = [&](long double v) {
      return (!lo.set || (lo.excl ? v > lo.v : v >= lo.v)) && (!hi.set || (hi.excl ? v < hi.v : v <= hi.v));
    };
    for (const Edge* e : {&lo, &hi})
      if (e->set && !e->excl && !e->integral() && in_range(e->v))
        opts.push_back(b_.literal(e->json->dump()));
  }
  if (opts.empty())
    fail("the range at " + path + " admits no " + t + " this grammar writes (at most 16 integer digits" +
         (t == "number" ? std::string(", decimals as described for numbers") : "") + ")");
  return b_.alt(std::move(opts));
}

}  // namespace qwen35::grammar
