// AnswerBlocks: a choice's deltas -> ordered reasoning / text / tool-call blocks and the events
// a stream shows, the same blocks whether or not the events are taken.
#include "server/answer_blocks.h"

#include <gtest/gtest.h>

namespace qwen35::server {
namespace {

Delta delta(std::string reasoning, std::string text, std::vector<ToolCall> calls = {},
            int tokens = 1, std::string finish = "") {
  Delta d;
  d.reasoning = std::move(reasoning);
  d.text = std::move(text);
  d.calls = std::move(calls);
  d.samples.resize(size_t(tokens));
  d.finish_reason = std::move(finish);
  return d;
}

ToolCall call(const char* name) {
  ToolCall c;
  c.name = name;
  c.arguments = {{"city", "Paris"}};
  return c;
}

std::string ops(const std::vector<BlockEvent>& ev) {
  std::string s;
  for (const auto& e : ev) {
    s += e.op == BlockEvent::kOpen ? 'o' : e.op == BlockEvent::kAppend ? 'a' : 'c';
    s += std::to_string(e.index);
    if (e.op == BlockEvent::kAppend) {
      s += '(';
      s += e.text;
      s += ')';
    }
    s += ' ';
  }
  return s;
}

TEST(AnswerBlocks, ReasoningTextCallsInOrder) {
  AnswerBlocks b(/*in_reasoning=*/true, -1), quiet(true, -1);
  const std::vector<Delta> ds = {delta("\n", ""),
                                 delta("think", ""),
                                 delta("", "", {}, 1),
                                 delta("", "\n\nHi"),
                                 delta("", " there\n"),
                                 delta("", "", {call("f"), call("g")}),
                                 delta("", "", {}, 1, "tool_calls")};
  std::vector<BlockEvent> ev;
  for (const auto& d : ds) {
    b.push(d, &ev);
    quiet.push(d, nullptr);
  }
  b.finish(&ev);
  quiet.finish(nullptr);
  EXPECT_EQ(ops(ev), "o0 a0(\nthink) c0 o1 a1(\n\nHi) a1( there\n) c1 o2 c2 o3 c3 ");
  ASSERT_EQ(b.blocks().size(), 4u);
  EXPECT_EQ(b.blocks()[0].text, "\nthink");
  EXPECT_EQ(b.blocks()[2].call.name, "f");
  EXPECT_EQ(b.blocks()[3].call.name, "g");
  EXPECT_EQ(b.reasoning_tokens(), 3);  // up to the delta that brought text
  ASSERT_EQ(quiet.blocks().size(), 4u);
  EXPECT_EQ(quiet.joined(AnswerBlock::kText), b.joined(AnswerBlock::kText));
}

// Qwen3's prompt leaves <think> to the model: its thinking tokens count from the first one (the
// <think> tag, held back as a possible tag, brings nothing); an answer that does not think has none.
TEST(AnswerBlocks, ReasoningTheModelOpened) {
  AnswerBlocks b(/*in_reasoning=*/false, -1);
  for (const auto& d : {delta("", ""), delta("think", "", {}, 2), delta("", ""), delta("", "Hi")})
    b.push(d, nullptr);
  b.finish(nullptr);
  EXPECT_EQ(b.reasoning_tokens(), 4);
  ASSERT_EQ(b.blocks().size(), 2u);
  EXPECT_EQ(b.blocks()[0].kind, AnswerBlock::kReasoning);
  AnswerBlocks plain(false, -1);
  for (const auto& d : {delta("", ""), delta("", "Hi")}) plain.push(d, nullptr);
  plain.finish(nullptr);
  EXPECT_EQ(plain.reasoning_tokens(), 0);
}

TEST(AnswerBlocks, BlankBlocksAreNotOpened) {
  AnswerBlocks b(true, -1);
  std::vector<BlockEvent> ev;
  b.push(delta("\n", ""), &ev);
  b.push(delta("", "\n\n"), &ev);
  b.push(delta("", "", {call("f")}), &ev);
  b.finish(&ev);
  EXPECT_EQ(ops(ev), "o0 c0 ");
  ASSERT_EQ(b.blocks().size(), 1u);
  EXPECT_EQ(b.blocks()[0].kind, AnswerBlock::kCall);
}

TEST(AnswerBlocks, EmptyAnswerHasOneTextBlock) {
  AnswerBlocks b(false, -1);
  std::vector<BlockEvent> ev;
  b.push(delta("", "", {}, 1, "stop"), &ev);
  b.finish(&ev);
  EXPECT_EQ(ops(ev), "o0 c0 ");
  ASSERT_EQ(b.blocks().size(), 1u);
  EXPECT_EQ(b.blocks()[0].kind, AnswerBlock::kText);
  EXPECT_EQ(b.reasoning_tokens(), 0);
}

TEST(AnswerBlocks, OneCallWhenParallelCallsAreOff) {
  AnswerBlocks b(false, 1);
  b.push(delta("", "", {call("f"), call("g")}), nullptr);
  b.push(delta("", "", {call("h")}), nullptr);
  b.finish(nullptr);
  ASSERT_EQ(b.blocks().size(), 1u);
  EXPECT_EQ(b.blocks()[0].call.name, "f");
}

}  // namespace
}  // namespace qwen35::server
