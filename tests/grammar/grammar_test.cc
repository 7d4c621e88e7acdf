// The grammar layer: JSON Schema and pattern compilation, token masks, finishing in budget.
// Expectations are independent of the compiler: hand-written valid and invalid documents,
// nlohmann's JSON parser, and std::regex (ECMAScript) for patterns.
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"
#include "grammar_fixture.h"

namespace qwen35::grammar {
namespace {

TEST(Grammar, ObjectsAcceptExactlyTheirDocuments) {
  Fixture f;
  auto a = f.compile(Json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},
      "b":{"type":"string","maxLength":3},"c":{"type":"array","items":{"type":"boolean"},
      "minItems":1,"maxItems":2}},"required":["a","c"],"additionalProperties":false})"));
  ASSERT_TRUE(a);
  for (const char* ok : {R"({"a":5,"c":[true]})", R"({"a": -0, "b": "xy\n", "c": [false, true]})",
                         "{\n  \"a\": 12,\n  \"c\": [true]\n}", R"({"a":1,"b":"","c":[true]})",
                         R"({"a":7,"b":"é€😀","c":[true]})"})
    EXPECT_EQ(Fixture::accepts(*a, ok), 1) << ok;
  for (const char* bad : {R"({"c":[true]})", R"({"a":5.5,"c":[true]})", R"({"a":01,"c":[true]})",
                          R"({"a":1,"c":[]})", R"({"a":1,"c":[true,true,true]})",
                          R"({"a":1,"b":"abcd","c":[true]})", R"({"c":[true],"a":1})",
                          R"({"a":1,"c":[true],"d":1})", R"({"a":1,"b":"\ud800","c":[true]})",
                          "{\"a\":1,\"b\":\"\x01\",\"c\":[true]}", "{\"a\":1,\"b\":\"\xC3\",\"c\":[true]}"})
    EXPECT_NE(Fixture::accepts(*a, bad), 1) << bad;
  EXPECT_EQ(Fixture::accepts(*a, R"({"a":5,"c":[true])"), 0);  // a valid prefix, not complete
}

TEST(Grammar, EnumsConstRefsAnyOfAndFormats) {
  Fixture f;
  auto a = f.compile(Json::parse(R"({"$defs":{"node":{"type":"object","properties":{
      "v":{"enum":["x","y\"z",3,null]},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},
      "required":["v"]}},"anyOf":[{"$ref":"#/$defs/node"},{"const":{"k":[1,2]}},
      {"type":"string","format":"date"},{"type":["number","null"]}]})"));
  ASSERT_TRUE(a);
  for (const char* ok : {R"({"v":"x"})", R"({"v":"y\"z","kids":[{"v":3},{"v":null,"kids":[]}]})",
                         R"({"k":[1,2]})", R"("2024-02-28")", R"("1999-12-31")", "-1.5e+10", "null",
                         "3"})
    EXPECT_EQ(Fixture::accepts(*a, ok), 1) << ok;
  for (const char* bad : {R"({"v":"z"})", R"({"k":[1,3]})", R"("2024-02-30")", R"("2024-13-01")",
                          R"("2024-1-01")", "true", R"({"kids":[]})", "1e999"})
    EXPECT_NE(Fixture::accepts(*a, bad), 1) << bad;
}

TEST(Grammar, JsonObjectAcceptsAnyObject) {
  Fixture f;
  auto g = json_object_grammar();
  ASSERT_TRUE(g.ok());
  Automaton a(std::move(*g), f.vocab, f.ends);
  for (const char* ok : {"{}", R"({"a":[1,{"b":null}],"c":"\u00e9\n"})", "{ \"x\" : true }"})
    EXPECT_EQ(Fixture::accepts(a, ok), 1) << ok;
  for (const char* bad : {"[]", "1", R"({"a":})", R"({a:1})", "{,}"})
    EXPECT_NE(Fixture::accepts(a, bad), 1) << bad;
}

// Patterns against std::regex's ECMAScript engine on every short string of a small alphabet.
TEST(Grammar, PatternsMatchWhatEcmaScriptMatches) {
  Fixture f;
  const char* patterns[] = {"^[a-c]+$", "^a(b|cd)*$", "b.c", "^\\d{2,3}-?x$", "^(?:ab|a)c?$",
                            "^[^b]*b{1,2}$", "^\\w\\s\\W?$", "c$", "^a|b$", "^[\\d\\-]{2}$"};
  const std::string alphabet = "abcd1-x ";
  for (const char* p : patterns) {
    auto a = f.compile(Json{{"type", "string"}, {"pattern", p}});
    ASSERT_TRUE(a) << p;
    const std::regex re(p, std::regex::ECMAScript);
    std::vector<std::string> strs = {""};
    for (int len = 1; len <= 4; ++len)
      for (size_t i = 0, n = strs.size(); i < n; ++i)
        if (strs[i].size() == size_t(len - 1))
          for (char c : alphabet) strs.push_back(strs[i] + c);
    for (const auto& s : strs)
      ASSERT_EQ(Fixture::accepts(*a, "\"" + s + "\"") == 1, std::regex_search(s, re))
          << "pattern " << p << " on '" << s << "'";
  }
}

// Random walks under the mask: every output parses, and finishes within its token budget.
TEST(Grammar, MaskedWalksGiveValidJsonWithinTheBudget) {
  Fixture f;
  const char* schemas[] = {
      R"({"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer"},
         "tags":{"type":"array","items":{"type":"string","enum":["a","b"]}}},"required":["name"]})",
      R"({"type":"array","items":{"type":"number"},"minItems":2})",
      R"({"type":"string","pattern":"^[A-Z]{2}\\d+$"})",
      R"({"type":"object"})",
      R"({"anyOf":[{"type":"string","format":"uuid"},{"type":"string","format":"date-time"}]})"};
  std::mt19937_64 rng(5);
  for (const char* s : schemas) {
    auto a = f.compile(Json::parse(s));
    ASSERT_TRUE(a);
    for (int i = 0; i < 20; ++i) {
      const int64_t budget = a->finish_tokens(a->initial()) + 1 + int64_t(rng() % 40);
      bool ended = false;
      const std::string out = f.walk(*a, rng, budget, &ended);
      ASSERT_TRUE(ended) << s << ": ran out of budget " << budget << " after '" << out << "'";
      EXPECT_FALSE(Json::parse(out, nullptr, false).is_discarded()) << s << ": " << out;
      EXPECT_EQ(Fixture::accepts(*a, out), 1) << out;
    }
  }
}

// The mask from the sorted-vocabulary walk equals stepping each token on its own.
TEST(Grammar, MaskEqualsTokenByTokenSteps) {
  Fixture f;
  auto a = f.compile(Json::parse(R"({"type":"object","properties":{"name":{"type":"string"},
      "x":{"type":"array","items":{"type":"integer"}}},"required":["name","x"]})"));
  ASSERT_TRUE(a);
  int32_t c = a->initial();
  std::vector<uint64_t> m;
  for (unsigned char b : std::string(R"({"name": "h€llo", "x": [1, 2)")) {
    a->mask(c, Automaton::kInf, &m);
    for (int32_t t = 0; t < f.vocab->size(); ++t) {
      const bool in_mask = (m[size_t(t) / 64] >> (t % 64)) & 1;
      EXPECT_EQ(in_mask, a->step(c, t) != Automaton::kDead) << "token " << t;
    }
    c = a->step(c, int32_t(b));
    ASSERT_NE(c, Automaton::kDead);
  }
}

TEST(Grammar, UnsupportedKeywordsAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type":"integer","multipleOf":3})", "'multipleOf' at #"},
      {R"({"type":"object","properties":{"a":{"not":{"type":"string"}}}})", "'not' at #/properties/a"},
      {R"({"type":"string","format":"hostname"})", "format 'hostname'"},
      {R"({"type":"string","pattern":"(?=a)b"})", "lookaround"},
      {R"({"type":"string","pattern":"(a)\\1"})", "backreferences"},
      {R"({"$ref":"#/$defs/missing"})", "'$ref'"},
      {R"({"type":"strin"})", "unknown type 'strin'"},
      {R"({"type":"string","pattern":"a{2,1}"})", "below its minimum"},
      {R"({"type":"string","pattern":"[z-a]"})", "out of order"},
      {R"({"type":"array","maxItems":999999})", "'maxItems'"},
      {R"(false)", "admits no value"},
      {R"({"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})", "admits no value"},
      {R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"})",
       "left-recursive"},
  };
  for (const auto& [schema, want] : cases) {
    auto g = json_schema_grammar(Json::parse(schema));
    ASSERT_FALSE(g.ok()) << schema;
    EXPECT_NE(g.message().find(want), std::string::npos) << schema << ": " << g.message();
  }
  // A chain of $defs, each referring to the next, is compiled recursively: bounded too.
  Json chain = {{"$ref", "#/$defs/d0"}, {"$defs", Json::object()}};
  for (int i = 0; i < 1000; ++i) {
    std::string name = "d", next = "#/$defs/d";
    name += std::to_string(i);
    next += std::to_string(i + 1);
    chain["$defs"][name] = Json{{"type", "array"}, {"items", {{"$ref", next}}}};
  }
  chain["$defs"]["d1000"] = Json{{"type", "null"}};
  auto c = json_schema_grammar(chain);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("128 definitions"), std::string::npos) << c.message();
  // A pattern's groups are parsed recursively: their depth is bounded.
  const std::string deep = std::string(100, '(') + "a" + std::string(100, ')');
  auto g = json_schema_grammar(Json{{"type", "string"}, {"pattern", deep}});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("nest deeper"), std::string::npos) << g.message();
}

TEST(Grammar, RawStringsNeverCloseATag) {
  Builder b;
  const Json schema = {{"type", "string"}};
  JsonSchemaCompiler c(b, schema);
  auto s = c.raw_string(schema, "#");
  ASSERT_TRUE(s.ok());
  auto g = b.finish(b.seq({b.literal("<p>"), *s, b.literal("</p>")}));
  ASSERT_TRUE(g.ok());
  std::vector<int32_t> ends;
  Automaton a(std::move(*g), test_vocab(&ends), ends);
  EXPECT_EQ(Fixture::accepts(a, "<p>a < b, <<x>></p>"), 1);
  EXPECT_EQ(Fixture::accepts(a, "<p>a<</p>"), 1);
  EXPECT_EQ(Fixture::accepts(a, "<p>a</b></p>"), -1);
}

}  // namespace
}  // namespace qwen35::grammar
