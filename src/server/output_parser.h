// Splits a chat completion's text, as it streams, into reasoning (between <think> and </think>),
// content, and tool calls in the form the model's chat template writes them (ToolCallFormat):
//   Qwen3.5's XML: <tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>\n</function>\n</tool_call>
//   Qwen3's Hermes-style JSON: <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
// A block that is not a call of that form is left as the text it is.
// Text that could still be the start of a tag is held back until it is decided, so a streamed
// split equals the split of the whole text. Tool calls are recognized in content and in
// reasoning. Not thread-safe; one per choice.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qwen35::server {

struct ToolCall {
  std::string name;
  nlohmann::ordered_json arguments = nlohmann::ordered_json::object();
};

// How a model writes tool calls: what its chat template writes for an assistant's calls
// (tool_call_format() in chat_request.h reads it from the template), never guessed per message.
enum class ToolCallFormat { kXml, kJson };

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
  // (declared or not) are read as JSON when they parse (the XML form; the JSON form is typed).
  OutputParser(bool in_reasoning, bool parse_reasoning, bool parse_tools,
               nlohmann::ordered_json tools = nullptr,
               ToolCallFormat format = ToolCallFormat::kXml);

  // Appends text; returns the pieces now decided (adjacent text of one kind merged).
  std::vector<OutputPiece> push(std::string_view text);
  // End of output: everything held back is decided (an unfinished tool call becomes content).
  std::vector<OutputPiece> flush();

 private:
  enum State { kText, kThink, kCall };
  void emit(OutputPiece::Kind kind, std::string_view text, std::vector<OutputPiece>* out);
  void drain(bool final, std::vector<OutputPiece>* out);

  bool parse_reasoning_, parse_tools_;
  nlohmann::ordered_json tools_;
  ToolCallFormat format_;
  State state_ = kText;
  State call_return_ = kText;    // where a tool call returns to
  bool strip_newlines_ = false;  // drop newlines right after <think>, </think> or a tool call
  std::string buf_;
};

// Parses one <tool_call> body (the text between the tags) in `format`; nullopt when it is not a
// call of that form (no function name; for JSON, not an object with a string "name" and an
// object "arguments", or arguments as JSON text of an object). Exposed for tests.
std::optional<ToolCall> parse_tool_call(std::string_view body, const nlohmann::ordered_json& tools,
                                        ToolCallFormat format);

}  // namespace qwen35::server
