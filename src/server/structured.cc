#include "server/request_fields.h"
#include "server/structured.h"

#include <algorithm>
#include <new>
#include <stdexcept>

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

std::string GrammarCache::full_key(const std::string& key, const std::vector<int32_t>& end_ids) {
  std::string full = key;
  for (int32_t e : end_ids) {
    full += ',';
    full += std::to_string(e);
  }
  return full;
}

core::Result<std::shared_ptr<grammar::Automaton>> GrammarCache::get(
    const std::string& key, const std::vector<int32_t>& end_ids, const Build& build) {
  const std::string full = full_key(key, end_ids);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(full); it != index_.end()) {
      if (!it->second->second->exhausted()) {
        lru_.splice(lru_.begin(), lru_, it->second);
        return it->second->second;
      }
      lru_.erase(it->second);  // it can grow no more: this request starts a fresh one
      index_.erase(it);
    }
  }
  auto g = build(limits_.max_states);  // outside the lock: a large schema holds up no one
  if (!g.ok()) return g.status();
  return std::make_shared<grammar::Automaton>(std::move(*g), vocab_, end_ids,
                                              grammar::AutomatonLimits{limits_.automaton_bytes});
}

void GrammarCache::keep(const std::string& key, const std::vector<int32_t>& end_ids,
                        std::shared_ptr<grammar::Automaton> a) {
  const std::string full = full_key(key, end_ids);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(full); it != index_.end()) {
    // Kept already (this one, or another request's twin compiled meanwhile): the first stays.
    lru_.splice(lru_.begin(), lru_, it->second);
  } else {
    lru_.emplace_front(full, std::move(a));
    index_[full] = lru_.begin();
  }
  trim();
}

void GrammarCache::trim() {
  size_t total = 0;
  for (auto it = lru_.begin(); it != lru_.end();) {
    if (it->second->exhausted()) {  // no later request could use it
      index_.erase(it->first);
      it = lru_.erase(it);
      continue;
    }
    total += it->second->bytes();
    ++it;
  }
  while (!lru_.empty() && (lru_.size() > limits_.capacity || total > limits_.cache_bytes)) {
    total -= lru_.back().second->bytes();  // (it may have grown since: the sum is an estimate)
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

size_t GrammarCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t total = 0;
  for (const auto& [k, a] : lru_) total += a->bytes();
  return total;
}

namespace {

// Where a function tool is in the client's request: its name at name_at, its schema at
// schema_at ("tools[1].function.parameters", "tools[1].input_schema", ...).
struct ToolAt {
  std::string name_at, schema_at;
};

ToolAt tool_at(const ChatNames* nm, size_t t) {
  if (nm && t < nm->tool_paths.size())
    return {nm->tool_paths[t] + ".name", nm->tool_paths[t] + "." + nm->tool_schema};
  const std::string f = "tools[" + std::to_string(t) + "].function";
  return {f + ".name", f + ".parameters"};
}

// One call in Qwen3.5's XML form: parameters in the schema's order, the required ones always; a
// plain string raw, anything else JSON under its schema.
core::Result<grammar::Sym> xml_call(grammar::Builder& b, grammar::JsonSchemaCompiler& c,
                                    const std::string& fname, const Json& params,
                                    const ToolAt& at) {
  using grammar::Sym;
  if (!tag_name_ok(fname)) return core::error(at.name_at + ": a forced call's name cannot hold '<', '>' or a newline");
  std::vector<std::pair<std::string, Sym>> items;
  std::vector<std::string> required;
  if (params.contains("required") && params["required"].is_array())
    for (const auto& r : params["required"])
      if (r.is_string()) required.push_back(r.get<std::string>());
  if (params.contains("properties")) {
    if (!params["properties"].is_object()) return core::error(at.schema_at + ".properties must be an object");
    for (const auto& [k, v] : params["properties"].items()) {
      if (!tag_name_ok(k)) return core::error(at.schema_at + ": parameter name '" + k + "' cannot hold '<', '>' or a newline");
      const std::string path = "#/properties/" + k;
      auto value = plain_string(v) ? c.raw_string(v, path) : c.value(v, path);
      if (!value.ok()) return core::error(at.schema_at + ": " + value.message());
      items.emplace_back(k, b.seq({b.literal("<parameter=" + k + ">\n"), *value, b.literal("\n</parameter>\n")}));
    }
  }
  for (const auto& r : required)
    if (std::none_of(items.begin(), items.end(), [&](const auto& x) { return x.first == r; }))
      return core::error(at.schema_at + ": required parameter '" + r + "' is not in 'properties'");
  Sym rest = b.empty();
  for (size_t i = items.size(); i-- > 0;) {
    const Sym with = b.seq({items[i].second, rest});
    const bool req = std::find(required.begin(), required.end(), items[i].first) != required.end();
    rest = req ? with : b.alt({with, rest});
  }
  return b.seq({b.literal("<tool_call>\n<function=" + fname + ">\n"), rest,
                b.literal("</function>\n</tool_call>")});
}

// One call in Qwen3's Hermes-style JSON form, as its template writes one:
// <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>, ARGS an object under the
// parameters' schema (an object of any members when the schema gives no type).
core::Result<grammar::Sym> json_call(grammar::Builder& b, grammar::JsonSchemaCompiler& c,
                                     const std::string& fname, const Json& params,
                                     const ToolAt& at) {
  if (fname.empty()) return core::error(at.name_at + ": a forced call needs a name");
  if (params.contains("type") && params["type"] != "object")
    return core::error(at.schema_at + ": a call's arguments are an object ('type' must be \"object\")");
  Json schema = params;
  if (!schema.contains("type")) schema["type"] = "object";
  auto args = c.value(schema, "#");
  if (!args.ok()) return core::error(at.schema_at + ": " + args.message());
  return b.seq({b.literal("<tool_call>\n{\"name\": " + Json(fname).dump() + ", \"arguments\": "), *args,
                b.literal("}\n</tool_call>")});
}

// What a forced call of a tool that is not strict constrains: the envelope and arguments that
// are a JSON object (OpenAI and Anthropic enforce a tool's schema only for strict tools). The
// object holds the declared properties (in their order, the required ones always), each any
// JSON value (a string-typed one any string, written raw in the XML form); without declared
// properties, any members (none in the XML form). No keyword of the schema can make it fail.
Json lenient_parameters(const Json& params, ToolCallFormat format) {
  Json props = Json::object(), required = Json::array();
  if (params.is_object() && params.contains("properties") && params["properties"].is_object())
    for (const auto& [k, v] : params["properties"].items())
      if (format == ToolCallFormat::kJson || tag_name_ok(k))
        props[k] = plain_string(v) ? Json{{"type", "string"}} : Json::object();
  if (params.is_object() && params.contains("required") && params["required"].is_array())
    for (const auto& r : params["required"])
      if (r.is_string() && props.contains(r.get<std::string>()) &&
          std::find(required.begin(), required.end(), r) == required.end())
        required.push_back(r);
  if (props.empty()) return Json{{"type", "object"}};
  return Json{{"type", "object"}, {"properties", props}, {"required", required}};
}

}  // namespace

bool strict_tool(const Json& tool) {
  const Json* f = tool.is_object() && tool.contains("function") ? &tool["function"] : nullptr;
  return f && f->is_object() && f->contains("strict") && (*f)["strict"] == true;
}

core::Result<grammar::Grammar> tool_call_grammar(const Json& tools, const std::string& name,
                                                 bool after_think, ToolCallFormat format,
                                                 int64_t max_states, const ChatNames* names) {
  using grammar::Sym;
  grammar::Builder b(max_states);
  // Compilers keep the schema they resolve $ref in: one per tool, alive until finish().
  std::vector<std::unique_ptr<Json>> schemas;
  std::vector<std::unique_ptr<grammar::JsonSchemaCompiler>> compilers;
  std::vector<Sym> calls;
  for (size_t t = 0; t < tools.size(); ++t) {
    const Json& f = tools[t]["function"];
    const std::string fname = f["name"].get<std::string>();
    if (!name.empty() && fname != name) continue;
    const ToolAt at = tool_at(names, t);
    static const Json kNone = Json::object();
    const Json& given = f.contains("parameters") && !f["parameters"].is_null() ? f["parameters"] : kNone;
    const bool strict = strict_tool(tools[t]);
    if (strict && !given.is_object()) return core::error(at.schema_at + " must be an object");
    schemas.push_back(std::make_unique<Json>(strict ? given : lenient_parameters(given, format)));
    const Json& params = *schemas.back();
    compilers.push_back(std::make_unique<grammar::JsonSchemaCompiler>(b, params));
    auto call = format == ToolCallFormat::kJson ? json_call(b, *compilers.back(), fname, params, at)
                                                : xml_call(b, *compilers.back(), fname, params, at);
    if (!call.ok()) return core::error(call.message());
    calls.push_back(*call);
  }
  if (calls.empty()) return core::error("no tool named '" + name + "' in 'tools'");
  // After </think> the model writes a blank line (the output parser drops it); otherwise the
  // call comes first, so that the answer has no content besides it.
  const Sym pad = after_think ? b.repeat(b.byte('\n'), 0, 2) : b.empty();
  const Sym body = name.empty() ? b.list(b.alt(calls), b.byte('\n'), 1, -1) : calls[0];
  return b.finish(b.seq({pad, body}));
}

namespace {

// The grammar a request asks for: its cache key, the field that names it, how to build it.
// Empty key: none.
struct Wanted {
  std::string key, param;
  GrammarCache::Build build;
};

std::optional<ApiError> wanted(const OutputFormat& format, const ToolChoice& tc,
                               const ChatNames& nm, const CompletionRequest& r, Wanted* w) {
  if (format.kind == OutputFormat::Kind::kJsonObject) {
    w->key = "json_object";
    w->param = format.field;
    w->build = [](int64_t) { return grammar::json_object_grammar(); };
  } else if (format.kind == OutputFormat::Kind::kJsonSchema) {
    w->key = "schema:" + dump(format.schema);
    w->param = format.schema_field;
    w->build = [s = format.schema](int64_t max) { return grammar::json_schema_grammar(s, max); };
  }
  const bool forced = tc.mode == ToolChoice::Mode::kRequired || tc.mode == ToolChoice::Mode::kNamed;
  if (!forced) return std::nullopt;
  if (!w->key.empty())
    return bad(nm.tool_choice, "a forced tool call cannot be combined with '" + format.field + "'");
  if (!r.tools.is_array() || r.tools.empty())
    return bad(nm.tool_choice, "'" + nm.tool_choice +
                                   "' forces a tool call, but the request has no '" + nm.tools +
                                   "'");
  w->param = nm.tools;
  const bool json = r.tool_format == ToolCallFormat::kJson;
  const bool think = r.in_reasoning || r.think_may_open;  // a thinking block may come first
  w->key = std::string(json ? "json-tools:" : "tools:") + tc.name + (think ? ":think:" : ":") +
           dump(r.tools);
  w->build = [tools = r.tools, name = tc.name, think, format = r.tool_format, nm](int64_t max) {
    return tool_call_grammar(tools, name, think, format, max, &nm);
  };
  return std::nullopt;
}

// Compiles (or finds) the grammar, checks what it needs against the request, and only then
// caches it.
std::optional<ApiError> attach(const Wanted& w, const ChatNames& nm, const ModelInfo& mi,
                               CompletionRequest* r) {
  GrammarCache& cache = *mi.grammars;
  auto a = cache.get(w.key, r->eos_ids, w.build);
  if (!a.ok()) return bad(w.param, a.message());
  auto& s = r->sampling;
  if (r->in_reasoning) {
    s.think_end = mi.tok->token_to_id("</think>");
    s.think_start = mi.tok->token_to_id("<think>");
    s.reasoning_open = true;
    if (s.think_end < 0)
      return bad(w.param, "the prompt opens thinking, but the vocabulary has no </think>");
  } else if (r->think_may_open && mi.tok->token_to_id("<think>") >= 0 &&
             mi.tok->token_to_id("</think>") >= 0) {
    // The model may think first (Qwen3), when max_tokens leaves room for it: the sampler lets
    // <think> be its first token, and the grammar applies after </think>.
    s.think_start = mi.tok->token_to_id("<think>");
    s.think_end = mi.tok->token_to_id("</think>");
    s.think_may_open = true;
  }
  const int64_t finish = (*a)->finish_tokens((*a)->initial());
  if ((*a)->exhausted())
    return bad(w.param, "the format is too large: its automaton passed this server's bound of " +
                            std::to_string(cache.limits().automaton_bytes >> 20) +
                            " MiB (--grammar-max-mb) while working out its shortest value");
  const int64_t need = finish + 1 + (r->in_reasoning ? 1 : 0);
  if (r->max_tokens >= 0 && r->max_tokens < need)
    return bad(nm.max_tokens, "'" + nm.max_tokens + "' is " + std::to_string(r->max_tokens) +
                                  ", but this format needs up to " + std::to_string(need) +
                                  " tokens to be sure of a whole value");
  cache.keep(w.key, r->eos_ids, *a);
  s.grammar = std::move(*a);
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> set_structured_output(const OutputFormat& format, const ToolChoice& tc,
                                              const ChatNames& nm, const ModelInfo& mi,
                                              CompletionRequest* r) {
  // Compiling is where a request's size turns into memory: running out there is the server's
  // failure (500), and the process goes on.
  try {
    Wanted w;
    if (auto e = wanted(format, tc, nm, *r, &w)) return e;
    if (w.key.empty()) return std::nullopt;
    if (!mi.grammars) return bad(w.param, "structured outputs are not available on this server");
    if (r->eos_ids.empty())
      return bad("ignore_eos", "'ignore_eos' cannot be combined with structured outputs (the end "
                               "token closes the value)");
    return attach(w, nm, mi, r);
  } catch (const std::bad_alloc&) {
  } catch (const std::length_error&) {
  }
  r->sampling.grammar = nullptr;
  return api_error(ErrorKind::kServer,
                   "the server ran out of memory while compiling the output format's grammar");
}

}  // namespace qwen35::server
