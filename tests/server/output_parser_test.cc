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
          const nlohmann::ordered_json& schema = nullptr) {
  OutputParser p(in_reasoning, true, tools, schema);
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

}  // namespace
}  // namespace qwen35::server
