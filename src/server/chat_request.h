// The one internal form of a chat request, whichever API it came in: OpenAI chat
// (chat_body.cc), Responses (responses_request.cc) and Anthropic Messages
// (messages_request.cc) each read their own JSON into a ChatRequest, validating it and naming
// what is wrong in their own terms; finish_chat_request turns it into the CompletionRequest the
// engine runs (rendered through the chat template, encoded, with its reasoning budget and
// grammar). No API is translated into another's JSON on the way.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/request.h"

namespace qwen35::server {

// A tool call the assistant made earlier in the conversation.
struct ChatToolCall {
  std::string id, name;
  Json arguments;  // a JSON object; null when the client sent none
};

// An image part of a message: its encoded bytes (PNG, JPEG, WebP, GIF), where it sits in the
// message's text, and where the client sent it (errors name it: "messages[1].content[0]").
struct ChatImage {
  size_t at = 0;  // a byte offset in ChatMessage::content: the image comes before content[at]
  std::string bytes;
  std::string origin;
};

struct ChatMessage {
  enum class Role { kSystem, kUser, kAssistant, kTool };
  ChatMessage() = default;
  ChatMessage(Role r, std::string text, std::string where)
      : role(r), content(std::move(text)), origin(std::move(where)) {}

  Role role = Role::kUser;
  std::string content;
  std::optional<std::string> reasoning;  // an assistant's thinking, when the client sent it
  std::vector<ChatToolCall> tool_calls;  // an assistant's
  std::string tool_call_id;              // a tool result's (may be empty)
  // Where the client sent it ("messages[2]", "input[3]", "system"): errors about it name this.
  std::string origin;
  std::vector<ChatImage> images;  // in text order (server/image_parts.h)

  // The message as the chat template reads it: role, content, reasoning_content, tool_calls
  // ({id, type, function: {name, arguments}}), tool_call_id. With images, content is a list of
  // parts as transformers passes it: {"type": "text", "text"} and {"type": "image"}.
  Json to_template() const;
};

// response_format (chat, completions) or text.format (Responses).
struct OutputFormat {
  enum class Kind { kText, kJsonObject, kJsonSchema };
  Kind kind = Kind::kText;
  Json schema;  // kJsonSchema
  // The client's names of the format and of its schema, for errors.
  std::string field = "response_format";
  std::string schema_field = "response_format.json_schema.schema";
};

struct ToolChoice {
  enum class Mode { kAuto, kNone, kRequired, kNamed };
  Mode mode = Mode::kAuto;
  std::string name;  // kNamed

  // OpenAI's string forms, which chat and Responses share: "auto", "none", "required".
  // False for any other string.
  bool set_mode(const std::string& s);
};

// How the client's API names the fields finish_chat_request may find wrong.
struct ChatNames {
  std::string messages = "messages";
  std::string tools = "tools";
  std::string tool_choice = "tool_choice";
  std::string max_tokens = "max_tokens";
  std::string budget = "thinking_token_budget";  // or what sets the budget in this API
  // Where each function tool of ChatRequest::tools is in the client's request ("tools[2]"), and
  // the key of its schema there ("parameters", Anthropic's "input_schema"). A tool past the
  // list's end is chat's own: "tools[i].function", "parameters".
  std::vector<std::string> tool_paths;
  std::string tool_schema = "parameters";
};

struct ChatRequest {
  std::vector<ChatMessage> messages;
  Json tools = Json::array();  // function tools as the template reads them (validated)
  ToolChoice tool_choice;
  OutputFormat format;
  Json template_kwargs = Json::object();  // extra template variables (enable_thinking, ...)
  bool add_generation_prompt = true;
  // The thinking budget in tokens (-1: no cap); unset: the server's default for chat.
  std::optional<int64_t> budget;
  ChatNames names;
};

// System and developer messages anywhere, one rule for every API (chat, Responses, Messages):
// the leading ones (before any other message) are joined, blank-line separated, into the one
// first system message; each later one becomes a user turn of its own whose text starts with
// kLaterSystemMark. Qwen3.5's template takes a system message first only, and a later
// instruction must not rewrite the first system prompt: the prompt up to that turn stays the
// prefix the cache holds. Every parser calls this once its messages are read.
inline constexpr const char* kLaterSystemMark = "[System message]\n";
void place_system_messages(std::vector<ChatMessage>* messages);

// OpenAI's "response_format" (chat and completions) -> *f (left alone when absent).
std::optional<ApiError> read_response_format(const Json& body, OutputFormat* f);

// Reasoning effort (OpenAI's reasoning_effort, Responses' reasoning.effort) at `param`: "none"
// turns thinking off (enable_thinking false, refused when the template kwargs ask for it),
// "minimal" is 128 tokens, "low" 1024, "medium" 4096, "high" and "xhigh" no cap.
std::optional<ApiError> apply_reasoning_effort(const Json& effort, const std::string& param,
                                               const std::string& kwargs_param, ChatRequest* c);

// Tool call arguments sent as JSON text (OpenAI's form) -> the object the template iterates
// (anything else: {}). The text is client JSON like the body, so it gets the same depth bound;
// `where` names the call in errors.
std::optional<ApiError> parse_call_arguments(const std::string& text, int max_depth,
                                             const std::string& where, Json* out);

// How the template writes an assistant's tool calls: it renders a probe conversation with one
// call and looks at the result. Qwen3.5's template writes <function=NAME> (kXml), Qwen3's
// {"name": "NAME", ...} (kJson); a template that writes neither (or cannot render the probe)
// gets kXml, the engine's own family's form.
ToolCallFormat tool_call_format(const tmpl::ChatTemplate& t);

// Renders the conversation through the chat template (for /apply-template, /tokenize and
// finish_chat_request).
std::optional<ApiError> render_chat(const ChatRequest& c, const ModelInfo& mi, std::string* text);

// The request's prompt, reasoning budget, tools to parse and grammar, from the conversation:
// *r's sampling, lengths and end tokens are read already (request.h's building blocks).
std::optional<ApiError> finish_chat_request(const ChatRequest& c, const ModelInfo& mi,
                                            CompletionRequest* r);

}  // namespace qwen35::server
