#include "template/jinja_value.h"

#include <algorithm>
#include <cmath>

#include "template/jinja_pystr.h"

namespace qwen35::tmpl::jinja {

namespace {

// Values nest at most this deep, so that printing, comparing and freeing them cannot exhaust the
// stack (a loop can otherwise wrap a list in itself a million times).
constexpr int kMaxNesting = 256;

Value from_json_at(const nlohmann::ordered_json& j, int depth);

[[noreturn]] void unorderable(const Value& a, const Value& b, std::string_view op) {
  throw TemplateError("TypeError: '" + std::string(op) + "' not supported between instances of '" +
                      type_name(a) + "' and '" + type_name(b) + "'");
}

bool apply_op(int cmp, std::string_view op) {
  if (op == "<") return cmp < 0;
  if (op == "<=") return cmp <= 0;
  if (op == ">") return cmp > 0;
  return cmp >= 0;
}

void json_into(const Value& v, const JsonOptions& o, int level, std::string& out) {
  auto newline = [&](int lvl) {
    if (o.indent < 0) return;
    out.push_back('\n');
    out.append(static_cast<size_t>(o.indent) * static_cast<size_t>(lvl), ' ');
  };
  switch (v.type()) {
    case Value::Type::kNone:
      out += "null";
      return;
    case Value::Type::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Type::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Type::kFloat: {
      const double d = v.as_double();
      if (std::isnan(d))
        out += "NaN";
      else if (std::isinf(d))
        out += d < 0 ? "-Infinity" : "Infinity";
      else
        out += py_float_repr(d);
      return;
    }
    case Value::Type::kString:
      out += json_quote(v.str(), o.ensure_ascii);
      return;
    case Value::Type::kList: {
      if (v.items().empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      bool first = true;
      for (const Value& x : v.items()) {
        if (!first) out += o.item_sep;
        first = false;
        newline(level + 1);
        json_into(x, o, level + 1, out);
      }
      newline(level);
      out.push_back(']');
      return;
    }
    case Value::Type::kDict: {
      if (v.dict().size() == 0) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> kvs;
      for (const auto& kv : v.dict().items()) kvs.push_back(&kv);
      if (o.sort_keys)
        std::stable_sort(kvs.begin(), kvs.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      out.push_back('{');
      bool first = true;
      for (const auto* kv : kvs) {
        if (!first) out += o.item_sep;
        first = false;
        newline(level + 1);
        out += json_quote(kv->first, o.ensure_ascii);
        out += o.key_sep;
        json_into(kv->second, o, level + 1, out);
      }
      newline(level);
      out.push_back('}');
      return;
    }
    default:
      throw TemplateError("TypeError: Object of type " + type_name(v) +
                          " is not JSON serializable");
  }
}

}  // namespace

Value Value::undefined(std::string hint) {
  return Value(std::in_place, UndefinedTag{std::make_shared<const std::string>(std::move(hint))});
}

Value Value::string(std::string s, bool markup) {
  return Value(std::in_place,
               StrPtr(std::make_shared<const StrData>(StrData{std::move(s), markup})));
}

Value Value::list(std::vector<Value> items, bool tuple) {
  int nesting = 0;
  for (const Value& x : items) nesting = std::max(nesting, x.nesting());
  if (nesting >= kMaxNesting) throw TemplateError("value nested too deeply");
  return Value(
      std::in_place,
      ListPtr(std::make_shared<const ListData>(ListData{std::move(items), tuple, nesting + 1})));
}

Value Value::dict(Dict d) {
  if (d.nesting() > kMaxNesting) throw TemplateError("value nested too deeply");
  return Value(std::in_place, DictPtr(std::make_shared<const Dict>(std::move(d))));
}

int Value::nesting() const {
  if (is_list()) return std::get<ListPtr>(v_)->nesting;
  if (is_dict()) return dict().nesting();
  return 0;
}

Value Value::new_namespace() {
  return Value(std::in_place, NamespaceRef{std::make_shared<Dict>()});
}

int64_t Value::as_int() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  return std::get<int64_t>(v_);
}

double Value::as_double() const {
  if (is_float()) return std::get<double>(v_);
  return static_cast<double>(as_int());
}

const std::string& Value::undefined_hint() const {
  static const std::string kNone = "value is undefined";
  const auto& tag = std::get<UndefinedTag>(v_);
  return tag.hint ? *tag.hint : kNone;
}

const Value* Dict::find(std::string_view key) const {
  if (items_.size() < kIndexFrom) {
    for (const auto& kv : items_)
      if (kv.first == key) return &kv.second;
    return nullptr;
  }
  const auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

void Dict::set(const std::string& key, Value v) {
  nesting_ = std::max(nesting_, v.nesting() + 1);
  for (size_t i = 0; i < items_.size() && items_.size() < kIndexFrom; ++i) {
    if (items_[i].first == key) {
      items_[i].second = std::move(v);
      return;
    }
  }
  if (items_.size() >= kIndexFrom) {
    const auto it = index_.find(key);
    if (it != index_.end()) {
      items_[it->second].second = std::move(v);
      return;
    }
  }
  items_.emplace_back(key, std::move(v));
  if (items_.size() == kIndexFrom) {
    for (size_t i = 0; i < items_.size(); ++i) index_[items_[i].first] = i;
  } else if (items_.size() > kIndexFrom) {
    index_[key] = items_.size() - 1;
  }
}

bool truthy(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kNone:
      return false;
    case Value::Type::kBool:
      return v.as_bool();
    case Value::Type::kInt:
      return v.as_int() != 0;
    case Value::Type::kFloat:
      return v.as_double() != 0.0;
    case Value::Type::kString:
      return !v.str().empty();
    case Value::Type::kList:
      return !v.items().empty();
    case Value::Type::kDict:
      return v.dict().size() != 0;
    default:
      return true;
  }
}

std::string type_name(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return "Undefined";
    case Value::Type::kNone:
      return "NoneType";
    case Value::Type::kBool:
      return "bool";
    case Value::Type::kInt:
      return "int";
    case Value::Type::kFloat:
      return "float";
    case Value::Type::kString:
      return v.is_markup() ? "Markup" : "str";
    case Value::Type::kList:
      return v.is_tuple() ? "tuple" : "list";
    case Value::Type::kDict:
      return "dict";
    case Value::Type::kNamespace:
      return "Namespace";
    default:
      return "function";
  }
}

std::string to_str(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return "";
    case Value::Type::kString:
      return v.str();
    default:
      return repr(v);
  }
}

std::string repr(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return "Undefined";
    case Value::Type::kNone:
      return "None";
    case Value::Type::kBool:
      return v.as_bool() ? "True" : "False";
    case Value::Type::kInt:
      return std::to_string(v.as_int());
    case Value::Type::kFloat:
      return py_float_repr(v.as_double());
    case Value::Type::kString:
      return v.is_markup() ? "Markup(" + py_repr_str(v.str()) + ")" : py_repr_str(v.str());
    case Value::Type::kList: {
      std::string out = v.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) out += ", ";
        out += repr(v.items()[i]);
      }
      if (v.is_tuple() && v.items().size() == 1) out += ",";
      return out + (v.is_tuple() ? ")" : "]");
    }
    case Value::Type::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& kv : v.dict().items()) {
        if (!first) out += ", ";
        first = false;
        out += py_repr_str(kv.first) + ": " + repr(kv.second);
      }
      return out + "}";
    }
    case Value::Type::kNamespace:
      return "<Namespace>";
    default:
      return "<function " + v.fn().name() + ">";
  }
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kNone:
      return true;
    case Value::Type::kString:
      return a.str() == b.str();
    case Value::Type::kList: {
      if (a.is_tuple() != b.is_tuple() || a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!equals(a.items()[i], b.items()[i])) return false;
      return true;
    }
    case Value::Type::kDict: {
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& kv : a.dict().items()) {
        const Value* other = b.dict().find(kv.first);
        if (!other || !equals(kv.second, *other)) return false;
      }
      return true;
    }
    case Value::Type::kNamespace:
      return &a.ns() == &b.ns();
    case Value::Type::kCallable:
      return &a.fn() == &b.fn();
    default:
      return false;
  }
}

bool compare(const Value& a, const Value& b, std::string_view op) {
  require_defined(a);
  require_defined(b);
  if (a.is_number() && b.is_number()) {
    int cmp;
    if (a.is_float() || b.is_float()) {
      const double x = a.as_double(), y = b.as_double();
      if (std::isnan(x) || std::isnan(y)) return false;
      cmp = x < y ? -1 : (x > y ? 1 : 0);
    } else {
      cmp = a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
    }
    return apply_op(cmp, op);
  }
  if (a.is_string() && b.is_string()) return apply_op(a.str().compare(b.str()), op);
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals(x[i], y[i])) return compare(x[i], y[i], op);
    const int cmp = x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
    return apply_op(cmp, op);
  }
  unorderable(a, b, op);
}

void require_defined(const Value& v) {
  if (v.is_undefined()) throw TemplateError(v.undefined_hint());
}

Value from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

namespace {
Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxNesting) throw TemplateError("JSON value nested too deeply");
  using J = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case J::null:
      return Value::none();
    case J::boolean:
      return Value::boolean(j.get<bool>());
    case J::number_integer:
      return Value::integer(j.get<int64_t>());
    case J::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX))
        throw TemplateError("integer " + std::to_string(u) + " is too large");
      return Value::integer(static_cast<int64_t>(u));
    }
    case J::number_float:
      return Value::number(j.get<double>());
    case J::string:
      return Value::string(j.get<std::string>());
    case J::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json_at(x, depth + 1));
      return Value::list(std::move(items));
    }
    case J::object: {
      Dict d;
      for (const auto& [k, x] : j.items()) d.set(k, from_json_at(x, depth + 1));
      return Value::dict(std::move(d));
    }
    default:
      throw TemplateError("unsupported JSON value (binary)");
  }
}
}  // namespace

std::string to_json(const Value& v, const JsonOptions& opts) {
  std::string out;
  json_into(v, opts, 0, out);
  return out;
}

}  // namespace qwen35::tmpl::jinja
