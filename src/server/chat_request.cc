#include "server/chat_request.h"

#include <algorithm>
#include <climits>

#include "server/image_parts.h"
#include "server/prompt_tokens.h"
#include "server/request_fields.h"
#include "server/structured.h"

namespace qwen35::server {
using namespace fields;

Json ChatMessage::to_template() const {
  static const char* const kRoles[] = {"system", "user", "assistant", "tool"};
  Json m = {{"role", kRoles[int(role)]}, {"content", content}};
  if (!images.empty()) {
    Json parts = Json::array();
    size_t from = 0;
    for (const auto& im : images) {
      if (im.at > from) parts.push_back({{"type", "text"}, {"text", content.substr(from, im.at - from)}});
      parts.push_back({{"type", "image"}});
      from = im.at;
    }
    if (from < content.size()) parts.push_back({{"type", "text"}, {"text", content.substr(from)}});
    m["content"] = std::move(parts);
  }
  if (reasoning) m["reasoning_content"] = *reasoning;
  if (!tool_calls.empty()) {
    Json calls = Json::array();
    for (const auto& c : tool_calls) {
      Json fn = {{"name", c.name}};
      if (!c.arguments.is_null()) fn["arguments"] = c.arguments;
      Json call = Json::object();
      if (!c.id.empty()) call["id"] = c.id;
      call["type"] = "function";
      call["function"] = std::move(fn);
      calls.push_back(std::move(call));
    }
    m["tool_calls"] = std::move(calls);
  }
  if (role == Role::kTool && !tool_call_id.empty()) m["tool_call_id"] = tool_call_id;
  return m;
}

void place_system_messages(std::vector<ChatMessage>* messages) {
  using Role = ChatMessage::Role;
  auto& ms = *messages;
  size_t lead = 0;
  while (lead < ms.size() && ms[lead].role == Role::kSystem) ++lead;
  if (lead > 1) {
    ChatMessage& first = ms[0];
    for (size_t i = 1; i < lead; ++i) {
      ChatMessage& m = ms[i];
      if (!first.content.empty() && !m.content.empty()) first.content += "\n\n";
      for (auto& im : m.images) {
        im.at += first.content.size();
        first.images.push_back(std::move(im));
      }
      first.content += m.content;
    }
    ms.erase(ms.begin() + 1, ms.begin() + ptrdiff_t(lead));
  }
  const std::string mark = kLaterSystemMark;
  for (size_t i = lead > 0 ? 1 : 0; i < ms.size(); ++i) {
    if (ms[i].role != Role::kSystem) continue;
    ms[i].role = Role::kUser;
    ms[i].content.insert(0, mark);
    for (auto& im : ms[i].images) im.at += mark.size();
  }
}

bool ToolChoice::set_mode(const std::string& s) {
  static const std::pair<const char*, Mode> kModes[] = {
      {"auto", Mode::kAuto}, {"none", Mode::kNone}, {"required", Mode::kRequired}};
  for (const auto& [n, m] : kModes)
    if (s == n) {
      mode = m;
      return true;
    }
  return false;
}

std::optional<ApiError> apply_reasoning_effort(const Json& e, const std::string& param,
                                               const std::string& kwargs_param, ChatRequest* c) {
  static const std::pair<const char*, int64_t> kEfforts[] = {
      {"none", -1}, {"minimal", 128}, {"low", 1024}, {"medium", 4096}, {"high", -1}, {"xhigh", -1}};
  const auto* it = std::find_if(std::begin(kEfforts), std::end(kEfforts),
                                [&](const auto& x) { return e.is_string() && e == x.first; });
  if (it == std::end(kEfforts))
    return bad(param, "'" + param +
                          "' must be \"none\", \"minimal\", \"low\", \"medium\", \"high\" "
                          "or \"xhigh\"");
  c->budget = it->second;
  if (std::string_view(it->first) == "none") {
    const Json& k = c->template_kwargs;
    if (k.contains("enable_thinking") && k["enable_thinking"] != false)
      return bad(param, "'" + param + "': \"none\" turns thinking off, but " + kwargs_param +
                            ".enable_thinking asks for it");
    c->template_kwargs["enable_thinking"] = false;
  }
  return std::nullopt;
}

std::optional<ApiError> parse_call_arguments(const std::string& text, int max_depth,
                                             const std::string& where, Json* out) {
  JsonStatus st;
  Json parsed = parse_json(text, max_depth, &st);
  if (st == JsonStatus::kTooDeep)
    return bad(where, "tool call arguments nest JSON deeper than the limit of " +
                          std::to_string(max_depth) + " levels");
  *out = parsed.is_object() ? std::move(parsed) : Json::object();
  return std::nullopt;
}

ToolCallFormat tool_call_format(const tmpl::ChatTemplate& t) {
  const Json messages = Json::parse(R"([{"role": "user", "content": "q"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
     "function": {"name": "probe_fn", "arguments": {"probe_arg": 1}}}]}])");
  auto r = t.render(messages, nullptr, false, Json::object());
  if (!r.ok()) return ToolCallFormat::kXml;
  if (r->find("<function=probe_fn>") != std::string::npos) return ToolCallFormat::kXml;
  const size_t call = r->find("<tool_call>");
  if (call != std::string::npos && r->find("\"probe_fn\"", call) != std::string::npos)
    return ToolCallFormat::kJson;
  return ToolCallFormat::kXml;
}

namespace {

std::optional<ApiError> render_messages_of(const ChatRequest& c, const ModelInfo& mi,
                                           const std::vector<ChatMessage>& messages, bool add_gen,
                                           std::string* text) {
  if (!mi.tmpl)
    return bad(c.names.messages, "the model has no chat template; use /v1/completions");
  Json msgs = Json::array();
  for (const auto& m : messages) msgs.push_back(m.to_template());
  const bool use_tools = c.tool_choice.mode != ToolChoice::Mode::kNone && !c.tools.empty();
  bool over_limit = false;
  std::string reason;
  auto r = mi.tmpl->render(msgs, use_tools ? c.tools : Json(nullptr), add_gen, c.template_kwargs,
                           &over_limit, &reason);
  if (r.ok()) {
    *text = std::move(*r);
    return std::nullopt;
  }
  if (!over_limit) return bad(c.names.messages, "the chat template refused the request: " + reason);
  // A template that runs past its work bounds (an endless loop, a runaway string) is the
  // server's template misbehaving, not a malformed request: 500, as for any server fault.
  return api_error(ErrorKind::kServer, "the chat template failed: " + r.message());
}

// Where other conversations' prompts are likely to part from this one: after the leading
// system messages and the tools, which agents and chat clients resend unchanged. The prefix
// cache takes a snapshot at the last 64-token boundary below it. Empty when there is no such
// part, or its rendering shares under 64 tokens with the prompt.
std::vector<int64_t> shared_prefix_hint(const ChatRequest& c, const ModelInfo& mi,
                                        const std::vector<int32_t>& ids) {
  std::vector<ChatMessage> head;
  for (const auto& m : c.messages) {
    if (m.role != ChatMessage::Role::kSystem) break;
    head.push_back(m);
  }
  const bool use_tools = c.tool_choice.mode != ToolChoice::Mode::kNone && !c.tools.empty();
  if (head.empty() && !use_tools) return {};
  // Templates may insist on a user message (Qwen3.5's does): an empty one, which parts from any
  // real one right after its role header.
  head.emplace_back();
  std::string text;
  if (render_messages_of(c, mi, head, false, &text)) return {};
  auto head_ids = mi.tok->encode(text);
  if (!head_ids.ok()) return {};
  size_t n = 0;
  while (n < head_ids->size() && n < ids.size() && (*head_ids)[n] == ids[n]) ++n;
  if (n < 64) return {};
  return {int64_t(n)};
}

}  // namespace

std::optional<ApiError> render_chat(const ChatRequest& c, const ModelInfo& mi, std::string* text) {
  return render_messages_of(c, mi, c.messages, c.add_generation_prompt, text);
}

std::optional<ApiError> finish_chat_request(const ChatRequest& c, const ModelInfo& mi,
                                            CompletionRequest* r) {
  r->chat = true;
  r->prompt_param = c.names.messages;
  std::string text;
  QWEN35_TRY(render_chat(c, mi, &text));
  if (c.tool_choice.mode != ToolChoice::Mode::kNone && !c.tools.empty()) {
    r->parse_tools = true;
    r->tools = c.tools;
  }
  r->tool_format = mi.tool_format;
  // Qwen3.5's generation prompt opens <think> unless thinking is off: the answer starts inside.
  r->in_reasoning = opens_thinking(text);
  r->think_end = mi.tok->token_to_id("</think>");
  r->think_may_open = !r->in_reasoning && !closes_thinking(text);
  QWEN35_TRY(set_reasoning_budget(c.budget.value_or(mi.reasoning_budget), r->in_reasoning, mi,
                                  c.names.budget, r));
  QWEN35_TRY(set_structured_output(c.format, c.tool_choice, c.names, mi, r));
  std::vector<int32_t> ids;
  std::vector<tokenizer::TextRange> literal;
  QWEN35_TRY(encode_chat_prompt(c, mi, text, &ids, &literal));
  QWEN35_TRY(attach_images(c, mi, text, literal, &ids, r));
  r->batch = {{std::move(ids), ""}};
  r->snapshot_hints = shared_prefix_hint(c, mi, r->batch[0].ids);
  return std::nullopt;
}

}  // namespace qwen35::server
