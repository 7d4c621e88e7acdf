// What a structured output may cost the server (issue 32), through set_structured_output as
// every API calls it: refused requests leave nothing in the grammar cache, the cache stays
// within its bytes over many large distinct schemas, a format too large for the states bound or
// the automaton's memory bound is a 400 that says which, and running out of memory while
// compiling is a 500 after which the server goes on.
#include <gtest/gtest.h>

#include "alloc_hook.h"
#include "bundled_model_info.h"
#include "server/structured.h"

namespace qwen35::server {
namespace {

// Grammars of the bundled vocabulary with `limits`, in a ModelInfo of their own.
struct Limited {
  explicit Limited(GrammarLimits limits) {
    auto& m = testing_model::bundled_model_info();
    cache = std::make_shared<GrammarCache>(grammar_vocab(*m.tok, 0), limits);
    mi = m.mi;
    mi.grammars = cache;
  }
  // The outcome of a response_format json_schema request for `schema`.
  std::optional<ApiError> ask(const Json& schema, int64_t max_tokens) {
    OutputFormat f;
    f.kind = OutputFormat::Kind::kJsonSchema;
    f.schema = schema;
    CompletionRequest r;
    r.max_tokens = max_tokens;
    r.eos_ids = mi.eos_ids;
    return set_structured_output(f, ToolChoice{}, ChatNames{}, mi, &r);
  }
  std::shared_ptr<GrammarCache> cache;
  ModelInfo mi;
};

// n required integer properties named with `tag`, so that each tag gives a distinct schema.
Json properties(int n, const std::string& tag) {
  Json s = {{"type", "object"}, {"properties", Json::object()}, {"required", Json::array()}};
  for (int i = 0; i < n; ++i) {
    const std::string k = tag + std::to_string(i);
    s["properties"][k] = {{"type", "integer"}};
    s["required"].push_back(k);
  }
  return s;
}

void expect_error(const std::optional<ApiError>& e, int status, const std::string& want) {
  ASSERT_TRUE(e.has_value()) << "no error, want " << want;
  EXPECT_EQ(e->status(), status) << e->message;
  EXPECT_NE(e->message.find(want), std::string::npos) << e->message;
}

TEST(StructuredLimits, RefusedRequestsLeaveNothingCached) {
  Limited s({});
  // The report's shapes: 10,000 required properties, and repeats nested three deep.
  expect_error(s.ask(properties(10000, "p"), 200000), 400, "--grammar-max-states");
  expect_error(s.ask(Json{{"type", "string"}, {"pattern", "^((a{2,100}){2,100}){2,100}$"}}, 400),
               400, "the pattern is too large");
  // Under the bound, but max_tokens below what they need: each automaton is built, then let go.
  for (int i = 0; i < 20; ++i) {
    expect_error(s.ask(properties(1500, "k" + std::to_string(i) + "_"), 50), 400, "needs up to");
    EXPECT_EQ(s.cache->size(), 0u);
    EXPECT_EQ(s.cache->bytes(), 0u);
  }
  EXPECT_FALSE(s.ask(properties(3, "k"), -1).has_value());
  EXPECT_EQ(s.cache->size(), 1u);
}

TEST(StructuredLimits, TheCacheStaysWithinItsBytes) {
  GrammarLimits lim;
  lim.cache_bytes = size_t(40) << 20;
  Limited s(lim);
  size_t most = 0;
  for (int i = 0; i < 20; ++i) {
    ASSERT_FALSE(s.ask(properties(400, "c" + std::to_string(i) + "_"), -1).has_value());
    most = std::max(most, s.cache->bytes());
    EXPECT_LE(s.cache->bytes(), lim.cache_bytes) << "after schema " << i;
  }
  EXPECT_GE(s.cache->size(), 1u);
  EXPECT_LT(s.cache->size(), 20u);  // the oldest went
  EXPECT_GT(most, lim.cache_bytes / 4);
}

TEST(StructuredLimits, AnAutomatonPastItsMemoryBoundIsA400) {
  GrammarLimits lim;
  lim.automaton_bytes = size_t(2) << 20;
  Limited s(lim);
  expect_error(s.ask(properties(1500, "m"), -1), 400, "--grammar-max-mb");
  EXPECT_EQ(s.cache->size(), 0u);
  EXPECT_FALSE(s.ask(properties(3, "m"), -1).has_value());  // small ones still fit
}

TEST(StructuredLimits, OutOfMemoryWhileCompilingIsA500AndNothingStays) {
  Limited s({});
  const Json schema = properties(1500, "o");
  for (size_t at : {size_t(1) << 20, size_t(64) << 10, size_t(1) << 10}) {
    testing::fail_next_allocation(at, 3);
    auto e = s.ask(schema, -1);
    testing::allow_allocations();
    expect_error(e, 500, "ran out of memory");
    EXPECT_EQ(s.cache->size(), 0u);
  }
  EXPECT_FALSE(s.ask(schema, -1).has_value());  // and then it compiles
  EXPECT_EQ(s.cache->size(), 1u);
}

}  // namespace
}  // namespace qwen35::server
