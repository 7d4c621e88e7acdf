// The reasoning / tool-call split of chat output: streamed in any pieces it equals the split of
// the whole text; tool calls parse with schema types, inside reasoning too.
#include "server/output_parser.h"

#include <gtest/gtest.h>

namespace qwen35::server {
namespace {

struct Split {
  std::string content, reasoning;
  std::vector<ToolCall> calls;
};

Split run(const std::string& text, size_t piece, bool in_reasoning, bool tools,
          const nlohmann::ordered_json& schema = nullptr,
          ToolCallFormat format = ToolCallFormat::kXml) {
  OutputParser p(in_reasoning, true, tools, schema, format);
  Split s;
  auto take = [&](std::vector<OutputPiece> v) {
    for (auto& x : v) {
      if (x.kind == OutputPiece::kContent)
        s.content += x.text;
      else if (x.kind == OutputPiece::kReasoning)
        s.reasoning += x.text;
      else
        s.calls.push_back(x.call);
    }
  };
  for (size_t i = 0; i < text.size(); i += piece) take(p.push(text.substr(i, piece)));
  take(p.flush());
  return s;
}

TEST(OutputParser, ReasoningSplitStreamsLikeWhole) {
  const std::string text = "let me think <b>\nabout it</think>\n\nThe answer is 4.";
  for (size_t piece : {1, 2, 3, 7, 100}) {
    auto s = run(text, piece, true, false);
    EXPECT_EQ(s.reasoning, "let me think <b>\nabout it") << piece;
    EXPECT_EQ(s.content, "The answer is 4.") << piece;
  }
  auto s = run("<think>x</think>y", 1, false, false);
  EXPECT_EQ(s.reasoning, "x");
  EXPECT_EQ(s.content, "y");
  s = run("plain </thin", 1, false, false);
  EXPECT_EQ(s.content, "plain </thin");
  s = run("never closed", 2, true, false);
  EXPECT_EQ(s.reasoning, "never closed");
  EXPECT_EQ(s.content, "");
}

TEST(OutputParser, ToolCalls) {
  nlohmann::ordered_json tools = nlohmann::ordered_json::parse(R"([{"type":"function","function":
    {"name":"get_weather","parameters":{"type":"object","properties":
    {"city":{"type":"string"},"days":{"type":"integer"},"opts":{"type":"object"}}}}}])");
  const std::string text =
      "I will call.\n<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"u\": \"C\"}\n</parameter>\n"
      "</function>\n</tool_call>";
  for (size_t piece : {1, 5, 1000}) {
    auto s = run(text, piece, false, true, tools);
    EXPECT_EQ(s.content, "I will call.\n");
    ASSERT_EQ(s.calls.size(), 1u);
    EXPECT_EQ(s.calls[0].name, "get_weather");
    EXPECT_EQ(s.calls[0].arguments.dump(), R"({"city":"42","days":3,"opts":{"u":"C"}})");
  }
  // Inside reasoning, and an unfinished call that ends up as text.
  auto s = run(
      "hmm <tool_call><function=f><parameter=a>x</parameter></function></tool_call> ok</think>done",
      3, true, true);
  EXPECT_EQ(s.reasoning, "hmm  ok");
  EXPECT_EQ(s.content, "done");
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].arguments["a"], "x");
  s = run("a <tool_call><function=f>", 2, false, true);
  EXPECT_EQ(s.content, "a <tool_call><function=f>");
  EXPECT_TRUE(s.calls.empty());
}

// Qwen3's template leaves <think> to the model, which writes "<think>\n...\n</think>\n\n".
TEST(OutputParser, ThinkingOpenedByTheModel) {
  const std::string text = "<think>\nWeigh it.\n</think>\n\nIt is 4.";
  for (size_t piece : {1, 2, 5, 100}) {
    auto s = run(text, piece, false, false);
    EXPECT_EQ(s.reasoning, "Weigh it.\n") << piece;
    EXPECT_EQ(s.content, "It is 4.") << piece;
  }
  // enable_thinking=false: the prompt holds the empty block, the answer is content alone.
  auto s = run("It is 4.", 1, false, false);
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "It is 4.");
}

// Qwen3's Hermes-style calls, as its template writes them (tests/fixtures/chat_template/qwen3):
// <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, calls separated by "\n".
TEST(OutputParser, HermesJsonToolCalls) {
  const std::string text =
      "<think>\nThe user wants weather.\n</think>\n\nLet me look.\n<tool_call>\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3, "
      "\"opts\": {\"u\": \"C\"}}}\n</tool_call>\n<tool_call>\n"
      "{\"name\": \"get_time\", \"arguments\": \"{\\\"tz\\\": \\\"CET\\\"}\"}\n</tool_call>";
  for (size_t piece : {1, 3, 8, 1000}) {
    auto s = run(text, piece, false, true, nullptr, ToolCallFormat::kJson);
    EXPECT_EQ(s.reasoning, "The user wants weather.\n") << piece;
    EXPECT_EQ(s.content, "Let me look.\n") << piece;
    ASSERT_EQ(s.calls.size(), 2u) << piece;
    EXPECT_EQ(s.calls[0].name, "get_weather");
    EXPECT_EQ(s.calls[0].arguments.dump(), R"({"city":"Paris","days":3,"opts":{"u":"C"}})");
    EXPECT_EQ(s.calls[1].name, "get_time");  // arguments sent as JSON text
    EXPECT_EQ(s.calls[1].arguments.dump(), R"({"tz":"CET"})");
  }
  // No arguments: {}. Not a call of the form (bad JSON, no name, arguments not an object, the
  // XML form): the block stays the text it is.
  auto s = run("<tool_call>\n{\"name\": \"ping\"}\n</tool_call>", 4, false, true, nullptr,
               ToolCallFormat::kJson);
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].name, "ping");
  EXPECT_EQ(s.calls[0].arguments.dump(), "{}");
  for (const char* bad_text :
       {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}\n</tool_call>",
        "<tool_call>\n{\"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>",
        "<tool_call>\n<function=f>\n</function>\n</tool_call>"}) {
    const std::string bad = bad_text;
    s = run("a " + bad + " b", 3, false, true, nullptr, ToolCallFormat::kJson);
    EXPECT_TRUE(s.calls.empty()) << bad;
    EXPECT_EQ(s.content, "a " + bad + " b");
  }
  // And the other way: under the XML form a JSON body is text too (the form is the model's,
  // not guessed per call).
  s = run("<tool_call>\n{\"name\": \"ping\"}\n</tool_call>", 4, false, true);
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.content, "<tool_call>\n{\"name\": \"ping\"}\n</tool_call>");
}

}  // namespace
}  // namespace qwen35::server
