// Messages request -> chat-completions body (messages.h). The mapping:
//   system (a string or text blocks)       the first, system message
//   user text blocks                        a user message (blocks joined)
//   user tool_result blocks                 role "tool" messages, in order (is_error: the
//                                           content is prefixed "Error: ", which is how the
//                                           model can tell)
//   assistant text / tool_use / thinking    one assistant message: content, tool_calls,
//                                           reasoning_content (redacted_thinking is dropped)
//   tools [{name, description, input_schema}]  [{type: function, function: {...}}]
//   tool_choice auto | any | tool | none    "auto" | "required" | {type: function, ...} | "none"
//   thinking enabled {budget_tokens}        enable_thinking true, thinking_token_budget
//   thinking disabled, or absent            enable_thinking false (Anthropic's default)
//   stop_sequences, max_tokens, temperature, top_p, top_k, stream    as named in chat
// metadata and service_tier are ignored. Everything else the chat path validates itself, naming
// the fields in Messages terms (FieldNames, request.h).
#include <string>

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

// One user turn: tool results become tool messages, text a user message.
std::optional<ApiError> map_user(const Json& content, const std::string& where, Json* messages,
                                 std::vector<std::string>* origin) {
  if (content.is_string()) {
    messages->push_back({{"role", "user"}, {"content", content}});
    origin->push_back(where);
    return std::nullopt;
  }
  std::string text;
  bool any = false;
  auto flush_text = [&] {
    if (text.empty()) return;
    messages->push_back({{"role", "user"}, {"content", text}});
    origin->push_back(where);
    text.clear();
    any = true;
  };
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string w = where + ".content[" + std::to_string(k) + "]";
    const Json& blk = content[k];
    std::string type;
    QWEN35_TRY(block_type(blk, w, &type));
    if (type == "text") {
      std::string t;
      QWEN35_TRY(get_string(blk, "text", w, &t));
      text += t;
    } else if (type == "tool_result") {
      flush_text();
      std::string id, out;
      QWEN35_TRY(get_string(blk, "tool_use_id", w, &id));
      if (const Json* c = field(blk, "content")) QWEN35_TRY(text_of(*c, w + ".content", &out));
      if (const Json* err = field(blk, "is_error")) {
        if (!err->is_boolean())
          return bad(w + ".is_error", "'" + w + ".is_error' must be a boolean");
        if (err->get<bool>()) out = "Error: " + out;
      }
      messages->push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", out}});
      origin->push_back(w);
      any = true;
    } else {
      return bad(w + ".type", "content block type '" + type + "' in '" + w +
                                  "' is not supported in a user turn (text, tool_result)");
    }
  }
  if (!text.empty() || !any) {
    messages->push_back({{"role", "user"}, {"content", text}});
    origin->push_back(where);
  }
  return std::nullopt;
}

std::optional<ApiError> map_assistant(const Json& content, const std::string& where, Json* messages,
                                      std::vector<std::string>* origin) {
  Json msg = {{"role", "assistant"}, {"content", ""}};
  if (content.is_string()) {
    msg["content"] = content;
  } else {
    std::string text, thinking;
    bool has_thinking = false;
    Json calls = Json::array();
    for (size_t k = 0; k < content.size(); ++k) {
      const std::string w = where + ".content[" + std::to_string(k) + "]";
      const Json& blk = content[k];
      std::string type;
      QWEN35_TRY(block_type(blk, w, &type));
      if (type == "text") {
        std::string t;
        QWEN35_TRY(get_string(blk, "text", w, &t));
        text += t;
      } else if (type == "thinking") {
        std::string t;
        QWEN35_TRY(get_string(blk, "thinking", w, &t));
        thinking += t;
        has_thinking = true;
      } else if (type == "redacted_thinking") {
        // Encrypted by Anthropic for Anthropic's models: nothing this model can read.
      } else if (type == "tool_use") {
        std::string id, name;
        QWEN35_TRY(get_string(blk, "id", w, &id));
        QWEN35_TRY(get_string(blk, "name", w, &name));
        const Json* input = field(blk, "input");
        if (!input || !input->is_object())
          return bad(w + ".input", "'" + w + ".input' must be an object");
        calls.push_back({{"id", id},
                         {"type", "function"},
                         {"function", {{"name", name}, {"arguments", *input}}}});
      } else {
        return bad(w + ".type", "content block type '" + type + "' in '" + w +
                                    "' is not supported in an assistant turn (text, thinking, "
                                    "redacted_thinking, tool_use)");
      }
    }
    msg["content"] = text;
    if (has_thinking) msg["reasoning_content"] = thinking;
    if (!calls.empty()) msg["tool_calls"] = std::move(calls);
  }
  messages->push_back(std::move(msg));
  origin->push_back(where);
  return std::nullopt;
}

std::optional<ApiError> map_tools(const Json& b, Json* chat, MessagesOptions* opt) {
  static constexpr ToolDialect kTools{"custom", false, "input_schema", true, "server tools",
                                      "(only client tools: {name, description, input_schema})"};
  Json tools;
  QWEN35_TRY(map_function_tools(b, kTools, &tools));
  if (!tools.empty()) (*chat)["tools"] = std::move(tools);
  if (const Json* tc = field(b, "tool_choice")) {
    const char* what =
        "'tool_choice' must be {\"type\": \"auto\"}, {\"type\": \"any\"}, {\"type\": \"none\"} "
        "or {\"type\": \"tool\", \"name\": ...}";
    std::string type;
    if (!tc->is_object() || get_string(*tc, "type", "tool_choice", &type))
      return bad("tool_choice", what);
    if (type == "auto") {
      (*chat)["tool_choice"] = "auto";
    } else if (type == "any") {
      (*chat)["tool_choice"] = "required";
    } else if (type == "none") {
      (*chat)["tool_choice"] = "none";
    } else if (type == "tool") {
      std::string name;
      QWEN35_TRY(get_string(*tc, "name", "tool_choice", &name));
      (*chat)["tool_choice"] = {{"type", "function"}, {"function", {{"name", name}}}};
    } else {
      return bad("tool_choice.type", what);
    }
    if (const Json* d = field(*tc, "disable_parallel_tool_use")) {
      if (!d->is_boolean())
        return bad("tool_choice.disable_parallel_tool_use",
                   "'tool_choice.disable_parallel_tool_use' must be a boolean");
      opt->parallel_tool_calls = !d->get<bool>();
    }
  }
  return std::nullopt;
}

std::optional<ApiError> map_thinking(const Json& b, Json* chat) {
  bool enabled = false;
  if (const Json* t = field(b, "thinking")) {
    const char* what =
        "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N}, {\"type\": "
        "\"adaptive\"} or {\"type\": \"disabled\"}";
    std::string type;
    if (!t->is_object() || get_string(*t, "type", "thinking", &type)) return bad("thinking", what);
    if (type == "enabled") {
      enabled = true;
      if (const Json* n = field(*t, "budget_tokens")) (*chat)["thinking_token_budget"] = *n;
    } else if (type == "adaptive") {
      enabled = true;  // the model decides how long to think: no budget
    } else if (type != "disabled") {
      return bad("thinking.type", what);
    }
  }
  (*chat)["chat_template_kwargs"] = {{"enable_thinking", enabled}};
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> messages_to_chat(const Json& b, bool count_tokens, Json* chat,
                                         MessagesOptions* opt, FieldNames* names) {
  if (!b.is_object()) return bad("", "the request body must be a JSON object");
  for (const char* name : {"container", "mcp_servers"})
    if (field(b, name)) return bad(name, std::string("'") + name + "' is not supported");
  *chat = Json::object();
  if (const Json* m = field(b, "model")) (*chat)["model"] = *m;
  if (!count_tokens) {
    const Json* mt = field(b, "max_tokens");
    if (!mt) return bad("max_tokens", "'max_tokens' is required");
    (*chat)["max_tokens"] = *mt;
  }
  Json messages = Json::array();
  std::vector<std::string> origin;
  std::string system;
  if (const Json* s = field(b, "system")) QWEN35_TRY(text_of(*s, "system", &system));
  const Json* m = field(b, "messages");
  if (!m) return bad("messages", "'messages' is required");
  if (!m->is_array()) return bad("messages", "'messages' must be an array");
  if (m->empty()) return bad("messages", "'messages' must not be empty");
  bool leading = true;
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
    if (role == "system") {  // newer clients may send system turns among the messages
      std::string text;
      QWEN35_TRY(text_of(*content, where + ".content", &text));
      if (leading) {
        if (!system.empty() && !text.empty()) system += "\n\n";
        system += text;
      } else {
        messages.push_back({{"role", "user"}, {"content", text}});
        origin.push_back(where);
      }
      continue;
    }
    leading = false;
    if (role == "user") {
      QWEN35_TRY(map_user(*content, where, &messages, &origin));
    } else if (role == "assistant") {
      QWEN35_TRY(map_assistant(*content, where, &messages, &origin));
    } else {
      return bad(where + ".role",
                 "unknown role '" + role + "' in '" + where + "' (expected user or assistant)");
    }
  }
  if (!system.empty()) {
    messages.insert(messages.begin(), Json{{"role", "system"}, {"content", system}});
    origin.insert(origin.begin(), "system");
  }
  (*chat)["messages"] = std::move(messages);
  QWEN35_TRY(map_tools(b, chat, opt));
  QWEN35_TRY(map_thinking(b, chat));
  if (const Json* s = field(b, "stop_sequences")) (*chat)["stop"] = *s;
  for (const char* name : {"temperature", "top_p", "top_k", "stream"})
    if (const Json* f = field(b, name)) (*chat)[name] = *f;
  names->origin = std::move(origin);
  names->fields = {{"stop", "stop_sequences"},
                   {"thinking_token_budget", "thinking.budget_tokens"},
                   {"chat_template_kwargs", "thinking"}};
  return std::nullopt;
}

}  // namespace qwen35::server
