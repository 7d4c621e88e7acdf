// Messages request -> ChatRequest -> CompletionRequest (messages.h). The reading:
//   system (a string or text blocks)       the first, system message
//   messages of role system                  placed by place_system_messages (chat_request.h)
//   user text blocks                        a user message (blocks joined)
//   user tool_result blocks                 tool messages, in order (is_error: the content is
//                                           prefixed "Error: ", which is how the model can tell)
//   assistant text / tool_use / thinking    one assistant message: content, tool calls,
//                                           reasoning (redacted_thinking is dropped)
//   tools [{name, description, input_schema}]  the template's function tools
//   tool_choice auto | any | tool | none    the typed tool choice
//   thinking enabled {budget_tokens}        enable_thinking true, the budget
//   thinking disabled, or absent            enable_thinking false (Anthropic's default)
//   thinking adaptive                       enable_thinking true, no budget
//   output_config.effort                    the budget when thinking is on without budget_tokens
//   stop_sequences, max_tokens, temperature, top_p, top_k, stream    as chat reads its own
// metadata and service_tier are ignored. Every error names the Messages field.
#include <algorithm>
#include <climits>
#include <string>
#include <utility>

#include "server/agent_tools.h"
#include "server/chat_request.h"
#include "server/image_parts.h"
#include "server/request_fields.h"
#include "server/messages.h"

namespace qwen35::server {
using namespace fields;
namespace {


// The type of content block `blk` at `where` (an object with a string "type").
std::optional<ApiError> block_type(const Json& blk, const std::string& where, std::string* type) {
  if (!blk.is_object()) return bad(where, "'" + where + "' must be an object");
  return get_string(blk, "type", where, type);
}

// Text: a string, or text blocks (joined). `what` names the blocks' owner in errors.
std::optional<ApiError> text_of(const Json& c, const std::string& where, std::string* out) {
  if (c.is_string()) {
    *out = c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array()) return bad(where, "'" + where + "' must be a string or a list of blocks");
  out->clear();
  for (size_t k = 0; k < c.size(); ++k) {
    const std::string w = where + "[" + std::to_string(k) + "]";
    std::string type, text;
    QWEN35_TRY(block_type(c[k], w, &type));
    if (type != "text")
      return bad(w + ".type",
                 "content block type '" + type + "' in '" + w + "' is not supported here (text)");
    QWEN35_TRY(get_string(c[k], "text", w, &text));
    *out += text;
  }
  return std::nullopt;
}

// An image block: {"source": {"type": "base64", "media_type": "image/png", "data": "..."}};
// url and file sources are refused (the server fetches nothing and keeps no files).
std::optional<ApiError> read_image_block(const Json& blk, const std::string& w, size_t at,
                                         std::vector<ChatImage>* images) {
  const Json* src = field(blk, "source");
  if (!src || !src->is_object()) return bad(w + ".source", "'" + w + ".source' must be an object");
  std::string type, media, data;
  QWEN35_TRY(get_string(*src, "type", w + ".source", &type));
  if (type == "url")
    return bad(w + ".source", "'" + w + "': the server fetches nothing: send the image as a base64 source");
  if (type != "base64")
    return bad(w + ".source.type", "'" + w + ".source.type' '" + type + "' is not supported (base64)");
  QWEN35_TRY(get_string(*src, "media_type", w + ".source", &media));
  QWEN35_TRY(get_string(*src, "data", w + ".source", &data));
  if (media.rfind("image/", 0) != 0)
    return bad(w + ".source.media_type", "'" + w + ".source.media_type' '" + media +
                                             "' is not an image type (image/png, image/jpeg, ...)");
  ChatImage im{at, "", w};
  // One reading for every API: the media type and the data as the data: URL they spell.
  QWEN35_TRY(read_image_url("data:" + media + ";base64," + data, w, &im.bytes));
  images->push_back(std::move(im));
  return std::nullopt;
}

// One user turn: tool results become tool messages, text a user message.
std::optional<ApiError> read_user(const Json& content, const std::string& where,
                                  std::vector<ChatMessage>* out) {
  using Role = ChatMessage::Role;
  if (content.is_string()) {
    out->push_back(ChatMessage(Role::kUser, content.get<std::string>(), where));
    return std::nullopt;
  }
  std::string text;
  std::vector<ChatImage> images;
  const auto flush = [&] {
    out->push_back(ChatMessage(Role::kUser, std::exchange(text, ""), where));
    out->back().images = std::exchange(images, {});
  };
  bool any = false;
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string w = where + ".content[" + std::to_string(k) + "]";
    const Json& blk = content[k];
    std::string type;
    QWEN35_TRY(block_type(blk, w, &type));
    if (type == "text") {
      std::string t;
      QWEN35_TRY(get_string(blk, "text", w, &t));
      text += t;
    } else if (type == "image") {
      QWEN35_TRY(read_image_block(blk, w, text.size(), &images));
    } else if (type == "video") {
      return video_refused(type, w);
    } else if (type == "tool_result") {
      if (!text.empty() || !images.empty()) flush();
      std::string result;
      ChatMessage m(Role::kTool, "", w);
      QWEN35_TRY(get_string(blk, "tool_use_id", w, &m.tool_call_id));
      if (const Json* c = field(blk, "content")) QWEN35_TRY(text_of(*c, w + ".content", &result));
      if (const Json* err = field(blk, "is_error")) {
        if (!err->is_boolean())
          return bad(w + ".is_error", "'" + w + ".is_error' must be a boolean");
        if (err->get<bool>()) result = "Error: " + result;
      }
      m.content = std::move(result);
      out->push_back(std::move(m));
      any = true;
    } else {
      return bad(w + ".type", "content block type '" + type + "' in '" + w +
                                  "' is not supported in a user turn (text, image, tool_result)");
    }
  }
  if (!text.empty() || !images.empty() || !any) flush();
  return std::nullopt;
}

// One assistant turn: text, thinking and tool_use blocks make one message.
std::optional<ApiError> read_assistant(const Json& content, const std::string& where,
                                       std::vector<ChatMessage>* out) {
  ChatMessage m(ChatMessage::Role::kAssistant, "", where);
  if (content.is_string()) {
    m.content = content.get<std::string>();
    out->push_back(std::move(m));
    return std::nullopt;
  }
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string w = where + ".content[" + std::to_string(k) + "]";
    const Json& blk = content[k];
    std::string type, t;
    QWEN35_TRY(block_type(blk, w, &type));
    if (type == "text") {
      QWEN35_TRY(get_string(blk, "text", w, &t));
      m.content += t;
    } else if (type == "thinking") {
      QWEN35_TRY(get_string(blk, "thinking", w, &t));
      m.reasoning = m.reasoning.value_or("") + t;
    } else if (type == "redacted_thinking") {
      // Encrypted by Anthropic for Anthropic's models: nothing this model can read.
    } else if (type == "tool_use") {
      ChatToolCall call;
      QWEN35_TRY(get_string(blk, "id", w, &call.id));
      QWEN35_TRY(get_string(blk, "name", w, &call.name));
      const Json* input = field(blk, "input");
      if (!input || !input->is_object())
        return bad(w + ".input", "'" + w + ".input' must be an object");
      call.arguments = *input;
      m.tool_calls.push_back(std::move(call));
    } else {
      return bad(w + ".type", "content block type '" + type + "' in '" + w +
                                  "' is not supported in an assistant turn (text, thinking, "
                                  "redacted_thinking, tool_use)");
    }
  }
  out->push_back(std::move(m));
  return std::nullopt;
}

// system, then the turns: user, assistant, and system messages after the first turn.
std::optional<ApiError> read_messages(const Json& b, ChatRequest* c) {
  using Role = ChatMessage::Role;
  std::string system;
  if (const Json* s = field(b, "system")) QWEN35_TRY(text_of(*s, "system", &system));
  const Json* m = field(b, "messages");
  if (!m) return bad("messages", "'messages' is required");
  if (!m->is_array()) return bad("messages", "'messages' must be an array");
  if (m->empty()) return bad("messages", "'messages' must not be empty");
  for (size_t i = 0; i < m->size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    const Json& msg = (*m)[i];
    if (!msg.is_object()) return bad(where, "'" + where + "' must be an object");
    std::string role;
    QWEN35_TRY(get_string(msg, "role", where, &role));
    const Json* content = field(msg, "content");
    if (!content || !(content->is_string() || content->is_array()))
      return bad(where + ".content",
                 "'" + where + ".content' must be a string or a list of content blocks");
    if (role == "user") {
      QWEN35_TRY(read_user(*content, where, &c->messages));
    } else if (role == "assistant") {
      QWEN35_TRY(read_assistant(*content, where, &c->messages));
    } else if (role == "system") {
      // Mid-conversation system messages (Anthropic's mid-conversation-system beta, which
      // Claude Code sends): text only, placed by place_system_messages.
      std::string text;
      QWEN35_TRY(text_of(*content, where + ".content", &text));
      c->messages.push_back(ChatMessage(Role::kSystem, std::move(text), where));
    } else {
      return bad(where + ".role", "unknown role '" + role + "' in '" + where +
                                      "' (expected user, assistant or system)");
    }
  }
  if (!system.empty())
    c->messages.insert(c->messages.begin(), ChatMessage(Role::kSystem, system, "system"));
  place_system_messages(&c->messages);
  return std::nullopt;
}

// tools: client tools; Anthropic's server and versioned tools (web_search_20250305,
// bash_20250124, ...) are left out with a warning (agent_tools.h), or refused under
// --strict-tools.
std::optional<ApiError> read_tools(const Json& b, const ModelInfo& mi, ChatRequest* c,
                                   MessagesOptions* opt, std::vector<std::string>* warnings) {
  static constexpr ToolDialect kTools{"custom", false, "input_schema", true, "server tools",
                                      "(only client tools: {name, description, input_schema})"};
  std::vector<std::string> left_out;
  QWEN35_TRY(map_function_tools(b, kTools, &c->tools, mi.strict_tools ? nullptr : &left_out));
  for (const auto& t : left_out) warnings->push_back(left_out_warning(t));
  c->names.tool_paths = function_tool_paths(b, kTools);
  c->names.tool_schema = "input_schema";
  const Json* tc = field(b, "tool_choice");
  if (!tc) return std::nullopt;
  const char* what =
      "'tool_choice' must be {\"type\": \"auto\"}, {\"type\": \"any\"}, {\"type\": \"none\"} "
      "or {\"type\": \"tool\", \"name\": ...}";
  std::string type;
  if (!tc->is_object() || get_string(*tc, "type", "tool_choice", &type))
    return bad("tool_choice", what);
  using Mode = ToolChoice::Mode;
  if (type == "auto") {
    c->tool_choice.mode = Mode::kAuto;
  } else if (type == "any") {
    c->tool_choice.mode = Mode::kRequired;
  } else if (type == "none") {
    c->tool_choice.mode = Mode::kNone;
  } else if (type == "tool") {
    c->tool_choice.mode = Mode::kNamed;
    QWEN35_TRY(get_string(*tc, "name", "tool_choice", &c->tool_choice.name));
    if (c->tool_choice.name.empty()) return bad("tool_choice", what);
  } else {
    return bad("tool_choice.type", what);
  }
  if (const Json* d = field(*tc, "disable_parallel_tool_use")) {
    if (!d->is_boolean())
      return bad("tool_choice.disable_parallel_tool_use",
                 "'tool_choice.disable_parallel_tool_use' must be a boolean");
    opt->parallel_tool_calls = !d->get<bool>();
  }
  return std::nullopt;
}

// thinking: enabled (with its budget), adaptive (no budget), or disabled, Anthropic's default.
std::optional<ApiError> read_thinking(const Json& b, ChatRequest* c) {
  bool enabled = false;
  if (const Json* t = field(b, "thinking")) {
    const char* what =
        "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N}, {\"type\": "
        "\"adaptive\"} or {\"type\": \"disabled\"}";
    std::string type;
    if (!t->is_object() || get_string(*t, "type", "thinking", &type)) return bad("thinking", what);
    if (type == "enabled") {
      enabled = true;
      if (field(*t, "budget_tokens")) {
        int64_t budget = 0;
        QWEN35_TRY(get_int(*t, "budget_tokens", "thinking.budget_tokens", &budget, 0, INT64_MAX));
        c->budget = budget;
      }
    } else if (type == "adaptive") {
      enabled = true;  // the model decides how long to think: no budget
    } else if (type != "disabled") {
      return bad("thinking.type", what);
    }
  }
  c->template_kwargs = {{"enable_thinking", enabled}};
  // output_config.effort: how much to think when thinking is on and no budget_tokens says it
  // (the reasoning budget's effort levels, chat_request.h: low 1024, medium 4096, high and max
  // no cap); with thinking off there is nothing for it to set.
  if (const Json* oc = field(b, "output_config")) {
    if (!oc->is_object()) return bad("output_config", "'output_config' must be an object");
    if (const Json* e = field(*oc, "effort")) {
      static const std::pair<const char*, int64_t> kEfforts[] = {
          {"low", 1024}, {"medium", 4096}, {"high", -1}, {"max", -1}};
      const auto* it = std::find_if(std::begin(kEfforts), std::end(kEfforts),
                                    [&](const auto& x) { return *e == x.first; });
      if (it == std::end(kEfforts))
        return bad("output_config.effort",
                   "'output_config.effort' must be \"low\", \"medium\", \"high\" or \"max\"");
      if (enabled && !c->budget) c->budget = it->second;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_messages_request(const Json& b, bool count_tokens,
                                               const ModelInfo& mi, CompletionRequest* r,
                                               MessagesOptions* opt) {
  if (!b.is_object()) return bad("", "the request body must be a JSON object");
  for (const char* name : {"container", "mcp_servers"})
    if (field(b, name)) return bad(name, std::string("'") + name + "' is not supported");
  QWEN35_TRY(start_request(b, mi, r));
  if (!count_tokens) {
    if (!field(b, "max_tokens")) return bad("max_tokens", "'max_tokens' is required");
    QWEN35_TRY(read_max_tokens(b, "max_tokens", r));
    QWEN35_TRY(get_bool(b, "stream", &r->stream));
  }
  ChatRequest c;
  c.names.budget = "thinking.budget_tokens";
  QWEN35_TRY(read_messages(b, &c));
  QWEN35_TRY(read_tools(b, mi, &c, opt, &r->warnings));
  QWEN35_TRY(read_thinking(b, &c));
  QWEN35_TRY(read_stop(b, "stop_sequences", r));
  QWEN35_TRY(read_sampling(b, {"temperature", "top_p", "top_k"}, r));
  QWEN35_TRY(check_sampling(*r));
  return finish_chat_request(c, mi, r);
}

}  // namespace qwen35::server
