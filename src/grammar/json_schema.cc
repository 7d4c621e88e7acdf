#include "grammar/json_schema.h"

#include <algorithm>
#include <set>

#include "grammar/regex.h"
#include "grammar/schema_detail.h"

namespace qwen35::grammar {
using schema_detail::fail;
using schema_detail::matches_type;
using schema_detail::SchemaError;
using schema_detail::text;
namespace {

const std::set<std::string>& annotations() {
  static const std::set<std::string> k = {"title",   "description", "default",  "examples",
                                          "$schema", "$id",         "$comment", "deprecated",
                                          "readOnly", "writeOnly",  "$defs",    "definitions"};
  return k;
}

const std::set<std::string>& supported() {
  static const std::set<std::string> k = {
      "type",     "properties", "required",  "additionalProperties", "items",
      "minItems", "maxItems",   "enum",      "const",                "anyOf",
      "allOf",    "$ref",       "minLength", "maxLength",            "pattern",
      "format",   "oneOf",      "minimum",   "maximum",              "exclusiveMinimum",
      "exclusiveMaximum",       "propertyNames",                     "patternProperties",
      "prefixItems",            "uniqueItems"};
  return k;
}

// Format patterns, in the regex subset (ajv-formats' full mode accepts each match).
const char* format_pattern(const std::string& f) {
  if (f == "date")
    return "^\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)"
           "|02-(?:0[1-9]|1\\d|2[0-8]))$";
  if (f == "time") return "^(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d{1,6})?(?:Z|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)$";
  if (f == "date-time")
    return "^\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)"
           "|02-(?:0[1-9]|1\\d|2[0-8]))T(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d{1,6})?"
           "(?:Z|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)$";
  if (f == "uuid") return "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
  if (f == "email") return "^[a-z0-9_+-]{1,32}(?:\\.[a-z0-9_+-]{1,32}){0,3}@[a-z0-9]{1,32}(?:-[a-z0-9]{1,32})?(?:\\.[a-z0-9]{1,32}){0,3}\\.[a-z]{2,8}$";
  if (f == "ipv4") return "^(?:(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)$";
  return nullptr;
}

}  // namespace

JsonSchemaCompiler::JsonSchemaCompiler(Builder& b, const Json& root) : b_(b), chars_(b), root_(root) {}

Sym JsonSchemaCompiler::ws() {
  if (ws_.id < 0) {
    ByteSet indent;
    indent.set(' ').set('\t');
    ws_ = b_.alt({b_.empty(), b_.byte(' '),
                  b_.seq({b_.byte('\n'), b_.repeat(b_.bytes(indent), 0, 24)})});
  }
  return ws_;
}

Sym JsonSchemaCompiler::sep() { return b_.seq({ws(), b_.byte(','), ws()}); }

Sym JsonSchemaCompiler::any_value() {
  if (any_.id >= 0) return any_;
  any_ = b_.rule();  // recursive: arrays and objects hold values
  const Sym sep = b_.seq({ws(), b_.byte(','), ws()});
  if (string_.id < 0) string_ = b_.seq({b_.byte('"'), b_.star(chars_.json_any()), b_.byte('"')});
  const Sym array = b_.seq({b_.byte('['), ws(), b_.list(any_, sep, 0, -1), ws(), b_.byte(']')});
  const Sym member = b_.seq({string_, ws(), b_.byte(':'), ws(), any_});
  any_object_ = b_.seq({b_.byte('{'), ws(), b_.list(member, sep, 0, -1), ws(), b_.byte('}')});
  for (const Sym s : {any_object_, array, string_, typed("number", Json::object(), ""),
                      b_.literal("true"), b_.literal("false"), b_.literal("null")})
    b_.add(any_, {s});
  return any_;
}

Sym JsonSchemaCompiler::any_object() {
  any_value();
  return any_object_;
}

int64_t JsonSchemaCompiler::count(const Json& s, const char* key, int64_t dflt,
                                  const std::string& path) {
  auto it = s.find(key);
  if (it == s.end()) return dflt;
  if (!it->is_number_integer() || it->get<int64_t>() < 0)
    fail("'" + std::string(key) + "' at " + path + " must be a non-negative integer");
  if (it->get<int64_t>() > kMaxCount)
    fail("'" + std::string(key) + "' at " + path + " is over " + std::to_string(kMaxCount));
  return it->get<int64_t>();
}

Sym JsonSchemaCompiler::ref(const std::string& r, const std::string& path) {
  if (auto it = refs_.find(r); it != refs_.end()) return it->second;
  const Json* target = nullptr;
  std::string name;
  if (r == "#") {
    target = &root_;
  } else {
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (r.compare(0, p.size(), p) != 0) continue;
      name = r.substr(p.size());
      const std::string section = p.substr(2, p.size() - 3);
      auto sec = root_.find(section);
      if (sec != root_.end() && sec->is_object() && sec->contains(name)) target = &(*sec)[name];
    }
  }
  if (!target) fail("'$ref' at " + path + ": '" + r + "' is not \"#\" or a name in $defs");
  const Sym rule = b_.rule();
  refs_.emplace(r, rule);  // before compiling: a recursive reference finds the rule
  // A chain of references to not yet compiled definitions recurses: bounded.
  // 128: each level is four frames (ref, compile, typed, array) that must fit a sanitizer's stack.
  if (++ref_depth_ > 128) fail("'$ref' at " + path + ": references chain more than 128 definitions deep");
  b_.add(rule, {compile(*target, r)});
  --ref_depth_;
  return rule;
}

void JsonSchemaCompiler::check_keywords(const Json& s, const std::string& path) {
  if (!s.is_object()) fail("the schema at " + path + " must be an object or a boolean");
  for (const auto& [k, v] : s.items())
    if (!annotations().count(k) && !supported().count(k))
      fail("unsupported JSON Schema keyword '" + k + "' at " + path);
}

Sym JsonSchemaCompiler::compile(const Json& s, const std::string& path) {
  if (b_.too_large()) fail("the schema makes too large a grammar");
  if (s.is_boolean()) {
    if (s.get<bool>()) return any_value();
    fail("the schema at " + path + " is false: it admits no value");
  }
  check_keywords(s, path);
  auto has = [&](const char* k) { return s.contains(k); };
  auto only = [&](const char* k) {  // k and annotations, nothing else
    for (const auto& [key, v] : s.items())
      if (key != k && !annotations().count(key))
        fail("'" + std::string(k) + "' at " + path + " cannot be combined with '" + key + "'");
  };
  if (has("$ref")) {
    only("$ref");
    if (!s["$ref"].is_string()) fail("'$ref' at " + path + " must be a string");
    return ref(s["$ref"].get<std::string>(), path);
  }
  if (has("allOf")) {
    only("allOf");
    if (!s["allOf"].is_array() || s["allOf"].size() != 1)
      fail("'allOf' at " + path + " is supported only with exactly one schema");
    return compile(s["allOf"][0], path + "/allOf/0");
  }
  // oneOf as anyOf: a value valid under two of its schemas is not excluded (see the header).
  for (const char* k : {"anyOf", "oneOf"}) {
    if (!has(k)) continue;
    only(k);
    const Json& a = s[k];
    if (!a.is_array() || a.empty()) fail("'" + std::string(k) + "' at " + path + " must be a non-empty array");
    std::vector<Sym> opts;
    for (size_t i = 0; i < a.size(); ++i)
      opts.push_back(compile(a[i], path + "/" + k + "/" + std::to_string(i)));
    return b_.alt(std::move(opts));
  }
  std::vector<std::string> types;
  if (has("type")) {
    const Json& t = s["type"];
    if (t.is_string()) types.push_back(t.get<std::string>());
    else if (t.is_array())
      for (const auto& x : t) {
        if (!x.is_string()) fail("'type' at " + path + " must be a string or a list of strings");
        types.push_back(x.get<std::string>());
      }
    else fail("'type' at " + path + " must be a string or a list of strings");
    for (const auto& x : types)
      if (x != "null" && x != "boolean" && x != "integer" && x != "number" && x != "string" &&
          x != "array" && x != "object")
        fail("unknown type '" + x + "' at " + path);
    if (types.empty()) fail("'type' at " + path + " is an empty list");
  }
  if (has("enum") || has("const")) {
    std::vector<Json> values;
    if (has("const")) values.push_back(s["const"]);
    if (has("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) fail("'enum' at " + path + " must be a non-empty array");
      for (const auto& v : s["enum"]) values.push_back(v);
    }
    if (has("enum") && has("const"))
      values.erase(std::remove_if(values.begin() + 1, values.end(), [&](const Json& v) { return v != values[0]; }),
                   values.end());
    for (const auto& [k, v] : s.items())
      if (k != "enum" && k != "const" && k != "type" && !annotations().count(k))
        fail("'" + k + "' at " + path + " cannot be combined with 'enum' or 'const'");
    std::vector<Sym> opts;
    for (const auto& v : values) {
      const bool ok = types.empty() ||
                      std::any_of(types.begin(), types.end(), [&](const auto& t) { return matches_type(v, t); });
      if (ok) opts.push_back(b_.literal(text(v)));
    }
    if (opts.empty()) fail("no value of 'enum'/'const' at " + path + " has the schema's type");
    return b_.alt(std::move(opts));
  }
  if (types.empty()) {  // the type the keywords imply, else any value
    if (has("properties") || has("required") || has("additionalProperties") ||
        has("propertyNames") || has("patternProperties"))
      types = {"object"};
    else if (has("items") || has("minItems") || has("maxItems") || has("prefixItems") || has("uniqueItems"))
      types = {"array"};
    else if (has("pattern") || has("format") || has("minLength") || has("maxLength")) types = {"string"};
    else if (has("minimum") || has("maximum") || has("exclusiveMinimum") || has("exclusiveMaximum"))
      types = {"number"};
    else return any_value();
  }
  std::vector<Sym> opts;
  for (const auto& t : types) opts.push_back(typed(t, s, path));
  return b_.alt(std::move(opts));
}

Sym JsonSchemaCompiler::typed(const std::string& t, const Json& s, const std::string& path) {
  if (t == "null") return b_.literal("null");
  if (t == "boolean") return b_.alt({b_.literal("true"), b_.literal("false")});
  if (t == "integer" || t == "number") {
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
      if (s.contains(k)) return bounded_number(t, s, path);
    if (integer_.id < 0) {
      const Sym digit = b_.range('0', '9');
      const Sym nat = b_.alt({b_.byte('0'), b_.seq({b_.range('1', '9'), b_.repeat(digit, 0, 15)})});
      integer_ = b_.seq({b_.opt(b_.byte('-')), nat});
      ByteSet e, sign;
      e.set('e').set('E');
      sign.set('+').set('-');
      const Sym frac = b_.opt(b_.seq({b_.byte('.'), b_.repeat(digit, 1, 16)}));
      const Sym exp = b_.opt(b_.seq({b_.bytes(e), b_.opt(b_.bytes(sign)), b_.repeat(digit, 1, 2)}));
      number_ = b_.seq({integer_, frac, exp});
    }
    return t == "integer" ? integer_ : number_;
  }
  if (t == "string") return b_.seq({b_.byte('"'), string_body(s, path, Encoding::kJson), b_.byte('"')});
  if (t == "array") return array(s, path);
  return object(s, path);
}

Sym JsonSchemaCompiler::string_body(const Json& s, const std::string& path, Encoding enc) {
  const bool pattern = s.contains("pattern"), format = s.contains("format");
  const bool lengths = s.contains("minLength") || s.contains("maxLength");
  if (int(pattern) + int(format) + int(lengths) > 1)
    fail("the string at " + path + " combines 'pattern', 'format' and lengths; only one is supported");
  // Raw text leaves out '<' wherever a constraint decides the characters (CharSyms::of).
  const Sym ch = enc == Encoding::kJson ? chars_.json_any() : chars_.of(CharSet::any(), enc);
  if (pattern || format) {
    std::string p;
    if (pattern) {
      if (!s["pattern"].is_string()) fail("'pattern' at " + path + " must be a string");
      p = s["pattern"].get<std::string>();
    } else {
      if (!s["format"].is_string()) fail("'format' at " + path + " must be a string");
      const char* fp = format_pattern(s["format"].get<std::string>());
      if (!fp) fail("unsupported format '" + s["format"].get<std::string>() + "' at " + path +
                    " (supported: date, time, date-time, uuid, email, ipv4)");
      p = fp;
    }
    auto r = compile_pattern(p, b_, chars_, enc);
    if (!r.ok()) fail("'pattern' at " + path + ": " + r.message());
    return *r;
  }
  if (lengths) {
    const int64_t lo = count(s, "minLength", 0, path), hi = count(s, "maxLength", -1, path);
    if (hi >= 0 && hi < lo) fail("'maxLength' at " + path + " is below 'minLength'");
    return b_.repeat(ch, lo, hi);
  }
  if (enc == Encoding::kJson) return b_.star(ch);
  // Unconstrained raw text: any characters, but '<' never directly before '/'.
  const Sym not_lt = chars_.of(CharSet::any(), enc);
  const Sym after_lt = chars_.of(CharSet::any().minus(CharSet().add('/')), enc);
  const Sym lts = b_.plus(b_.byte('<'));
  return b_.seq({b_.star(b_.alt({not_lt, b_.seq({lts, after_lt})})), b_.opt(lts)});
}

core::Result<Sym> JsonSchemaCompiler::value(const Json& schema, const std::string& path) {
  try {
    return compile(schema, path);
  } catch (const SchemaError& e) {
    return core::error(e.what());
  }
}

core::Result<Sym> JsonSchemaCompiler::raw_string(const Json& schema, const std::string& path) {
  try {
    check_keywords(schema, path);
    if (schema.contains("enum") || schema.contains("const")) {
      std::vector<Sym> opts;
      std::vector<Json> values;
      if (schema.contains("const")) values.push_back(schema["const"]);
      if (schema.contains("enum") && schema["enum"].is_array())
        for (const auto& v : schema["enum"]) values.push_back(v);
      for (const auto& v : values)
        if (v.is_string() && v.get<std::string>().find('<') == std::string::npos)
          opts.push_back(b_.literal(v.get<std::string>()));
      if (opts.empty()) fail("no string of 'enum'/'const' at " + path + " can be written raw (without '<')");
      return b_.alt(std::move(opts));
    }
    return string_body(schema, path, Encoding::kRaw);
  } catch (const SchemaError& e) {
    return core::error(e.what());
  }
}

namespace {
core::Result<Grammar> document(Builder& b, core::Result<Sym> v) {
  if (!v.ok()) return v.status();
  const Sym pad = b.repeat(b.byte('\n'), 0, 2);
  return b.finish(b.seq({pad, *v, pad}));
}
}  // namespace

core::Result<Grammar> json_schema_grammar(const Json& schema, int64_t max_states) {
  Builder b(max_states);
  JsonSchemaCompiler c(b, schema);
  return document(b, c.value(schema, "#"));
}

core::Result<Grammar> json_object_grammar() {
  Builder b;
  const Json root = Json::object();
  JsonSchemaCompiler c(b, root);
  return document(b, c.any_object());
}

}  // namespace qwen35::grammar
