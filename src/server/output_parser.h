// Splits a chat completion's text, as it streams, into reasoning (between <think> and </think>),
// content, and Qwen3.5 XML tool calls:
//   <tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>\n</function>\n</tool_call>
// Text that could still be the start of a tag is held back until it is decided, so a streamed
// split equals the split of the whole text. Tool calls are recognized in content and in
// reasoning. Not thread-safe; one per choice.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace qwen35::server {

struct ToolCall {
  std::string name;
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
};

struct OutputPiece {
  enum Kind { kContent, kReasoning, kToolCall } kind = kContent;
  std::string text;  // kContent, kReasoning
  ToolCall call;     // kToolCall
};

class OutputParser {
 public:
  // in_reasoning: the prompt already opened <think> (Qwen3.5's generation prompt does unless
  // enable_thinking is false). parse_tools: recognize <tool_call> blocks. `tools` (the request's
  // tools array) gives parameter types: a parameter declared "string" stays a string, others
  // (declared or not) are read as JSON when they parse.
  OutputParser(bool in_reasoning, bool parse_reasoning, bool parse_tools,
               nlohmann::ordered_json tools = nullptr);

  // Appends text; returns the pieces now decided (adjacent text of one kind merged).
  std::vector<OutputPiece> push(std::string_view text);
  // End of output: everything held back is decided (an unfinished tool call becomes content).
  std::vector<OutputPiece> flush();

 private:
  enum State { kText, kThink, kCall };
  void emit(OutputPiece::Kind kind, std::string_view text, std::vector<OutputPiece>* out);
  void drain(bool final, std::vector<OutputPiece>* out);
  ToolCall parse_call(std::string_view body) const;

  bool parse_reasoning_, parse_tools_;
  nlohmann::ordered_json tools_;
  State state_ = kText;
  State call_return_ = kText;    // where a tool call returns to
  bool strip_newlines_ = false;  // drop newlines right after </think> or a tool call
  std::string buf_;
};

// Parses one <tool_call> body (the text between the tags). Exposed for tests.
ToolCall parse_tool_call(std::string_view body, const nlohmann::ordered_json& tools);

}  // namespace qwen35::server
