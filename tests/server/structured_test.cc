// Structured outputs over HTTP (issue 19): response_format and forced tool calls on the bundled
// model and on random weights, the exactness equalities under a grammar (concurrent == solo,
// drafted == plain), the thinking block left free, and the 400s. Schema validation of a large
// corpus by an independent validator (ajv) is tests/server/structured_outputs_test.cjs.
#include <gtest/gtest.h>

#include <thread>

#include "server_process.h"

namespace qwen35 {
namespace {

using testing::Json;
using testing::ServerProcess;
using testing::TempDir;

const std::string kBundled = std::string(QWEN35_SOURCE_DIR) + "/models/qwen35-tiny-kjv";

const Json kPerson = Json::parse(R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":24},"age":{"type":"integer"},
  "role":{"enum":["admin","user"]},"tags":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3},
  "born":{"type":"string","format":"date"}},"required":["name","age","role"],"additionalProperties":false})");

Json schema_format(const Json& schema) {
  return {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", schema}, {"strict", true}}}};
}

Json chat(const Json& format, int seed, bool think) {
  return {{"messages", {{{"role", "user"}, {"content", "Tell me about a person."}}}},
          {"response_format", format},
          {"max_tokens", 160},
          {"temperature", 1},
          {"seed", seed},
          {"logprobs", true},
          {"chat_template_kwargs", {{"enable_thinking", think}}}};
}

// The person schema checked by hand (the ajv corpus test is the thorough one).
void expect_person(const std::string& content) {
  const Json v = Json::parse(content, nullptr, false);
  ASSERT_TRUE(v.is_object()) << content;
  EXPECT_TRUE(v["name"].is_string() && v["age"].is_number_integer()) << content;
  EXPECT_TRUE(v["role"] == "admin" || v["role"] == "user") << content;
  for (const auto& [k, x] : v.items())
    EXPECT_TRUE(k == "name" || k == "age" || k == "role" || k == "tags" || k == "born") << content;
}

// "bundled" (the trained model), "random" (a random Qwen3.5 checkpoint) or "qwen3_random" (a
// random Qwen3-MoE one: the other family under the same grammars).
class StructuredTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    for (const char* preset : {"tiny", "qwen3-tiny-moe"}) {
      auto r = testing::run_qwen35(std::string("synth --preset ") + preset + " --quiet --out " + dir_->file(preset));
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
  }
  static void TearDownTestSuite() { delete dir_; }
  std::string model() const {
    if (GetParam() == "bundled") return kBundled;
    return dir_->file(GetParam() == "random" ? "tiny" : "qwen3-tiny-moe");
  }
  static TempDir* dir_;
};
TempDir* StructuredTest::dir_ = nullptr;

TEST_P(StructuredTest, SchemaOutputsParseWithThinkingOnAndOff) {
  ServerProcess srv(model(), {"--parallel", "2", "--ctx", "1024"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  for (bool think : {false, true})
    for (int seed : {1, 2, 3}) {
      auto [st, r] = srv.post("/v1/chat/completions", chat(schema_format(kPerson), seed, think));
      ASSERT_EQ(st, 200) << r;
      const Json& m = r["choices"][0]["message"];
      expect_person(m["content"].get<std::string>());
      EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << r;
      if (think) {
        EXPECT_TRUE(m.contains("reasoning_content")) << r;
      }
    }
  // json_object, on completions too.
  auto [st, r] = srv.post("/v1/completions", Json{{"prompt", "The record:"}, {"max_tokens", 60},
                                                  {"seed", 4}, {"temperature", 1},
                                                  {"response_format", {{"type", "json_object"}}}});
  ASSERT_EQ(st, 200) << r;
  EXPECT_TRUE(Json::parse(r["choices"][0]["text"].get<std::string>(), nullptr, false).is_object()) << r;
}

TEST_P(StructuredTest, ForcedToolCallsFollowTheParameters) {
  ServerProcess srv(model(), {"--parallel", "1", "--ctx", "1024"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  const Json tools = Json::parse(R"([{"type":"function","function":{"name":"get_weather","strict":true,
    "parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":20},
    "days":{"type":"integer"},"unit":{"type":"string","enum":["c","f"]},
    "when":{"type":"string","format":"date"}},"required":["city","days"]}}},
    {"type":"function","function":{"name":"ping","parameters":{"type":"object","properties":{}}}}])");
  for (const Json& choice : {Json("required"), Json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}})
    for (bool think : {false, true})
      for (int seed : {1, 2}) {
        Json req = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
                    {"tools", tools}, {"tool_choice", choice}, {"max_tokens", 200},
                    {"temperature", 1}, {"seed", seed},
                    {"chat_template_kwargs", {{"enable_thinking", think}}}};
        auto [st, r] = srv.post("/v1/chat/completions", req);
        ASSERT_EQ(st, 200) << r;
        const Json& m = r["choices"][0]["message"];
        ASSERT_TRUE(m.contains("tool_calls") && !m["tool_calls"].empty()) << r;
        EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
        EXPECT_TRUE(!m.contains("content") || m["content"].is_null()) << r;
        for (const auto& c : m["tool_calls"]) {
          const std::string name = c["function"]["name"];
          const Json args = Json::parse(c["function"]["arguments"].get<std::string>());
          if (choice.is_object()) {
            EXPECT_EQ(name, "get_weather");
          }
          if (name == "ping") {
            EXPECT_TRUE(args.empty()) << args;
            continue;
          }
          ASSERT_EQ(name, "get_weather");
          EXPECT_TRUE(args["city"].is_string() && args["days"].is_number_integer()) << args;
          EXPECT_LE(args["city"].get<std::string>().size(), 4 * 20u);
          if (args.contains("unit")) {
            EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f") << args;
          }
        }
      }
}

// A grammar keeps the equalities: alone or among others, drafted or not, the same bits. (Qwen3
// checkpoints have no MTP head: lookup drafts only.)
TEST_P(StructuredTest, ConcurrentEqualsSoloAndDraftedEqualsPlain) {
  const bool mtp = GetParam() != "qwen3_random";
  ServerProcess srv(model(), {"--parallel", "4", "--ctx", "1024", "--step-tokens", "64", "--spec", mtp ? "mtp" : "lookup"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  std::vector<Json> reqs;
  for (int i = 0; i < 4; ++i) {
    Json q = chat(i % 2 ? Json{{"type", "json_object"}} : schema_format(kPerson), 10 + i, i >= 2);
    q["speculative"] = "off";
    q["logprobs"] = true;
    q["top_logprobs"] = 2;
    reqs.push_back(q);
  }
  auto key = [](const Json& r) { return r["choices"][0]["message"].dump() + r["choices"][0]["logprobs"].dump(); };
  std::vector<std::string> solo, together(reqs.size()), drafted;
  for (const auto& q : reqs) {
    auto [st, r] = srv.post("/v1/chat/completions", q);
    ASSERT_EQ(st, 200) << r;
    solo.push_back(key(r));
    for (const char* method : {"lookup", "mtp"}) {  // drafts checked against the mask
      if (!mtp && std::string(method) == "mtp") continue;
      Json d = q;
      d["speculative"] = method;
      auto [st2, r2] = srv.post("/v1/chat/completions", d);
      ASSERT_EQ(st2, 200) << r2;
      EXPECT_EQ(key(r2), solo.back()) << method;
    }
  }
  std::vector<std::thread> ts;
  for (size_t i = 0; i < reqs.size(); ++i)
    ts.emplace_back([&, i] { together[i] = key(srv.post("/v1/chat/completions", reqs[i]).second); });
  for (auto& t : ts) t.join();
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(together[i], solo[i]) << "request " << i;
}

INSTANTIATE_TEST_SUITE_P(BundledAndRandom, StructuredTest, ::testing::Values("bundled", "random", "qwen3_random"),
                         [](const auto& p) { return p.param; });

TEST(StructuredErrors, BadFormatsAre400sThatSayWhat) {
  ServerProcess srv(kBundled, {"--parallel", "1", "--ctx", "512"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  const Json msgs = {{{"role", "user"}, {"content", "hi"}}};
  const Json tools = Json::parse(R"([{"type":"function","function":{"name":"f","strict":true,"parameters":
      {"type":"object","properties":{"a":{"type":"integer","multipleOf":2}}}}}])");
  const std::vector<std::tuple<Json, std::string, std::string>> cases = {
      {{{"response_format", schema_format(Json::parse(R"({"type":"integer","multipleOf":3})"))}},
       "response_format.json_schema.schema", "'multipleOf'"},
      {{{"response_format", schema_format(Json::parse(R"j({"type":"string","pattern":"(?!a)"})j"))}},
       "response_format.json_schema.schema", "lookaround"},
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", Json::object()}}}},
       "response_format.json_schema.schema", "required"},
      {{{"response_format", {{"type", "yaml"}}}}, "response_format.type", "json_schema"},
      {{{"response_format", {{"type", "json_object"}}}, {"ignore_eos", true}}, "ignore_eos", "end token"},
      {{{"response_format", schema_format(kPerson)}, {"max_tokens", 3}}, "max_tokens", "needs up to"},
      {{{"tool_choice", "required"}}, "tool_choice", "no 'tools'"},
      {{{"tool_choice", "sometimes"}}, "tool_choice", "\"required\""},
      {{{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "g"}}}}}},
       "tools", "no tool named 'g'"},
      {{{"tools", tools}, {"tool_choice", "required"}}, "tools",
       "tools[0].function.parameters: unsupported JSON Schema keyword 'multipleOf' at #/properties/a"},
      {{{"tools", tools}, {"tool_choice", "required"}, {"response_format", {{"type", "json_object"}}}},
       "tool_choice", "cannot be combined"},
  };
  for (const auto& [extra, param, want] : cases) {
    Json body = {{"messages", msgs}};
    for (const auto& [k, v] : extra.items()) body[k] = v;
    auto [st, r] = srv.post("/v1/chat/completions", body);
    EXPECT_EQ(st, 400) << body;
    ASSERT_TRUE(r.contains("error")) << r;
    EXPECT_EQ(r["error"]["param"], param) << r;
    EXPECT_NE(r["error"]["message"].get<std::string>().find(want), std::string::npos) << r;
  }
  // The server is healthy after them.
  auto [st, r] = srv.post("/v1/chat/completions", chat(schema_format(kPerson), 1, false));
  EXPECT_EQ(st, 200) << r;
}

// Formats whose grammars would cost too much are refused before anything is built (issue 32):
// the states of the grammar (nested repeats multiply, properties add) are over the bound,
// which --grammar-max-states sets. The server answers the next request as before.
TEST(StructuredErrors, FormatsTooLargeAreRefusedBeforeTheyAreBuilt) {
  Json props = Json::object(), required = Json::array();
  for (int i = 0; i < 10000; ++i) {
    props["p" + std::to_string(i)] = {{"type", "integer"}};
    required.push_back("p" + std::to_string(i));
  }
  const Json wide = {{"type", "object"}, {"properties", props}, {"required", required}};
  const Json nested = {{"type", "string"}, {"pattern", "^((a{2,100}){2,100}){2,100}$"}};
  const Json tools = {{{"type", "function"},
                       {"function", {{"name", "f"}, {"strict", true}, {"parameters", {{"type", "object"},
                                     {"properties", {{"a", nested}}}}}}}}};
  const Json msgs = {{{"role", "user"}, {"content", "hi"}}};
  ServerProcess srv(kBundled, {"--parallel", "1", "--ctx", "512"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  const std::vector<std::tuple<Json, std::string, std::string>> cases = {
      {{{"response_format", schema_format(wide)}}, "response_format.json_schema.schema",
       "--grammar-max-states"},
      {{{"response_format", schema_format(nested)}}, "response_format.json_schema.schema",
       "the pattern is too large"},
      {{{"tools", tools}, {"tool_choice", "required"}}, "tools", "the pattern is too large"},
  };
  for (const auto& [extra, param, want] : cases) {
    Json body = {{"messages", msgs}, {"max_tokens", 400}};
    for (const auto& [k, v] : extra.items()) body[k] = v;
    auto [st, r] = srv.post("/v1/chat/completions", body);
    EXPECT_EQ(st, 400) << r;
    EXPECT_EQ(r["error"]["param"], param) << r;
    EXPECT_NE(r["error"]["message"].get<std::string>().find(want), std::string::npos) << r;
  }
  auto [st, r] = srv.post("/v1/chat/completions", chat(schema_format(kPerson), 1, false));
  EXPECT_EQ(st, 200) << r;
  // The bound is the server's: at 100 states, even the person schema (about 250) is too large.
  ServerProcess strict(kBundled,
                       {"--parallel", "1", "--ctx", "512", "--grammar-max-states", "100"});
  ASSERT_TRUE(strict.ready()) << strict.log();
  auto [st2, r2] = strict.post("/v1/chat/completions", chat(schema_format(kPerson), 1, false));
  EXPECT_EQ(st2, 400) << r2;
  EXPECT_NE(r2["error"]["message"].get<std::string>().find("bound of 100"), std::string::npos)
      << r2;
}

}  // namespace
}  // namespace qwen35
