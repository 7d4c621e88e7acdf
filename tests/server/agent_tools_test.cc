// Forced tool calls on coding agents' tool schemas (issue 46), in all three APIs: Claude Code's
// Read ({file_path, offset minimum 0, limit exclusiveMinimum 0}), OpenCode's bash (a `timeout`
// number) and a record with propertyNames; their bounds once more as required parameters. A strict tool's arguments are checked here by hand
// against its schema; a tool that is not strict gets a JSON object of its declared parameters,
// and a keyword the compiler cannot enforce never fails the request. A strict tool with such a
// keyword is a 400 that names the field in the client's own API.
#include <gtest/gtest.h>

#include <algorithm>

#include "server_process.h"

namespace qwen35::agent_tools {
namespace {

using testing::Json;
using testing::ServerProcess;

const std::string kBundled = std::string(QWEN35_SOURCE_DIR) + "/models/qwen35-tiny-kjv";

struct Tool {
  std::string name;
  Json schema;
};

const Tool kRead = {"Read", Json::parse(R"({"$schema":"http://json-schema.org/draft-07/schema#",
  "type":"object","properties":{"file_path":{"type":"string","description":"The absolute path"},
  "offset":{"type":"integer","minimum":0,"description":"The line to start at"},
  "limit":{"type":"integer","exclusiveMinimum":0,"description":"The number of lines"}},
  "required":["file_path"],"additionalProperties":false})")};
const Tool kBash = {"bash", Json::parse(R"({"type":"object","properties":{
  "command":{"type":"string"},"timeout":{"type":"number","description":"Optional timeout in ms",
  "exclusiveMinimum":0,"maximum":600000},"description":{"type":"string"}},
  "required":["command","description"],"additionalProperties":false})")};
const Tool kTask = {"TaskCreate", Json::parse(R"({"type":"object","properties":{
  "subject":{"type":"string","maxLength":40},"metadata":{"type":"object",
  "propertyNames":{"type":"string"},"additionalProperties":{}}},"required":["subject"]})")};
// The bounds of Read and bash as required parameters (the bundled model rarely writes optional
// ones within the token budget).
const Tool kSlice = {"Slice", Json::parse(R"({"type":"object","properties":{
  "offset":{"type":"integer","minimum":0},"limit":{"type":"integer","exclusiveMinimum":0,"maximum":2000},
  "timeout":{"type":"number","exclusiveMinimum":0,"maximum":600000}},
  "required":["offset","limit","timeout"],"additionalProperties":false})")};
// Keywords the compiler does not enforce.
const Tool kOdd = {"Odd", Json::parse(R"({"type":"object","properties":{
  "n":{"type":"integer","multipleOf":5},"s":{"not":{"const":"x"}},
  "t":{"type":"array","items":{"type":"string"},"uniqueItems":true}},"required":["n"]})")};

enum class Api { kChat, kResponses, kMessages };

Json tools_for(Api api, const std::vector<Tool>& tools, bool strict) {
  Json out = Json::array();
  for (const auto& t : tools) {
    Json x;
    if (api == Api::kChat) {
      x = {{"type", "function"}, {"function", {{"name", t.name}, {"parameters", t.schema}}}};
      if (strict) x["function"]["strict"] = true;
    } else if (api == Api::kResponses) {
      x = {{"type", "function"}, {"name", t.name}, {"parameters", t.schema}};
      if (strict) x["strict"] = true;
    } else {
      x = {{"name", t.name}, {"input_schema", t.schema}};
      if (strict) x["strict"] = true;
    }
    out.push_back(x);
  }
  return out;
}

// The request: one call of `name`, or (empty) any calls.
std::pair<std::string, Json> request(Api api, const std::vector<Tool>& tools, bool strict,
                                     const std::string& name, int seed) {
  const Json t = tools_for(api, tools, strict);
  const std::string q = "Read the file and run the build.";
  if (api == Api::kChat)
    return {"/v1/chat/completions",
            {{"messages", {{{"role", "user"}, {"content", q}}}}, {"tools", t},
             {"tool_choice", name.empty() ? Json("required") : Json{{"type", "function"}, {"function", {{"name", name}}}}},
             {"max_tokens", 150}, {"temperature", 1}, {"seed", seed}}};
  if (api == Api::kResponses)
    return {"/v1/responses",
            {{"input", q}, {"tools", t},
             {"tool_choice", name.empty() ? Json("required") : Json{{"type", "function"}, {"name", name}}},
             {"max_output_tokens", 150}, {"temperature", 1}, {"seed", seed}}};
  return {"/v1/messages",
          {{"messages", {{{"role", "user"}, {"content", q}}}}, {"tools", t},
           {"tool_choice", name.empty() ? Json{{"type", "any"}} : Json{{"type", "tool"}, {"name", name}}},
           {"max_tokens", 150}, {"temperature", 1}, {"seed", seed}}};
}

// The calls of an answer: (name, arguments).
std::vector<std::pair<std::string, Json>> calls_of(Api api, const Json& r) {
  std::vector<std::pair<std::string, Json>> out;
  if (api == Api::kChat) {
    for (const auto& c : r["choices"][0]["message"].value("tool_calls", Json::array()))
      out.emplace_back(c["function"]["name"], Json::parse(c["function"]["arguments"].get<std::string>()));
  } else if (api == Api::kResponses) {
    for (const auto& item : r["output"])
      if (item["type"] == "function_call")
        out.emplace_back(item["name"], Json::parse(item["arguments"].get<std::string>()));
  } else {
    for (const auto& block : r["content"])
      if (block["type"] == "tool_use") out.emplace_back(block["name"], block["input"]);
  }
  return out;
}

const char* api_name(Api api) {
  return api == Api::kChat ? "chat" : api == Api::kResponses ? "responses" : "messages";
}

// The strict tools' schemas, checked by hand.
void expect_valid(const std::string& name, const Json& a) {
  ASSERT_TRUE(a.is_object()) << a;
  if (name == "Read") {
    ASSERT_TRUE(a.contains("file_path") && a["file_path"].is_string()) << a;
    EXPECT_TRUE(!a.contains("offset") || (a["offset"].is_number_integer() && a["offset"].get<int64_t>() >= 0)) << a;
    EXPECT_TRUE(!a.contains("limit") || (a["limit"].is_number_integer() && a["limit"].get<int64_t>() > 0)) << a;
    for (const auto& [k, v] : a.items()) EXPECT_TRUE(k == "file_path" || k == "offset" || k == "limit") << a;
  } else if (name == "bash") {
    ASSERT_TRUE(a.contains("command") && a["command"].is_string() && a.contains("description")) << a;
    EXPECT_TRUE(!a.contains("timeout") || (a["timeout"].is_number() && a["timeout"].get<double>() > 0 &&
                                           a["timeout"].get<double>() <= 600000)) << a;
    for (const auto& [k, v] : a.items()) EXPECT_TRUE(k == "command" || k == "timeout" || k == "description") << a;
  } else if (name == "Slice") {
    ASSERT_TRUE(a.contains("offset") && a.contains("limit") && a.contains("timeout")) << a;
    EXPECT_TRUE(a["offset"].is_number_integer() && a["offset"].get<int64_t>() >= 0) << a;
    EXPECT_TRUE(a["limit"].is_number_integer() && a["limit"].get<int64_t>() > 0 && a["limit"].get<int64_t>() <= 2000) << a;
    EXPECT_TRUE(a["timeout"].is_number() && a["timeout"].get<double>() > 0 && a["timeout"].get<double>() <= 600000) << a;
    EXPECT_EQ(a.size(), 3u) << a;
  } else {
    ASSERT_EQ(name, "TaskCreate");
    ASSERT_TRUE(a.contains("subject") && a["subject"].is_string()) << a;
    EXPECT_TRUE(!a.contains("metadata") || a["metadata"].is_object()) << a;
  }
}

class AgentTools : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { srv_ = new ServerProcess(kBundled, {"--parallel", "2", "--ctx", "2048"}); }
  static void TearDownTestSuite() { delete srv_; }
  static ServerProcess* srv_;
};
ServerProcess* AgentTools::srv_ = nullptr;

TEST_F(AgentTools, StrictToolsFollowTheirSchemasInEveryApi) {
  ASSERT_TRUE(srv_->ready()) << srv_->log();
  const std::vector<Tool> tools = {kRead, kBash, kTask, kSlice};
  for (Api api : {Api::kChat, Api::kResponses, Api::kMessages})
    for (const std::string name : {"", "Read", "Slice"})
      for (int seed : {1, 2}) {
        SCOPED_TRACE(std::string(api_name(api)) + " " + (name.empty() ? "any" : name) + " seed " + std::to_string(seed));
        auto [path, body] = request(api, tools, true, name, seed);
        auto [st, r] = srv_->post(path, body);
        ASSERT_EQ(st, 200) << r;
        const auto calls = calls_of(api, r);
        ASSERT_FALSE(calls.empty()) << r;
        for (const auto& [n, args] : calls) {
          EXPECT_TRUE(name.empty() || n == name) << n;
          expect_valid(n, args);
        }
      }
}

TEST_F(AgentTools, ToolsThatAreNotStrictAreNeverRefused) {
  ASSERT_TRUE(srv_->ready()) << srv_->log();
  const std::vector<Tool> tools = {kRead, kBash, kTask, kOdd};
  for (Api api : {Api::kChat, Api::kResponses, Api::kMessages})
    for (const std::string name : {"", "Odd", "Read"})
      for (int seed : {1}) {
        SCOPED_TRACE(std::string(api_name(api)) + " " + (name.empty() ? "any" : name) + " seed " + std::to_string(seed));
        auto [path, body] = request(api, tools, false, name, seed);
        auto [st, r] = srv_->post(path, body);
        ASSERT_EQ(st, 200) << r;
        const auto calls = calls_of(api, r);
        ASSERT_FALSE(calls.empty()) << r;
        for (const auto& [n, args] : calls) {
          EXPECT_TRUE(name.empty() || n == name) << n;
          const auto it = std::find_if(tools.begin(), tools.end(), [&](const Tool& t) { return t.name == n; });
          ASSERT_NE(it, tools.end()) << n;
          // A JSON object of declared parameters, the required ones present.
          ASSERT_TRUE(args.is_object()) << args;
          for (const auto& [k, v] : args.items()) EXPECT_TRUE(it->schema["properties"].contains(k)) << k;
          for (const auto& req : it->schema["required"]) EXPECT_TRUE(args.contains(req.get<std::string>())) << args;
        }
      }
}

TEST_F(AgentTools, StrictErrorsNameTheClientsOwnField) {
  ASSERT_TRUE(srv_->ready()) << srv_->log();
  const std::vector<Tool> tools = {kRead, kBash, kOdd};
  const std::pair<Api, const char*> cases[] = {{Api::kChat, "tools[2].function.parameters: "},
                                               {Api::kResponses, "tools[2].parameters: "},
                                               {Api::kMessages, "tools[2].input_schema: "}};
  for (const auto& [api, field] : cases) {
    auto [path, body] = request(api, tools, true, "", 1);
    auto [st, r] = srv_->post(path, body);
    ASSERT_EQ(st, 400) << api_name(api) << " " << r;
    const std::string msg = r["error"]["message"];
    EXPECT_NE(msg.find(std::string(field) + "unsupported JSON Schema keyword 'multipleOf' at #/properties/n"),
              std::string::npos) << api_name(api) << ": " << msg;
    EXPECT_EQ(msg.find("function.parameters"), api == Api::kChat ? msg.find("function.parameters") : std::string::npos) << msg;
  }
  // A strict flag that is not a boolean.
  auto [path, body] = request(Api::kMessages, {kRead}, false, "", 1);
  body["tools"][0]["strict"] = "yes";
  auto [st, r] = srv_->post(path, body);
  EXPECT_EQ(st, 400) << r;
  EXPECT_NE(r["error"]["message"].get<std::string>().find("tools[0].strict"), std::string::npos) << r;
  // The server is healthy after them.
  auto [p2, b2] = request(Api::kChat, {kRead}, true, "Read", 1);
  EXPECT_EQ(srv_->post(p2, b2).first, 200);
}

}  // namespace
}  // namespace qwen35::agent_tools
