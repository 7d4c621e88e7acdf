// The chat-like APIs read into one internal request (chat_request.h): one conversation sent as
// an OpenAI chat body, a Responses body and a Messages body gives the same prompt tokens, the
// same tools, lengths and sampling, and the same compiled grammar, with no API's JSON rewritten
// into another's. Chat is the reference: its body is what the chat template documents.
#include <gtest/gtest.h>

#include "bundled_model_info.h"
#include "server/messages.h"
#include "server/responses.h"
#include "server/structured.h"

namespace qwen35::server {
namespace {

const Json kSchema = {{"type", "object"},
                      {"properties", {{"city", {{"type", "string"}}}}},
                      {"required", {"city"}}};

ModelInfo info_with_grammars() {
  auto& m = testing_model::bundled_model_info();
  static auto grammars = std::make_shared<GrammarCache>(grammar_vocab(*m.tok, 0));
  ModelInfo mi = m.mi;
  mi.grammars = grammars;
  return mi;
}

Json chat_body(const Json& tool_choice) {
  return {{"messages",
           {{{"role", "developer"}, {"content", "Be brief."}},
            {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Weather "}},
                                            {{"type", "text"}, {"text", "in Paris?"}}}}},
            {{"role", "assistant"},
             {"content", nullptr},
             {"reasoning_content", "plan"},
             {"tool_calls",
              {{{"id", "c1"},
                {"type", "function"},
                {"function", {{"name", "w"}, {"arguments", "{\"city\": \"Paris\"}"}}}}}}},
            {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "sunny"}}}},
          {"tools",
           {{{"type", "function"},
             {"function", {{"name", "w"}, {"description", "d"}, {"parameters", kSchema}}}}}},
          {"tool_choice", tool_choice},
          {"max_tokens", 64},
          {"temperature", 0.5},
          {"top_p", 0.9},
          {"chat_template_kwargs", {{"enable_thinking", true}}}};
}

Json responses_body(const Json& tool_choice) {
  return {{"instructions", "Be brief."},
          {"input",
           {{{"role", "user"},
             {"content", {{{"type", "input_text"}, {"text", "Weather "}},
                          {{"type", "input_text"}, {"text", "in Paris?"}}}}},
            {{"type", "reasoning"}, {"summary", {{{"type", "summary_text"}, {"text", "plan"}}}}},
            {{"type", "function_call"},
             {"call_id", "c1"},
             {"name", "w"},
             {"arguments", "{\"city\": \"Paris\"}"}},
            {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "sunny"}}}},
          {"tools",
           {{{"type", "function"}, {"name", "w"}, {"description", "d"}, {"parameters", kSchema}}}},
          {"tool_choice", tool_choice},
          {"max_output_tokens", 64},
          {"temperature", 0.5},
          {"top_p", 0.9}};
}

Json messages_body(const Json& tool_choice) {
  return {{"system", {{{"type", "text"}, {"text", "Be brief."}}}},
          {"messages",
           {{{"role", "user"}, {"content", "Weather in Paris?"}},
            {{"role", "assistant"},
             {"content",
              {{{"type", "thinking"}, {"thinking", "plan"}, {"signature", ""}},
               {{"type", "tool_use"}, {"id", "c1"}, {"name", "w"}, {"input", {{"city", "Paris"}}}}}}},
            {{"role", "user"},
             {"content", {{{"type", "tool_result"}, {"tool_use_id", "c1"}, {"content", "sunny"}}}}}}},
          {"tools", {{{"name", "w"}, {"description", "d"}, {"input_schema", kSchema}}}},
          {"tool_choice", tool_choice},
          {"thinking", {{"type", "adaptive"}}},
          {"max_tokens", 64},
          {"temperature", 0.5},
          {"top_p", 0.9}};
}

void expect_same(const CompletionRequest& want, const CompletionRequest& got, const char* api) {
  ASSERT_EQ(got.batch.size(), 1u) << api;
  EXPECT_EQ(got.batch[0].ids, want.batch[0].ids) << api;
  EXPECT_EQ(got.tools, want.tools) << api;
  EXPECT_EQ(got.parse_tools, want.parse_tools) << api;
  EXPECT_EQ(got.max_tokens, want.max_tokens) << api;
  EXPECT_EQ(got.in_reasoning, want.in_reasoning) << api;
  EXPECT_EQ(got.sampling.temperature, want.sampling.temperature) << api;
  EXPECT_EQ(got.sampling.top_p, want.sampling.top_p) << api;
  EXPECT_EQ(got.sampling.grammar, want.sampling.grammar) << api;  // one cached automaton
  EXPECT_EQ(got.snapshot_hints, want.snapshot_hints) << api;
}

TEST(ChatRequest, EveryApiReadsOneConversationIntoTheSameRequest) {
  const ModelInfo mi = info_with_grammars();
  CompletionRequest chat, resp, msgs;
  ResponsesOptions ropt;
  MessagesOptions mopt;
  auto e = parse_chat_request(chat_body("auto"), mi, &chat);
  ASSERT_FALSE(e) << e->message;
  e = parse_responses_request(responses_body("auto"), mi, &resp, &ropt);
  ASSERT_FALSE(e) << e->message;
  e = parse_messages_request(messages_body({{"type", "auto"}}), false, mi, &msgs, &mopt);
  ASSERT_FALSE(e) << e->message;
  // The reference prompt holds every part of the conversation, in the template's tool-call form.
  const std::string text = mi.tok->decode(chat.batch[0].ids);
  for (const char* part : {"Be brief.", "Weather in Paris?", "plan", "<function=w>",
                           "<parameter=city>\nParis", "sunny", "\"name\": \"w\""})
    EXPECT_NE(text.find(part), std::string::npos) << part << " in\n" << text;
  EXPECT_TRUE(chat.parse_tools);
  EXPECT_EQ(chat.sampling.grammar, nullptr);
  expect_same(chat, resp, "responses");
  expect_same(chat, msgs, "messages");
}

TEST(ChatRequest, ForcedToolCallsCompileOneGrammarFromEveryApi) {
  const ModelInfo mi = info_with_grammars();
  const std::pair<Json, Json> forced[] = {
      {"required", {{"type", "any"}}},
      {{{"type", "function"}, {"function", {{"name", "w"}}}}, {{"type", "tool"}, {"name", "w"}}}};
  for (const auto& [openai, anthropic] : forced) {
    CompletionRequest chat, resp, msgs;
    ResponsesOptions ropt;
    MessagesOptions mopt;
    ASSERT_FALSE(parse_chat_request(chat_body(openai), mi, &chat));
    const Json rchoice = openai.is_string() ? openai : Json{{"type", "function"}, {"name", "w"}};
    ASSERT_FALSE(parse_responses_request(responses_body(rchoice), mi, &resp, &ropt));
    ASSERT_FALSE(parse_messages_request(messages_body(anthropic), false, mi, &msgs, &mopt));
    ASSERT_NE(chat.sampling.grammar, nullptr) << openai;
    expect_same(chat, resp, "responses");
    expect_same(chat, msgs, "messages");
  }
}

// A structured output through text.format (Responses) and response_format (chat): one grammar,
// and its errors in each API's names.
TEST(ChatRequest, OutputFormatsAreOneTypeNamedInEachApi) {
  const ModelInfo mi = info_with_grammars();
  Json chat_b = chat_body("auto");
  chat_b["response_format"] = {{"type", "json_schema"},
                               {"json_schema", {{"name", "x"}, {"schema", kSchema}}}};
  Json resp_b = responses_body("auto");
  resp_b["text"] = {{"format", {{"type", "json_schema"}, {"name", "x"}, {"schema", kSchema}}}};
  CompletionRequest chat, resp;
  ResponsesOptions ropt;
  ASSERT_FALSE(parse_chat_request(chat_b, mi, &chat));
  ASSERT_FALSE(parse_responses_request(resp_b, mi, &resp, &ropt));
  ASSERT_NE(chat.sampling.grammar, nullptr);
  expect_same(chat, resp, "responses");
  EXPECT_EQ(ropt.text["format"]["name"], "x");  // echoed as sent
  // Too few tokens for the value: blamed on each API's length field.
  chat_b["max_tokens"] = 2;
  resp_b["max_output_tokens"] = 2;
  CompletionRequest c2, r2;
  auto ce = parse_chat_request(chat_b, mi, &c2);
  auto re = parse_responses_request(resp_b, mi, &r2, &ropt);
  ASSERT_TRUE(ce && re);
  EXPECT_EQ(ce->param, "max_tokens");
  EXPECT_EQ(re->param, "max_output_tokens");
  EXPECT_EQ(re->message.rfind("'max_output_tokens' is 2, but this format needs", 0), 0u)
      << re->message;
  // With a forced tool call: blamed on each API's own names of the two fields.
  resp_b["max_output_tokens"] = 64;
  resp_b["tool_choice"] = "required";
  CompletionRequest r3;
  re = parse_responses_request(resp_b, mi, &r3, &ropt);
  ASSERT_TRUE(re);
  EXPECT_EQ(re->param, "tool_choice");
  EXPECT_EQ(re->message, "a forced tool call cannot be combined with 'text.format'");
}

}  // namespace
}  // namespace qwen35::server
