#include "server/output_parser.h"

#include <algorithm>

#include "server/json_limits.h"

namespace qwen35::server {
namespace {

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";
constexpr std::string_view kCallOpen = "<tool_call>", kCallClose = "</tool_call>";

std::string_view trim(std::string_view s) {
  while (!s.empty() &&
         (s.front() == ' ' || s.front() == '\n' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\n' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// The declared JSON-schema type of parameter `arg` of function `name`, or "" when unknown.
std::string param_type(const nlohmann::ordered_json& tools, const std::string& name,
                       const std::string& arg) {
  if (!tools.is_array()) return "";
  for (const auto& t : tools) {
    if (!t.is_object()) continue;
    const auto f = t.find("function");
    if (f == t.end() || !f->is_object()) continue;
    const auto n = f->find("name");
    if (n == f->end() || !n->is_string() || n->get<std::string>() != name) continue;
    const auto p = f->find("parameters");
    if (p == f->end() || !p->is_object()) return "";
    const auto props = p->find("properties");
    if (props == p->end() || !props->is_object()) return "";
    const auto a = props->find(arg);
    if (a == props->end() || !a->is_object()) return "";
    const auto ty = a->find("type");
    if (ty != a->end() && ty->is_string()) return ty->get<std::string>();
    return "";
  }
  return "";
}

}  // namespace

namespace {

// {"name": NAME, "arguments": {...}} (arguments may also come as the JSON text of an object, as
// OpenAI's API writes them; absent, they are {}).
std::optional<ToolCall> parse_json_call(std::string_view body) {
  // Model output, but copied into the response like client JSON: the same depth bound.
  auto j = parse_json(trim(body), kDefaultMaxJsonDepth);
  if (!j.is_object()) return std::nullopt;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty())
    return std::nullopt;
  ToolCall call;
  call.name = name->get<std::string>();
  const auto args = j.find("arguments");
  if (args == j.end() || args->is_null()) return call;
  if (args->is_string()) {
    auto parsed = parse_json(args->get<std::string>(), kDefaultMaxJsonDepth);
    if (!parsed.is_object()) return std::nullopt;
    call.arguments = std::move(parsed);
  } else if (args->is_object()) {
    call.arguments = *args;
  } else {
    return std::nullopt;
  }
  return call;
}

// <function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>...</function>; a parameter left open
// ends at the next one or at </function>.
std::optional<ToolCall> parse_xml_call(std::string_view body, const nlohmann::ordered_json& tools) {
  ToolCall call;
  size_t i = body.find("<function=");
  if (i == std::string_view::npos) return std::nullopt;
  i += 10;
  size_t e = body.find('>', i);
  if (e == std::string_view::npos) return std::nullopt;
  call.name = std::string(trim(body.substr(i, e - i)));
  if (call.name.empty()) return std::nullopt;
  size_t p = e + 1;
  for (;;) {
    size_t a = body.find("<parameter=", p);
    if (a == std::string_view::npos) break;
    a += 11;
    const size_t ae = body.find('>', a);
    if (ae == std::string_view::npos) break;
    const std::string arg(trim(body.substr(a, ae - a)));
    size_t ve = body.find("</parameter>", ae + 1);
    const bool closed = ve != std::string_view::npos;
    if (!closed) ve = body.find("<parameter=", ae + 1);
    if (ve == std::string_view::npos) ve = body.find("</function>", ae + 1);
    if (ve == std::string_view::npos) ve = body.size();
    std::string_view value = body.substr(ae + 1, ve - ae - 1);
    if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
    if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
    const std::string type = param_type(tools, call.name, arg);
    nlohmann::ordered_json v = std::string(value);
    // Declared non-string types are JSON; so are undeclared ones that parse (the forced-call
    // grammar writes every parameter but a plain string as JSON).
    if (type != "string") {
      auto parsed = parse_json(value, kDefaultMaxJsonDepth);
      if (!parsed.is_discarded()) v = std::move(parsed);
    }
    call.arguments[arg] = std::move(v);
    p = closed ? ve + 12 : ve;
  }
  return call;
}

}  // namespace

std::optional<ToolCall> parse_tool_call(std::string_view body, const nlohmann::ordered_json& tools,
                                        ToolCallFormat format) {
  return format == ToolCallFormat::kJson ? parse_json_call(body) : parse_xml_call(body, tools);
}

OutputParser::OutputParser(bool in_reasoning, bool parse_reasoning, bool parse_tools,
                           nlohmann::ordered_json tools, ToolCallFormat format)
    : parse_reasoning_(parse_reasoning),
      parse_tools_(parse_tools),
      tools_(std::move(tools)),
      format_(format) {
  if (in_reasoning && parse_reasoning) state_ = kThink;
}

void OutputParser::emit(OutputPiece::Kind kind, std::string_view text,
                        std::vector<OutputPiece>* out) {
  if (strip_newlines_) {
    while (!text.empty() && text.front() == '\n') text.remove_prefix(1);
    if (!text.empty()) strip_newlines_ = false;
  }
  if (text.empty()) return;
  if (!out->empty() && out->back().kind == kind) {
    out->back().text.append(text);
    return;
  }
  OutputPiece p;
  p.kind = kind;
  p.text = std::string(text);
  out->push_back(std::move(p));
}

void OutputParser::drain(bool final, std::vector<OutputPiece>* out) {
  for (;;) {
    std::vector<std::string_view> tags;
    if (state_ == kCall) {
      tags.push_back(kCallClose);
    } else {
      if (parse_reasoning_) tags.push_back(state_ == kThink ? kThinkClose : kThinkOpen);
      if (parse_tools_) tags.push_back(kCallOpen);
    }
    size_t best = std::string::npos;
    std::string_view tag;
    for (auto t : tags) {
      const size_t p = buf_.find(t);
      if (p < best) best = p, tag = t;
    }
    const auto kind = state_ == kThink ? OutputPiece::kReasoning : OutputPiece::kContent;
    if (best != std::string::npos) {
      if (state_ == kCall) {
        const std::string_view body = std::string_view(buf_).substr(0, best);
        const auto back = call_return_ == kThink ? OutputPiece::kReasoning : OutputPiece::kContent;
        if (auto call = parse_tool_call(body, tools_, format_)) {
          OutputPiece p;
          p.kind = OutputPiece::kToolCall;
          p.call = std::move(*call);
          out->push_back(std::move(p));
          strip_newlines_ = true;  // calls are separated by a newline, as the template writes them
        } else {  // not a call of the model's form: the text as written
          emit(back, std::string(kCallOpen).append(body).append(kCallClose), out);
        }
        state_ = call_return_;
      } else {
        emit(kind, std::string_view(buf_).substr(0, best), out);
        if (tag == kCallOpen) {
          call_return_ = state_;
          state_ = kCall;
        } else if (tag == kThinkOpen) {  // the model opened it (Qwen3 writes "<think>\n")
          state_ = kThink;
          strip_newlines_ = true;
        } else {
          state_ = kText;
          strip_newlines_ = true;
        }
      }
      buf_.erase(0, best + tag.size());
      continue;
    }
    if (state_ == kCall) {
      if (final) {  // an unfinished call is shown as the text it is
        emit(call_return_ == kThink ? OutputPiece::kReasoning : OutputPiece::kContent,
             std::string(kCallOpen) + buf_, out);
        buf_.clear();
      }
      return;
    }
    size_t hold = 0;
    if (!final) {
      for (auto t : tags)
        for (size_t k = std::min(t.size() - 1, buf_.size()); k > hold; --k)
          if (buf_.compare(buf_.size() - k, k, t.substr(0, k)) == 0) {
            hold = k;
            break;
          }
    }
    emit(kind, std::string_view(buf_).substr(0, buf_.size() - hold), out);
    buf_.erase(0, buf_.size() - hold);
    return;
  }
}

std::vector<OutputPiece> OutputParser::push(std::string_view text) {
  buf_.append(text);
  std::vector<OutputPiece> out;
  drain(false, &out);
  return out;
}

std::vector<OutputPiece> OutputParser::flush() {
  std::vector<OutputPiece> out;
  drain(true, &out);
  return out;
}

}  // namespace qwen35::server
