// A choice's answer as the Responses and Messages APIs present it: an ordered list of blocks
// (reasoning, text, tool calls) rather than chat's three parallel fields. Fed the deltas of a
// ChoiceRunner; hands out open / append / close events for streaming, and keeps the blocks for
// a whole-body answer, so a streamed answer and a non-streamed one are the same by
// construction. Not thread-safe; one per choice.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/choice.h"

namespace qwen35::server {

struct AnswerBlock {
  enum Kind { kReasoning, kText, kCall } kind = kText;
  std::string text;  // kReasoning, kText
  ToolCall call;     // kCall
};

struct BlockEvent {
  enum Op { kOpen, kAppend, kClose } op = kOpen;
  size_t index = 0;  // into blocks()
  std::string text;  // kAppend
};

class AnswerBlocks {
 public:
  // in_reasoning: the prompt opened <think> (the first tokens are reasoning tokens).
  // max_calls: tool calls kept (-1: all; 1 for parallel_tool_calls false: the client runs one
  // call per turn, so later ones are dropped rather than handed to a client that ignores them).
  // think_end: the </think> token's id (-1: unknown), which ends the reasoning tokens.
  AnswerBlocks(bool in_reasoning, int max_calls, int32_t think_end = -1);

  // Appends a delta; *ev (null: not wanted) gets the events it causes, in order. Within one
  // delta, reasoning comes before text and text before calls (the order Qwen3.5 writes them).
  void push(const Delta& d, std::vector<BlockEvent>* ev);
  // The end: closes the open block. An answer with no block gets one empty text block, so that
  // every answer has a message to read.
  void finish(std::vector<BlockEvent>* ev);

  const std::vector<AnswerBlock>& blocks() const { return blocks_; }
  bool finished() const { return finished_; }
  // Tokens sampled inside the thinking block, when the prompt opened <think> or the model did
  // (Qwen3's template leaves it to the model); else 0. With think_end known: every token up to
  // and including </think>, so a forced tool call's tokens after it are not reasoning. Without
  // it: every token up to the first delta that brought text or a tool call.
  int64_t reasoning_tokens() const;
  // The text of the blocks of one kind, joined.
  std::string joined(AnswerBlock::Kind kind) const;

 private:
  void piece(AnswerBlock::Kind kind, std::string_view text, std::vector<BlockEvent>* ev);
  void close_open(std::vector<BlockEvent>* ev);

  std::vector<AnswerBlock> blocks_;
  bool open_ = false;  // the last block still takes text
  bool finished_ = false;
  // Whitespace that would open a block is held until something visible of the same kind
  // follows (then it leads that block); a block of only whitespace (the newlines before a tool
  // call or after </think>) is never opened.
  AnswerBlock::Kind pending_kind_ = AnswerBlock::kText;
  std::string pending_;
  bool reasoning_seen_;        // the prompt or the answer opened a thinking block
  bool answered_ = false;      // text or a tool call came
  int64_t before_answer_ = 0;  // tokens sampled before that
  int max_calls_, n_calls_ = 0;
  int32_t think_end_;
  bool think_closed_ = false;  // the </think> token was sampled
};

}  // namespace qwen35::server
