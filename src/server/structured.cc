#include "server/request_fields.h"
#include "server/structured.h"

#include <algorithm>

namespace qwen35::server {
using namespace fields;
namespace {


bool plain_string(const Json& schema) {
  return schema.is_object() && schema.contains("type") && schema["type"] == "string";
}

// A tag's name (function, parameter) goes between '=' and '>' on one line.
bool tag_name_ok(const std::string& s) {
  return !s.empty() && s.find_first_of("<>\n") == std::string::npos;
}

}  // namespace

std::shared_ptr<const grammar::Vocab> grammar_vocab(const tokenizer::Tokenizer& tok,
                                                    int64_t model_vocab) {
  const size_t n = std::max(tok.vocab_size(), size_t(std::max<int64_t>(model_vocab, 0)));
  std::vector<std::string> bytes(n);
  std::vector<bool> usable(n, false);
  const int32_t open = tok.token_to_id("<think>"), close = tok.token_to_id("</think>");
  for (size_t i = 0; i < tok.vocab_size(); ++i) {
    const int32_t id = int32_t(i);
    bytes[i] = std::string(tok.token_bytes(id));
    usable[i] = !tok.is_special(id) && id != open && id != close;
  }
  return std::make_shared<const grammar::Vocab>(std::move(bytes), usable);
}

core::Result<std::shared_ptr<grammar::Automaton>> GrammarCache::get(
    const std::string& key, const std::vector<int32_t>& end_ids,
    const std::function<core::Result<grammar::Grammar>()>& build) {
  std::string full = key;
  for (int32_t e : end_ids) {
    full += ',';
    full += std::to_string(e);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(full); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  auto g = build();  // outside the lock: a large schema does not hold up the other workers
  if (!g.ok()) return g.status();
  auto a = std::make_shared<grammar::Automaton>(std::move(*g), vocab_, end_ids);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(full); it != index_.end()) return it->second->second;
  lru_.emplace_front(full, a);
  index_[full] = lru_.begin();
  if (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return a;
}

core::Result<grammar::Grammar> tool_call_grammar(const Json& tools, const std::string& name,
                                                 bool after_think) {
  using grammar::Sym;
  grammar::Builder b;
  // Compilers keep the schema they resolve $ref in: one per tool, alive until finish().
  std::vector<std::unique_ptr<grammar::JsonSchemaCompiler>> compilers;
  std::vector<Sym> calls;
  for (size_t t = 0; t < tools.size(); ++t) {
    const Json& f = tools[t]["function"];
    const std::string fname = f["name"].get<std::string>();
    if (!name.empty() && fname != name) continue;
    const std::string where = "tools[" + std::to_string(t) + "].function";
    if (!tag_name_ok(fname)) return core::error(where + ".name: a forced call's name cannot hold '<', '>' or a newline");
    static const Json kNone = Json::object();
    const Json& params = f.contains("parameters") && !f["parameters"].is_null() ? f["parameters"] : kNone;
    if (!params.is_object()) return core::error(where + ".parameters must be an object");
    compilers.push_back(std::make_unique<grammar::JsonSchemaCompiler>(b, params));
    grammar::JsonSchemaCompiler& c = *compilers.back();
    std::vector<std::pair<std::string, Sym>> items;
    std::vector<std::string> required;
    if (params.contains("required") && params["required"].is_array())
      for (const auto& r : params["required"])
        if (r.is_string()) required.push_back(r.get<std::string>());
    if (params.contains("properties")) {
      if (!params["properties"].is_object()) return core::error(where + ".parameters.properties must be an object");
      for (const auto& [k, v] : params["properties"].items()) {
        if (!tag_name_ok(k)) return core::error(where + ": parameter name '" + k + "' cannot hold '<', '>' or a newline");
        const std::string path = "#/properties/" + k;
        auto value = plain_string(v) ? c.raw_string(v, path) : c.value(v, path);
        if (!value.ok()) return core::error(where + ".parameters: " + value.message());
        items.emplace_back(k, b.seq({b.literal("<parameter=" + k + ">\n"), *value, b.literal("\n</parameter>\n")}));
      }
    }
    for (const auto& r : required)
      if (std::none_of(items.begin(), items.end(), [&](const auto& x) { return x.first == r; }))
        return core::error(where + ".parameters: required parameter '" + r + "' is not in 'properties'");
    Sym rest = b.empty();
    for (size_t i = items.size(); i-- > 0;) {
      const Sym with = b.seq({items[i].second, rest});
      const bool req = std::find(required.begin(), required.end(), items[i].first) != required.end();
      rest = req ? with : b.alt({with, rest});
    }
    calls.push_back(b.seq({b.literal("<tool_call>\n<function=" + fname + ">\n"), rest,
                           b.literal("</function>\n</tool_call>")}));
  }
  if (calls.empty()) return core::error("no tool named '" + name + "' in 'tools'");
  // After </think> the model writes a blank line (the output parser drops it); otherwise the
  // call comes first, so that the answer has no content besides it.
  const Sym pad = after_think ? b.repeat(b.byte('\n'), 0, 2) : b.empty();
  const Sym body = name.empty() ? b.list(b.alt(calls), b.byte('\n'), 1, -1) : calls[0];
  return b.finish(b.seq({pad, body}));
}

std::optional<ApiError> set_structured_output(const OutputFormat& format, const ToolChoice& tc,
                                              const ChatNames& nm, const ModelInfo& mi,
                                              CompletionRequest* r) {
  std::string key, param;
  std::function<core::Result<grammar::Grammar>()> build;
  if (format.kind == OutputFormat::Kind::kJsonObject) {
    key = "json_object";
    param = format.field;
    build = [] { return grammar::json_object_grammar(); };
  } else if (format.kind == OutputFormat::Kind::kJsonSchema) {
    key = "schema:" + dump(format.schema);
    param = format.schema_field;
    build = [s = format.schema] { return grammar::json_schema_grammar(s); };
  }
  const bool forced = tc.mode == ToolChoice::Mode::kRequired || tc.mode == ToolChoice::Mode::kNamed;
  if (forced) {
    if (!key.empty())
      return bad(nm.tool_choice,
                 "a forced tool call cannot be combined with '" + format.field + "'");
    if (!r->tools.is_array() || r->tools.empty())
      return bad(nm.tool_choice, "'" + nm.tool_choice +
                                     "' forces a tool call, but the request has no '" + nm.tools +
                                     "'");
    param = nm.tools;
    key = "tools:" + tc.name + (r->in_reasoning ? ":think:" : ":") + dump(r->tools);
    build = [tools = r->tools, name = tc.name, think = r->in_reasoning] {
      return tool_call_grammar(tools, name, think);
    };
  }
  if (key.empty()) return std::nullopt;
  if (!mi.grammars) return bad(param, "structured outputs are not available on this server");
  if (r->eos_ids.empty())
    return bad("ignore_eos", "'ignore_eos' cannot be combined with structured outputs (the end "
                             "token closes the value)");
  auto a = mi.grammars->get(key, r->eos_ids, build);
  if (!a.ok()) return bad(param, a.message());
  auto& s = r->sampling;
  if (r->in_reasoning) {
    s.think_end = mi.tok->token_to_id("</think>");
    s.think_start = mi.tok->token_to_id("<think>");
    s.reasoning_open = true;
    if (s.think_end < 0) return bad(param, "the prompt opens thinking, but the vocabulary has no </think>");
  }
  const int64_t need = (*a)->finish_tokens((*a)->initial()) + 1 + (r->in_reasoning ? 1 : 0);
  if (r->max_tokens >= 0 && r->max_tokens < need)
    return bad(nm.max_tokens, "'" + nm.max_tokens + "' is " +
                                         std::to_string(r->max_tokens) +
                                         ", but this format needs up to " + std::to_string(need) +
                                         " tokens to be sure of a whole value");
  s.grammar = std::move(*a);
  return std::nullopt;
}

}  // namespace qwen35::server
