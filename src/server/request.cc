#include "server/request.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "model/state.h"
#include "server/request_fields.h"
#include "server/structured.h"
#include "tokenizer/utf8.h"

namespace qwen35::server {
using namespace fields;
namespace {

ApiError not_supported(const std::string& name, const std::string& why) {
  return bad(name, "'" + name + "' is not supported yet" + (why.empty() ? "" : ": " + why));
}

// OpenAI request fields this server does not implement. Silently ignoring one would hand the
// client an answer it did not ask for (text instead of JSON, no bias, no forced tool call), so
// each is refused with a 400 that names it, unless it is absent, null, or the value that means
// "nothing special". (response_format and tool_choice are read in server/structured.cc.)
// Decisions (issue 14):
//   logit_bias           {} only                  the sampler has no per-token bias
//   parallel_tool_calls  true only                nothing stops the model emitting several calls
//   functions, function_call (chat)               deprecated; use "tools"
//   audio, web_search_options (chat)              no audio out, no search
//   modalities           ["text"] only
//   verbosity (chat)
//   suffix (completions) "" only                  no fill-in-the-middle
//   best_of (completions) 1 or n                  no server-side ranking of candidates
// Accepted and ignored, as they do not change the output: user, metadata, store,
// service_tier, prompt_cache_key, safety_identifier. Unknown fields are ignored as vLLM does
// (clients send vendor extensions); the vLLM extensions we implement are parsed normally.
// "speculative": "lookup" | "mtp" | "off", or {"method": ..., "draft_tokens": K} (either key
// may be left out: the server's setting stands). "prediction" (OpenAI's predicted outputs):
// {"type": "content", "content": text or text parts}, tokens prompt lookup drafts from.
std::optional<ApiError> parse_speculative(const Json& b, const ModelInfo& mi,
                                          CompletionRequest* r) {
  if (const Json* pr = field(b, "prediction")) {
    const char* what =
        "'prediction' must be {\"type\": \"content\", \"content\": a string or text parts}";
    if (!pr->is_object() || !has_type(*pr, "content") || !field(*pr, "content"))
      return bad("prediction", what);
    Json content = *field(*pr, "content");
    std::string text;
    if (content.is_string()) {
      text = content.get<std::string>();
    } else if (content.is_array()) {
      for (const auto& part : content) {
        if (!part.is_object() || !has_type(part, "text") || !part.contains("text") ||
            !part["text"].is_string())
          return bad("prediction.content", what);
        text += part["text"].get<std::string>();
      }
    } else {
      return bad("prediction.content", what);
    }
    auto ids = mi.tok->encode(text);
    if (!ids.ok()) return bad("prediction", ids.message());
    r->prediction = std::move(*ids);
  }
  const Json* f = field(b, "speculative");
  if (!f) return std::nullopt;
  const char* what =
      "'speculative' must be \"lookup\", \"mtp\", \"off\" or {\"method\": ..., "
      "\"draft_tokens\": K}";
  const Json* method = f->is_string() ? f : nullptr;
  if (f->is_object()) {
    for (const auto& [k, v] : f->items())
      if (k != "method" && k != "draft_tokens") return bad("speculative." + k, what);
    method = field(*f, "method");
    if (const Json* k = field(*f, "draft_tokens")) {
      if (!k->is_number_integer() || k->get<int64_t>() < 1 ||
          k->get<int64_t>() >= model::kMaxVerifyRows)
        return bad("speculative.draft_tokens",
                   "'speculative.draft_tokens' must be an integer in [1, " +
                       std::to_string(model::kMaxVerifyRows - 1) + "]");
      r->spec_draft_tokens = int(k->get<int64_t>());
    }
  } else if (!method) {
    return bad("speculative", what);
  }
  if (method) {
    const auto m = method->is_string() ? runtime::parse_spec_method(method->get<std::string>())
                                       : std::nullopt;
    if (!m) return bad(f->is_string() ? "speculative" : "speculative.method", what);
    r->spec_method = *m;
  }
  return std::nullopt;
}

std::optional<ApiError> refuse_unsupported(const Json& b, bool chat, int n) {
  if (const Json* f = field(b, "logit_bias"); f && !(f->is_object() && f->empty()))
    return not_supported("logit_bias", "");
  if (const Json* f = field(b, "parallel_tool_calls"); f && !(f->is_boolean() && f->get<bool>()))
    return not_supported("parallel_tool_calls", "only true");
  if (const Json* f = field(b, "modalities");
      f && !(f->is_array() && f->size() == 1 && (*f)[0] == "text"))
    return not_supported("modalities", "only [\"text\"]");
  if (chat) {
    for (const char* name : {"functions", "function_call"})
      if (field(b, name)) return not_supported(name, "deprecated by OpenAI; use 'tools'");
    for (const char* name : {"audio", "web_search_options"})
      if (field(b, name)) return not_supported(name, "");
    if (field(b, "verbosity")) return not_supported("verbosity", "");
  } else {
    if (const Json* f = field(b, "suffix"); f && !(f->is_string() && f->get<std::string>().empty()))
      return not_supported("suffix", "no fill-in-the-middle");
    if (const Json* f = field(b, "best_of");
        f && !(f->is_number_integer() && (f->get<int64_t>() == 1 || f->get<int64_t>() == n)))
      return not_supported("best_of", "only 1 or equal to 'n'");
  }
  return std::nullopt;
}

// Fields shared by both endpoints: sampling, lengths, stop, n, stream, debugging extras.
std::optional<ApiError> parse_common(const Json& b, const ModelInfo& mi, const FieldNames& nm,
                                     CompletionRequest* r) {
  if (!b.is_object()) return bad("", "the request body must be a JSON object");
  QWEN35_TRY(check_model(b, mi));
  r->model = mi.name;
  r->sampling = mi.defaults;
  r->eos_ids = mi.eos_ids;
  auto& s = r->sampling;
  QWEN35_TRY(get_float(b, "temperature", nm.of("temperature"), &s.temperature));
  if (s.temperature < 0)
    return bad(nm.of("temperature"), "'" + nm.of("temperature") + "' must be >= 0");
  for (auto [key, v] : {std::pair{"top_p", &s.top_p}, {"min_p", &s.min_p},
                        {"presence_penalty", &s.presence_penalty},
                        {"frequency_penalty", &s.frequency_penalty},
                        {"repetition_penalty", &s.repetition_penalty}})
    QWEN35_TRY(get_float(b, key, nm.of(key), v));
  int64_t v = 0;
  if (field(b, "top_k")) {
    QWEN35_TRY(get_int(b, "top_k", nm.of("top_k"), &v, -1, INT32_MAX));
    s.top_k = int32_t(v);
  }
  if (field(b, "seed")) {
    const Json& f = *field(b, "seed");
    if (!f.is_number_integer()) return bad("seed", "'seed' must be an integer");
    s.seed = f.is_number_unsigned() ? f.get<uint64_t>() : uint64_t(f.get<int64_t>());
  }
  const char* len_name = field(b, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (field(b, len_name))
    QWEN35_TRY(get_int(b, len_name, nm.of(len_name), &r->max_tokens, 1, INT64_MAX));
  if (field(b, "n")) {
    QWEN35_TRY(get_int(b, "n", &v, 1, 16));
    r->n = int(v);
  }
  QWEN35_TRY(get_bool(b, "stream", nm.of("stream"), &r->stream));
  if (const Json* so = field(b, "stream_options")) {
    if (!so->is_object()) return bad("stream_options", "'stream_options' must be an object");
    QWEN35_TRY(get_bool(*so, "include_usage", &r->include_usage));
  }
  if (const Json* st = field(b, "stop")) {
    const std::string stop = nm.of("stop");
    const std::string what = "'" + stop + "' must be a string or a list of strings";
    if (st->is_string()) {
      r->stops.push_back(st->get<std::string>());
    } else if (st->is_array()) {
      for (const auto& x : *st) {
        if (!x.is_string()) return bad(stop, what);
        r->stops.push_back(x.get<std::string>());
      }
    } else {
      return bad(stop, what);
    }
    for (const auto& x : r->stops)
      if (x.empty()) return bad(stop, "the strings of '" + stop + "' must not be empty");
  }
  bool ignore_eos = false;
  QWEN35_TRY(get_bool(b, "ignore_eos", &ignore_eos));
  if (ignore_eos) r->eos_ids.clear();
  QWEN35_TRY(get_bool(b, "return_token_ids", &r->return_token_ids));
  QWEN35_TRY(get_bool(b, "skip_special_tokens", &r->skip_special));
  QWEN35_TRY(parse_speculative(b, mi, r));
  if (auto st = s.validate(); !st.ok()) return bad("", st.message());
  QWEN35_TRY(refuse_unsupported(b, r->chat, r->n));
  return std::nullopt;
}

// Content: a string, or a list of {"type": "text", "text": ...} parts (joined).
std::optional<ApiError> flatten_content(Json* content, size_t i, const FieldNames& nm) {
  const std::string where = nm.message(i, ".content");
  if (content->is_string() || content->is_null()) return std::nullopt;
  if (!content->is_array())
    return bad(where, "'" + where + "' must be a string or a list of parts");
  std::string text;
  for (const auto& part : *content) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      return bad(where, "each part of '" + where + "' must be an object with a 'type'");
    if (part["type"] != "text")
      return bad(where, "content part type '" + part["type"].get<std::string>() +
                            "' is not supported (text only)");
    if (!part.contains("text") || !part["text"].is_string())
      return bad(where, "a text part of '" + where + "' needs a string 'text'");
    text += part["text"].get<std::string>();
  }
  *content = text;
  return std::nullopt;
}

std::optional<ApiError> normalize_messages(const Json& b, int max_depth, const FieldNames& nm,
                                           Json* messages) {
  const std::string all = nm.of("messages");
  const Json* m = field(b, "messages");
  if (!m) return bad(all, "'" + all + "' is required");
  if (!m->is_array()) return bad(all, "'" + all + "' must be an array");
  if (m->empty()) return bad(all, "'" + all + "' must not be empty");
  *messages = Json::array();
  for (size_t i = 0; i < m->size(); ++i) {
    Json msg = (*m)[i];
    const std::string where = nm.message(i);
    if (!msg.is_object()) return bad(where, "'" + where + "' must be an object");
    if (!msg.contains("role") || !msg["role"].is_string())
      return bad(nm.message(i, ".role"), "'" + nm.message(i, ".role") + "' must be a string");
    std::string role = msg["role"];
    if (role == "developer") {
      role = "system";
      msg["role"] = "system";
    }
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      return bad(nm.message(i, ".role"), "unknown role '" + role + "' in " + where +
                                      " (expected system, developer, user, assistant or tool)");
    if (!msg.contains("content")) {
      if (role != "assistant")
        return bad(nm.message(i, ".content"), "'" + nm.message(i, ".content") + "' is required");
      msg["content"] = "";
    }
    if (msg["content"].is_null()) {
      if (role != "assistant")
        return bad(nm.message(i, ".content"), "'" + nm.message(i, ".content") + "' is null");
      msg["content"] = "";
    }
    QWEN35_TRY(flatten_content(&msg["content"], i, nm));
    if (msg.contains("tool_calls") && !msg["tool_calls"].is_null()) {
      Json& tc = msg["tool_calls"];
      const std::string calls = nm.message(i, ".tool_calls");
      if (!tc.is_array()) return bad(calls, "'" + calls + "' must be an array");
      for (auto& c : tc) {
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
          return bad(calls, "each tool call needs a 'function' object");
        Json& f = c["function"];
        // OpenAI sends arguments as a JSON string; the template iterates them as a mapping.
        // The string is client JSON like the body, so it gets the same depth bound.
        if (f.contains("arguments") && f["arguments"].is_string()) {
          JsonStatus st;
          auto parsed = parse_json(f["arguments"].get<std::string>(), max_depth, &st);
          if (st == JsonStatus::kTooDeep)
            return bad(calls,
                       "tool call arguments nest JSON deeper than the "
                       "limit of " +
                           std::to_string(max_depth) + " levels");
          f["arguments"] = parsed.is_object() ? parsed : Json::object();
        }
      }
    }
    messages->push_back(std::move(msg));
  }
  return std::nullopt;
}

std::optional<ApiError> render_impl(const Json& b, const ModelInfo& mi, bool use_tools,
                                    const FieldNames& nm, std::string* text) {
  if (!mi.tmpl)
    return bad(nm.of("messages"), "the model has no chat template; use /v1/completions");
  Json messages;
  QWEN35_TRY(normalize_messages(b, mi.max_json_depth, nm, &messages));
  Json tools = nullptr;
  if (use_tools) {
    if (const Json* t = field(b, "tools")) {
      if (!t->is_array()) return bad(nm.of("tools"), "'" + nm.of("tools") + "' must be an array");
      for (const auto& x : *t)
        if (!x.is_object() || !x.contains("function") || !x["function"].is_object() ||
            !x["function"].contains("name") || !x["function"]["name"].is_string())
          return bad(nm.of("tools"),
                     "each tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
      if (!t->empty()) tools = *t;
    }
  }
  Json kwargs = Json::object();
  if (const Json* k = field(b, "chat_template_kwargs")) {
    const std::string kw = nm.of("chat_template_kwargs");
    if (!k->is_object()) return bad(kw, "'" + kw + "' must be an object");
    // The template variables the server fills from validated fields: a kwarg of the same name
    // would replace them (issue 14: image parts smuggled in through "messages").
    for (const char* key : {"messages", "tools", "documents", "add_generation_prompt"})
      if (k->contains(key))
        return bad(kw, "'" + kw + "' must not set '" + key +
                       "': the server sets it from the request's validated fields");
    kwargs = *k;
  }
  bool add_gen = true;
  QWEN35_TRY(get_bool(b, "add_generation_prompt", nm.of("add_generation_prompt"), &add_gen));
  bool over_limit = false;
  auto r = mi.tmpl->render(messages, tools, add_gen, kwargs, &over_limit);
  if (r.ok()) {
    *text = std::move(*r);
    return std::nullopt;
  }
  if (!over_limit) return bad(nm.of("messages"), "chat template: " + r.message());
  // A template that runs past its work bounds (an endless loop, a runaway string) is the
  // server's template misbehaving, not a malformed request: 500, as for any server fault.
  return api_error(ErrorKind::kServer, "the chat template failed: " + r.message());
}

}  // namespace

std::optional<ApiError> parse_request_body(std::string_view body, const ModelInfo& mi, Json* out) {
  if (tokenizer::utf8_valid_prefix(body) != body.size())
    return bad("", "the request body is not valid UTF-8");
  JsonStatus st;
  *out = parse_json(body, mi.max_json_depth, &st);
  if (st == JsonStatus::kTooDeep)
    return bad("", "the request body nests JSON deeper than the limit of " +
                       std::to_string(mi.max_json_depth) + " levels");
  if (st != JsonStatus::kOk || !out->is_object())
    return bad("", "the request body is not a valid JSON object");
  return std::nullopt;
}

std::optional<ApiError> get_token_id(const Json& x, const tokenizer::Tokenizer& tok,
                                     const char* param, int32_t* out) {
  if (!x.is_number_integer())
    return bad(param, std::string("'") + param + "' must hold integer token ids");
  // Compare as 64 bits first: cut to 32 bits, -4294967291 would become the valid id 5.
  const bool fits = x.is_number_unsigned() ? x.get<uint64_t>() <= uint64_t(INT32_MAX)
                                           : x.get<int64_t>() >= 0 && x.get<int64_t>() <= INT32_MAX;
  if (!fits || !tok.is_valid_id(int32_t(x.get<int64_t>())))
    return bad(param, "token id " + x.dump() + " is out of range [0, " +
                          std::to_string(tok.vocab_size()) + ")");
  *out = int32_t(x.get<int64_t>());
  return std::nullopt;
}

std::optional<ApiError> parse_detokenize(const Json& b, const ModelInfo& mi,
                                         std::vector<int32_t>* ids) {
  QWEN35_TRY(check_model(b, mi));
  const Json* t = field(b, "tokens");
  if (!t || !t->is_array()) return bad("tokens", "'tokens' (a list of token ids) is required");
  for (const auto& x : *t) {
    int32_t id = 0;
    QWEN35_TRY(get_token_id(x, *mi.tok, "tokens", &id));
    ids->push_back(id);
  }
  return std::nullopt;
}

std::optional<ApiError> check_model(const Json& b, const ModelInfo& mi) {
  if (!b.is_object()) return bad("", "the request body must be a JSON object");
  const Json* m = field(b, "model");
  if (!m) return std::nullopt;
  if (!m->is_string()) return bad("model", "'model' must be a string");
  const std::string name = *m;
  if (name != mi.name && name != mi.path) {
    ApiError e = bad(
        "model", "the model '" + name + "' does not exist (this server serves '" + mi.name + "')");
    e.kind = ErrorKind::kModelNotFound;  // 400 as for any other bad field (issue 6)
    return e;
  }
  return std::nullopt;
}

std::optional<ApiError> render_messages(const Json& b, const ModelInfo& mi, std::string* text) {
  if (!b.is_object()) return bad("", "the request body must be a JSON object");
  return render_impl(b, mi, true, FieldNames{}, text);
}

namespace {

// Where other conversations' prompts are likely to part from this one: after the leading
// system messages and the tools, which agents and chat clients resend unchanged. The prefix
// cache takes a snapshot at the last 64-token boundary below it. Empty when there is no such
// part, or its rendering shares under 64 tokens with the prompt.
std::vector<int64_t> shared_prefix_hint(const Json& b, const ModelInfo& mi, bool use_tools,
                                        const std::vector<int32_t>& ids) {
  const Json* msgs = field(b, "messages");
  if (!msgs || !msgs->is_array()) return {};
  Json head = Json::array();
  for (const auto& m : *msgs) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) break;
    const std::string role = m["role"];
    if (role != "system" && role != "developer") break;
    head.push_back(m);
  }
  if (head.empty() && !(use_tools && field(b, "tools"))) return {};
  // Templates may insist on a user message (Qwen3.5's does): an empty one, which parts from any
  // real one right after its role header.
  Json part = b;
  head.push_back({{"role", "user"}, {"content", ""}});
  part["messages"] = head;
  part["add_generation_prompt"] = false;
  std::string text;
  if (render_impl(part, mi, use_tools, FieldNames{}, &text)) return {};
  auto head_ids = mi.tok->encode(text);
  if (!head_ids.ok()) return {};
  size_t n = 0;
  while (n < head_ids->size() && n < ids.size() && (*head_ids)[n] == ids[n]) ++n;
  if (n < 64) return {};
  return {int64_t(n)};
}


// The reasoning budget: "thinking_token_budget" (vLLM's name) caps the tokens sampled inside
// the thinking block, after which </think> is forced and the answer follows; "reasoning_effort"
// (OpenAI's, chat only) "none" turns thinking off (enable_thinking false in the template),
// "minimal" is 128 tokens, "low" 1024, "medium" 4096, "high" and "xhigh" no cap. An explicit
// thinking_token_budget wins over the effort's, and either over the server's default for chat
// (--reasoning-budget). *body is the request to render (b, or a copy with enable_thinking set).
std::optional<ApiError> parse_reasoning_budget(const Json& b, bool chat, const ModelInfo& mi,
                                               const FieldNames& nm, Json* body, int64_t* budget) {
  *budget = chat ? mi.reasoning_budget : -1;
  if (const Json* e = field(b, "reasoning_effort"); e && chat) {
    static const std::pair<const char*, int64_t> kEfforts[] = {
        {"none", -1}, {"minimal", 128}, {"low", 1024}, {"medium", 4096}, {"high", -1}, {"xhigh", -1}};
    const auto* it = std::find_if(std::begin(kEfforts), std::end(kEfforts),
                                  [&](const auto& x) { return e->is_string() && *e == x.first; });
    const std::string effort = nm.of("reasoning_effort");
    if (it == std::end(kEfforts))
      return bad(effort, "'" + effort +
                             "' must be \"none\", \"minimal\", \"low\", \"medium\", \"high\" "
                             "or \"xhigh\"");
    *budget = it->second;
    if (std::string_view(it->first) == "none") {
      const Json* k = field(b, "chat_template_kwargs");
      if (k && k->is_object() && k->contains("enable_thinking") && (*k)["enable_thinking"] != false)
        return bad(effort, "'" + effort + "': \"none\" turns thinking off, but " +
                               nm.of("chat_template_kwargs") + ".enable_thinking asks for it");
      if (!k || k->is_object()) {
        *body = b;
        (*body)["chat_template_kwargs"]["enable_thinking"] = false;
      }
    }
  }
  if (field(b, "thinking_token_budget"))
    QWEN35_TRY(get_int(b, "thinking_token_budget", nm.of("thinking_token_budget"), budget, 0,
                       INT64_MAX));
  return std::nullopt;
}

// Sets the sampler's reasoning budget: the thinking block is open from the start when the
// prompt (its last non-blank text) opened it.
std::optional<ApiError> set_reasoning_budget(int64_t budget, bool open, const ModelInfo& mi,
                                             const FieldNames& nm, CompletionRequest* r) {
  if (budget < 0) return std::nullopt;
  const int32_t end_id = mi.tok->token_to_id("</think>");
  if (end_id < 0)
    return bad(nm.of("thinking_token_budget"), "this model's vocabulary has no </think> token");
  r->sampling.reasoning_budget = budget;
  r->sampling.think_end = end_id;
  r->sampling.think_start = mi.tok->token_to_id("<think>");
  r->sampling.reasoning_open = open;
  return std::nullopt;
}

bool opens_thinking(const std::string& text) {
  size_t end = text.size();
  while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == ' ')) --end;
  return end >= 7 && text.compare(end - 7, 7, "<think>") == 0;
}

}  // namespace

std::optional<ApiError> parse_chat_request(const Json& b, const ModelInfo& mi,
                                           CompletionRequest* r, const FieldNames& nm) {
  r->chat = true;
  r->prompt_param = nm.of("messages");
  QWEN35_TRY(parse_common(b, mi, nm, r));
  bool logprobs = false;
  QWEN35_TRY(get_bool(b, "logprobs", &logprobs));
  int64_t top = 0;
  QWEN35_TRY(get_int(b, "top_logprobs", &top, 0, 20));
  if (field(b, "top_logprobs") && !logprobs)
    return bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  r->sampling.logprobs = logprobs ? int32_t(top) : -1;
  // tool_choice: "auto", "none", "required" (one or more calls of any tool) or
  // {"type": "function", "function": {"name": N}} (one call of N); the forced ones are grammars.
  std::string tool_choice = "auto", forced_tool;
  if (const Json* tc = field(b, "tool_choice")) {
    const std::string param = nm.of("tool_choice");
    const std::string what = "'" + param +
                             "' must be \"auto\", \"none\", \"required\" or {\"type\": "
                             "\"function\", \"function\": {\"name\": ...}}";
    if (tc->is_string()) {
      tool_choice = tc->get<std::string>();
      if (tool_choice != "auto" && tool_choice != "none" && tool_choice != "required")
        return bad(param, what);
    } else if (tc->is_object() && has_type(*tc, "function") && tc->contains("function") &&
               (*tc)["function"].is_object() && (*tc)["function"].contains("name") &&
               (*tc)["function"]["name"].is_string()) {
      forced_tool = (*tc)["function"]["name"].get<std::string>();
      if (forced_tool.empty()) return bad(param, what);
    } else {
      return bad(param, what);
    }
  }
  const bool use_tools = tool_choice != "none";
  Json adjusted;
  int64_t budget = -1;
  QWEN35_TRY(parse_reasoning_budget(b, true, mi, nm, &adjusted, &budget));
  const Json& body = adjusted.is_null() ? b : adjusted;
  std::string text;
  QWEN35_TRY(render_impl(body, mi, use_tools, nm, &text));
  if (use_tools && field(b, "tools") && !field(b, "tools")->empty()) {
    r->parse_tools = true;
    r->tools = *field(b, "tools");
  }
  // Qwen3.5's generation prompt opens <think> unless thinking is off: the answer starts inside.
  r->in_reasoning = opens_thinking(text);
  QWEN35_TRY(set_reasoning_budget(budget, r->in_reasoning, mi, nm, r));
  QWEN35_TRY(set_structured_output(b, mi, forced_tool, tool_choice == "required", nm, r));
  auto ids = mi.tok->encode(text);
  if (!ids.ok()) return bad(nm.of("messages"), ids.message());
  r->batch = {{std::move(*ids), ""}};
  r->snapshot_hints = shared_prefix_hint(body, mi, use_tools, r->batch[0].ids);
  return std::nullopt;
}

std::optional<ApiError> parse_completion_request(const Json& b, const ModelInfo& mi,
                                                 CompletionRequest* r) {
  const FieldNames nm;  // completions has no other API on top of it
  QWEN35_TRY(parse_common(b, mi, nm, r));
  const Json* p = field(b, "prompt");
  if (!p) return bad("prompt", "'prompt' is required");
  // One prompt: a string or a list of token ids. A batch: a list of those (strings or id lists).
  auto one = [&](const Json& q, CompletionRequest::Prompt* out) -> std::optional<ApiError> {
    if (q.is_string()) {
      out->text = q.get<std::string>();
      auto ids = mi.tok->encode(out->text);
      if (!ids.ok()) return bad("prompt", ids.message());
      out->ids = std::move(*ids);
    } else if (q.is_array() && !q.empty() && q[0].is_number()) {
      for (const auto& x : q) {
        int32_t id = 0;
        QWEN35_TRY(get_token_id(x, *mi.tok, "prompt", &id));
        out->ids.push_back(id);
      }
      out->text = mi.tok->decode(out->ids);
    } else {
      return bad("prompt", "'prompt' must be a string, a list of token ids, or a list of either");
    }
    if (out->ids.empty()) return bad("prompt", "the prompt is empty");
    return std::nullopt;
  };
  constexpr size_t kMaxBatch = 64;
  if (p->is_array() && !p->empty() && (p->front().is_string() || p->front().is_array())) {
    if (p->size() > kMaxBatch)
      return bad("prompt", "at most " + std::to_string(kMaxBatch) + " prompts per request");
    if (int64_t(p->size()) * r->n > 256) return bad("n", "prompts x n must be at most 256");
    for (const auto& q : *p) {
      if (q.is_array() && !q.empty() && !q[0].is_number())
        return bad("prompt", "a batched prompt must be a string or a list of token ids");
      r->batch.emplace_back();
      QWEN35_TRY(one(q, &r->batch.back()));
    }
  } else if (p->is_array() && p->empty()) {
    return bad("prompt", "the prompt is empty");
  } else {
    r->batch.emplace_back();
    QWEN35_TRY(one(*p, &r->batch.back()));
  }
  int64_t lp = -1;
  QWEN35_TRY(get_int(b, "logprobs", &lp, 0, 20));
  r->sampling.logprobs = int32_t(lp);
  // A budget applies to prompts that end inside an open <think> (per prompt: the sampler
  // parameters are shared, so a batch must agree).
  Json unused;
  int64_t budget = -1;
  QWEN35_TRY(parse_reasoning_budget(b, false, mi, nm, &unused, &budget));
  if (budget >= 0) {
    const bool open = opens_thinking(r->batch[0].text);
    for (const auto& q : r->batch)
      if (opens_thinking(q.text) != open)
        return bad("thinking_token_budget",
                   "a batch of prompts with a reasoning budget must all end inside <think>, or none");
    QWEN35_TRY(set_reasoning_budget(budget, open, mi, nm, r));
  }
  if (field(b, "response_format")) {
    // The grammar starts after the thinking block when the prompts open one (a batch agrees).
    r->in_reasoning = opens_thinking(r->batch[0].text);
    for (const auto& q : r->batch)
      if (opens_thinking(q.text) != r->in_reasoning)
        return bad("response_format",
                   "a batch of prompts with a response_format must all end inside <think>, or none");
    QWEN35_TRY(set_structured_output(b, mi, "", false, nm, r));
  }
  QWEN35_TRY(get_bool(b, "echo", &r->echo));
  if (r->echo && lp >= 0) r->prompt_logprobs = int32_t(lp);
  r->parse_reasoning = false;
  return std::nullopt;
}

std::string FieldNames::of(const std::string& chat) const {
  for (const auto& [from, to] : fields)
    if (from == chat) return to;
  return chat;
}

std::string FieldNames::message(size_t i, const std::string& sub) const {
  if (i < origin.size()) return origin[i];
  return "messages[" + std::to_string(i) + "]" + sub;
}

}  // namespace qwen35::server
