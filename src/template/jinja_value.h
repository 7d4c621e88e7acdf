// Values of the chat-template interpreter, modelled on the Python objects jinja2 works with:
// Undefined, None, bool, int, float, str (plain or Markup), list / tuple, dict (insertion
// ordered), namespace and callables. Lists and dicts are immutable once built and shared by
// pointer (the sandbox transformers uses forbids mutating them); a namespace is the one mutable
// object. Errors inside the interpreter are TemplateError exceptions, turned into core::Status
// at the ChatTemplate boundary.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace qwen35::tmpl::jinja {

class TemplateError : public std::exception {
 public:
  explicit TemplateError(std::string message, int line = 0)
      : message_(std::move(message)), line_(line) {}
  const char* what() const noexcept override { return message_.c_str(); }
  const std::string& message() const { return message_; }
  int line() const { return line_; }
  void set_line_if_unset(int line) {
    if (line_ == 0) line_ = line;
  }
  // A work bound of jinja::Limits was hit (steps, sizes, depth): the template ran away, which
  // callers may report differently from a template that rejected its input.
  bool over_limit() const { return over_limit_; }
  static TemplateError limit(std::string message) {
    TemplateError e(std::move(message));
    e.over_limit_ = true;
    return e;
  }

 private:
  std::string message_;
  int line_;
  bool over_limit_ = false;
};

class Value;
class Dict;
class Callable;

struct UndefinedTag {
  std::shared_ptr<const std::string> hint;  // the UndefinedError message when it is used
};
struct NoneTag {};
struct StrData {
  std::string s;
  bool markup = false;  // a markupsafe.Markup (from |safe): `+` escapes a plain operand
};
struct ListData {
  std::vector<Value> items;
  bool tuple = false;
  int nesting = 1;
};
struct NamespaceRef {
  std::shared_ptr<Dict> dict;
};

class Value {
 public:
  enum class Type {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable
  };

  Value() = default;
  static Value undefined(std::string hint);
  static Value none() { return Value(std::in_place, NoneTag{}); }
  static Value boolean(bool b) { return Value(std::in_place, b); }
  static Value integer(int64_t i) { return Value(std::in_place, i); }
  static Value number(double d) { return Value(std::in_place, d); }
  static Value string(std::string s, bool markup = false);
  static Value list(std::vector<Value> items, bool tuple = false);
  static Value dict(Dict d);
  static Value new_namespace();
  static Value callable(std::shared_ptr<const Callable> fn) {
    return Value(std::in_place, std::move(fn));
  }

  Type type() const { return static_cast<Type>(v_.index()); }
  bool is_undefined() const { return type() == Type::kUndefined; }
  bool is_none() const { return type() == Type::kNone; }
  bool is_bool() const { return type() == Type::kBool; }
  bool is_int() const { return type() == Type::kInt; }
  bool is_float() const { return type() == Type::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is int
  bool is_string() const { return type() == Type::kString; }
  bool is_list() const { return type() == Type::kList; }
  bool is_dict() const { return type() == Type::kDict; }
  bool is_namespace() const { return type() == Type::kNamespace; }
  bool is_callable() const { return type() == Type::kCallable; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const;    // int or bool
  double as_double() const;  // int, bool or float
  const std::string& str() const { return std::get<StrPtr>(v_)->s; }
  bool is_markup() const { return is_string() && std::get<StrPtr>(v_)->markup; }
  const std::vector<Value>& items() const { return std::get<ListPtr>(v_)->items; }
  bool is_tuple() const { return is_list() && std::get<ListPtr>(v_)->tuple; }
  const Dict& dict() const { return *std::get<DictPtr>(v_); }
  Dict& ns() const { return *std::get<NamespaceRef>(v_).dict; }
  const Callable& fn() const { return *std::get<FnPtr>(v_); }
  int nesting() const;  // 0 for scalars, 1 + the deepest element for lists and dicts
  const std::string& undefined_hint() const;

 private:
  using StrPtr = std::shared_ptr<const StrData>;
  using ListPtr = std::shared_ptr<const ListData>;
  using DictPtr = std::shared_ptr<const Dict>;
  using FnPtr = std::shared_ptr<const Callable>;
  using Storage = std::variant<UndefinedTag, NoneTag, bool, int64_t, double, StrPtr, ListPtr,
                               DictPtr, NamespaceRef, FnPtr>;
  template <typename T>
  Value(std::in_place_t, T v) : v_(std::in_place_type<T>, std::move(v)) {}
  Storage v_;
};

// A str-keyed dict that keeps insertion order, like a Python dict parsed by json.loads.
class Dict {
 public:
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
  size_t size() const { return items_.size(); }
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }
  int nesting() const { return nesting_; }  // 1 + the deepest nesting of a value
  void clear() {
    items_.clear();
    index_.clear();
  }

 private:
  static constexpr size_t kIndexFrom = 16;  // linear search below this size
  std::vector<std::pair<std::string, Value>> items_;
  std::unordered_map<std::string, size_t> index_;
  int nesting_ = 1;
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

class Interpreter;

class Callable {
 public:
  virtual ~Callable() = default;
  virtual Value call(Interpreter& in, CallArgs args) const = 0;
  virtual std::string name() const = 0;
};

// Python semantics.
bool truthy(const Value& v);
std::string type_name(const Value& v);  // "str", "int", "NoneType", ...
std::string to_str(const Value& v);     // str(v); Undefined prints as ""
std::string repr(const Value& v);       // repr(v)
bool equals(const Value& a, const Value& b);
// a < b (op "<", "<=", ">", ">="), raising TypeError for unordered types.
bool compare(const Value& a, const Value& b, std::string_view op);
// Raises UndefinedError when v is undefined.
void require_defined(const Value& v);

Value from_json(const nlohmann::ordered_json& j);

struct JsonOptions {
  bool ensure_ascii = false;
  int indent = -1;  // < 0: none
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
// json.dumps(v) as transformers' tojson filter calls it.
std::string to_json(const Value& v, const JsonOptions& opts);

}  // namespace qwen35::tmpl::jinja
