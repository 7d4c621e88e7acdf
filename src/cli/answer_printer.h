// How `qwen35 run` shows a chat answer. Qwen3.5's generation prompt ends in "<think>\n", so the
// model's text opens with reasoning, then "</think>" and the answer. The text is split as the
// server splits it (server::OutputParser: reasoning_content vs content), and the reasoning is
//   kDim:    printed faint (ANSI "\033[2m" … "\033[0m"), without tags: stdout is a terminal;
//   kTagged: enclosed in "<think>\n" … "</think>\n", so a pipe or file stays parseable;
//   kHidden: left out; `indicator` shows "thinking…" on stderr while the model reasons.
// Reasoning that is only whitespace is not shown at all. The answer is printed as it comes.
// content() and reasoning() are the whole split, for the chat history. Not thread-safe.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include "server/output_parser.h"

namespace qwen35::cli {

enum class ReasoningDisplay { kDim, kTagged, kHidden };

class AnswerPrinter {
 public:
  // in_reasoning: the prompt already opened <think>.
  AnswerPrinter(bool in_reasoning, ReasoningDisplay display, bool indicator);

  // Text as it streams (stop strings already applied).
  void push(std::string_view text);
  // End of the answer: decides what the parser held back and closes an open reasoning block.
  void finish();

  const std::string& content() const { return content_; }
  const std::string& reasoning() const { return reasoning_; }

 private:
  void show(const server::OutputPiece& p);
  void show_reasoning(std::string_view text);
  void close_reasoning();

  server::OutputParser parser_;
  ReasoningDisplay display_;
  bool indicator_;
  bool open_ = false;        // a reasoning block (or the indicator) is on screen
  bool at_line_start_ = true;  // the last reasoning character shown was a newline
  std::string pending_;      // leading whitespace of reasoning not shown yet
  std::string content_, reasoning_;
};

}  // namespace qwen35::cli
