#include "server/agent_tools.h"

#include <set>

#include "grammar/grammar.h"
#include "grammar/regex.h"
#include "grammar/text.h"
#include "server/request_fields.h"
#include "server/structured.h"

namespace qwen35::server {
using namespace fields;
namespace {

// A custom tool's regex as a full match (OpenAI matches the whole input), as the JSON Schema
// `pattern` search it becomes: anchored unless it anchors itself.
std::string full_match(const std::string& re) {
  if (!re.empty() && re.front() == '^' && re.back() == '$' &&
      (re.size() < 2 || re[re.size() - 2] != '\\'))
    return re;
  return "^(?:" + re + ")$";
}

// Whether the grammar engine takes `pattern` as a raw tool-call parameter (why not, in *why).
bool regex_ok(const std::string& pattern, int64_t max_states, std::string* why) {
  grammar::Builder b(max_states);
  grammar::CharSyms chars(b);
  auto r = grammar::compile_pattern(pattern, b, chars, grammar::Encoding::kRaw);
  if (!r.ok()) {
    *why = r.message();
    return false;
  }
  auto g = b.finish(*r);
  if (!g.ok()) {
    *why = g.message();
    return false;
  }
  return true;
}

// One tool as it reaches the template, before names are settled.
struct Pending {
  std::string name;  // the client's
  std::string ns;
  bool custom = false;
  Json fn;  // {"type": "function", "function": {...}}
};

// A custom tool {name, description, format: {type: "text"} | {type: "grammar", syntax:
// "lark" | "regex", definition}} -> a function of one string parameter.
std::optional<ApiError> custom_tool(const Json& tool, const std::string& where,
                                    const ModelInfo& mi, Pending* p,
                                    std::vector<std::string>* warnings) {
  QWEN35_TRY(get_string(tool, "name", where, &p->name));
  std::string description;
  if (const Json* d = field(tool, "description")) {
    if (!d->is_string())
      return bad(where + ".description", "'" + where + ".description' must be a string");
    description = *d;
  }
  Json input = {{"type", "string"}, {"description", "The tool's input: free-form text, not JSON."}};
  if (const Json* f = field(tool, "format")) {
    const std::string at = where + ".format";
    std::string type;
    if (!f->is_object()) return bad(at, "'" + at + "' must be an object");
    QWEN35_TRY(get_string(*f, "type", at, &type));
    if (type == "grammar") {
      std::string syntax, definition;
      QWEN35_TRY(get_string(*f, "syntax", at, &syntax));
      QWEN35_TRY(get_string(*f, "definition", at, &definition));
      if (syntax != "lark" && syntax != "regex")
        return bad(at + ".syntax", "'" + at + ".syntax' must be \"lark\" or \"regex\"");
      std::string why = "the grammar engine reads no Lark";
      const std::string pattern = full_match(definition);
      if (syntax == "regex" && regex_ok(pattern, mi.grammars ? mi.grammars->limits().max_states
                                                             : grammar::Builder::kInf,
                                        &why)) {
        input["description"] = "The tool's input: text that matches the regular expression " +
                               definition;
        input["pattern"] = pattern;
      } else {
        input["description"] = "The tool's input: free-form text, not JSON, in this " + syntax +
                               " grammar:\n" + definition;
        warnings->push_back(where + " (custom tool '" + p->name + "'): its " + syntax +
                            " grammar is not enforced (" + why + "); the input is free text");
      }
    } else if (type != "text") {
      return bad(at + ".type", "'" + at + ".type' must be \"text\" or \"grammar\"");
    }
  }
  Json fn = {{"name", p->name}};
  if (!description.empty()) fn["description"] = description;
  fn["parameters"] = {{"type", "object"},
                      {"properties", {{kCustomInput, std::move(input)}}},
                      {"required", {kCustomInput}}};
  p->custom = true;
  p->fn = {{"type", "function"}, {"function", std::move(fn)}};
  return std::nullopt;
}

// A function or custom tool at `where` (inside a namespace when ns is set); other types go to
// *other, named.
std::optional<ApiError> one_tool(const Json& tool, const std::string& where, const std::string& ns,
                                 const ModelInfo& mi, std::vector<Pending>* out,
                                 std::vector<std::string>* other,
                                 std::vector<std::string>* warnings);

std::optional<ApiError> namespace_tool(const Json& tool, const std::string& where,
                                       const ModelInfo& mi, std::vector<Pending>* out,
                                       std::vector<std::string>* other,
                                       std::vector<std::string>* warnings) {
  std::string ns;
  QWEN35_TRY(get_string(tool, "name", where, &ns));
  if (ns.empty()) return bad(where + ".name", "'" + where + ".name' must not be empty");
  const Json* inner = field(tool, "tools");
  if (!inner || !inner->is_array())
    return bad(where + ".tools", "'" + where + ".tools' must be an array");
  for (size_t k = 0; k < inner->size(); ++k)
    QWEN35_TRY(one_tool((*inner)[k], where + ".tools[" + std::to_string(k) + "]", ns, mi, out,
                        other, warnings));
  return std::nullopt;
}

std::optional<ApiError> one_tool(const Json& tool, const std::string& where, const std::string& ns,
                                 const ModelInfo& mi, std::vector<Pending>* out,
                                 std::vector<std::string>* other,
                                 std::vector<std::string>* warnings) {
  const Json* ty = tool.is_object() ? field(tool, "type") : nullptr;
  if (!ty || !ty->is_string())
    return bad(where, "'" + where + "' must be an object with a string 'type'");
  const std::string type = *ty;
  if (type == "namespace" && ns.empty())
    return namespace_tool(tool, where, mi, out, other, warnings);
  Pending p;
  p.ns = ns;
  if (type == "function") {
    QWEN35_TRY(flat_function_tool(tool, where, "parameters", false, &p.fn));
    p.name = p.fn["function"]["name"];
  } else if (type == "custom") {
    QWEN35_TRY(custom_tool(tool, where, mi, &p, warnings));
  } else {
    other->push_back(where + " (" + type + ")");
    return std::nullopt;
  }
  if (p.name.empty()) return bad(where + ".name", "'" + where + ".name' must not be empty");
  out->push_back(std::move(p));
  return std::nullopt;
}

}  // namespace

const ToolOrigin* AgentTools::origin(const std::string& model_name) const {
  auto it = by_model.find(model_name);
  return it == by_model.end() ? nullptr : &it->second;
}

std::string AgentTools::model_name(const std::string& ns, const std::string& name) const {
  for (const auto& [m, o] : by_model)
    if (o.ns == ns && o.name == name) return m;
  return name;
}

std::optional<ApiError> read_responses_tools(const Json& t, const ModelInfo& mi, Json* fn,
                                             AgentTools* out) {
  if (!t.is_array()) return bad("tools", "'tools' must be an array");
  std::vector<Pending> tools;
  std::vector<std::string> other;
  for (size_t k = 0; k < t.size(); ++k)
    QWEN35_TRY(one_tool(t[k], "tools[" + std::to_string(k) + "]", "", mi, &tools, &other,
                        &out->warnings));
  if (!other.empty() && mi.strict_tools) {
    std::string names;
    for (const auto& o : other) names += (names.empty() ? "" : ", ") + o;
    return bad("tools", "built-in tools are not supported: " + names +
                            " (only tools of type \"function\", \"custom\" and \"namespace\"; "
                            "the server runs with --strict-tools)");
  }
  for (const auto& o : other) out->warnings.push_back(left_out_warning(o));
  // A flattened tool keeps its own name unless another tool has it too.
  std::map<std::string, int> uses;
  for (const auto& p : tools) ++uses[p.name];
  std::set<std::string> taken;
  *fn = Json::array();
  for (auto& p : tools) {
    std::string name = p.name;
    if (!p.ns.empty() && uses[p.name] > 1) name = p.ns + "." + p.name;
    if (!taken.insert(name).second)
      return bad("tools", "two tools are named '" + name + "'");
    p.fn["function"]["name"] = name;
    if (!p.ns.empty() || p.custom || name != p.name) out->by_model[name] = {p.name, p.ns, p.custom};
    fn->push_back(std::move(p.fn));
  }
  return std::nullopt;
}

std::string left_out_warning(const std::string& what) {
  return what + " is left out: the server cannot run it";
}

std::string warnings_header(const std::vector<std::string>& warnings) {
  std::string out;
  for (const auto& w : warnings) {
    if (!out.empty()) out += "; ";
    for (unsigned char ch : w) out += ch >= 0x20 && ch < 0x7f ? char(ch) : '?';
  }
  return out;
}

}  // namespace qwen35::server
