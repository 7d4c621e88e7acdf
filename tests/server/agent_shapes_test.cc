// What coding agents send, against a live server on the bundled trained model (issue 46): a
// mid-conversation system message on Messages, count_tokens, chat and Responses; Codex's tool
// types (namespace tools called back under their name and namespace, built-in tools left out
// with a warning in the body and the X-Qwen35-Warnings header, --strict-tools refusing them);
// custom tools both ways, streamed too; each API's context-overflow error; chat's
// parallel_tool_calls false; reasoning_tokens of a forced call; GET /v1/models/{id}; the
// warning of a --ctx past max_position_embeddings. agent_parse_test.cc checks the prompts.
#include <regex>

#include "api_compat.h"

namespace qwen35 {
namespace {

Json msg(const char* role, const std::string& text) { return {{"role", role}, {"content", text}}; }

const std::string kMark = "[System message]\n";  // server/chat_request.h, kLaterSystemMark

TEST_F(ApiCompatTest, MidConversationSystemMessages) {
  // Claude Code's shape on Messages: 200, and the answer of the documented equivalent.
  const Json mbody = {{"system", "Be brief."},
                      {"max_tokens", 16},
                      {"temperature", 0},
                      {"messages", {msg("user", "Who made the earth?"), msg("system", "Answer as the Bible.")}}};
  const Json equivalent = {{"messages", {msg("system", "Be brief."), msg("user", "Who made the earth?"),
                                         msg("user", kMark + "Answer as the Bible.")}},
                           {"max_tokens", 16},
                           {"chat_template_kwargs", {{"enable_thinking", false}}}};
  const Json c = chat(equivalent);
  auto [st, m] = post(s(), "/v1/messages", mbody);
  ASSERT_EQ(st, 200) << m;
  std::string text;
  for (const auto& b : m["content"])
    if (b["type"] == "text") text += b["text"].get<std::string>();
  EXPECT_EQ(text, visible(c["choices"][0]["message"]["content"])) << m;
  auto [ct, n] = post(s(), "/v1/messages/count_tokens", mbody);
  ASSERT_EQ(ct, 200) << n;
  EXPECT_EQ(n["input_tokens"], c["usage"]["prompt_tokens"]);
  // Chat takes it too (the template alone refuses it).
  Json cbody = {{"messages", {msg("system", "Be brief."), msg("user", "Who made the earth?"),
                              msg("system", "Answer as the Bible.")}},
                {"max_tokens", 16},
                {"chat_template_kwargs", {{"enable_thinking", false}}}};
  const Json c2 = chat(cbody);
  EXPECT_EQ(c2["choices"][0]["message"]["content"], c["choices"][0]["message"]["content"]);
  // Responses: a developer item after the user's.
  auto [rt, r] = post(s(), "/v1/responses",
                      Json{{"instructions", "Be brief."},
                           {"input", {msg("user", "Who made the earth?"), msg("developer", "Answer as the Bible.")}},
                           {"reasoning", {{"effort", "none"}}},
                           {"max_output_tokens", 16},
                           {"temperature", 0}});
  ASSERT_EQ(rt, 200) << r;
  EXPECT_EQ(r["usage"]["input_tokens"], c["usage"]["prompt_tokens"]);
  EXPECT_EQ(r["output"].back()["content"][0]["text"], visible(c["choices"][0]["message"]["content"]));
}

const Json kShell = Json::parse(R"({"type": "function", "name": "shell", "description": "Runs a command.",
  "strict": false, "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
  "required": ["command"]}})");
const Json kAgents = Json::parse(R"({"type": "namespace", "name": "agents", "description": "Agents.",
  "tools": [{"type": "function", "name": "spawn_agent", "description": "Starts an agent.", "strict": false,
             "parameters": {"type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]}}]})");
const Json kPatch = Json::parse(R"({"type": "custom", "name": "apply_patch", "description": "Edits files.",
  "format": {"type": "grammar", "syntax": "lark", "definition": "start: line+\nline: /[^\\n]*\\n/"}})");
const Json kCode = Json::parse(R"({"type": "custom", "name": "code",
  "format": {"type": "grammar", "syntax": "regex", "definition": "[a-z]{3}[0-9]"}})");

// Every tool type Codex sends in one request: the function tools are offered, the rest named in
// the warnings; a forced call of a namespaced tool comes back under its name and namespace.
TEST_F(ApiCompatTest, CodexToolTypes) {
  const Json tools = {kShell,
                      kAgents,
                      kPatch,
                      {{"type", "web_search"}, {"external_web_access", false}},
                      {{"type", "image_generation"}, {"output_format", "png"}},
                      Json::parse(R"({"type": "tool_search", "execution": "client", "description": "d",
                                      "parameters": {"type": "object"}})"),
                      {{"type", "file_search"}, {"vector_store_ids", {"v"}}},
                      {{"type", "mcp"}, {"server_label", "x"}}};
  const Json body = {{"input", "Start an agent."},
                     {"tools", tools},
                     {"tool_choice", {{"type", "function"}, {"name", "spawn_agent"}, {"namespace", "agents"}}},
                     {"parallel_tool_calls", false},
                     {"text", {{"verbosity", "low"}}},
                     {"reasoning", {{"effort", "none"}}},
                     {"max_output_tokens", 64}};
  auto res = s().client().post("/v1/responses", body.dump());
  ASSERT_EQ(res.status, 200) << res.body;
  const Json r = Json::parse(res.body);
  const Json& call = r["output"].back();
  EXPECT_EQ(call["type"], "function_call") << r;
  EXPECT_EQ(call["name"], "spawn_agent") << r;
  EXPECT_EQ(call["namespace"], "agents") << r;
  EXPECT_TRUE(Json::parse(call["arguments"].get<std::string>())["task"].is_string()) << r;
  EXPECT_EQ(r["text"]["verbosity"], "low");
  const std::string header = res.header("X-Qwen35-Warnings");
  for (const char* t : {"web_search", "image_generation", "tool_search", "file_search", "mcp",
                        "lark grammar is not enforced"})
    EXPECT_NE(header.find(t), std::string::npos) << t << ": " << header;
  ASSERT_EQ(r["warnings"].size(), 6u) << r;
  // The call goes back into the history under its name and namespace, with its output.
  Json input = {msg("user", "Start an agent."),
                {{"type", "function_call"}, {"call_id", call["call_id"]}, {"name", "spawn_agent"},
                 {"namespace", "agents"}, {"arguments", call["arguments"]}},
                {{"type", "function_call_output"}, {"call_id", call["call_id"]}, {"output", "started"}}};
  auto [st, next] = post(s(), "/v1/responses",
                         Json{{"input", input}, {"tools", tools}, {"max_output_tokens", 8},
                              {"reasoning", {{"effort", "none"}}}});
  EXPECT_EQ(st, 200) << next;
}

TEST(AgentShapesStrict, StrictToolsRefuses) {
  ServerProcess s(bundled_model(), {"--ctx", "512", "--parallel", "1", "--strict-tools"});
  ASSERT_TRUE(s.ready()) << s.log();
  auto [st, r] = post(s, "/v1/responses", Json{{"input", "Hi"}, {"tools", {kShell, {{"type", "web_search"}}}}});
  EXPECT_EQ(st, 400) << r;
  EXPECT_EQ(r["error"]["param"], "tools");
  EXPECT_NE(r["error"]["message"].get<std::string>().find("web_search"), std::string::npos) << r;
  auto [sm, m] = post(s, "/v1/messages",
                      Json{{"max_tokens", 4}, {"messages", {msg("user", "Hi")}},
                           {"tools", {{{"type", "web_search_20250305"}, {"name", "web_search"}}}}});
  EXPECT_EQ(sm, 400) << m;
  EXPECT_EQ(m["type"], "error");
  // A --ctx within max_position_embeddings (4096 here) gets no warning.
  EXPECT_EQ(s.log().find("max_position_embeddings"), std::string::npos) << s.log();
}

// Custom tools both ways: a forced call is a custom_tool_call whose input is text (streamed as
// custom_tool_call_input events), a regex grammar constrains it, and custom_tool_call /
// custom_tool_call_output items are taken back.
TEST_F(ApiCompatTest, CustomToolsBothWays) {
  const Json body = {{"input", "Write some code."},
                     {"tools", {kShell, kCode, kPatch}},
                     {"tool_choice", {{"type", "custom"}, {"name", "code"}}},
                     {"reasoning", {{"effort", "none"}}},
                     {"max_output_tokens", 64},
                     {"temperature", 0}};
  auto [st, r] = post(s(), "/v1/responses", body);
  ASSERT_EQ(st, 200) << r;
  const Json& call = r["output"].back();
  ASSERT_EQ(call["type"], "custom_tool_call") << r;
  EXPECT_EQ(call["name"], "code");
  EXPECT_FALSE(call.contains("arguments"));
  const std::string in = call["input"];
  EXPECT_TRUE(std::regex_match(in, std::regex("[a-z]{3}[0-9]"))) << in;
  EXPECT_EQ(call["id"].get<std::string>().rfind("ctc_", 0), 0u);
  // Streamed: the same item, its input in custom_tool_call_input events.
  Json sbody = body;
  sbody["stream"] = true;
  std::string delta, done;
  Json item;
  for (const auto& e : named_events(s(), "/v1/responses", sbody)) {
    if (e.name == "response.custom_tool_call_input.delta") delta += e.data["delta"].get<std::string>();
    if (e.name == "response.custom_tool_call_input.done") done = e.data["input"];
    if (e.name == "response.output_item.done") item = e.data["item"];
    EXPECT_EQ(e.name.find("function_call"), std::string::npos) << e.name;
  }
  EXPECT_EQ(delta, done);
  EXPECT_EQ(done, in);
  EXPECT_EQ(item["type"], "custom_tool_call");
  EXPECT_EQ(item["input"], done);
  // The call and its output as input items.
  Json input = {msg("user", "Write some code."),
                {{"type", "custom_tool_call"}, {"call_id", "c1"}, {"name", "code"}, {"input", in}},
                {{"type", "custom_tool_call_output"}, {"call_id", "c1"}, {"output", "ran"}}};
  auto [s2, next] = post(s(), "/v1/responses",
                         Json{{"input", input}, {"tools", {kShell, kCode, kPatch}}, {"max_output_tokens", 8}});
  EXPECT_EQ(s2, 200) << next;
  // A forced call of the Lark tool: free text, and the warning says so.
  Json lark = body;
  lark["tool_choice"] = {{"type", "custom"}, {"name", "apply_patch"}};
  auto [s3, p] = post(s(), "/v1/responses", lark);
  ASSERT_EQ(s3, 200) << p;
  EXPECT_EQ(p["output"].back()["type"], "custom_tool_call");
  EXPECT_TRUE(p["output"].back()["input"].is_string());
}

// A prompt over the context: each API's own error.
TEST_F(ApiCompatTest, ContextOverflowErrors) {
  std::string longer;
  for (int i = 0; i < 700; ++i) longer += "And the LORD said unto Moses, ";
  const Json m = {msg("user", longer)};
  for (const char* path : {"/v1/chat/completions", "/v1/responses"}) {
    const Json body = std::string(path) == "/v1/responses" ? Json{{"input", longer}}
                                                           : Json{{"messages", m}};
    auto [st, r] = post(s(), path, body);
    EXPECT_EQ(st, 400) << path << r;
    EXPECT_EQ(r["error"]["code"], "context_length_exceeded") << r;
    EXPECT_EQ(r["error"]["type"], "invalid_request_error") << r;
    EXPECT_NE(r["error"]["message"].get<std::string>().find("2048"), std::string::npos) << r;
  }
  auto [ct, cr] = post(s(), "/v1/completions", Json{{"prompt", longer}});
  EXPECT_EQ(ct, 400);
  EXPECT_EQ(cr["error"]["code"], "context_length_exceeded") << cr;
  const Json mb = {{"max_tokens", 8}, {"messages", m}};
  auto [n_st, n] = post(s(), "/v1/messages/count_tokens", mb);
  ASSERT_EQ(n_st, 200) << n;
  auto [st, r] = post(s(), "/v1/messages", mb);
  EXPECT_EQ(st, 400) << r;
  EXPECT_EQ(r["type"], "error");
  EXPECT_EQ(r["error"]["type"], "invalid_request_error");
  EXPECT_EQ(r["error"]["message"], "prompt is too long: " + std::to_string(n["input_tokens"].get<int64_t>()) +
                                       " tokens > 2047 maximum")
      << r;
  EXPECT_EQ(s().get("/health").first, 200);
}

// parallel_tool_calls false in chat: at most one call, the first of those it would make.
TEST_F(ApiCompatTest, ChatParallelToolCallsFalse) {
  Json body = {{"messages", {msg("user", "What is the weather in Paris and in Rome?")}},
               {"tools", kTools},
               {"tool_choice", "required"},
               {"chat_template_kwargs", {{"enable_thinking", false}}},
               {"max_tokens", 96}};
  const Json all = chat(body);
  body["parallel_tool_calls"] = false;
  const Json one = chat(body);
  const Json& calls = all["choices"][0]["message"]["tool_calls"];
  ASSERT_GE(calls.size(), 1u) << all;
  ASSERT_EQ(one["choices"][0]["message"]["tool_calls"].size(), 1u) << one;
  EXPECT_EQ(one["choices"][0]["message"]["tool_calls"][0]["function"], calls[0]["function"]);
  EXPECT_EQ(one["choices"][0]["finish_reason"], "tool_calls");
}

// reasoning_tokens counts the thinking block only: a forced call's tokens after </think> are not
// reasoning.
TEST_F(ApiCompatTest, ReasoningTokensOfAForcedCall) {
  const Json body = {{"input", "What is the weather in Paris?"},
                     {"tools", {{{"type", "function"}, {"name", "get_weather"},
                                 {"description", kTools[0]["function"]["description"]},
                                 {"parameters", kTools[0]["function"]["parameters"]}}}},
                     {"tool_choice", "required"},
                     {"max_output_tokens", 96},
                     {"temperature", 0}};
  auto [st, r] = post(s(), "/v1/responses", body);
  ASSERT_EQ(st, 200) << r;
  const Json c = chat({{"messages", {msg("user", "What is the weather in Paris?")}},
                       {"tools", kTools},
                       {"tool_choice", "required"},
                       {"max_tokens", 96},
                       {"return_token_ids", true}});
  auto [tt, think_end] = post(s(), "/tokenize", Json{{"prompt", "</think>"}});
  ASSERT_EQ(tt, 200);
  const int64_t end_id = think_end["tokens"][0];
  const Json& ids = c["choices"][0]["token_ids"];
  int64_t expected = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == end_id) {
      expected = int64_t(i) + 1;
      break;
    }
  ASSERT_GT(expected, 0) << c;
  ASSERT_LT(expected, int64_t(ids.size())) << c;
  EXPECT_EQ(r["usage"]["output_tokens"], int64_t(ids.size()));
  EXPECT_EQ(r["usage"]["output_tokens_details"]["reasoning_tokens"], expected) << r;
}

TEST_F(ApiCompatTest, ModelById) {
  auto [st, list] = s().get("/v1/models");
  ASSERT_EQ(st, 200);
  const std::string id = Json::parse(list)["data"][0]["id"];
  auto [s1, one] = s().get("/v1/models/" + id);
  ASSERT_EQ(s1, 200) << one;
  EXPECT_EQ(Json::parse(one)["id"], id);
  EXPECT_EQ(Json::parse(one)["object"], "model");
  auto [s2, none] = s().get("/v1/models/gpt-9%2Fturbo");
  EXPECT_EQ(s2, 404) << none;
  const Json e = Json::parse(none);
  EXPECT_EQ(e["error"]["code"], "model_not_found") << e;
  EXPECT_NE(e["error"]["message"].get<std::string>().find("gpt-9/turbo"), std::string::npos) << e;
  EXPECT_EQ(s().client().send("POST", "/v1/models/" + id, "{}", nullptr).status, 405);
}

TEST(AgentShapesCtx, WarnsPastMaxPositionEmbeddings) {
  ServerProcess s(bundled_model(), {"--ctx", "8192", "--parallel", "1"});
  ASSERT_TRUE(s.ready()) << s.log();
  EXPECT_NE(s.log().find("--ctx 8192 is past the checkpoint's max_position_embeddings (4096)"),
            std::string::npos)
      << s.log();
}

}  // namespace
}  // namespace qwen35
