// Responses request -> chat-completions body (responses.h). The mapping:
//   instructions + leading system/developer items   one system message (Qwen3.5's template takes
//                                                   a system message first only; a later one
//                                                   becomes a user message, so that a client's
//                                                   mid-conversation instruction still reaches
//                                                   the model)
//   message items (user / assistant)                 messages, text parts joined
//   function_call items                              tool_calls of the assistant message they
//                                                   follow (or of a new one)
//   function_call_output items                       role "tool" messages
//   reasoning items                                  reasoning_content of the next assistant turn
//   tools [{type: function, name, ...}]              [{type: function, function: {...}}]
//   tool_choice {type: function, name}               {type: function, function: {name}}
//   max_output_tokens, text.format, reasoning.effort max_tokens, response_format,
//                                                   reasoning_effort
//   parallel_tool_calls false                        kept here: the answer keeps the first call
// Everything else the chat path validates (and refuses) itself, naming the fields in Responses
// terms (FieldNames, request.h).
#include <string>

#include "server/request_fields.h"
#include "server/responses.h"

namespace qwen35::server {
using namespace fields;
namespace {


// Content: a string, or parts whose text is joined. input_text / output_text / text carry
// "text", refusal carries "refusal"; images, files and audio are refused (the model reads text).
std::optional<ApiError> content_text(const Json& c, const std::string& where, std::string* out) {
  if (c.is_string()) {
    *out = c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array()) return bad(where, "'" + where + "' must be a string or a list of parts");
  out->clear();
  for (size_t k = 0; k < c.size(); ++k) {
    const std::string w = where + "[" + std::to_string(k) + "]";
    const Json& part = c[k];
    if (!part.is_object() || !field(part, "type") || !part["type"].is_string())
      return bad(w, "'" + w + "' must be an object with a string 'type'");
    const std::string type = part["type"];
    const char* key = type == "refusal" ? "refusal" : "text";
    if (type != "input_text" && type != "output_text" && type != "text" && type != "refusal")
      return bad(w + ".type", "content part type '" + type + "' in '" + w +
                                  "' is not supported (input_text, output_text only)");
    std::string text;
    QWEN35_TRY(get_string(part, key, w, &text));
    *out += text;
  }
  return std::nullopt;
}

// Items -> chat messages; origin[i] names the item message i came from.
std::optional<ApiError> map_items(const Json& input, std::string* system,
                                  std::string* system_origin, Json* messages,
                                  std::vector<std::string>* origin) {
  bool leading = true;  // still in the leading system/developer items
  std::string reasoning;
  bool has_reasoning = false;
  auto take_reasoning = [&](Json* msg) {
    if (has_reasoning) (*msg)["reasoning_content"] = reasoning;
    has_reasoning = false;
    reasoning.clear();
  };
  for (size_t j = 0; j < input.size(); ++j) {
    const std::string where = "input[" + std::to_string(j) + "]";
    const Json& item = input[j];
    if (!item.is_object()) return bad(where, "'" + where + "' must be an object");
    std::string type = "message";  // a message item may leave out its type
    if (const Json* t = field(item, "type")) {
      if (!t->is_string()) return bad(where + ".type", "'" + where + ".type' must be a string");
      type = t->get<std::string>();
    }
    if (type == "message") {
      std::string role, text;
      QWEN35_TRY(get_string(item, "role", where, &role));
      if (role != "user" && role != "assistant" && role != "system" && role != "developer")
        return bad(where + ".role", "unknown role '" + role + "' in '" + where +
                                        "' (expected user, assistant, system or developer)");
      const Json* c = field(item, "content");
      if (!c) return bad(where + ".content", "'" + where + ".content' is required");
      QWEN35_TRY(content_text(*c, where + ".content", &text));
      if (role == "system" || role == "developer") {
        if (leading) {
          if (system_origin->empty()) *system_origin = where;
          if (!system->empty() && !text.empty()) *system += "\n\n";
          *system += text;
          continue;
        }
        role = "user";
      }
      leading = false;
      Json msg = {{"role", role}, {"content", text}};
      if (role == "assistant") take_reasoning(&msg);
      messages->push_back(std::move(msg));
      origin->push_back(where);
    } else if (type == "function_call") {
      leading = false;
      std::string call_id, name, arguments;
      QWEN35_TRY(get_string(item, "call_id", where, &call_id));
      QWEN35_TRY(get_string(item, "name", where, &name));
      QWEN35_TRY(get_string(item, "arguments", where, &arguments));
      Json call = {{"id", call_id},
                   {"type", "function"},
                   {"function", {{"name", name}, {"arguments", arguments}}}};
      // Calls that follow an assistant turn (its text, or earlier calls) belong to it: that is
      // how the model wrote them, so the rendered history matches what it generated.
      if (!messages->empty() && messages->back()["role"] == "assistant" && !has_reasoning) {
        (*messages).back()["tool_calls"].push_back(std::move(call));
      } else {
        Json msg = {{"role", "assistant"}, {"content", ""}, {"tool_calls", Json::array({call})}};
        take_reasoning(&msg);
        messages->push_back(std::move(msg));
        origin->push_back(where);
      }
    } else if (type == "function_call_output") {
      leading = false;
      std::string call_id, text;
      QWEN35_TRY(get_string(item, "call_id", where, &call_id));
      const Json* out = field(item, "output");
      if (!out) return bad(where + ".output", "'" + where + ".output' is required");
      QWEN35_TRY(content_text(*out, where + ".output", &text));
      messages->push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", text}});
      origin->push_back(where);
    } else if (type == "reasoning") {
      leading = false;
      // The summary (what this server sends) or the raw reasoning content, as text.
      std::string text;
      for (const char* key : {"summary", "content"}) {
        const Json* parts = field(item, key);
        if (!parts) continue;
        if (!parts->is_array())
          return bad(where + "." + key, "'" + where + "." + key + "' must be a list of parts");
        for (size_t k = 0; k < parts->size(); ++k) {
          const std::string w = where + "." + key + "[" + std::to_string(k) + "]";
          std::string t;
          if (!(*parts)[k].is_object()) return bad(w, "'" + w + "' must be an object");
          QWEN35_TRY(get_string((*parts)[k], "text", w, &t));
          if (!text.empty() && !t.empty()) text += "\n\n";
          text += t;
        }
        if (!parts->empty()) break;
      }
      reasoning += text;
      has_reasoning = true;
    } else if (type == "item_reference") {
      return bad(where, "'" + where +
                            "': item references need stored responses, and this server is "
                            "stateless; send the items themselves");
    } else {
      return bad(where + ".type", "input item type '" + type + "' in '" + where +
                                      "' is not supported (message, function_call, "
                                      "function_call_output, reasoning)");
    }
  }
  return std::nullopt;
}

std::optional<ApiError> map_tools(const Json& b, Json* chat, ResponsesOptions* opt) {
  static constexpr ToolDialect kTools{"function", true, "parameters", false, "built-in tools",
                                      "(only tools of type \"function\")"};
  Json tools;
  QWEN35_TRY(map_function_tools(b, kTools, &tools));
  if (const Json* t = field(b, "tools")) opt->tools = *t;
  if (!tools.empty()) (*chat)["tools"] = std::move(tools);
  if (const Json* tc = field(b, "tool_choice")) {
    opt->tool_choice = *tc;
    if (tc->is_string()) {
      if (*tc != "auto" && *tc != "none" && *tc != "required")
        return bad("tool_choice",
                   "'tool_choice' must be \"auto\", \"none\", \"required\" or "
                   "{\"type\": \"function\", \"name\": ...}");
      (*chat)["tool_choice"] = *tc;
    } else if (tc->is_object() && field(*tc, "type") && (*tc)["type"] == "function") {
      std::string name;
      QWEN35_TRY(get_string(*tc, "name", "tool_choice", &name));
      (*chat)["tool_choice"] = {{"type", "function"}, {"function", {{"name", name}}}};
    } else {
      return bad("tool_choice",
                 "'tool_choice' must be \"auto\", \"none\", \"required\" or "
                 "{\"type\": \"function\", \"name\": ...} (built-in tools and "
                 "allowed_tools are not supported)");
    }
  }
  if (const Json* p = field(b, "parallel_tool_calls")) {
    if (!p->is_boolean())
      return bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    opt->parallel_tool_calls = p->get<bool>();
  }
  return std::nullopt;
}

std::optional<ApiError> map_text(const Json& b, Json* chat, ResponsesOptions* opt) {
  const Json* t = field(b, "text");
  if (!t) return std::nullopt;
  if (!t->is_object()) return bad("text", "'text' must be an object");
  if (const Json* v = field(*t, "verbosity"); v && *v != "medium")
    return bad("text.verbosity", "'text.verbosity' is not supported (only \"medium\")");
  const Json* f = field(*t, "format");
  if (!f) return std::nullopt;
  const char* what =
      "'text.format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
      "{\"type\": \"json_schema\", \"name\": ..., \"schema\": {...}}";
  if (!f->is_object() || !field(*f, "type") || !(*f)["type"].is_string())
    return bad("text.format", what);
  const std::string type = (*f)["type"];
  if (type == "text" || type == "json_object") {
    (*chat)["response_format"] = {{"type", type}};
  } else if (type == "json_schema") {
    const Json* schema = field(*f, "schema");
    if (!schema || !schema->is_object())
      return bad("text.format.schema", "'text.format.schema' must be a JSON schema (an object)");
    Json js = {{"name", "response"}, {"schema", *schema}};
    if (const Json* n = field(*f, "name")) {
      if (!n->is_string()) return bad("text.format.name", "'text.format.name' must be a string");
      js["name"] = *n;
    }
    if (const Json* d = field(*f, "description")) js["description"] = *d;
    if (const Json* s = field(*f, "strict")) {
      if (!s->is_boolean())
        return bad("text.format.strict", "'text.format.strict' must be a boolean");
      js["strict"] = *s;
    }
    (*chat)["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(js)}};
  } else {
    return bad("text.format.type", what);
  }
  opt->text["format"] = *f;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> responses_to_chat(const Json& b, Json* chat, ResponsesOptions* opt,
                                          FieldNames* names) {
  if (!b.is_object()) return bad("", "the request body must be a JSON object");
  // Stateless: the answer cannot continue a stored response or conversation.
  if (field(b, "previous_response_id"))
    return bad("previous_response_id",
               "'previous_response_id' is not supported: this server stores no responses; send "
               "the whole conversation in 'input'");
  if (field(b, "conversation"))
    return bad("conversation", "'conversation' is not supported: this server stores nothing");
  if (const Json* bg = field(b, "background"); bg && *bg != false)
    return bad("background", "'background' is not supported (responses are answered at once)");
  if (const Json* tr = field(b, "truncation"); tr && *tr != "disabled")
    return bad("truncation", "'truncation' is not supported (only \"disabled\")");
  if (field(b, "prompt"))
    return bad("prompt", "'prompt' (stored prompt templates) is not supported");
  if (field(b, "max_tool_calls")) return bad("max_tool_calls", "'max_tool_calls' is not supported");
  if (const Json* t = field(b, "top_logprobs"); t && *t != 0)
    return bad("top_logprobs", "'top_logprobs' is not supported");

  *chat = Json::object();
  if (const Json* m = field(b, "model")) (*chat)["model"] = *m;
  std::string system, system_origin;
  if (const Json* ins = field(b, "instructions")) {
    if (!ins->is_string()) return bad("instructions", "'instructions' must be a string");
    system = ins->get<std::string>();
    system_origin = "instructions";
    opt->instructions = *ins;
  }
  Json messages = Json::array();
  std::vector<std::string> origin;
  const Json* input = field(b, "input");
  if (!input) return bad("input", "'input' is required");
  if (input->is_string()) {
    messages.push_back({{"role", "user"}, {"content", *input}});
    origin.push_back("input");
  } else if (input->is_array()) {
    QWEN35_TRY(map_items(*input, &system, &system_origin, &messages, &origin));
  } else {
    return bad("input", "'input' must be a string or a list of items");
  }
  if (messages.empty()) return bad("input", "'input' must hold at least one message");
  if (!system.empty()) {
    messages.insert(messages.begin(), Json{{"role", "system"}, {"content", system}});
    origin.insert(origin.begin(), system_origin);
  }
  (*chat)["messages"] = std::move(messages);

  QWEN35_TRY(map_tools(b, chat, opt));
  QWEN35_TRY(map_text(b, chat, opt));
  if (const Json* m = field(b, "max_output_tokens")) {
    (*chat)["max_tokens"] = *m;
    opt->max_output_tokens = *m;
  }
  for (const char* name : {"temperature", "top_p", "stream"})
    if (const Json* f = field(b, name)) (*chat)[name] = *f;
  if (const Json* r = field(b, "reasoning")) {
    if (!r->is_object()) return bad("reasoning", "'reasoning' must be an object");
    if (const Json* e = field(*r, "effort")) {
      (*chat)["reasoning_effort"] = *e;
      opt->reasoning_effort = *e;
    }
  }
  if (const Json* s = field(b, "store")) {
    if (!s->is_boolean()) return bad("store", "'store' must be a boolean");
    opt->store = s->get<bool>();
  }
  if (const Json* m = field(b, "metadata")) opt->metadata = *m;
  if (const Json* u = field(b, "user")) opt->user = *u;

  names->origin = std::move(origin);
  // The chat fields this body maps onto, in Responses terms (text.format is flat: its schema,
  // name and strict sit beside its type).
  names->fields = {{"max_tokens", "max_output_tokens"},
                   {"response_format", "text.format"},
                   {"response_format.type", "text.format.type"},
                   {"response_format.json_schema", "text.format"},
                   {"response_format.json_schema.schema", "text.format.schema"},
                   {"response_format.json_schema.name", "text.format.name"},
                   {"response_format.json_schema.strict", "text.format.strict"},
                   {"reasoning_effort", "reasoning.effort"},
                   {"messages", "input"}};
  return std::nullopt;
}

}  // namespace qwen35::server
