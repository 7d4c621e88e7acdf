// Attribute and item lookup with jinja2's sandboxed semantics, the str / dict / list methods
// templates call, and the global functions.
#include <algorithm>
#include <ctime>

#include "template/jinja_builtins.h"
#include "template/jinja_interp.h"
#include "template/jinja_pystr.h"

namespace qwen35::tmpl::jinja {

namespace {

// Python's attribute names of each type: an attribute by one of these names is the method, even
// when a dict also holds such a key.
const char* const kStrMethods[] = {
    "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
    "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
    "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
    "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
    "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
    "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
    "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
    "swapcase",     "title",       "translate", "upper",      "zfill"};
const char* const kDictMethods[] = {"clear", "copy",    "fromkeys",   "get",    "items", "keys",
                                    "pop",   "popitem", "setdefault", "update", "values"};
const char* const kListMethods[] = {"append", "clear", "copy",   "count",   "extend", "index",
                                    "insert", "pop",   "remove", "reverse", "sort"};
// What ImmutableSandboxedEnvironment refuses (it modifies a known mutable type).
const char* const kUnsafe[] = {"append", "clear",   "extend",     "insert", "pop",   "popitem",
                               "remove", "reverse", "setdefault", "sort",   "update"};

template <size_t N>
bool in_list(const char* const (&names)[N], const std::string& name) {
  return std::any_of(std::begin(names), std::end(names), [&](const char* n) { return name == n; });
}

bool is_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) return in_list(kStrMethods, name);
  if (obj.is_dict()) return in_list(kDictMethods, name);
  if (obj.is_list())
    return !obj.is_tuple() ? in_list(kListMethods, name) : (name == "count" || name == "index");
  return false;
}

std::string object_type(const Value& v) {
  std::string s = v.is_none() ? "None" : type_name(v);
  if (!v.is_none()) s.append(" object");
  return s;
}

Value call_method(Interpreter& in, const Value& obj, const std::string& name, CallArgs args);

class BoundMethod : public Callable {
 public:
  BoundMethod(Value obj, std::string name) : obj_(std::move(obj)), name_(std::move(name)) {}
  Value call(Interpreter& in, CallArgs args) const override {
    return call_method(in, obj_, name_, std::move(args));
  }
  std::string name() const override { return type_name(obj_) + "." + name_; }

 private:
  Value obj_;
  std::string name_;
};

std::optional<std::string> opt_chars(const BoundArgs& a, size_t i) {
  if (!a.has(i) || a[i].is_none()) return std::nullopt;
  if (!a[i].is_string()) throw TemplateError("TypeError: strip arg must be None or str");
  return a[i].str();
}

// startswith / endswith take a str or a tuple of str.
bool affix(const std::string& s, const Value& what, bool start) {
  auto one = [&](const Value& p) {
    if (!p.is_string())
      throw TemplateError(
          "TypeError: startswith/endswith arg must be str or a "
          "tuple of str, not " +
          type_name(p));
    const std::string& x = p.str();
    return x.size() <= s.size() && (start ? s.compare(0, x.size(), x) == 0
                                          : s.compare(s.size() - x.size(), x.size(), x) == 0);
  };
  if (what.is_list() && what.is_tuple())
    return std::any_of(what.items().begin(), what.items().end(), one);
  return one(what);
}

// str.format with {} / {0} / {name} fields and no format specs.
std::string str_format(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if ((c == '{' || c == '}') && i + 1 < fmt.size() && fmt[i + 1] == c) {
      out.push_back(c);
      ++i;
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos)
      throw TemplateError("ValueError: Single '{' encountered in format string");
    const std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos)
      throw TemplateError("str.format: format specs are not supported");
    const Value* v = nullptr;
    if (field.empty() ||
        std::all_of(field.begin(), field.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      const size_t idx = field.empty() ? auto_index++ : std::stoul(field);
      if (idx >= args.pos.size()) throw TemplateError("IndexError: Replacement index out of range");
      v = &args.pos[idx];
    } else {
      for (const auto& kv : args.kw)
        if (kv.first == field) v = &kv.second;
      if (!v) throw TemplateError("KeyError: '" + field + "'");
    }
    out += to_str(*v);
    i = close;
  }
  return out;
}

Value str_method(Interpreter& in, const Value& obj, const std::string& name, CallArgs args) {
  const std::string& s = obj.str();
  auto str_out = [&](std::string r) {
    in.check_string(r.size());
    in.charge(r.size());
    return Value::string(std::move(r), obj.is_markup());
  };
  if (name == "startswith" || name == "endswith") {
    const BoundArgs a = bind_args(name, std::move(args), {"prefix"});
    if (!a.has(0)) throw TemplateError("TypeError: " + name + "() takes at least 1 argument");
    return Value::boolean(affix(s, a[0], name == "startswith"));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const BoundArgs a = bind_args(name, std::move(args), {"chars"});
    return str_out(py_strip(s, opt_chars(a, 0), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    const BoundArgs a = bind_args(name, std::move(args), {"sep", "maxsplit"});
    std::optional<std::string> sep;
    if (a.has(0) && !a[0].is_none()) sep = to_str(a[0]);
    std::vector<Value> parts;
    for (auto& p : py_split(s, sep, a.has(1) ? a[1].as_int() : -1, name == "rsplit"))
      parts.push_back(Value::string(std::move(p)));
    return Value::list(std::move(parts));
  }
  if (name == "splitlines") {
    const BoundArgs a = bind_args(name, std::move(args), {"keepends"});
    std::vector<Value> parts;
    for (auto& p : py_splitlines(s, a.has(0) && truthy(a[0])))
      parts.push_back(Value::string(std::move(p)));
    return Value::list(std::move(parts));
  }
  if (name == "replace") {
    const BoundArgs a = bind_args(name, std::move(args), {"old", "new", "count"});
    if (!a.has(0) || !a.has(1) || !a[0].is_string() || !a[1].is_string())
      throw TemplateError("TypeError: replace() needs two str arguments");
    return str_out(py_replace(s, a[0].str(), a[1].str(), a.has(2) ? a[2].as_int() : -1));
  }
  if (name == "upper" || name == "lower" || name == "casefold" || name == "title" ||
      name == "capitalize") {
    bind_args(name, std::move(args), {});
    if (name == "upper") return str_out(py_upper(s));
    if (name == "title") return str_out(py_title(s));
    if (name == "capitalize") return str_out(py_capitalize(s));
    return str_out(py_lower(s));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    const BoundArgs a = bind_args(name, std::move(args), {"sub"});
    if (!a.has(0) || !a[0].is_string())
      throw TemplateError("TypeError: " + name + "() needs a str");
    const std::string& sub = a[0].str();
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    }
    const size_t p = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
    if (p == std::string::npos) {
      if (name == "index" || name == "rindex")
        throw TemplateError("ValueError: substring not found");
      return Value::integer(-1);
    }
    return Value::integer(static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, p))));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const BoundArgs a = bind_args(name, std::move(args), {"affix"});
    if (!a.has(0) || !a[0].is_string())
      throw TemplateError("TypeError: " + name + "() needs a str");
    const std::string& x = a[0].str();
    if (!affix(s, a[0], name == "removeprefix")) return obj;
    return str_out(name == "removeprefix" ? s.substr(x.size()) : s.substr(0, s.size() - x.size()));
  }
  if (name == "join") {
    const BoundArgs a = bind_args(name, std::move(args), {"iterable"});
    std::string out;
    bool first = true;
    for (const Value& x : iterate(a[0])) {
      if (!x.is_string())
        throw TemplateError("TypeError: sequence item: expected str instance, " + type_name(x) +
                            " found");
      if (!first) out += s;
      first = false;
      out += x.str();
      in.check_string(out.size());
    }
    return str_out(std::move(out));
  }
  if (name == "format") return str_out(str_format(s, args));
  if (name.rfind("is", 0) == 0 && name != "isidentifier" && name != "istitle" &&
      name != "isprintable" && name != "isascii") {
    bind_args(name, std::move(args), {});
    return Value::boolean(py_is(s, name.substr(2)));
  }
  throw TemplateError("str." + name + "() is not supported");
}

Value call_method(Interpreter& in, const Value& obj, const std::string& name, CallArgs args) {
  if (in_list(kUnsafe, name) && (obj.is_dict() || (obj.is_list() && !obj.is_tuple())))
    throw TemplateError("SecurityError: access to attribute '" + name + "' of '" + type_name(obj) +
                        "' object is unsafe.");
  if (obj.is_string()) return str_method(in, obj, name, std::move(args));
  if (obj.is_dict()) {
    if (name == "get") {
      const BoundArgs a = bind_args("get", std::move(args), {"key", "default"});
      const Value* v = a.has(0) && a[0].is_string() ? obj.dict().find(a[0].str()) : nullptr;
      return v ? *v : (a.has(1) ? a[1] : Value::none());
    }
    bind_args(name, std::move(args), {});
    if (name == "copy") return obj;
    std::vector<Value> out;
    for (const auto& [k, v] : obj.dict().items()) {
      if (name == "items")
        out.push_back(Value::list({Value::string(k), v}, true));
      else if (name == "keys")
        out.push_back(Value::string(k));
      else if (name == "values")
        out.push_back(v);
      else
        throw TemplateError("dict." + name + "() is not supported");
    }
    return Value::list(std::move(out));
  }
  if (obj.is_list()) {
    const BoundArgs a = bind_args(name, std::move(args), {"value"});
    if (name == "copy") return obj;
    if (name == "count" || name == "index") {
      int64_t n = 0;
      for (size_t i = 0; i < obj.items().size(); ++i) {
        if (!equals(obj.items()[i], a[0])) continue;
        if (name == "index") return Value::integer(static_cast<int64_t>(i));
        ++n;
      }
      if (name == "index") throw TemplateError("ValueError: value is not in list");
      return Value::integer(n);
    }
  }
  throw TemplateError(type_name(obj) + "." + name + "() is not supported");
}

class Builtin : public Callable {
 public:
  using Fn = Value (*)(Interpreter&, CallArgs);
  Builtin(const char* name, Fn fn) : name_(name), fn_(fn) {}
  Value call(Interpreter& in, CallArgs args) const override { return fn_(in, std::move(args)); }
  std::string name() const override { return name_; }

 private:
  const char* name_;
  Fn fn_;
};

Value g_range(Interpreter& in, CallArgs args) {
  if (!args.kw.empty() || args.pos.empty() || args.pos.size() > 3)
    throw TemplateError("TypeError: range expected 1 to 3 integer arguments");
  for (const Value& v : args.pos)
    if (!v.is_int() && !v.is_bool())
      throw TemplateError("TypeError: '" + type_name(v) +
                          "' object cannot be interpreted as an integer");
  int64_t start = 0, stop, step = 1;
  if (args.pos.size() == 1) {
    stop = args.pos[0].as_int();
  } else {
    start = args.pos[0].as_int();
    stop = args.pos[1].as_int();
    if (args.pos.size() == 3) step = args.pos[2].as_int();
  }
  if (step == 0) throw TemplateError("ValueError: range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    if (out.size() >= 100000)
      throw TemplateError(
          "OverflowError: Range too big. The sandbox blocks ranges larger than "
          "MAX_RANGE (100000).");
    out.push_back(Value::integer(i));
    if (__builtin_add_overflow(i, step, &i)) break;
  }
  in.check_list(out.size());
  return Value::list(std::move(out));
}

Value g_namespace(Interpreter& in, CallArgs args) {
  Value ns = Value::new_namespace();
  in.track(ns);
  if (args.pos.size() > 1)
    throw TemplateError("TypeError: namespace() takes at most 1 positional argument");
  if (args.pos.size() == 1) {
    if (!args.pos[0].is_dict())
      throw TemplateError("TypeError: namespace() argument must be a mapping");
    for (const auto& [k, v] : args.pos[0].dict().items()) ns.ns().set(k, v);
  }
  for (auto& [k, v] : args.kw) ns.ns().set(k, v);
  return ns;
}

Value g_dict(Interpreter&, CallArgs args) {
  Dict d;
  if (args.pos.size() == 1 && args.pos[0].is_dict())
    d = args.pos[0].dict();
  else if (!args.pos.empty())
    throw TemplateError("TypeError: dict() takes a mapping or keyword arguments");
  for (auto& [k, v] : args.kw) d.set(k, v);
  return Value::dict(std::move(d));
}

Value g_raise(Interpreter&, CallArgs args) {
  throw TemplateError(args.pos.empty() ? std::string() : to_str(args.pos[0]));
}

Value g_strftime_now(Interpreter&, CallArgs args) {
  const BoundArgs a = bind_args("strftime_now", std::move(args), {"format"});
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[512];
  const size_t n = std::strftime(buf, sizeof(buf), to_str(a[0]).c_str(), &tm);
  return Value::string(std::string(buf, n));
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  require_defined(obj);
  if (is_method(obj, name)) {
    if (in_list(kUnsafe, name) && (obj.is_dict() || (obj.is_list() && !obj.is_tuple())))
      return Value::undefined("SecurityError: access to attribute '" + name + "' of '" +
                              type_name(obj) + "' object is unsafe.");
    return Value::callable(std::make_shared<BoundMethod>(obj, name));
  }
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().find(name)) return *v;
  } else if (obj.is_namespace()) {
    if (const Value* v = obj.ns().find(name)) return *v;
  }
  std::string hint = "'";
  hint.append(object_type(obj)).append("' has no attribute '").append(name).append("'");
  return Value::undefined(std::move(hint));
}

Value get_item(const Value& obj, const Value& key) {
  require_defined(obj);
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.dict().find(key.str())) return *v;
  } else if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const auto n = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.items()[static_cast<size_t>(i)];
    } else {
      const std::u32string cps = decode_utf8(obj.str());
      const auto n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        std::string s;
        append_utf8(s, cps[static_cast<size_t>(i)]);
        return Value::string(std::move(s));
      }
    }
  }
  if (key.is_string()) {
    const Value v = get_attr(obj, key.str());
    if (!v.is_undefined()) return v;
  }
  return Value::undefined(object_type(obj) + " has no element " + repr(key));
}

void add_globals(Dict& globals) {
  auto add = [&](const char* name, Builtin::Fn fn) {
    globals.set(name, Value::callable(std::make_shared<Builtin>(name, fn)));
  };
  add("range", g_range);
  add("namespace", g_namespace);
  add("dict", g_dict);
  add("raise_exception", g_raise);
  add("strftime_now", g_strftime_now);
}

}  // namespace qwen35::tmpl::jinja
