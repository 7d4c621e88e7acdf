// Responses request -> ChatRequest -> CompletionRequest (responses.h). The reading:
//   instructions + leading system/developer items   one system message; a later one becomes a
//                                                   user turn marked as system text
//                                                   (place_system_messages, chat_request.h)
//   message items (user / assistant)                 messages, text parts joined
//   function_call items                              tool calls of the assistant message they
//                                                   follow (or of a new one)
//   function_call_output items                       tool messages
//   reasoning items                                  the reasoning of the next assistant turn
//   tools [{type: function, name, ...}]              the template's function tools
//   tool_choice, text.format, reasoning.effort       the typed tool choice, output format, budget
//   max_output_tokens, temperature, top_p, stream    read as chat reads its own
//   parallel_tool_calls false                        kept here: the answer keeps the first call
// Every error names the Responses field.
#include <string>
#include <utility>

#include "server/agent_tools.h"
#include "server/chat_request.h"
#include "server/image_parts.h"
#include "server/request_fields.h"
#include "server/responses.h"

namespace qwen35::server {
using namespace fields;
namespace {


// An input_image part: {"image_url": "data:image/...;base64,...", "detail": ...} (detail is
// accepted and ignored); file_id needs stored files, which this server does not keep.
std::optional<ApiError> read_input_image(const Json& part, const std::string& w, size_t at,
                                         std::vector<ChatImage>* images) {
  if (field(part, "file_id"))
    return bad(w, "'" + w + "': file_id needs uploaded files, and this server keeps none; send the image "
                            "as 'image_url': \"data:image/png;base64,...\"");
  const Json* u = field(part, "image_url");
  if (!u || !u->is_string())
    return bad(w, "'" + w + "' needs 'image_url': \"data:image/png;base64,...\"");
  ChatImage im{at, "", w};
  QWEN35_TRY(read_image_url(u->get<std::string>(), w, &im.bytes));
  images->push_back(std::move(im));
  return std::nullopt;
}

// Content: a string, or parts whose text is joined. input_text / output_text / text carry
// "text", refusal carries "refusal"; input_image parts go to *images where given (a message's
// content); files and audio are refused (the model reads text and images).
std::optional<ApiError> content_text(const Json& c, const std::string& where, std::string* out,
                                     std::vector<ChatImage>* images = nullptr) {
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
    if (type == "input_image" && images) {
      QWEN35_TRY(read_input_image(part, w, out->size(), images));
      continue;
    }
    if (type == "input_video" || type == "video_url" || type == "video") return video_refused(type, w);
    const char* key = type == "refusal" ? "refusal" : "text";
    if (type != "input_text" && type != "output_text" && type != "text" && type != "refusal")
      return bad(w + ".type", "content part type '" + type + "' in '" + w +
                                  (images ? "' is not supported (input_text, input_image, output_text only)"
                                          : "' is not supported (input_text, output_text only)"));
    std::string text;
    QWEN35_TRY(get_string(part, key, w, &text));
    *out += text;
  }
  return std::nullopt;
}

// The input items, read in order into the conversation. Leading system/developer items and the
// instructions become the one first system message; reasoning items wait for the assistant
// turn they precede.
class ItemReader {
 public:
  ItemReader(int max_depth, const AgentTools& tools, ChatRequest* c)
      : max_depth_(max_depth), tools_(tools), c_(c) {}

  std::optional<ApiError> instructions(const Json& ins) {
    if (!ins.is_string()) return bad("instructions", "'instructions' must be a string");
    system_ = ins.get<std::string>();
    return std::nullopt;
  }

  std::optional<ApiError> input(const Json& input) {
    if (input.is_string()) {
      push(ChatMessage::Role::kUser, input.get<std::string>(), "input");
      return std::nullopt;
    }
    if (!input.is_array()) return bad("input", "'input' must be a string or a list of items");
    for (size_t j = 0; j < input.size(); ++j) QWEN35_TRY(item(input[j], j));
    return std::nullopt;
  }

  // The instructions go first, once every item is read; then the system messages are placed
  // as in every API (place_system_messages).
  void finish() {
    if (!system_.empty())
      c_->messages.insert(c_->messages.begin(),
                          ChatMessage(ChatMessage::Role::kSystem, system_, "instructions"));
    place_system_messages(&c_->messages);
  }

 private:
  std::optional<ApiError> item(const Json& item, size_t j) {
    const std::string where = "input[" + std::to_string(j) + "]";
    if (!item.is_object()) return bad(where, "'" + where + "' must be an object");
    std::string type = "message";  // a message item may leave out its type
    if (const Json* t = field(item, "type")) {
      if (!t->is_string()) return bad(where + ".type", "'" + where + ".type' must be a string");
      type = t->get<std::string>();
    }
    if (type == "message") return message(item, where);
    if (type == "function_call" || type == "custom_tool_call") return function_call(item, where);
    if (type == "function_call_output" || type == "custom_tool_call_output")
      return function_call_output(item, where);
    if (type == "reasoning") return reasoning(item, where);
    if (type == "item_reference")
      return bad(where, "'" + where +
                            "': item references need stored responses, and this server is "
                            "stateless; send the items themselves");
    return bad(where + ".type", "input item type '" + type + "' in '" + where +
                                    "' is not supported (message, function_call, "
                                    "function_call_output, custom_tool_call, "
                                    "custom_tool_call_output, reasoning)");
  }

  std::optional<ApiError> message(const Json& item, const std::string& where) {
    std::string role, text;
    QWEN35_TRY(get_string(item, "role", where, &role));
    if (role != "user" && role != "assistant" && role != "system" && role != "developer")
      return bad(where + ".role", "unknown role '" + role + "' in '" + where +
                                      "' (expected user, assistant, system or developer)");
    const Json* c = field(item, "content");
    if (!c) return bad(where + ".content", "'" + where + ".content' is required");
    std::vector<ChatImage> images;
    QWEN35_TRY(content_text(*c, where + ".content", &text, &images));
    if (!images.empty() && role != "user")
      return bad(images[0].origin, "'" + images[0].origin + "': images go in user messages");
    if (role == "system" || role == "developer") {
      if (!text.empty()) push(ChatMessage::Role::kSystem, text, where);  // placed by finish()
      return std::nullopt;
    }
    push(role == "user" ? ChatMessage::Role::kUser : ChatMessage::Role::kAssistant, text, where);
    c_->messages.back().images = std::move(images);
    return std::nullopt;
  }

  // A function_call, or a custom_tool_call (its input text is the one parameter the custom tool
  // is offered with, agent_tools.h); either under the name the model knows the tool by.
  std::optional<ApiError> function_call(const Json& item, const std::string& where) {
    ChatToolCall call;
    std::string name, ns;
    QWEN35_TRY(get_string(item, "call_id", where, &call.id));
    QWEN35_TRY(get_string(item, "name", where, &name));
    if (field(item, "namespace")) QWEN35_TRY(get_string(item, "namespace", where, &ns));
    call.name = tools_.model_name(ns, name);
    std::string arguments;
    if (item["type"] == "custom_tool_call") {
      QWEN35_TRY(get_string(item, "input", where, &arguments));
      call.arguments = {{kCustomInput, std::move(arguments)}};
    } else {
      QWEN35_TRY(get_string(item, "arguments", where, &arguments));
      QWEN35_TRY(parse_call_arguments(arguments, max_depth_, where, &call.arguments));
    }
    // Calls that follow an assistant turn (its text, or earlier calls) belong to it: that is
    // how the model wrote them, so the rendered history matches what it generated.
    auto& msgs = c_->messages;
    if (msgs.empty() || msgs.back().role != ChatMessage::Role::kAssistant || reasoning_)
      push(ChatMessage::Role::kAssistant, "", where);
    msgs.back().tool_calls.push_back(std::move(call));
    return std::nullopt;
  }

  std::optional<ApiError> function_call_output(const Json& item, const std::string& where) {
    std::string call_id, text;
    QWEN35_TRY(get_string(item, "call_id", where, &call_id));
    const Json* out = field(item, "output");
    if (!out) return bad(where + ".output", "'" + where + ".output' is required");
    QWEN35_TRY(content_text(*out, where + ".output", &text));
    push(ChatMessage::Role::kTool, text, where);
    c_->messages.back().tool_call_id = call_id;
    return std::nullopt;
  }

  // The summary (what this server sends) or the raw reasoning content, as text.
  std::optional<ApiError> reasoning(const Json& item, const std::string& where) {
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
    reasoning_ = reasoning_.value_or("") + text;
    return std::nullopt;
  }

  // A new message; an assistant's takes the reasoning items read since the last one.
  void push(ChatMessage::Role role, std::string content, const std::string& where) {
    ChatMessage m(role, std::move(content), where);
    if (role == ChatMessage::Role::kAssistant) m.reasoning = std::exchange(reasoning_, std::nullopt);
    c_->messages.push_back(std::move(m));
  }

  int max_depth_;
  const AgentTools& tools_;
  ChatRequest* c_;
  std::string system_;  // the instructions
  std::optional<std::string> reasoning_;
};

// tools (function, namespace and custom; the rest left out, agent_tools.h) and tool_choice.
std::optional<ApiError> read_tools(const Json& b, const ModelInfo& mi, ChatRequest* c,
                                   ResponsesOptions* opt) {
  if (const Json* t = field(b, "tools")) {
    QWEN35_TRY(read_responses_tools(*t, mi, &c->tools, &opt->agent_tools));
    opt->tools = *t;
    // Errors about a tool's schema name it where the client wrote it ("tools[3].parameters")
    // when every tool is a plain function (the template's tools are then the request's, in
    // order); namespaces and custom tools reorder them, and errors fall back to the index.
    bool plain = t->is_array();
    if (plain)
      for (const Json& x : *t) {
        const Json* ty = x.is_object() ? field(x, "type") : nullptr;
        plain = plain && ty && *ty == "function";
      }
    if (plain) {
      for (size_t k = 0; k < t->size(); ++k)
        c->names.tool_paths.push_back("tools[" + std::to_string(k) + "]");
      c->names.tool_schema = "parameters";
    }
  }
  if (const Json* tc = field(b, "tool_choice")) {
    opt->tool_choice = *tc;
    const char* what =
        "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
        "\"name\": ...}";
    if (tc->is_string()) {
      if (!c->tool_choice.set_mode(*tc)) return bad("tool_choice", what);
    } else if (tc->is_object() && (has_type(*tc, "function") || has_type(*tc, "custom"))) {
      c->tool_choice.mode = ToolChoice::Mode::kNamed;
      std::string name, ns;
      QWEN35_TRY(get_string(*tc, "name", "tool_choice", &name));
      if (field(*tc, "namespace")) QWEN35_TRY(get_string(*tc, "namespace", "tool_choice", &ns));
      if (name.empty()) return bad("tool_choice", what);
      c->tool_choice.name = opt->agent_tools.model_name(ns, name);
    } else {
      return bad("tool_choice", std::string(what) +
                                    " (built-in tools and allowed_tools are not supported)");
    }
  }
  if (const Json* p = field(b, "parallel_tool_calls")) {
    if (!p->is_boolean())
      return bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    opt->parallel_tool_calls = p->get<bool>();
  }
  return std::nullopt;
}

// text.format: {"type": "text" | "json_object"} or {"type": "json_schema", "name", "schema",
// "strict", "description"} (flat: the schema sits beside the type).
std::optional<ApiError> read_text(const Json& b, ChatRequest* c, ResponsesOptions* opt) {
  const Json* t = field(b, "text");
  if (!t) return std::nullopt;
  if (!t->is_object()) return bad("text", "'text' must be an object");
  // A hint the model does not see: accepted (Codex sends "low") and echoed, never rendered,
  // so the prompt stays the same whatever a client asks.
  if (const Json* v = field(*t, "verbosity")) {
    if (*v != "low" && *v != "medium" && *v != "high")
      return bad("text.verbosity", "'text.verbosity' must be \"low\", \"medium\" or \"high\"");
    opt->text["verbosity"] = *v;
  }
  const Json* f = field(*t, "format");
  if (!f) return std::nullopt;
  const char* what =
      "'text.format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
      "{\"type\": \"json_schema\", \"name\": ..., \"schema\": {...}}";
  if (!f->is_object() || !field(*f, "type") || !(*f)["type"].is_string())
    return bad("text.format", what);
  const std::string type = (*f)["type"];
  OutputFormat& out = c->format;
  out.field = "text.format";
  out.schema_field = "text.format.schema";
  if (type == "json_object") {
    out.kind = OutputFormat::Kind::kJsonObject;
  } else if (type == "json_schema") {
    const Json* schema = field(*f, "schema");
    if (!schema || !schema->is_object())
      return bad("text.format.schema", "'text.format.schema' must be a JSON schema (an object)");
    if (const Json* n = field(*f, "name"); n && !n->is_string())
      return bad("text.format.name", "'text.format.name' must be a string");
    bool strict = false;
    QWEN35_TRY(get_bool(*f, "strict", "text.format.strict", &strict));
    out.kind = OutputFormat::Kind::kJsonSchema;
    out.schema = *schema;
  } else if (type != "text") {
    return bad("text.format.type", what);
  }
  opt->text["format"] = *f;
  return std::nullopt;
}

// Stateless: the answer cannot continue a stored response or conversation, and the other
// server-side features are refused by name.
std::optional<ApiError> refuse_unsupported(const Json& b) {
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
  return std::nullopt;
}

// The fields a Response echoes and nothing else reads.
std::optional<ApiError> read_echoed(const Json& b, ResponsesOptions* opt) {
  if (const Json* s = field(b, "store")) {
    if (!s->is_boolean()) return bad("store", "'store' must be a boolean");
    opt->store = s->get<bool>();
  }
  if (const Json* m = field(b, "metadata")) opt->metadata = *m;
  if (const Json* u = field(b, "user")) opt->user = *u;
  if (const Json* m = field(b, "max_output_tokens")) opt->max_output_tokens = *m;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_responses_request(const Json& b, const ModelInfo& mi,
                                                CompletionRequest* r, ResponsesOptions* opt) {
  if (!b.is_object()) return bad("", "the request body must be a JSON object");
  QWEN35_TRY(refuse_unsupported(b));
  QWEN35_TRY(start_request(b, mi, r));
  ChatRequest c;
  c.names.messages = "input";
  c.names.max_tokens = "max_output_tokens";
  c.names.budget = "reasoning.effort";
  QWEN35_TRY(read_tools(b, mi, &c, opt));
  ItemReader items(mi.max_json_depth, opt->agent_tools, &c);
  if (const Json* ins = field(b, "instructions")) {
    QWEN35_TRY(items.instructions(*ins));
    opt->instructions = *ins;
  }
  const Json* input = field(b, "input");
  if (!input) return bad("input", "'input' is required");
  QWEN35_TRY(items.input(*input));
  if (c.messages.empty()) return bad("input", "'input' must hold at least one message");
  items.finish();
  QWEN35_TRY(read_text(b, &c, opt));
  QWEN35_TRY(read_max_tokens(b, "max_output_tokens", r));
  QWEN35_TRY(read_sampling(b, {"temperature", "top_p"}, r));
  QWEN35_TRY(get_bool(b, "stream", &r->stream));
  if (const Json* re = field(b, "reasoning")) {
    if (!re->is_object()) return bad("reasoning", "'reasoning' must be an object");
    if (const Json* e = field(*re, "effort")) {
      QWEN35_TRY(apply_reasoning_effort(*e, "reasoning.effort", "reasoning", &c));
      opt->reasoning_effort = *e;
    }
  }
  QWEN35_TRY(read_echoed(b, opt));
  QWEN35_TRY(check_sampling(*r));
  r->warnings = opt->agent_tools.warnings;
  return finish_chat_request(c, mi, r);
}

}  // namespace qwen35::server
