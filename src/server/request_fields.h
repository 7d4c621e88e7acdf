// Reading fields of client JSON: shared by the request parsers of every endpoint (request.cc,
// structured.cc, responses_request.cc, messages_request.cc). Each getter leaves *v alone when
// the field is absent or null, and otherwise returns an ApiError that names the field when its
// value has the wrong type or range. `name` is the key read; `path` (when given) is how the
// client's API names that field, which the error uses: a parser reading a mapped body passes
// the API's path, so the error is in the client's terms where it arises.
#pragma once

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "server/request.h"

namespace qwen35::server::fields {

inline ApiError bad(const std::string& param, const std::string& message) {
  return invalid(param, message);
}

// The field, or null when it is absent or JSON null.
inline const Json* field(const Json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

// An object {"type": T, ...}.
inline bool has_type(const Json& f, const char* t) {
  if (!f.is_object()) return false;
  auto it = f.find("type");
  return it != f.end() && it->is_string() && it->get<std::string>() == t;
}

inline std::optional<ApiError> get_bool(const Json& b, const char* name, const std::string& path,
                                        bool* v) {
  const Json* f = field(b, name);
  if (!f) return std::nullopt;
  if (!f->is_boolean()) return bad(path, "'" + path + "' must be a boolean");
  *v = f->get<bool>();
  return std::nullopt;
}

inline std::optional<ApiError> get_float(const Json& b, const char* name, const std::string& path,
                                         float* v) {
  const Json* f = field(b, name);
  if (!f) return std::nullopt;
  if (!f->is_number()) return bad(path, "'" + path + "' must be a number");
  const double d = f->get<double>();
  // A double past float's range would become inf: refused here, where the field is known.
  if (!std::isfinite(d) || std::fabs(d) > double(std::numeric_limits<float>::max()))
    return bad(path, "'" + path + "' must be a finite number within float range");
  *v = float(d);
  return std::nullopt;
}

// An integer in [lo, hi]; a float with an integral value is taken too (clients send 64.0).
inline std::optional<ApiError> get_int(const Json& b, const char* name, const std::string& path,
                                       int64_t* v, int64_t lo, int64_t hi) {
  const Json* f = field(b, name);
  if (!f) return std::nullopt;
  int64_t x = 0;
  if (f->is_number_integer()) {
    x = f->is_number_unsigned() ? int64_t(std::min<uint64_t>(f->get<uint64_t>(), INT64_MAX))
                                : f->get<int64_t>();
  } else if (f->is_number_float() && std::floor(f->get<double>()) == f->get<double>() &&
             std::fabs(f->get<double>()) < 9e15) {
    x = int64_t(f->get<double>());
  } else {
    return bad(path, "'" + path + "' must be an integer");
  }
  if (x < lo || x > hi)
    return bad(path, "'" + path + "' must be in [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + "], got " + std::to_string(x));
  *v = x;
  return std::nullopt;
}

// The same, for a field the client's API names as it is read.
inline std::optional<ApiError> get_bool(const Json& b, const char* name, bool* v) {
  return get_bool(b, name, name, v);
}
inline std::optional<ApiError> get_float(const Json& b, const char* name, float* v) {
  return get_float(b, name, name, v);
}
inline std::optional<ApiError> get_int(const Json& b, const char* name, int64_t* v, int64_t lo,
                                       int64_t hi) {
  return get_int(b, name, name, v, lo, hi);
}

// A required string field of an object at `where` ("input[2]"): absent is an error too.
inline std::optional<ApiError> get_string(const Json& obj, const char* name,
                                          const std::string& where, std::string* out) {
  const Json* f = field(obj, name);
  if (!f || !f->is_string())
    return bad(where + "." + name, "'" + where + "." + name + "' must be a string");
  *out = f->get<std::string>();
  return std::nullopt;
}

}  // namespace qwen35::server::fields

// Returns the ApiError of a parsing step, if it has one.
#define QWEN35_TRY(expr)             \
  do {                               \
    if (auto _e = (expr)) return _e; \
  } while (0)

namespace qwen35::server::fields {

// A function tool sent flat ({name, description, <schema_key>}, at `where`: "tools[2]") -> the
// form the chat template reads, {"type": "function", "function": {name, description,
// parameters}}. The Responses and Messages APIs both send tools flat; only the schema's key
// differs ("parameters", which may be left out; Anthropic's "input_schema", which may not).
// A strict tool ({"strict": true}) keeps it as function.strict.
inline std::optional<ApiError> flat_function_tool(const Json& tool, const std::string& where,
                                                  const char* schema_key, bool schema_required,
                                                  Json* out) {
  std::string name;
  QWEN35_TRY(get_string(tool, "name", where, &name));
  Json fn = {{"name", name}};
  if (const Json* d = field(tool, "description")) {
    if (!d->is_string())
      return bad(where + ".description", "'" + where + ".description' must be a string");
    fn["description"] = *d;
  }
  const Json* schema = field(tool, schema_key);
  const std::string at = where + "." + schema_key;
  if ((schema && !schema->is_object()) || (!schema && schema_required))
    return bad(at, "'" + at + "' must be a JSON schema (an object)");
  fn["parameters"] = schema ? *schema : Json{{"type", "object"}, {"properties", Json::object()}};
  // strict (both APIs): the call's arguments are held to the schema, as chat's function.strict.
  if (const Json* st = field(tool, "strict")) {
    if (!st->is_boolean()) return bad(where + ".strict", "'" + where + ".strict' must be a boolean");
    if (st->get<bool>()) fn["strict"] = true;
  }
  *out = {{"type", "function"}, {"function", std::move(fn)}};
  return std::nullopt;
}

// How an API sends its tools, where the Responses and Messages APIs differ.
struct ToolDialect {
  const char* function_type;  // the type of a function tool: "function", Anthropic's "custom"
  bool type_required;         // whether a tool must name its type (Anthropic's may leave it out)
  const char* schema_key;     // "parameters" (optional), "input_schema" (required)
  bool schema_required;
  const char* refused;  // what the error calls the other tools, e.g. "built-in tools"
  const char* only;     // what it says is supported, e.g. "(only tools of type \"function\")"
};

// The request's `tools` (an array of flat tools) -> the chat template's function tools in
// *tools (left alone without `tools`). Tools of another type are named in *left_out ("tools[2]
// (web_search_20250305)"), or refused together by name when left_out is null.
inline std::optional<ApiError> map_function_tools(const Json& b, const ToolDialect& d,
                                                  Json* tools,
                                                  std::vector<std::string>* left_out = nullptr) {
  const Json* t = field(b, "tools");
  if (!t) return std::nullopt;
  if (!t->is_array()) return bad("tools", "'tools' must be an array");
  *tools = Json::array();
  std::string other;
  for (size_t k = 0; k < t->size(); ++k) {
    const std::string where = "tools[" + std::to_string(k) + "]";
    const Json& tool = (*t)[k];
    const Json* ty = tool.is_object() ? field(tool, "type") : nullptr;
    if (!tool.is_object() || (d.type_required && !(ty && ty->is_string())))
      return bad(where, "'" + where + "' must be an object" +
                            (d.type_required ? " with a string 'type'" : ""));
    if (ty && *ty != d.function_type) {  // the API's own tools (bash_20250124, web_search, ...)
      const std::string type = ty->is_string() ? ty->get<std::string>() : ty->dump();
      if (left_out) left_out->push_back(where + " (" + type + ")");
      other += (other.empty() ? "" : ", ") + type;
      continue;
    }
    Json fn;
    QWEN35_TRY(flat_function_tool(tool, where, d.schema_key, d.schema_required, &fn));
    tools->push_back(std::move(fn));
  }
  if (!other.empty() && !left_out)
    return bad("tools", std::string(d.refused) + " are not supported: " + other + " " + d.only);
  return std::nullopt;
}

// Where each function tool that map_function_tools keeps was in the request ("tools[3]"), in
// its order, for errors about a tool's fields (ChatNames::tool_paths).
inline std::vector<std::string> function_tool_paths(const Json& b, const ToolDialect& d) {
  std::vector<std::string> paths;
  const Json* t = field(b, "tools");
  if (!t || !t->is_array()) return paths;
  for (size_t k = 0; k < t->size(); ++k) {
    const Json& tool = (*t)[k];
    const Json* ty = tool.is_object() ? field(tool, "type") : nullptr;
    if (!ty || *ty == d.function_type) paths.push_back("tools[" + std::to_string(k) + "]");
  }
  return paths;
}

}  // namespace qwen35::server::fields
