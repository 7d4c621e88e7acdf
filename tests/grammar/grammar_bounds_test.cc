// The grammar layer's bounds (issue 32): the states estimate that refuses a grammar before its
// automaton exists (nested repeats multiply, properties add, a character counts once), the
// automaton's memory bound while in use (exhaustion is sticky and answers what is built as
// before), kBounded sessions (never wait, never build much), memory linear in the schema, deep
// rule chains without recursion, and allocation failures that leave a shared automaton whole.
#include <gtest/gtest.h>

#include <thread>

#include "alloc_hook.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"

namespace qwen35::grammar {
namespace {

// Single bytes, runs of 'a', and a few JSON-shaped tokens; the last id is the end token.
std::shared_ptr<const Vocab> bounds_vocab(std::vector<int32_t>* end_ids) {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.push_back(std::string(1, char(b)));
  for (int k = 2; k <= 8; ++k) t.push_back(std::string(size_t(k), 'a'));
  for (const char* s : {"{\"", "\":", "\",", ",\"", "\"}", "12", "\n  ", "  ", "true"})
    t.push_back(s);
  std::vector<bool> usable(t.size() + 1, true);
  t.push_back("<|end|>");
  usable.back() = false;
  *end_ids = {int32_t(t.size() - 1)};
  return std::make_shared<const Vocab>(t, usable);
}

Json pattern_schema(const std::string& p) { return Json{{"type", "string"}, {"pattern", p}}; }

// An object of n required integer properties (the shape of the report's 10,000-property body).
Json many_properties(int n) {
  Json s = {{"type", "object"}, {"properties", Json::object()}, {"required", Json::array()}};
  for (int i = 0; i < n; ++i) {
    const std::string k = "p" + std::to_string(i);
    s["properties"][k] = {{"type", "integer"}};
    s["required"].push_back(k);
  }
  return s;
}

int64_t states_of(const Json& schema) {
  auto g = json_schema_grammar(schema);
  EXPECT_TRUE(g.ok()) << g.message();
  return g.ok() ? g->states() : -1;
}

TEST(GrammarBounds, StatesMultiplyForNestedRepeatsAndAddForProperties) {
  Builder b;
  CharSyms chars(b);
  auto p = compile_pattern("^((a{2,10}){2,10})$", b, chars, Encoding::kRaw);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(b.states(*p), 100);  // 10 x 10 positions of 'a'
  EXPECT_GT(states_of(pattern_schema("^((a{2,100}){2,100}){2,100}$")), 1000000);
  // A character is one state whatever its encodings (a JSON string character has ~40).
  const int64_t text = states_of(Json{{"type", "string"}, {"maxLength", 4096}});
  EXPECT_GE(text, 4096);
  EXPECT_LT(text, 4200);
  // Properties add: twice as many, twice the states (to within the object's own few).
  const int64_t a = states_of(many_properties(1000)), c = states_of(many_properties(2000));
  EXPECT_NEAR(double(c) / double(a), 2.0, 0.01);
  EXPECT_GT(states_of(many_properties(10000)), 1000000);
}

TEST(GrammarBounds, GrammarsPastTheBoundAreRefusedSayingWhy) {
  constexpr int64_t kBound = 250000;
  auto p = json_schema_grammar(
      Json{{"type", "object"},
           {"properties", {{"x", pattern_schema("^((a{2,100}){2,100}){2,100}$")}}}},
      kBound);
  ASSERT_FALSE(p.ok());
  for (const char* want : {"'pattern' at #/properties/x", "the pattern is too large", "states",
                           "250000", "--grammar-max-states"})
    EXPECT_NE(p.message().find(want), std::string::npos) << p.message();
  auto props = json_schema_grammar(many_properties(10000), kBound);
  ASSERT_FALSE(props.ok());
  EXPECT_NE(props.message().find("the format is too large"), std::string::npos) << props.message();
  // Under the bound: compiled, and it says how large it is.
  auto ok = json_schema_grammar(many_properties(1000), kBound);
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_LT(ok->states(), kBound);
  EXPECT_TRUE(json_schema_grammar(pattern_schema("^((a{2,20}){2,20}){2,20}$"), kBound).ok());
}

// A rule chain 200,000 deep (each rule only refers to the next): the left-recursion check, the
// states count, the shortest strings and the finish count walk it without recursion.
TEST(GrammarBounds, DeepRuleChainsNeedNoDeepStack) {
  Builder b;
  Sym next = b.byte('x');
  for (int i = 0; i < 200000; ++i) {
    const Sym r = b.rule();
    b.add(r, {next});
    b.add(r, {b.byte('y'), b.byte('y'), next});
    next = r;
  }
  auto g = b.finish(next);
  ASSERT_TRUE(g.ok()) << g.message();
  std::vector<int32_t> ends;
  Automaton a(std::move(*g), bounds_vocab(&ends), ends);
  EXPECT_EQ(a.finish_tokens(a.initial()), 1);  // "x"
  EXPECT_TRUE(a.complete(a.step(a.initial(), 'x')));
}

TEST(GrammarBounds, AutomatonMemoryIsBoundedAndExhaustionIsSticky) {
  std::vector<int32_t> ends;
  auto vocab = bounds_vocab(&ends);
  auto g = json_schema_grammar(pattern_schema("^((a{2,20}){2,20}){2,20}$"));
  ASSERT_TRUE(g.ok());
  const Grammar copy = *g;
  constexpr size_t kBound = size_t(8) << 20;
  Automaton a(std::move(*g), vocab, ends, AutomatonLimits{kBound});
  std::vector<int32_t> path = {a.initial(), a.step(a.initial(), '"')};
  while (!a.exhausted() && path.size() < 9000) {
    path.push_back(a.step(path.back(), 'a'));
    ASSERT_NE(path.back(), Automaton::kDead) << "after " << path.size() - 2 << " a's";
    ASSERT_LE(a.bytes(), kBound + (size_t(1) << 20));  // past it by one configuration at most
  }
  ASSERT_TRUE(a.exhausted()) << a.bytes();
  path.pop_back();  // the step that passed the bound answered; the next one may not
  // What is built answers as before, and agrees with an automaton without a bound...
  Automaton free(copy, vocab, ends);
  int32_t c = a.initial(), f = free.initial();
  for (size_t i = 1; i < path.size(); ++i) {
    c = a.step(c, i == 1 ? '"' : 'a');
    f = free.step(f, i == 1 ? '"' : 'a');
    ASSERT_EQ(c, path[i]);
    ASSERT_EQ(a.complete(c), free.complete(f)) << i;
  }
  // ...and what would need more fails: kDead from the plain calls, Unavailable from a session.
  int32_t next = c;
  for (int i = 0; i < 64 && next != Automaton::kDead; ++i) next = a.step(next, 'a');
  EXPECT_EQ(next, Automaton::kDead);
  Automaton::Session s(a, Access::kBuild);
  try {
    int32_t x = c;
    for (int i = 0; i < 64; ++i) x = s.step(x, 'a');
    ADD_FAILURE() << "an exhausted automaton grew";
  } catch (const Unavailable& u) {
    EXPECT_EQ(u.why(), Unavailable::kExhausted);
  }
}

TEST(GrammarBounds, BoundedSessionsNeverWaitNorBuildAMask) {
  std::vector<int32_t> ends;
  auto g = json_schema_grammar(Json::parse(R"({"type":"object","properties":{
      "a":{"type":"integer"},"b":{"type":"string"}},"required":["a","b"]})"));
  ASSERT_TRUE(g.ok());
  Automaton a(std::move(*g), bounds_vocab(&ends), ends);
  const int32_t c0 = a.initial();
  std::vector<uint64_t> m, built;
  {
    Automaton::Session s(a, Access::kBounded);
    ASSERT_TRUE(s.locked());
    EXPECT_FALSE(s.has_mask(c0, Automaton::kInf));
    try {
      s.mask(c0, Automaton::kInf, &m);
      ADD_FAILURE() << "a bounded session made a mask pass";
    } catch (const Unavailable& u) {
      EXPECT_EQ(u.why(), Unavailable::kNotBuilt);
    }
    EXPECT_TRUE(s.allows(c0, '{', Automaton::kInf));  // a few transitions are within its work
  }
  a.mask(c0, Automaton::kInf, &built);
  {
    Automaton::Session s(a, Access::kBounded);
    ASSERT_TRUE(s.has_mask(c0, Automaton::kInf));
    s.mask(c0, Automaton::kInf, &m);
    EXPECT_EQ(m, built);
  }
  // Held elsewhere: a bounded session does not wait for the lock.
  Automaton::Session holder(a, Access::kBuild);
  std::thread([&] {
    Automaton::Session s(a, Access::kBounded);
    EXPECT_FALSE(s.locked());
    try {
      s.step(c0, '{');
      ADD_FAILURE() << "a session without the lock answered";
    } catch (const Unavailable& u) {
      EXPECT_EQ(u.why(), Unavailable::kBusy);
    }
  }).join();
}

// What a schema costs grows with it linearly: the shortest completions each rule keeps are cut
// at the longest token (whole strings were quadratic in a long object), so four times the
// properties take about four times the memory once their finish count is known.
TEST(GrammarBounds, MemoryGrowsLinearlyWithTheSchema) {
  std::vector<int32_t> ends;
  auto vocab = bounds_vocab(&ends);
  auto bytes_for = [&](int n) {
    auto g = json_schema_grammar(many_properties(n));
    EXPECT_TRUE(g.ok());
    Automaton a(std::move(*g), vocab, ends);
    EXPECT_LT(a.finish_tokens(a.initial()), Automaton::kInf);
    return double(a.bytes());
  };
  EXPECT_LT(bytes_for(4000) / bytes_for(1000), 4.6);
}

// An allocation that fails anywhere inside a call leaves the automaton whole: the failure after
// k allocations, for every k until the call no longer fails, and then every answer equals a
// fresh automaton's.
TEST(GrammarBounds, AllocationFailuresLeaveTheAutomatonWhole) {
  std::vector<int32_t> ends;
  auto vocab = bounds_vocab(&ends);
  const Json schema = Json::parse(R"({"type":"object","properties":{"n":{"type":"integer"},
      "s":{"type":"string","maxLength":5},"t":{"type":"array","items":{"type":"boolean"}}},
      "required":["n","s","t"]})");
  auto g = json_schema_grammar(schema);
  ASSERT_TRUE(g.ok());
  const Grammar copy = *g;
  Automaton a(std::move(*g), vocab, ends), fresh(copy, vocab, ends);
  const std::string doc = R"({"n": 12, "s": "ab", "t": [true]})";
  int64_t failures = 0;
  for (int64_t k = 0;; ++k) {
    std::vector<uint64_t> m;
    bool failed = false;
    testing::fail_next_allocation(1, k);
    try {
      int32_t c = a.initial();
      a.finish_tokens(c);
      for (unsigned char ch : doc) {
        a.mask(c, 4, &m);
        c = a.step(c, ch);
      }
    } catch (const std::bad_alloc&) {
      failed = true;
    }
    testing::allow_allocations();
    if (!failed) break;
    ++failures;
  }
  EXPECT_GT(failures, 10);
  std::vector<uint64_t> ma, mf;
  int32_t c = a.initial(), f = fresh.initial();
  ASSERT_EQ(a.finish_tokens(c), fresh.finish_tokens(f));
  for (unsigned char ch : doc) {
    for (int64_t limit : {int64_t(4), Automaton::kInf}) {
      a.mask(c, limit, &ma);
      fresh.mask(f, limit, &mf);
      ASSERT_EQ(ma, mf) << "before '" << ch << "'";
    }
    ASSERT_EQ(a.finish_tokens(c), fresh.finish_tokens(f));
    c = a.step(c, ch);
    f = fresh.step(f, ch);
    ASSERT_EQ(a.distance(c), fresh.distance(f));
  }
  EXPECT_TRUE(a.complete(c));
}

}  // namespace
}  // namespace qwen35::grammar
