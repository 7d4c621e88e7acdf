// Arrays and objects of JsonSchemaCompiler (json_schema.h says what each keyword enforces).
#include <algorithm>
#include <set>

#include "grammar/json_schema.h"
#include "grammar/schema_detail.h"

namespace qwen35::grammar {
using schema_detail::fail;
using schema_detail::matches_type;
using schema_detail::text;

namespace {

// Most (value, count) rules a unique array's grammar may take (each is a few symbols).
constexpr int64_t kMaxUniqueRules = 1 << 16;

bool is_false(const Json& s) { return s.is_boolean() && !s.get<bool>(); }

}  // namespace

Sym JsonSchemaCompiler::array(const Json& s, const std::string& path) {
  const int64_t lo = count(s, "minItems", 0, path);
  int64_t hi = count(s, "maxItems", -1, path);
  if (hi >= 0 && hi < lo) fail("'maxItems' at " + path + " is below 'minItems'");
  if (s.contains("uniqueItems")) {
    if (!s["uniqueItems"].is_boolean()) fail("'uniqueItems' at " + path + " must be a boolean");
    // With at most one item every array is unique.
    if (s["uniqueItems"].get<bool>() && !(hi >= 0 && hi <= 1)) return unique_array(s, path, lo, hi);
  }
  std::vector<Sym> prefix;
  if (s.contains("prefixItems")) {
    const Json& p = s["prefixItems"];
    if (!p.is_array()) fail("'prefixItems' at " + path + " must be an array of schemas");
    for (size_t i = 0; i < p.size(); ++i)
      prefix.push_back(compile(p[i], path + "/prefixItems/" + std::to_string(i)));
  }
  const int64_t n = int64_t(prefix.size());
  // The items after the prefix: `items` (false: none), else any values.
  Sym item = any_value();
  if (s.contains("items")) {
    const Json& it = s["items"];
    if (it.is_array()) fail("'items' as a list (tuples) at " + path + " is not supported; use 'prefixItems'");
    if (is_false(it)) hi = hi < 0 ? n : std::min(hi, n);
    else item = compile(it, path + "/items");
  }
  if (hi >= 0 && hi < lo) fail("the array at " + path + " admits no length: 'items' is false after " +
                               std::to_string(n) + " items, and 'minItems' is " + std::to_string(lo));
  const Sym sep = this->sep();
  Sym body;
  if (n == 0) {
    body = b_.list(item, sep, lo, hi);
  } else {
    // after(i): the items from position i on, once i (>= 1) are written, each after a comma.
    Sym after = b_.repeat(b_.seq({sep, item}), std::max<int64_t>(lo - n, 0), hi < 0 ? -1 : std::max<int64_t>(hi - n, 0));
    for (int64_t i = n - 1; i >= 1; --i) {
      if (hi >= 0 && i >= hi) {
        after = b_.empty();
        continue;
      }
      const Sym write = b_.seq({sep, prefix[size_t(i)], after});
      after = i >= lo ? b_.alt({b_.empty(), write}) : write;
    }
    const Sym first = b_.seq({prefix[0], after});
    body = hi == 0 ? b_.empty() : lo == 0 ? b_.opt(first) : first;
  }
  return b_.seq({b_.byte('['), ws(), body, ws(), b_.byte(']')});
}

// uniqueItems over a finite set of item values (enum, const, boolean, null): the arrays of
// distinct values, written in the set's order (every such array's values, reordered, is one).
Sym JsonSchemaCompiler::unique_array(const Json& s, const std::string& path, int64_t lo, int64_t hi) {
  const std::string why = "'uniqueItems' at " + path +
                          " is enforced only for items from a finite set of values (enum, const, "
                          "boolean, null) without 'prefixItems', or with 'maxItems' of at most 1";
  if (s.contains("prefixItems") || !s.contains("items") || !s["items"].is_object()) fail(why);
  const Json& it = s["items"];
  for (const auto& [k, v] : it.items())
    if (k != "enum" && k != "const" && k != "type" && k != "description" && k != "title")
      fail(why + " ('" + k + "' at " + path + "/items)");
  std::vector<std::string> types;
  if (it.contains("type")) {
    if (it["type"].is_string()) types.push_back(it["type"].get<std::string>());
    else if (it["type"].is_array())
      for (const auto& t : it["type"])
        if (t.is_string()) types.push_back(t.get<std::string>());
  }
  std::vector<Json> candidates;
  if (it.contains("const")) candidates.push_back(it["const"]);
  if (it.contains("enum")) {
    if (!it["enum"].is_array() || it["enum"].empty()) fail("'enum' at " + path + "/items must be a non-empty array");
    for (const auto& v : it["enum"])
      if (!it.contains("const") || v == it["const"]) candidates.push_back(v);
  }
  if (!it.contains("const") && !it.contains("enum")) {
    for (const auto& t : types) {
      if (t == "boolean") candidates.insert(candidates.end(), {Json(true), Json(false)});
      else if (t == "null") candidates.push_back(Json(nullptr));
      else fail(why);
    }
    if (types.empty()) fail(why);
  }
  std::vector<Json> values;  // distinct (JSON equality: 1 and 1.0 are one value), of the type
  for (const auto& v : candidates) {
    const bool typed = types.empty() || std::any_of(types.begin(), types.end(), [&](const auto& t) { return matches_type(v, t); });
    if (typed && std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
  }
  if (values.empty()) fail("no value of 'enum'/'const' at " + path + "/items has the schema's type");
  const int64_t k = int64_t(values.size());
  if (lo > k) fail("'minItems' at " + path + " asks for more than the " + std::to_string(k) + " distinct items there are");
  const int64_t top = hi < 0 ? k : std::min(hi, k);
  // R(i, c): the values from i on, c written so far; c only matters up to max(lo, 1) when the
  // count has no upper bound below k.
  const int64_t cmax = top < k ? top : std::max<int64_t>(lo, 1);
  if ((k + 1) * (cmax + 1) > kMaxUniqueRules) fail("'uniqueItems' at " + path + " has too many values and counts to write out");
  const Sym sep = this->sep();
  std::vector<Sym> next(size_t(cmax + 1)), cur(size_t(cmax + 1));
  std::vector<bool> next_ok(size_t(cmax + 1)), cur_ok(size_t(cmax + 1));
  for (int64_t c = 0; c <= cmax; ++c) {  // i = k: done, if enough were written
    next_ok[size_t(c)] = c >= lo;
    if (next_ok[size_t(c)]) next[size_t(c)] = b_.empty();
  }
  for (int64_t i = k - 1; i >= 0; --i) {
    const Sym lit = b_.literal(text(values[size_t(i)]));
    for (int64_t c = 0; c <= cmax; ++c) {
      const int64_t c2 = std::min(c + 1, cmax);
      if (c2 == c && top == k && c > 0 && next_ok[size_t(c)]) {
        // Writing it or not, the same rest follows: an optional item (states add, not double).
        cur_ok[size_t(c)] = true;
        cur[size_t(c)] = b_.seq({b_.opt(b_.seq({sep, lit})), next[size_t(c)]});
        continue;
      }
      std::vector<Sym> opts;
      if (next_ok[size_t(c)]) opts.push_back(next[size_t(c)]);  // skip value i
      if ((top == k || c < top) && c < k && next_ok[size_t(c2)])  // write it
        opts.push_back(c > 0 ? b_.seq({sep, lit, next[size_t(c2)]}) : b_.seq({lit, next[size_t(c2)]}));
      cur_ok[size_t(c)] = !opts.empty();
      if (cur_ok[size_t(c)]) cur[size_t(c)] = b_.alt(std::move(opts));
    }
    std::swap(cur, next);
    std::swap(cur_ok, next_ok);
  }
  return b_.seq({b_.byte('['), ws(), next[0], ws(), b_.byte(']')});
}

Sym JsonSchemaCompiler::key(const Json& names, const std::string& path) {
  if (string_.id < 0) string_ = b_.seq({b_.byte('"'), b_.star(chars_.json_any()), b_.byte('"')});
  if (names.is_boolean() && names.get<bool>()) return string_;
  if (!names.is_object()) fail("'propertyNames' at " + path + " must be a string schema");
  Json k = names;
  if (k.contains("type") && k["type"] != "string")
    fail("'propertyNames' at " + path + " must be a string schema ('type' \"string\")");
  k["type"] = "string";
  return compile(k, path + "/propertyNames");
}

Sym JsonSchemaCompiler::object(const Json& s, const std::string& path) {
  std::vector<std::pair<std::string, Sym>> props;
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) fail("'required' at " + path + " must be an array of strings");
    for (const auto& r : s["required"]) {
      if (!r.is_string()) fail("'required' at " + path + " must be an array of strings");
      required.insert(r.get<std::string>());
    }
  }
  // propertyNames as a set of keys (false, an enum or a const): declared keys outside it are
  // left out, or the object admits nothing when they are required.
  const Json* names = s.contains("propertyNames") ? &s["propertyNames"] : nullptr;
  auto named = [&](const std::string& key) {
    if (!names) return true;
    if (is_false(*names)) return false;
    if (!names->is_object()) return true;  // key() reports it
    const Json kj(key);
    if (names->contains("const") && (*names)["const"] != kj) return false;
    if (names->contains("enum") && (*names)["enum"].is_array()) {
      const Json& e = (*names)["enum"];
      if (std::find(e.begin(), e.end(), kj) == e.end()) return false;
    }
    return true;
  };
  for (const auto& r : required)
    if (!named(r)) fail("required property '" + r + "' at " + path + " is not allowed by 'propertyNames'");
  std::set<std::string> declared;
  if (s.contains("properties")) {
    if (!s["properties"].is_object()) fail("'properties' at " + path + " must be an object");
    for (const auto& [k, v] : s["properties"].items()) {
      if (!named(k)) continue;
      props.emplace_back(k, compile(v, path + "/properties/" + k));
      declared.insert(k);
    }
  }
  for (const auto& r : required)  // required but not declared: any value
    if (!declared.count(r)) props.emplace_back(r, any_value());
  const Json* extra = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
  if (extra && !extra->is_boolean() && !extra->is_object())
    fail("'additionalProperties' at " + path + " must be a boolean or a schema");
  const Json* patterns = s.contains("patternProperties") ? &s["patternProperties"] : nullptr;
  if (patterns && !patterns->is_object()) fail("'patternProperties' at " + path + " must be an object");
  if (patterns && patterns->empty()) patterns = nullptr;
  if (patterns && patterns->size() > 1)
    fail("'patternProperties' at " + path + " is supported with one pattern (a key matching two "
         "would need both schemas)");
  if (patterns && names && !(names->is_boolean() && names->get<bool>()) &&
      !(names->is_object() && (names->empty() || *names == Json{{"type", "string"}})))
    fail("'patternProperties' at " + path + " cannot be combined with 'propertyNames'");
  // Extra members only when nothing is declared (so they never repeat a declared key): keys of
  // the pattern with its schema, else keys under propertyNames with additionalProperties' schema.
  Sym member{};
  if (props.empty() && names && is_false(*names)) {
    // no key at all: {}
  } else if (props.empty() && patterns) {
    const std::string pattern = patterns->begin().key();
    const Json& schema = patterns->begin().value();
    const std::string at = path + "/patternProperties/" + pattern;
    const Sym k = compile(Json{{"type", "string"}, {"pattern", pattern}}, at);
    member = b_.seq({k, ws(), b_.byte(':'), ws(), compile(schema, at)});
  } else if (props.empty() && !(extra && is_false(*extra))) {
    const Sym k = names ? key(*names, path) : key(Json(true), path);
    const Sym v = extra && extra->is_object() ? compile(*extra, path + "/additionalProperties") : any_value();
    member = b_.seq({k, ws(), b_.byte(':'), ws(), v});
  }
  const Sym sep = this->sep();
  // M(i, e): the members from property i on, e telling whether one was written (then a comma
  // comes first). Built from the end.
  Sym tail[2];
  for (int e = 0; e < 2; ++e) {
    if (member.id >= 0) {
      const Sym more = b_.star(b_.seq({sep, member}));
      tail[e] = e ? more : b_.opt(b_.seq({member, more}));
    } else {
      tail[e] = b_.empty();
    }
  }
  for (size_t i = props.size(); i-- > 0;) {
    const auto& [key, val] = props[i];
    const Sym kv = b_.seq({b_.literal(text(Json(key))), ws(), b_.byte(':'), ws(), val});
    Sym next[2];
    // Once a member is written the rest is the same whether this one comes or not: an optional
    // "sep kv" (so optional properties add states instead of doubling them).
    const Sym later = b_.seq({sep, kv});
    next[1] = required.count(key) ? b_.seq({later, tail[1]}) : b_.seq({b_.opt(later), tail[1]});
    const Sym first = b_.seq({kv, tail[1]});
    next[0] = required.count(key) ? first : b_.alt({first, tail[0]});
    tail[0] = next[0], tail[1] = next[1];
  }
  return b_.seq({b_.byte('{'), ws(), tail[0], ws(), b_.byte('}')});
}

}  // namespace qwen35::grammar
