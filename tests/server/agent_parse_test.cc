// The request shapes coding agents send, read by the parsers (no model weights): system and
// developer messages anywhere in chat, Responses and Messages (one rule, place_system_messages);
// Codex's tools (namespace flattened, custom tools, built-in tools left out with warnings or
// refused under --strict-tools); Anthropic's server tools, thinking and output_config.effort.
// Each is checked against the prompt an equivalent plain request renders to.
#include <gtest/gtest.h>

#include "bundled_model_info.h"
#include "server/agent_tools.h"
#include "server/chat_request.h"
#include "server/messages.h"
#include "server/responses.h"

namespace qwen35::server {
namespace {

ModelInfo& model() { return testing_model::bundled_model_info().mi; }

std::vector<int32_t> chat_ids(const Json& body) {
  CompletionRequest r;
  auto e = parse_chat_request(body, model(), &r);
  EXPECT_FALSE(e) << body << ": " << (e ? e->message : "");
  return r.batch.empty() ? std::vector<int32_t>{} : r.batch[0].ids;
}

CompletionRequest responses(const Json& body, ResponsesOptions* opt, const ModelInfo& mi = model()) {
  CompletionRequest r;
  auto e = parse_responses_request(body, mi, &r, opt);
  EXPECT_FALSE(e) << body << ": " << (e ? e->message : "");
  return r;
}

CompletionRequest messages(const Json& body, bool count_tokens = false) {
  CompletionRequest r;
  MessagesOptions opt;
  auto e = parse_messages_request(body, count_tokens, model(), &r, &opt);
  EXPECT_FALSE(e) << body << ": " << (e ? e->message : "");
  return r;
}

Json msg(const char* role, const std::string& text) { return {{"role", role}, {"content", text}}; }

const std::string kMark = kLaterSystemMark;

// A later system message is a user turn of its own marked as system text; the first system
// prompt is left as it was, so the prompt up to the later message is the one the previous turn
// had (the prefix cache holds it).
TEST(AgentShapes, ChatSystemMessagesAnywhere) {
  const Json later = {{"messages",
                       {msg("system", "Be brief."), msg("user", "Hi"), msg("assistant", "Hello."),
                        msg("developer", "Now answer in French."), msg("user", "Again")}}};
  const Json plain = {{"messages",
                       {msg("system", "Be brief."), msg("user", "Hi"), msg("assistant", "Hello."),
                        msg("user", kMark + "Now answer in French."), msg("user", "Again")}}};
  const auto ids = chat_ids(later);
  EXPECT_EQ(ids, chat_ids(plain));
  // The earlier turn's prompt (without its generation prompt) is a prefix of this one.
  Json before = {{"messages", {msg("system", "Be brief."), msg("user", "Hi"), msg("assistant", "Hello.")}},
                 {"add_generation_prompt", false}};
  std::string text_before, text_later;
  ASSERT_FALSE(render_messages(before, model(), &text_before));
  ASSERT_FALSE(render_messages(later, model(), &text_later));
  EXPECT_EQ(text_later.compare(0, text_before.size(), text_before), 0) << text_later;
  // Leading system messages are joined into the one first system prompt.
  EXPECT_EQ(chat_ids({{"messages", {msg("system", "A"), msg("developer", "B"), msg("user", "Hi")}}}),
            chat_ids({{"messages", {msg("system", "A\n\nB"), msg("user", "Hi")}}}));
}

TEST(AgentShapes, MessagesSystemTurns) {
  // Claude Code's shape: a system message right after the user turn.
  const Json body = {{"system", "Be brief."},
                     {"max_tokens", 8},
                     {"messages", {msg("user", "Hi"), msg("system", "Use tools when you can.")}}};
  const Json plain = {{"messages", {msg("system", "Be brief."), msg("user", "Hi"),
                                    msg("user", kMark + "Use tools when you can.")}},
                      {"chat_template_kwargs", {{"enable_thinking", false}}}};
  EXPECT_EQ(messages(body).batch[0].ids, chat_ids(plain));
  // count_tokens reads it the same way.
  EXPECT_EQ(messages(body, true).batch[0].ids, chat_ids(plain));
  // Text blocks are joined; a system message first in 'messages' joins the top-level system.
  const Json blocks = {{"max_tokens", 8},
                       {"messages",
                        {{{"role", "system"},
                          {"content", {{{"type", "text"}, {"text", "Be "}}, {{"type", "text"}, {"text", "brief."}}}}},
                         msg("user", "Hi")}}};
  EXPECT_EQ(messages(blocks).batch[0].ids,
            chat_ids({{"messages", {msg("system", "Be brief."), msg("user", "Hi")}},
                      {"chat_template_kwargs", {{"enable_thinking", false}}}}));
}

TEST(AgentShapes, ResponsesSystemItemsUseTheSameRule) {
  ResponsesOptions opt;
  const Json body = {{"instructions", "Be brief."},
                     {"input",
                      {msg("developer", "Mind the tests."), msg("user", "Hi"),
                       msg("developer", "Now in French."), msg("user", "Again")}}};
  const Json plain = {{"messages", {msg("system", "Be brief.\n\nMind the tests."), msg("user", "Hi"),
                                    msg("user", kMark + "Now in French."), msg("user", "Again")}}};
  EXPECT_EQ(responses(body, &opt).batch[0].ids, chat_ids(plain));
}

const Json kShell = Json::parse(R"({"type": "function", "name": "shell", "description": "Runs a command.",
  "strict": false, "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
  "required": ["command"]}})");

Json chat_fn(const Json& flat) {
  Json fn = {{"name", flat["name"]}};
  if (flat.contains("description")) fn["description"] = flat["description"];
  fn["parameters"] = flat["parameters"];
  return {{"type", "function"}, {"function", fn}};
}

// Codex's default tools: a namespace of functions is flattened into them under their own names,
// and the built-in tools it cannot run are left out, each named in a warning.
TEST(AgentShapes, CodexToolsFlattenedAndLeftOut) {
  const Json spawn = Json::parse(R"({"type": "function", "name": "spawn_agent", "description": "Starts an agent.",
    "strict": false, "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}})");
  const Json tools = {kShell,
                      {{"type", "namespace"}, {"name", "multi_agent"}, {"description", "Agents."}, {"tools", {spawn}}},
                      {{"type", "web_search"}, {"external_web_access", false}},
                      {{"type", "image_generation"}, {"output_format", "png"}},
                      {{"type", "tool_search"}, {"execution", "client"}, {"description", "find tools"},
                       {"parameters", {{"type", "object"}}}}};
  ResponsesOptions opt;
  auto r = responses({{"input", "Hi"}, {"tools", tools}, {"text", {{"verbosity", "low"}}}}, &opt);
  EXPECT_EQ(r.batch[0].ids,
            chat_ids({{"messages", {msg("user", "Hi")}}, {"tools", {chat_fn(kShell), chat_fn(spawn)}}}));
  ASSERT_EQ(r.warnings.size(), 3u);
  EXPECT_NE(r.warnings[0].find("tools[2] (web_search)"), std::string::npos) << r.warnings[0];
  EXPECT_NE(r.warnings[1].find("image_generation"), std::string::npos) << r.warnings[1];
  EXPECT_NE(r.warnings[2].find("tool_search"), std::string::npos) << r.warnings[2];
  const ToolOrigin* o = opt.agent_tools.origin("spawn_agent");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->ns, "multi_agent");
  EXPECT_EQ(o->name, "spawn_agent");
  EXPECT_EQ(opt.text["verbosity"], "low");
  // A call of it in the history is read by name and namespace, as the model wrote it.
  const Json hist = {msg("user", "Hi"),
                     {{"type", "function_call"}, {"call_id", "c1"}, {"name", "spawn_agent"},
                      {"namespace", "multi_agent"}, {"arguments", "{\"task\": \"x\"}"}},
                     {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "done"}}};
  ResponsesOptions o2;
  EXPECT_EQ(responses({{"input", hist}, {"tools", tools}}, &o2).batch[0].ids,
            chat_ids({{"messages",
                       {msg("user", "Hi"),
                        {{"role", "assistant"}, {"content", ""},
                         {"tool_calls", {{{"id", "c1"}, {"type", "function"},
                                          {"function", {{"name", "spawn_agent"}, {"arguments", "{\"task\": \"x\"}"}}}}}}},
                        {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "done"}}}},
                      {"tools", {chat_fn(kShell), chat_fn(spawn)}}}));
  // Two tools of one name: the namespaced one is called NAMESPACE.NAME.
  Json clash = {kShell, {{"type", "namespace"}, {"name", "box"}, {"tools", {kShell}}}};
  ResponsesOptions o3;
  responses({{"input", "Hi"}, {"tools", clash}}, &o3);
  ASSERT_TRUE(o3.agent_tools.origin("box.shell"));
  EXPECT_EQ(o3.agent_tools.origin("box.shell")->name, "shell");
  EXPECT_EQ(o3.agent_tools.model_name("box", "shell"), "box.shell");
  EXPECT_EQ(o3.agent_tools.model_name("", "shell"), "shell");
}

TEST(AgentShapes, StrictToolsRefusesBuiltIns) {
  ModelInfo strict = model();
  strict.strict_tools = true;
  ResponsesOptions opt;
  CompletionRequest r;
  auto e = parse_responses_request({{"input", "Hi"}, {"tools", {kShell, {{"type", "web_search"}}}}},
                                   strict, &r, &opt);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "tools");
  EXPECT_NE(e->message.find("tools[1] (web_search)"), std::string::npos) << e->message;
  MessagesOptions mo;
  e = parse_messages_request({{"max_tokens", 4}, {"messages", {msg("user", "Hi")}},
                              {"tools", {{{"type", "web_search_20250305"}, {"name", "web_search"}}}}},
                             false, strict, &r, &mo);
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("web_search_20250305"), std::string::npos) << e->message;
  // Without --strict-tools Anthropic's server tools are left out, with a warning.
  auto m = messages({{"max_tokens", 4}, {"messages", {msg("user", "Hi")}},
                     {"tools", {{{"type", "web_search_20250305"}, {"name", "web_search"}}}}});
  ASSERT_EQ(m.warnings.size(), 1u);
  EXPECT_NE(m.warnings[0].find("tools[0] (web_search_20250305)"), std::string::npos);
  EXPECT_EQ(m.batch[0].ids, messages({{"max_tokens", 4}, {"messages", {msg("user", "Hi")}}}).batch[0].ids);
}

// A custom tool is a function of one string parameter, "input"; its calls in the history
// (custom_tool_call, custom_tool_call_output) render as that function's calls and results.
// A regex grammar the engine takes becomes the parameter's pattern; Lark is shown, not enforced.
TEST(AgentShapes, CustomTools) {
  const Json lark = {{"type", "custom"}, {"name", "apply_patch"}, {"description", "Edits files."},
                     {"format", {{"type", "grammar"}, {"syntax", "lark"}, {"definition", "start: \"x\"+"}}}};
  const Json regex = {{"type", "custom"}, {"name", "code"},
                      {"format", {{"type", "grammar"}, {"syntax", "regex"}, {"definition", "[a-z]{3}[0-9]"}}}};
  ResponsesOptions opt;
  Json hist = {msg("user", "Hi"),
               {{"type", "custom_tool_call"}, {"call_id", "c1"}, {"name", "apply_patch"}, {"input", "xxx"}},
               {{"type", "custom_tool_call_output"}, {"call_id", "c1"}, {"output", "ok"}}};
  auto r = responses({{"input", hist}, {"tools", {lark, regex}}}, &opt);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("lark grammar is not enforced"), std::string::npos) << r.warnings[0];
  ASSERT_TRUE(opt.agent_tools.origin("apply_patch"));
  EXPECT_TRUE(opt.agent_tools.origin("apply_patch")->custom);
  ASSERT_TRUE(opt.agent_tools.origin("code"));
  // The same history as a function call with {"input": ...}.
  Json as_fn = {msg("user", "Hi"),
                {{"type", "function_call"}, {"call_id", "c1"}, {"name", "apply_patch"},
                 {"arguments", "{\"input\": \"xxx\"}"}},
                {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "ok"}}};
  ResponsesOptions o2;
  EXPECT_EQ(r.batch[0].ids, responses({{"input", as_fn}, {"tools", {lark, regex}}}, &o2).batch[0].ids);
  const Json& params = r.tools[1]["function"]["parameters"];
  EXPECT_EQ(params["required"], Json::array({"input"}));
  EXPECT_EQ(params["properties"]["input"]["pattern"], "^(?:[a-z]{3}[0-9])$");
  EXPECT_FALSE(r.tools[0]["function"]["parameters"]["properties"]["input"].contains("pattern"));
  // A regex the grammar engine does not take (a backreference) is left free, with a warning.
  ResponsesOptions o3;
  auto bad = responses({{"input", "Hi"},
                        {"tools", {{{"type", "custom"}, {"name", "b"},
                                    {"format", {{"type", "grammar"}, {"syntax", "regex"}, {"definition", "(a)\\1"}}}}}}},
                       &o3);
  ASSERT_EQ(bad.warnings.size(), 1u);
  EXPECT_NE(bad.warnings[0].find("regex grammar is not enforced"), std::string::npos) << bad.warnings[0];
}

// Anthropic's thinking and output_config.effort set the reasoning budget that exists.
TEST(AgentShapes, MessagesThinkingAndEffort) {
  auto budget = [&](Json extra) {
    Json b = {{"max_tokens", 8}, {"messages", {msg("user", "Hi")}}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    return messages(b).sampling.reasoning_budget;
  };
  EXPECT_EQ(budget({{"thinking", {{"type", "enabled"}, {"budget_tokens", 300}}}}), 300);
  EXPECT_EQ(budget({{"thinking", {{"type", "adaptive"}}}, {"output_config", {{"effort", "low"}}}}), 1024);
  EXPECT_EQ(budget({{"thinking", {{"type", "adaptive"}}}, {"output_config", {{"effort", "medium"}}}}), 4096);
  EXPECT_EQ(budget({{"thinking", {{"type", "adaptive"}}}, {"output_config", {{"effort", "high"}}}}), -1);
  // budget_tokens wins over effort; with thinking off effort sets nothing.
  EXPECT_EQ(budget({{"thinking", {{"type", "enabled"}, {"budget_tokens", 300}}},
                    {"output_config", {{"effort", "low"}}}}),
            300);
  EXPECT_EQ(budget({{"thinking", {{"type", "disabled"}}}, {"output_config", {{"effort", "low"}}}}), -1);
  CompletionRequest r;
  MessagesOptions opt;
  auto e = parse_messages_request({{"max_tokens", 8}, {"messages", {msg("user", "Hi")}},
                                   {"output_config", {{"effort", "huge"}}}},
                                  false, model(), &r, &opt);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "output_config.effort");
}

TEST(AgentShapes, ChatParallelToolCallsFalse) {
  CompletionRequest r;
  ASSERT_FALSE(parse_chat_request({{"messages", {msg("user", "Hi")}}, {"parallel_tool_calls", false}},
                                  model(), &r));
  EXPECT_EQ(r.max_tool_calls, 1);
  CompletionRequest t;
  ASSERT_FALSE(parse_chat_request({{"messages", {msg("user", "Hi")}}, {"parallel_tool_calls", true}},
                                  model(), &t));
  EXPECT_EQ(t.max_tool_calls, -1);
  auto e = parse_chat_request({{"messages", {msg("user", "Hi")}}, {"parallel_tool_calls", "no"}}, model(), &t);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "parallel_tool_calls");
}

TEST(AgentShapes, ContextLengthErrorsInEachApisWords) {
  const ApiError e = context_length("messages", 5000, 4095);
  const Json o = error_body(e);
  EXPECT_EQ(o["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(o["error"]["type"], "invalid_request_error");
  EXPECT_EQ(o["error"]["param"], "messages");
  EXPECT_EQ(error_response(e).status, 400);
  EXPECT_EQ(anthropic_error_body(e),
            (Json{{"type", "error"},
                  {"error", {{"type", "invalid_request_error"},
                             {"message", "prompt is too long: 5000 tokens > 4095 maximum"}}}}));
}

}  // namespace
}  // namespace qwen35::server
