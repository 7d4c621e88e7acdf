// Filters and tests (jinja2.filters / jinja2.tests, with transformers' tojson).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "template/jinja_builtins.h"
#include "template/jinja_interp.h"
#include "template/jinja_pystr.h"

namespace qwen35::tmpl::jinja {

namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, CallArgs&&);
using TestFn = bool (*)(Interpreter&, const Value&, CallArgs&&);

[[noreturn]] void type_error(const std::string& msg) { throw TemplateError("TypeError: " + msg); }

int64_t len_of(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return 0;
    case Value::Type::kString:
      return static_cast<int64_t>(utf8_length(v.str()));
    case Value::Type::kList:
      return static_cast<int64_t>(v.items().size());
    case Value::Type::kDict:
      return static_cast<int64_t>(v.dict().size());
    default:
      type_error("object of type '" + type_name(v) + "' has no len()");
  }
}

// "a.b.0" attribute paths of map / selectattr / sort.
Value attr_path(const Value& v, const std::string& path) {
  Value cur = v;
  for (const std::string& part : py_split(path, std::string("."), -1, false)) {
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(),
                                                      [](char c) { return c >= '0' && c <= '9'; });
    cur = numeric ? get_item(cur, Value::integer(std::atoll(part.c_str())))
                  : get_item(cur, Value::string(part));
  }
  return cur;
}

Value str_result(const Value& in, std::string s) {
  return Value::string(std::move(s), in.is_markup());
}

Value f_trim(Interpreter&, const Value& v, CallArgs&& args) {
  const BoundArgs a = bind_args("trim", std::move(args), {"chars"});
  std::optional<std::string> chars;
  if (a.has(0) && !a[0].is_none()) chars = to_str(a[0]);
  return str_result(v, py_strip(to_str(v), chars, true, true));
}

// jinja2's title: upper-case the first character after start, whitespace or one of -({[<.
Value f_title(Interpreter&, const Value& v, CallArgs&&) {
  const std::u32string cps = decode_utf8(to_str(v));
  std::string out;
  bool word_start = true;
  for (char32_t c : cps) {
    const bool sep = py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    std::string one;
    append_utf8(one, c);
    out += sep ? one : (word_start ? py_upper(one) : py_lower(one));
    word_start = sep;
  }
  return str_result(v, std::move(out));
}

// len(re.findall(r"\w+", s)).
Value f_wordcount(Interpreter&, const Value& v, CallArgs&&) {
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : decode_utf8(to_str(v))) {
    std::string one;
    append_utf8(one, c);
    const bool w = c == '_' || py_is(one, "alnum");
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

Value f_tojson(Interpreter&, const Value& v, CallArgs&& args) {
  const BoundArgs a =
      bind_args("tojson", std::move(args), {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = a.has(0) && truthy(a[0]);
  if (a.has(1) && !a[1].is_none()) {
    if (!a[1].is_int()) throw TemplateError("tojson: only an integer indent is supported");
    o.indent = static_cast<int>(std::clamp<int64_t>(a[1].as_int(), 0, 64));
    o.item_sep = ",";
  }
  if (a.has(2) && !a[2].is_none()) {
    if (!a[2].is_list() || a[2].items().size() != 2 || !a[2].items()[0].is_string() ||
        !a[2].items()[1].is_string())
      throw TemplateError("tojson: separators must be a pair of strings");
    o.item_sep = a[2].items()[0].str();
    o.key_sep = a[2].items()[1].str();
  }
  o.sort_keys = a.has(3) && truthy(a[3]);
  return Value::string(to_json(v, o));
}

Value f_default(Interpreter&, const Value& v, CallArgs&& args) {
  const BoundArgs a = bind_args("default", std::move(args), {"default_value", "boolean"});
  const bool boolean = a.has(1) && truthy(a[1]);
  if (v.is_undefined() || (boolean && !truthy(v))) return a.has(0) ? a[0] : Value::string("");
  return v;
}

Value f_join(Interpreter& in, const Value& v, CallArgs&& args) {
  const BoundArgs a = bind_args("join", std::move(args), {"d", "attribute"});
  const std::string sep = a.has(0) ? to_str(a[0]) : "";
  std::string out;
  bool first = true;
  for (const Value& x : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(a.has(1) && !a[1].is_none() ? attr_path(x, to_str(a[1])) : x);
    in.check_string(out.size());
  }
  in.charge(out.size());
  return Value::string(std::move(out));
}

Value f_replace(Interpreter& in, const Value& v, CallArgs&& args) {
  const BoundArgs a = bind_args("replace", std::move(args), {"old", "new", "count"});
  if (!a.has(0) || !a.has(1)) type_error("replace() missing required arguments");
  const int64_t count = a.has(2) && !a[2].is_none() ? a[2].as_int() : -1;
  std::string s = py_replace(to_str(v), to_str(a[0]), to_str(a[1]), count);
  in.check_string(s.size());
  in.charge(s.size());
  return str_result(v, std::move(s));
}

Value f_int(Interpreter&, const Value& v, CallArgs&& args) {
  const BoundArgs a = bind_args("int", std::move(args), {"default", "base"});
  const Value dflt = a.has(0) ? a[0] : Value::integer(0);
  const int base = a.has(1) ? static_cast<int>(a[1].as_int()) : 10;
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    const double d = std::trunc(v.as_double());
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return dflt;
    return Value::integer(static_cast<int64_t>(d));
  }
  if (!v.is_string()) return dflt;
  std::string s = py_strip(v.str(), std::nullopt, true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (!s.empty()) {
    char* end = nullptr;
    errno = 0;
    const long long r = std::strtoll(s.c_str(), &end, base);
    if (errno == 0 && *end == '\0') return Value::integer(r);
    const double d = std::strtod(s.c_str(), &end);
    if (*end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18)
      return Value::integer(static_cast<int64_t>(std::trunc(d)));
  }
  return dflt;
}

Value f_float(Interpreter&, const Value& v, CallArgs&& args) {
  const BoundArgs a = bind_args("float", std::move(args), {"default"});
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is_string()) {
    const std::string s = py_strip(v.str(), std::nullopt, true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0' && s.find_first_of("xXpP") == std::string::npos)
      return Value::number(d);
  }
  return a.has(0) ? a[0] : Value::number(0.0);
}

Value f_first_last(const Value& v, bool last) {
  if (v.is_string() || v.is_list() || v.is_dict()) {
    const std::vector<Value> items = iterate(v);
    if (!items.empty()) return last ? items.back() : items.front();
  }
  return Value::undefined(std::string("No ") + (last ? "last" : "first") +
                          " item, sequence was empty.");
}

Value f_map(Interpreter& in, const Value& v, CallArgs&& args) {
  std::vector<Value> out;
  const auto attr = std::find_if(args.kw.begin(), args.kw.end(),
                                 [](const auto& kv) { return kv.first == "attribute"; });
  if (attr != args.kw.end()) {
    const auto dflt = std::find_if(args.kw.begin(), args.kw.end(),
                                   [](const auto& kv) { return kv.first == "default"; });
    for (const Value& x : iterate(v)) {
      Value r = attr_path(x, to_str(attr->second));
      if (r.is_undefined() && dflt != args.kw.end()) r = dflt->second;
      out.push_back(std::move(r));
    }
    return Value::list(std::move(out));
  }
  if (args.pos.empty()) return Value::list(iterate(v));
  const std::string name = to_str(args.pos[0]);
  if (!has_filter(name)) throw TemplateError(unknown_filter_message(name));
  CallArgs rest{{args.pos.begin() + 1, args.pos.end()}, args.kw};
  for (const Value& x : iterate(v)) out.push_back(apply_filter(in, name, x, CallArgs(rest)));
  return Value::list(std::move(out));
}

Value select_impl(Interpreter& in, const Value& v, CallArgs&& args, bool by_attr, bool keep) {
  std::vector<Value> out;
  size_t i = 0;
  std::string attr;
  if (by_attr) {
    if (args.pos.empty()) type_error("selectattr/rejectattr need an attribute name");
    attr = to_str(args.pos[i++]);
  }
  std::string test;
  if (i < args.pos.size()) test = to_str(args.pos[i++]);
  if (!test.empty() && !has_test(test)) throw TemplateError(unknown_test_message(test));
  CallArgs rest{{args.pos.begin() + static_cast<std::ptrdiff_t>(i), args.pos.end()}, args.kw};
  for (const Value& x : iterate(v)) {
    const Value subject = by_attr ? attr_path(x, attr) : x;
    const bool ok = test.empty() ? truthy(subject) : apply_test(in, test, subject, CallArgs(rest));
    if (ok == keep) out.push_back(x);
  }
  return Value::list(std::move(out));
}

Value sort_key(const Value& x, const BoundArgs& a, size_t cs_index, size_t attr_index) {
  Value k = a.has(attr_index) && !a[attr_index].is_none() ? attr_path(x, to_str(a[attr_index])) : x;
  const bool case_sensitive = a.has(cs_index) && truthy(a[cs_index]);
  if (!case_sensitive && k.is_string()) k = Value::string(py_lower(k.str()));
  return k;
}

Value f_sort(Interpreter&, const Value& v, CallArgs&& args) {
  const BoundArgs a =
      bind_args("sort", std::move(args), {"reverse", "case_sensitive", "attribute"});
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& x : iterate(v)) keyed.emplace_back(sort_key(x, a, 1, 2), x);
  const bool rev = a.has(0) && truthy(a[0]);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& l, const auto& r) {
    return rev ? compare(r.first, l.first, "<") : compare(l.first, r.first, "<");
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

Value f_unique(Interpreter&, const Value& v, CallArgs&& args) {
  const BoundArgs a = bind_args("unique", std::move(args), {"case_sensitive", "attribute"});
  std::vector<Value> out, seen;
  for (const Value& x : iterate(v)) {
    const Value k = sort_key(x, a, 0, 1);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) {
      seen.push_back(k);
      out.push_back(x);
    }
  }
  return Value::list(std::move(out));
}

Value min_max(const Value& v, CallArgs&& args, bool want_max) {
  const BoundArgs a =
      bind_args(want_max ? "max" : "min", std::move(args), {"case_sensitive", "attribute"});
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    const Value ki = sort_key(items[i], a, 0, 1), kb = sort_key(items[best], a, 0, 1);
    if (compare(ki, kb, want_max ? ">" : "<")) best = i;
  }
  return items[best];
}

Value f_sum(Interpreter& in, const Value& v, CallArgs&& args) {
  const BoundArgs a = bind_args("sum", std::move(args), {"attribute", "start"});
  Value total = a.has(1) ? a[1] : Value::integer(0);
  for (const Value& x : iterate(v))
    total = binary_op(in, "+", total, a.has(0) && !a[0].is_none() ? attr_path(x, to_str(a[0])) : x);
  return total;
}

Value f_dictsort(Interpreter&, const Value& v, CallArgs&& args) {
  const BoundArgs a = bind_args("dictsort", std::move(args), {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) type_error("dictsort needs a mapping");
  const size_t pos = a.has(1) && to_str(a[1]) == "value" ? 1 : 0;
  std::vector<Value> pairs;
  for (const auto& [k, x] : v.dict().items())
    pairs.push_back(Value::list({Value::string(k), x}, true));
  const bool cs = a.has(0) && truthy(a[0]);
  const bool rev = a.has(2) && truthy(a[2]);
  auto key = [&](const Value& p) {
    const Value& k = p.items()[pos];
    return (!cs && k.is_string()) ? Value::string(py_lower(k.str())) : k;
  };
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& l, const Value& r) {
    return rev ? compare(key(r), key(l), "<") : compare(key(l), key(r), "<");
  });
  return Value::list(std::move(pairs));
}

Value f_indent(Interpreter&, const Value& v, CallArgs&& args) {
  const BoundArgs a = bind_args("indent", std::move(args), {"width", "first", "blank"});
  std::string ind = "    ";
  if (a.has(0))
    ind = a[0].is_string()
              ? a[0].str()
              : std::string(static_cast<size_t>(std::clamp<int64_t>(a[0].as_int(), 0, 256)), ' ');
  const std::vector<std::string> lines = py_splitlines(to_str(v) + "\n", false);
  std::string rv;
  if (a.has(2) && truthy(a[2])) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : ind + lines[i]);
  }
  if (a.has(1) && truthy(a[1])) rv = ind + rv;
  return str_result(v, std::move(rv));
}

Value f_center(Interpreter&, const Value& v, CallArgs&& args) {
  const BoundArgs a = bind_args("center", std::move(args), {"width"});
  const std::string s = to_str(v);
  const int64_t width = a.has(0) ? std::min<int64_t>(a[0].as_int(), 1 << 20) : 80;
  const int64_t len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return Value::string(s);
  const int64_t marg = width - len;
  const int64_t left = marg / 2 + (marg & width & 1);
  return Value::string(std::string(static_cast<size_t>(left), ' ') + s +
                       std::string(static_cast<size_t>(marg - left), ' '));
}

Value f_round(Interpreter&, const Value& v, CallArgs&& args) {
  const BoundArgs a = bind_args("round", std::move(args), {"precision", "method"});
  const int64_t precision = a.has(0) ? a[0].as_int() : 0;
  const std::string method = a.has(1) ? to_str(a[1]) : "common";
  if (method != "common" && method != "ceil" && method != "floor")
    throw TemplateError("method must be 'common', 'ceil' or 'floor'");
  require_defined(v);
  if (!v.is_number()) type_error("type " + type_name(v) + " doesn't define __round__ method");
  if (method == "common" && !v.is_float()) return Value::integer(v.as_int());
  const double scale =
      std::pow(10.0, static_cast<double>(std::clamp<int64_t>(precision, -300, 300)));
  const double x = v.as_double() * scale;
  const double r = method == "ceil"    ? std::ceil(x)
                   : method == "floor" ? std::floor(x)
                                       : std::nearbyint(x);
  return Value::number(r / scale);
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const auto* kFilters = new std::unordered_map<std::string, FilterFn>{
      {"trim", f_trim},
      {"tojson", f_tojson},
      {"default", f_default},
      {"d", f_default},
      {"join", f_join},
      {"replace", f_replace},
      {"int", f_int},
      {"float", f_float},
      {"map", f_map},
      {"sort", f_sort},
      {"unique", f_unique},
      {"sum", f_sum},
      {"dictsort", f_dictsort},
      {"indent", f_indent},
      {"center", f_center},
      {"round", f_round},
      {"length",
       [](Interpreter&, const Value& v, CallArgs&&) { return Value::integer(len_of(v)); }},
      {"count", [](Interpreter&, const Value& v, CallArgs&&) { return Value::integer(len_of(v)); }},
      {"items",
       [](Interpreter&, const Value& v, CallArgs&&) {
         if (v.is_undefined()) return Value::list({});
         if (!v.is_dict()) type_error("Can only get item pairs from a mapping.");
         std::vector<Value> out;
         for (const auto& [k, x] : v.dict().items())
           out.push_back(Value::list({Value::string(k), x}, true));
         return Value::list(std::move(out));
       }},
      {"string", [](Interpreter&, const Value& v,
                    CallArgs&&) { return v.is_string() ? v : Value::string(to_str(v)); }},
      {"upper",
       [](Interpreter&, const Value& v, CallArgs&&) { return str_result(v, py_upper(to_str(v))); }},
      {"lower",
       [](Interpreter&, const Value& v, CallArgs&&) { return str_result(v, py_lower(to_str(v))); }},
      {"capitalize", [](Interpreter&, const Value& v,
                        CallArgs&&) { return str_result(v, py_capitalize(to_str(v))); }},
      {"title", f_title},
      {"wordcount", f_wordcount},
      {"format",
       [](Interpreter&, const Value& v, CallArgs&& a) {
         Value args;
         if (!a.kw.empty()) {
           Dict d;
           for (auto& [k, x] : a.kw) d.set(k, x);
           args = Value::dict(std::move(d));
         } else {
           args = Value::list(std::move(a.pos), true);
         }
         return Value::string(printf_format(to_str(v), args));
       }},
      {"first", [](Interpreter&, const Value& v, CallArgs&&) { return f_first_last(v, false); }},
      {"last", [](Interpreter&, const Value& v, CallArgs&&) { return f_first_last(v, true); }},
      {"list", [](Interpreter&, const Value& v, CallArgs&&) { return Value::list(iterate(v)); }},
      {"safe",
       [](Interpreter&, const Value& v, CallArgs&&) { return Value::string(to_str(v), true); }},
      {"escape",
       [](Interpreter&, const Value& v, CallArgs&&) {
         return v.is_markup() ? v : Value::string(html_escape(to_str(v)), true);
       }},
      {"e",
       [](Interpreter&, const Value& v, CallArgs&&) {
         return v.is_markup() ? v : Value::string(html_escape(to_str(v)), true);
       }},
      {"forceescape", [](Interpreter&, const Value& v,
                         CallArgs&&) { return Value::string(html_escape(to_str(v)), true); }},
      {"abs",
       [](Interpreter&, const Value& v, CallArgs&&) {
         require_defined(v);
         if (v.is_float()) return Value::number(std::fabs(v.as_double()));
         if (!v.is_number()) type_error("bad operand type for abs(): '" + type_name(v) + "'");
         if (v.as_int() == INT64_MIN) throw TemplateError("integer overflow");
         return Value::integer(std::llabs(v.as_int()));
       }},
      {"reverse",
       [](Interpreter&, const Value& v, CallArgs&&) {
         if (v.is_string()) {
           std::u32string cps = decode_utf8(v.str());
           std::reverse(cps.begin(), cps.end());
           return Value::string(encode_utf8(cps));
         }
         std::vector<Value> items = iterate(v);
         std::reverse(items.begin(), items.end());
         return Value::list(std::move(items));
       }},
      {"select", [](Interpreter& in, const Value& v,
                    CallArgs&& a) { return select_impl(in, v, std::move(a), false, true); }},
      {"reject", [](Interpreter& in, const Value& v,
                    CallArgs&& a) { return select_impl(in, v, std::move(a), false, false); }},
      {"selectattr", [](Interpreter& in, const Value& v,
                        CallArgs&& a) { return select_impl(in, v, std::move(a), true, true); }},
      {"rejectattr", [](Interpreter& in, const Value& v,
                        CallArgs&& a) { return select_impl(in, v, std::move(a), true, false); }},
      {"min",
       [](Interpreter&, const Value& v, CallArgs&& a) { return min_max(v, std::move(a), false); }},
      {"max",
       [](Interpreter&, const Value& v, CallArgs&& a) { return min_max(v, std::move(a), true); }},
      {"attr",
       [](Interpreter&, const Value& v, CallArgs&& a) {
         const BoundArgs b = bind_args("attr", std::move(a), {"name"});
         return get_attr(v, to_str(b[0]));
       }},
  };
  return *kFilters;
}

}  // namespace

BoundArgs bind_args(const std::string& what, CallArgs args,
                    std::initializer_list<const char*> params) {
  BoundArgs b;
  b.values.resize(params.size());
  b.given.assign(params.size(), false);
  if (args.pos.size() > params.size())
    type_error(what + "() takes at most " + std::to_string(params.size()) + " argument(s)");
  for (size_t i = 0; i < args.pos.size(); ++i) {
    b.values[i] = std::move(args.pos[i]);
    b.given[i] = true;
  }
  for (auto& kv : args.kw) {
    const std::string& key = kv.first;  // not a structured binding: clang 14 cannot capture those
    auto& v = kv.second;
    const auto it =
        std::find_if(params.begin(), params.end(), [&](const char* p) { return key == p; });
    if (it == params.end())
      type_error(what + "() got an unexpected keyword argument '" + key + "'");
    const auto i = static_cast<size_t>(it - params.begin());
    if (b.given[i]) type_error(what + "() got multiple values for argument '" + key + "'");
    b.values[i] = std::move(v);
    b.given[i] = true;
  }
  return b;
}

std::vector<Value> iterate(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return {};
    case Value::Type::kList:
      return v.items();
    case Value::Type::kDict: {
      std::vector<Value> keys;
      for (const auto& kv : v.dict().items()) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case Value::Type::kString: {
      std::vector<Value> chars;
      for (char32_t c : decode_utf8(v.str())) {
        std::string s;
        append_utf8(s, c);
        chars.push_back(Value::string(std::move(s)));
      }
      return chars;
    }
    default:
      type_error("'" + type_name(v) + "' object is not iterable");
  }
}

bool has_filter(std::string_view name) { return filters().count(std::string(name)) != 0; }

std::string unknown_filter_message(std::string_view name) {
  static const char* kJinjaOnly[] = {"batch",     "filesizeformat", "groupby",   "pprint",
                                     "random",    "slice",          "striptags", "truncate",
                                     "urlencode", "urlize",         "wordwrap",  "xmlattr"};
  for (const char* n : kJinjaOnly)
    if (name == n) return "filter '" + std::string(name) + "' is not supported";
  return "No filter named '" + std::string(name) + "'.";
}

Value apply_filter(Interpreter& in, const std::string& name, const Value& v, CallArgs args) {
  const auto it = filters().find(name);
  if (it == filters().end()) throw TemplateError(unknown_filter_message(name));
  return it->second(in, v, std::move(args));
}

}  // namespace qwen35::tmpl::jinja
