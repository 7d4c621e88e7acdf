// The JSON Schema keywords for agents' tool schemas (issue 46): numeric bounds, propertyNames,
// patternProperties, oneOf, uniqueItems, prefixItems. Expectations are independent of the
// compiler: the bounds checked on the parsed numbers (brute force over ranges of texts), sets of
// distinct values counted by hand, and hand-written documents.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <optional>
#include <random>
#include <set>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar_fixture.h"

namespace qwen35::grammar {
namespace {

// A range as JSON Schema states it; each side optional, inclusive or exclusive.
struct Range {
  std::optional<double> lo, hi;
  bool lo_excl = false, hi_excl = false;
  bool has(double v) const {
    if (lo && (lo_excl ? !(v > *lo) : !(v >= *lo))) return false;
    if (hi && (hi_excl ? !(v < *hi) : !(v <= *hi))) return false;
    return true;
  }
  Json schema(const char* type) const {
    Json s = {{"type", type}};
    auto num = [](double v) { return v == std::floor(v) ? Json(int64_t(v)) : Json(v); };
    if (lo) s[lo_excl ? "exclusiveMinimum" : "minimum"] = num(*lo);
    if (hi) s[hi_excl ? "exclusiveMaximum" : "maximum"] = num(*hi);
    return s;
  }
};

const Range kRanges[] = {
    {0.0, 2000.0},          // Claude Code's offsets and limits: 0..2000
    {-5.0, 17.0},           // across zero
    {1.0, std::nullopt},    // >= 1
    {0.0, std::nullopt, true},                 // > 0 (exclusiveMinimum 0)
    {std::nullopt, 0.0, false, true},          // < 0
    {-20.0, -3.0, false, true},                // -20 <= n < -3
    {-1000.0, 999.0, true, true},              // (-1000, 999)
    {0.5, 7.5},                                // non-integer bounds
    {-7.25, 3.75, true, false},
    {std::nullopt, 120000.0},                  // OpenCode's timeout: at most 120000
    {99.0, 101.0},
    {10.0, 10.0},                              // one value
};

TEST(Keywords, IntegerRangesAreExact) {
  Fixture f;
  for (const Range& r : kRanges) {
    const Json s = r.schema("integer");
    auto a = f.compile(s);
    ASSERT_TRUE(a) << s;
    for (int64_t n = -2100; n <= 2100; ++n)
      ASSERT_EQ(Fixture::accepts(*a, std::to_string(n)) == 1, r.has(double(n))) << s << " " << n;
    for (int64_t n : {99999, 100000, 119999, 120000, 120001, 1000000, -120001})
      ASSERT_EQ(Fixture::accepts(*a, std::to_string(n)) == 1, r.has(double(n))) << s << " " << n;
    for (const char* bad : {"-0", "01", "1.0", "1e2", "+1", "--1"})
      EXPECT_NE(Fixture::accepts(*a, bad), 1) << s << " " << bad;
  }
  // A bound past the 16 digits the grammar writes, and a large one within them.
  Fixture g;
  auto a = g.compile(Json{{"type", "integer"}, {"minimum", 9999999999999990LL}});
  ASSERT_TRUE(a);
  EXPECT_EQ(Fixture::accepts(*a, "9999999999999995"), 1);
  EXPECT_EQ(Fixture::accepts(*a, "9999999999999989"), -1);
  EXPECT_EQ(Fixture::accepts(*a, "99999999999999999"), -1);
  auto big = json_schema_grammar(Json{{"type", "integer"}, {"minimum", 1e20}});
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.message().find("admits no integer"), std::string::npos) << big.message();
}

// Decimal texts from eighths: "k", "k.0" and the shortest "k.xyz", with their values.
std::vector<std::pair<std::string, double>> decimal_texts() {
  std::vector<std::pair<std::string, double>> out;
  for (int64_t i = -200 * 8; i <= 200 * 8; ++i) {
    const double v = double(i) / 8;
    if (i % 8 == 0) {
      out.emplace_back(std::to_string(i / 8), v);
      out.emplace_back((i < 0 ? "-" : "") + std::to_string(std::abs(i / 8)) + ".0", v);
    } else {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.3f", v);
      std::string t = buf;
      while (t.back() == '0') t.pop_back();
      out.emplace_back(t, v);
    }
  }
  return out;
}

// Numbers: every accepted text is in the range; at integer bounds every decimal of the range is
// accepted (but "-0..." and exponents); at other bounds, every decimal whose unit interval
// [I, I+1) (or (-(I+1), -I]) lies in the range, and an inclusive bound itself.
TEST(Keywords, NumberRangesAreSoundAndExactAtIntegerBounds) {
  Fixture f;
  const auto texts = decimal_texts();
  for (const Range& r : kRanges) {
    const Json s = r.schema("number");
    auto a = f.compile(s);
    ASSERT_TRUE(a) << s;
    const bool integral = (!r.lo || *r.lo == std::floor(*r.lo)) && (!r.hi || *r.hi == std::floor(*r.hi));
    for (const auto& [t, v] : texts) {
      const bool ok = Fixture::accepts(*a, t) == 1;
      if (ok) {
        ASSERT_TRUE(r.has(v)) << s << " accepts " << t;
      }
      if (!r.has(v) || t.rfind("-0", 0) == 0) continue;
      // The unit interval of I.F: [I, I+1) or (-(I+1), -I], inside the range.
      const double whole = std::floor(std::fabs(v));
      const bool cell = v >= 0 ? r.has(whole) && (!r.hi || whole + 1 <= *r.hi)
                               : r.has(-whole) && (!r.lo || -(whole + 1) >= *r.lo);
      const bool integer_text = t.find('.') == std::string::npos;
      if (integral || cell || integer_text) {
        ASSERT_TRUE(ok) << s << " rejects " << t;
      }
    }
    for (const auto* e : {&r.lo, &r.hi})
      if (*e && **e != std::floor(**e) && r.has(**e)) {
        EXPECT_EQ(Fixture::accepts(*a, Json(**e).dump()), 1) << s << " " << Json(**e).dump();
      }
    EXPECT_NE(Fixture::accepts(*a, "1e1"), 1) << s;  // no exponents under a bound
  }
  // Masked walks: every number sampled parses and is in the range.
  std::mt19937_64 rng(5);
  for (const Range& r : kRanges) {
    auto a = f.compile(r.schema("number"));
    ASSERT_TRUE(a);
    for (int i = 0; i < 40; ++i) {
      bool ended = false;
      const std::string out = f.walk(*a, rng, 40, &ended);
      ASSERT_TRUE(ended) << out;
      const Json v = Json::parse(out, nullptr, false);
      ASSERT_TRUE(v.is_number()) << out;
      EXPECT_TRUE(r.has(v.get<double>())) << r.schema("number") << " " << out;
    }
  }
  // An exclusive range with no integer and no room for a whole unit interval: refused.
  auto none = json_schema_grammar(Json{{"type", "number"}, {"exclusiveMinimum", 0.2}, {"exclusiveMaximum", 0.7}});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.message().find("admits no number"), std::string::npos) << none.message();
  auto both = f.compile(Json{{"type", "number"}, {"minimum", 0.2}, {"maximum", 0.7}});
  ASSERT_TRUE(both);
  EXPECT_EQ(Fixture::accepts(*both, "0.2"), 1);
  EXPECT_EQ(Fixture::accepts(*both, "0.7"), 1);
  EXPECT_EQ(Fixture::accepts(*both, "0.8"), -1);
}

TEST(Keywords, BoundsWithoutATypeAndDraft4Forms) {
  Fixture f;
  auto a = f.compile(Json::parse(R"({"minimum":0,"maximum":10,"exclusiveMaximum":true})"));
  ASSERT_TRUE(a);
  for (const char* ok : {"0", "9", "9.5", "0.25"}) EXPECT_EQ(Fixture::accepts(*a, ok), 1) << ok;
  for (const char* bad : {"10", "-1", "10.5", "\"1\""}) EXPECT_NE(Fixture::accepts(*a, bad), 1) << bad;
  // The tighter of minimum and exclusiveMinimum.
  auto b = f.compile(Json::parse(R"({"type":"integer","minimum":3,"exclusiveMinimum":3})"));
  ASSERT_TRUE(b);
  EXPECT_NE(Fixture::accepts(*b, "3"), 1);
  EXPECT_EQ(Fixture::accepts(*b, "4"), 1);
  for (const char* bad : {R"({"type":"integer","minimum":"3"})", R"({"type":"number","maximum":null})"}) {
    auto g = json_schema_grammar(Json::parse(bad));
    ASSERT_FALSE(g.ok()) << bad;
    EXPECT_NE(g.message().find("must be a number"), std::string::npos) << g.message();
  }
}

TEST(Keywords, PropertyNamesAndPatternProperties) {
  Fixture f;
  auto a = f.compile(Json::parse(R"({"type":"object","propertyNames":{"pattern":"^[a-z]+$"},
      "additionalProperties":{"type":"integer","minimum":0}})"));
  ASSERT_TRUE(a);
  for (const char* ok : {"{}", R"({"abc":1})", R"({"abc":1, "x":20})"}) EXPECT_EQ(Fixture::accepts(*a, ok), 1) << ok;
  for (const char* bad : {R"({"Abc":1})", R"({"a1":1})", R"({"":1})", R"({"abc":-1})", R"({"abc":"s"})"})
    EXPECT_NE(Fixture::accepts(*a, bad), 1) << bad;
  // An enum of keys; declared properties outside it are left out.
  auto b = f.compile(Json::parse(R"({"type":"object","propertyNames":{"enum":["a","b"]}})"));
  ASSERT_TRUE(b);
  EXPECT_EQ(Fixture::accepts(*b, R"({"a":1,"b":[true]})"), 1);
  EXPECT_NE(Fixture::accepts(*b, R"({"c":1})"), 1);
  auto c = f.compile(Json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},"z":{"type":"integer"}},
      "propertyNames":{"const":"a"}})"));
  ASSERT_TRUE(c);
  EXPECT_EQ(Fixture::accepts(*c, R"({"a":1})"), 1);
  EXPECT_NE(Fixture::accepts(*c, R"({"a":1,"z":2})"), 1);
  auto req = json_schema_grammar(Json::parse(R"({"type":"object","required":["z"],"propertyNames":{"enum":["a"]}})"));
  ASSERT_FALSE(req.ok());
  EXPECT_NE(req.message().find("'propertyNames'"), std::string::npos) << req.message();
  auto bad_type = json_schema_grammar(Json::parse(R"({"type":"object","propertyNames":{"type":"integer"}})"));
  ASSERT_FALSE(bad_type.ok());
  // patternProperties: extra keys of the pattern, values under its schema.
  auto p = f.compile(Json::parse(R"({"type":"object","patternProperties":{"^x-":{"type":"boolean"}},
      "additionalProperties":false})"));
  ASSERT_TRUE(p);
  for (const char* ok : {"{}", R"({"x-a":true})", R"({"x-":false,"x-yz":true})"}) EXPECT_EQ(Fixture::accepts(*p, ok), 1) << ok;
  for (const char* bad : {R"({"y":true})", R"({"x-a":1})", R"({"ax-":true})"}) EXPECT_NE(Fixture::accepts(*p, bad), 1) << bad;
  auto two = json_schema_grammar(Json::parse(R"({"patternProperties":{"^a":{},"b$":{"type":"null"}}})"));
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.message().find("one pattern"), std::string::npos) << two.message();
}

TEST(Keywords, OneOfIsAnyOf) {
  Fixture f;
  auto a = f.compile(Json::parse(R"({"oneOf":[{"type":"integer","minimum":5},{"type":"string","maxLength":2}]})"));
  ASSERT_TRUE(a);
  for (const char* ok : {"5", "70", R"("ab")"}) EXPECT_EQ(Fixture::accepts(*a, ok), 1) << ok;
  for (const char* bad : {"4", R"("abc")", "null"}) EXPECT_NE(Fixture::accepts(*a, bad), 1) << bad;
}

// Every array of up to 4 items over the values (repeats and all orders): accepted only when its
// items are distinct and the count is within bounds; every such set is accepted in some order.
TEST(Keywords, UniqueItemsOverFiniteSets) {
  Fixture f;
  struct Case {
    const char* schema;
    std::vector<std::string> values;  // the item values' JSON texts
    size_t lo, hi;
  };
  const Case cases[] = {
      {R"({"type":"array","items":{"enum":["x","y","z"]},"uniqueItems":true})", {"\"x\"", "\"y\"", "\"z\""}, 0, 3},
      {R"({"type":"array","items":{"enum":["x","y","z",1]},"uniqueItems":true,"minItems":2,"maxItems":3})",
       {"\"x\"", "\"y\"", "\"z\"", "1"}, 2, 3},
      {R"({"type":"array","items":{"type":"boolean"},"uniqueItems":true,"minItems":1})", {"true", "false"}, 1, 2},
      {R"({"type":"array","items":{"type":"string","enum":["a","b",3,"a"]},"uniqueItems":true,"maxItems":1})",
       {"\"a\"", "\"b\""}, 0, 1},
  };
  for (const auto& c : cases) {
    auto a = f.compile(Json::parse(c.schema));
    ASSERT_TRUE(a) << c.schema;
    std::set<std::set<std::string>> seen;
    std::function<void(std::vector<std::string>&)> all = [&](std::vector<std::string>& items) {
      std::string text = "[";
      for (size_t i = 0; i < items.size(); ++i) text += (i ? "," : "") + items[i];
      text += "]";
      const std::set<std::string> distinct(items.begin(), items.end());
      const bool valid = distinct.size() == items.size() && items.size() >= c.lo && items.size() <= c.hi;
      const bool ok = Fixture::accepts(*a, text) == 1;
      if (ok) {
        EXPECT_TRUE(valid) << c.schema << " accepts " << text;
        seen.insert(distinct);
      }
      if (items.size() == 4) return;
      for (const auto& v : c.values) {
        items.push_back(v);
        all(items);
        items.pop_back();
      }
    };
    std::vector<std::string> none;
    all(none);
    // Every set of distinct values of an allowed size, in some order.
    size_t subsets = 0;
    for (size_t m = 0; m < (size_t(1) << c.values.size()); ++m) {
      const size_t k = size_t(__builtin_popcountll(m));
      if (k >= c.lo && k <= c.hi) ++subsets;
    }
    EXPECT_EQ(seen.size(), subsets) << c.schema;
  }
  // Not a finite set: refused, unless at most one item.
  auto g = json_schema_grammar(Json::parse(R"({"type":"array","items":{"type":"string"},"uniqueItems":true})"));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("'uniqueItems' at #"), std::string::npos) << g.message();
  auto one = f.compile(Json::parse(R"({"type":"array","items":{"type":"string"},"uniqueItems":true,"maxItems":1})"));
  ASSERT_TRUE(one);
  EXPECT_EQ(Fixture::accepts(*one, R"(["a"])"), 1);
  auto off = f.compile(Json::parse(R"({"type":"array","items":{"type":"string"},"uniqueItems":false})"));
  ASSERT_TRUE(off);
  EXPECT_EQ(Fixture::accepts(*off, R"(["a","a"])"), 1);
}

TEST(Keywords, PrefixItemsThenItems) {
  Fixture f;
  auto a = f.compile(Json::parse(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})"));
  ASSERT_TRUE(a);
  for (const char* ok : {"[]", R"(["a"])", R"(["a", 1])"}) EXPECT_EQ(Fixture::accepts(*a, ok), 1) << ok;
  for (const char* bad : {"[1]", R"(["a","b"])", R"(["a",1,2])", R"(["a",])"}) EXPECT_NE(Fixture::accepts(*a, bad), 1) << bad;
  auto b = f.compile(Json::parse(R"({"prefixItems":[{"const":"cmd"},{"type":"integer"}],
      "items":{"type":"boolean"},"minItems":3,"maxItems":4})"));
  ASSERT_TRUE(b);
  for (const char* ok : {R"(["cmd",1,true])", R"(["cmd",1,true,false])"}) EXPECT_EQ(Fixture::accepts(*b, ok), 1) << ok;
  for (const char* bad : {R"(["cmd",1])", R"(["cmd",1,true,false,true])", R"(["cmd",1,2])", R"(["x",1,true])"})
    EXPECT_NE(Fixture::accepts(*b, bad), 1) << bad;
  // Without items: any values after the tuple.
  auto c = f.compile(Json::parse(R"({"prefixItems":[{"type":"null"}]})"));
  ASSERT_TRUE(c);
  EXPECT_EQ(Fixture::accepts(*c, R"([null, "x", {"y": 1}])"), 1);
  EXPECT_NE(Fixture::accepts(*c, R"([1])"), 1);
  auto short_ = json_schema_grammar(Json::parse(R"({"prefixItems":[{}],"items":false,"minItems":2})"));
  ASSERT_FALSE(short_.ok());
}

// Optional properties add states (they used to double them): a tool with 40 optional
// parameters is well under serve's default bound of 250000.
TEST(Keywords, OptionalPropertiesStayWithinTheStateBound) {
  Json props = Json::object();
  for (int i = 0; i < 40; ++i) props["p" + std::to_string(i)] = {{"type", "integer"}, {"minimum", 0}};
  auto g = json_schema_grammar(Json{{"type", "object"}, {"properties", props}}, 250000);
  ASSERT_TRUE(g.ok()) << g.message();
  Fixture f;
  auto a = f.compile(Json{{"type", "object"}, {"properties", props}});
  ASSERT_TRUE(a);
  EXPECT_EQ(Fixture::accepts(*a, R"({"p3":1,"p39":2})"), 1);
  EXPECT_NE(Fixture::accepts(*a, R"({"p39":2,"p3":1})"), 1);
  EXPECT_NE(Fixture::accepts(*a, R"({"p3":1,"p3":1})"), 1);
  EXPECT_NE(Fixture::accepts(*a, R"({,"p3":1})"), 1);
}

}  // namespace
}  // namespace qwen35::grammar
