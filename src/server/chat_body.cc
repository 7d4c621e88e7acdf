// OpenAI chat-completions bodies -> ChatRequest (chat_request.h), and the /apply-template and
// /tokenize renderings of the same messages.
#include <climits>
#include <string>

#include "server/chat_request.h"
#include "server/image_parts.h"
#include "server/prompt_tokens.h"
#include "server/request_fields.h"
#include "server/structured.h"

namespace qwen35::server {
using namespace fields;
namespace {

// An image_url part: {"image_url": {"url": "data:image/...;base64,...", "detail": ...}}, or
// the URL as a bare string (some clients send that); detail is accepted and ignored.
std::optional<ApiError> read_image_part(const Json& part, const std::string& w, ChatMessage* m) {
  const Json* u = field(part, "image_url");
  if (u && u->is_object()) u = field(*u, "url");
  if (!u || !u->is_string())
    return bad(w, "'" + w + "' needs 'image_url': {\"url\": \"data:image/png;base64,...\"}");
  std::string bytes;
  QWEN35_TRY(read_image_url(u->get<std::string>(), w, &bytes));
  add_image(m, std::move(bytes), w);
  return std::nullopt;
}

// Content: a string, or a list of {"type": "text", "text": ...} and image_url parts (the text
// joined, the images where they sit in it); null is "".
std::optional<ApiError> read_content(const Json& content, const std::string& where, ChatMessage* m) {
  if (content.is_null()) return std::nullopt;
  if (content.is_string()) {
    m->content = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array())
    return bad(where, "'" + where + "' must be a string or a list of parts");
  for (size_t k = 0; k < content.size(); ++k) {
    const Json& part = content[k];
    const std::string w = where + "[" + std::to_string(k) + "]";
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      return bad(where, "each part of '" + where + "' must be an object with a 'type'");
    const std::string type = part["type"];
    if (type == "image_url") {
      QWEN35_TRY(read_image_part(part, w, m));
      continue;
    }
    if (type == "video_url" || type == "video" || type == "input_video") return video_refused(type, w);
    if (type != "text")
      return bad(w, "content part type '" + type + "' in '" + w + "' is not supported (text, image_url)");
    if (!part.contains("text") || !part["text"].is_string())
      return bad(where, "a text part of '" + where + "' needs a string 'text'");
    m->content += part["text"].get<std::string>();
  }
  return std::nullopt;
}

std::optional<ApiError> read_role(const Json& msg, const std::string& where,
                                  ChatMessage::Role* role) {
  using Role = ChatMessage::Role;
  if (!msg.contains("role") || !msg["role"].is_string())
    return bad(where + ".role", "'" + where + ".role' must be a string");
  const std::string name = msg["role"];
  static const std::pair<const char*, Role> kRoles[] = {{"system", Role::kSystem},
                                                         {"developer", Role::kSystem},
                                                         {"user", Role::kUser},
                                                         {"assistant", Role::kAssistant},
                                                         {"tool", Role::kTool}};
  for (const auto& [n, r] : kRoles)
    if (name == n) {
      *role = r;
      return std::nullopt;
    }
  return bad(where + ".role", "unknown role '" + name + "' in " + where +
                                  " (expected system, developer, user, assistant or tool)");
}

// An assistant's tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}],
// where arguments is JSON text (OpenAI's form) or already an object.
std::optional<ApiError> read_tool_calls(const Json& tc, const std::string& calls, int max_depth,
                                        std::vector<ChatToolCall>* out) {
  if (!tc.is_array()) return bad(calls, "'" + calls + "' must be an array");
  for (const auto& c : tc) {
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
      return bad(calls, "each tool call needs a 'function' object");
    const Json& f = c["function"];
    ChatToolCall call;
    if (const Json* id = field(c, "id"); id && id->is_string()) call.id = *id;
    if (const Json* n = field(f, "name")) {
      if (!n->is_string()) return bad(calls, "a tool call's 'function.name' must be a string");
      call.name = *n;
    }
    if (const Json* a = field(f, "arguments")) {
      if (a->is_string())
        QWEN35_TRY(parse_call_arguments(a->get<std::string>(), max_depth, calls, &call.arguments));
      else
        call.arguments = *a;
    }
    out->push_back(std::move(call));
  }
  return std::nullopt;
}

std::optional<ApiError> read_message(const Json& msg, const std::string& where, int max_depth,
                                     ChatMessage* m) {
  if (!msg.is_object()) return bad(where, "'" + where + "' must be an object");
  QWEN35_TRY(read_role(msg, where, &m->role));
  m->origin = where;
  const bool assistant = m->role == ChatMessage::Role::kAssistant;
  const std::string content = where + ".content";
  if (!assistant && (!msg.contains("content") || msg["content"].is_null()))
    return bad(content, "'" + content + (msg.contains("content") ? "' is null" : "' is required"));
  if (msg.contains("content")) QWEN35_TRY(read_content(msg["content"], content, m));
  if (const Json* r = field(msg, "reasoning_content"); r && assistant) {
    if (!r->is_string())
      return bad(where + ".reasoning_content",
                 "'" + where + ".reasoning_content' must be a string");
    m->reasoning = r->get<std::string>();
  }
  if (const Json* tc = field(msg, "tool_calls"))
    QWEN35_TRY(read_tool_calls(*tc, where + ".tool_calls", max_depth, &m->tool_calls));
  if (const Json* id = field(msg, "tool_call_id"); id && id->is_string()) m->tool_call_id = *id;
  return std::nullopt;
}

// What /apply-template renders: messages, tools, chat_template_kwargs, add_generation_prompt.
std::optional<ApiError> read_conversation(const Json& b, const ModelInfo& mi, ChatRequest* c) {
  const Json* m = field(b, "messages");
  if (!m) return bad("messages", "'messages' is required");
  if (!m->is_array()) return bad("messages", "'messages' must be an array");
  if (m->empty()) return bad("messages", "'messages' must not be empty");
  c->messages.resize(m->size());
  for (size_t i = 0; i < m->size(); ++i)
    QWEN35_TRY(read_message((*m)[i], "messages[" + std::to_string(i) + "]", mi.max_json_depth,
                            &c->messages[i]));
  place_system_messages(&c->messages);
  if (const Json* t = field(b, "tools")) {
    if (!t->is_array()) return bad("tools", "'tools' must be an array");
    for (const auto& x : *t)
      if (!x.is_object() || !x.contains("function") || !x["function"].is_object() ||
          !x["function"].contains("name") || !x["function"]["name"].is_string())
        return bad("tools",
                   "each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
    c->tools = *t;
  }
  if (const Json* k = field(b, "chat_template_kwargs")) {
    if (!k->is_object()) return bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    // The template variables the server fills from validated fields: a kwarg of the same name
    // would replace them (issue 14: image parts smuggled in through "messages").
    for (const char* key : {"messages", "tools", "documents", "add_generation_prompt"})
      if (k->contains(key))
        return bad("chat_template_kwargs",
                   std::string("'chat_template_kwargs' must not set '") + key +
                       "': the server sets it from the request's validated fields");
    // Nor replace what the template's own code calls (range, raise_exception, eos_token, ...).
    if (mi.tmpl)
      for (const auto& [key, v] : k->items())
        if (mi.tmpl->is_reserved(key))
          return bad("chat_template_kwargs", "'chat_template_kwargs' must not set '" + key +
                                                 "': the chat template's own code uses that name");
    c->template_kwargs = *k;
  }
  return get_bool(b, "add_generation_prompt", &c->add_generation_prompt);
}

// tool_choice: "auto", "none", "required" (one or more calls of any tool) or
// {"type": "function", "function": {"name": N}} (one call of N); the forced ones are grammars.
std::optional<ApiError> read_tool_choice(const Json& b, ToolChoice* tc) {
  const Json* f = field(b, "tool_choice");
  if (!f) return std::nullopt;
  const char* what =
      "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
      "\"function\": {\"name\": ...}}";
  if (f->is_string()) {
    if (!tc->set_mode(*f)) return bad("tool_choice", what);
    return std::nullopt;
  }
  if (f->is_object() && has_type(*f, "function") && f->contains("function") &&
      (*f)["function"].is_object() && (*f)["function"].contains("name") &&
      (*f)["function"]["name"].is_string() && !(*f)["function"]["name"].get<std::string>().empty()) {
    tc->mode = ToolChoice::Mode::kNamed;
    tc->name = (*f)["function"]["name"];
    return std::nullopt;
  }
  return bad("tool_choice", what);
}

}  // namespace

std::optional<ApiError> read_response_format(const Json& b, OutputFormat* f) {
  const Json* rf = field(b, "response_format");
  if (!rf) return std::nullopt;
  const char* what =
      "'response_format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
      "{\"type\": \"json_schema\", \"json_schema\": {\"name\": ..., \"schema\": {...}}}";
  if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
    return bad("response_format", what);
  const std::string type = (*rf)["type"];
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    f->kind = OutputFormat::Kind::kJsonObject;
    return std::nullopt;
  }
  if (type != "json_schema") return bad("response_format.type", what);
  const Json* js = field(*rf, "json_schema");
  if (!js || !js->is_object()) return bad("response_format.json_schema", what);
  const Json* schema = field(*js, "schema");
  if (!schema)
    return bad("response_format.json_schema.schema",
               "'response_format.json_schema.schema' is required");
  bool strict = false;
  QWEN35_TRY(get_bool(*js, "strict", "response_format.json_schema.strict", &strict));
  if (const Json* n = field(*js, "name"); n && !n->is_string())
    return bad("response_format.json_schema.name",
               "'response_format.json_schema.name' must be a string");
  f->kind = OutputFormat::Kind::kJsonSchema;
  f->schema = *schema;
  return std::nullopt;
}

std::optional<ApiError> parse_chat_request(const Json& b, const ModelInfo& mi,
                                           CompletionRequest* r) {
  r->chat = true;
  QWEN35_TRY(read_openai_common(b, mi, r));
  bool logprobs = false;
  QWEN35_TRY(get_bool(b, "logprobs", &logprobs));
  int64_t top = 0;
  QWEN35_TRY(get_int(b, "top_logprobs", &top, 0, 20));
  if (field(b, "top_logprobs") && !logprobs)
    return bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  r->sampling.logprobs = logprobs ? int32_t(top) : -1;
  ChatRequest c;
  QWEN35_TRY(read_tool_choice(b, &c.tool_choice));
  QWEN35_TRY(read_conversation(b, mi, &c));
  if (const Json* e = field(b, "reasoning_effort"))
    QWEN35_TRY(apply_reasoning_effort(*e, "reasoning_effort", "chat_template_kwargs", &c));
  if (field(b, "thinking_token_budget")) {
    int64_t budget = 0;
    QWEN35_TRY(get_int(b, "thinking_token_budget", &budget, 0, INT64_MAX));
    c.budget = budget;
  }
  QWEN35_TRY(read_response_format(b, &c.format));
  return finish_chat_request(c, mi, r);
}

std::optional<ApiError> render_messages(const Json& b, const ModelInfo& mi, std::string* text,
                                        std::vector<int32_t>* ids) {
  if (!b.is_object()) return bad("", "the request body must be a JSON object");
  ChatRequest c;
  QWEN35_TRY(read_conversation(b, mi, &c));
  QWEN35_TRY(render_chat(c, mi, text));
  if (!ids && !has_images(c)) return std::nullopt;
  // The prompt a chat request of these messages gets: images widened to their tokens.
  std::vector<int32_t> own;
  std::vector<int32_t>* out = ids ? ids : &own;
  std::vector<tokenizer::TextRange> literal;
  QWEN35_TRY(encode_chat_prompt(c, mi, *text, out, &literal));
  if (!has_images(c)) return std::nullopt;
  CompletionRequest r;
  std::string widened;
  QWEN35_TRY(attach_images(c, mi, *text, literal, out, &r, &widened));
  *text = std::move(widened);
  return std::nullopt;
}

}  // namespace qwen35::server
