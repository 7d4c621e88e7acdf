// Tests (`x is name`), as jinja2.tests defines them.
#include <unordered_map>

#include "template/jinja_builtins.h"
#include "template/jinja_interp.h"
#include "template/jinja_pystr.h"

namespace qwen35::tmpl::jinja {

namespace {

using TestFn = bool (*)(Interpreter&, const Value&, CallArgs&&);

const Value& arg0(const std::string& test, const CallArgs& a) {
  if (a.pos.empty()) {
    if (!a.kw.empty()) return a.kw[0].second;
    throw TemplateError("TypeError: test '" + test + "' needs an argument");
  }
  return a.pos[0];
}

int64_t int_of(const Value& v) {
  require_defined(v);
  if (!v.is_int() && !v.is_bool())
    throw TemplateError("TypeError: an integer is required, got '" + type_name(v) + "'");
  return v.as_int();
}

bool contains(const Value& needle, const Value& seq) {
  switch (seq.type()) {
    case Value::Type::kUndefined:
      return false;
    case Value::Type::kString:
      if (!needle.is_string())
        throw TemplateError("TypeError: 'in <string>' requires string as left operand, not " +
                            type_name(needle));
      return seq.str().find(needle.str()) != std::string::npos;
    case Value::Type::kList:
      for (const Value& x : seq.items())
        if (equals(x, needle)) return true;
      return false;
    case Value::Type::kDict:
      if (needle.is_list() && !needle.is_tuple())
        throw TemplateError("TypeError: unhashable type: 'list'");
      return needle.is_string() && seq.dict().find(needle.str()) != nullptr;
    default:
      throw TemplateError("TypeError: argument of type '" + type_name(seq) + "' is not iterable");
  }
}

#define QWEN35_TEST(body)                                  \
  [](Interpreter&, const Value& v, CallArgs&& a) -> bool { \
    (void)a;                                               \
    body                                                   \
  }

const std::unordered_map<std::string, TestFn>& tests() {
  static const auto* kTests = new std::unordered_map<std::string, TestFn>{
      {"defined", QWEN35_TEST(return !v.is_undefined();)},
      {"undefined", QWEN35_TEST(return v.is_undefined();)},
      {"none", QWEN35_TEST(return v.is_none();)},
      {"boolean", QWEN35_TEST(return v.is_bool();)},
      {"false", QWEN35_TEST(return v.is_bool() && !v.as_bool();)},
      {"true", QWEN35_TEST(return v.is_bool() && v.as_bool();)},
      {"integer", QWEN35_TEST(return v.is_int();)},
      {"float", QWEN35_TEST(return v.is_float();)},
      {"number", QWEN35_TEST(return v.is_number();)},
      {"string", QWEN35_TEST(return v.is_string();)},
      {"mapping", QWEN35_TEST(return v.is_dict();)},
      // Undefined defines __iter__, __len__ and __getitem__, so Python calls it iterable and a
      // sequence; so is a dict.
      {"iterable",
       QWEN35_TEST(return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();)},
      {"sequence",
       QWEN35_TEST(return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();)},
      {"callable", QWEN35_TEST(return v.is_callable() || v.is_undefined();)},
      {"escaped", QWEN35_TEST(return v.is_markup();)},
      {"odd", QWEN35_TEST(return (int_of(v) % 2 + 2) % 2 == 1;)},
      {"even", QWEN35_TEST(return int_of(v) % 2 == 0;)},
      {"divisibleby", QWEN35_TEST({
         const int64_t d = int_of(arg0("divisibleby", a));
         if (d == 0) throw TemplateError("ZeroDivisionError: integer division or modulo by zero");
         return int_of(v) % d == 0;
       })},
      {"lower", QWEN35_TEST(return py_is(to_str(v), "lower");)},
      {"upper", QWEN35_TEST(return py_is(to_str(v), "upper");)},
      {"in", QWEN35_TEST(return contains(v, arg0("in", a));)},
      {"sameas", QWEN35_TEST({
         const Value& o = arg0("sameas", a);
         return v.type() == o.type() && equals(v, o) &&
                (v.is_none() || v.is_bool() || v.is_undefined() || v.is_int());
       })},
      {"eq", QWEN35_TEST(return equals(v, arg0("eq", a));)},
      {"equalto", QWEN35_TEST(return equals(v, arg0("equalto", a));)},
      {"==", QWEN35_TEST(return equals(v, arg0("==", a));)},
      {"ne", QWEN35_TEST(return !equals(v, arg0("ne", a));)},
      {"!=", QWEN35_TEST(return !equals(v, arg0("!=", a));)},
      {"lt", QWEN35_TEST(return compare(v, arg0("lt", a), "<");)},
      {"lessthan", QWEN35_TEST(return compare(v, arg0("lessthan", a), "<");)},
      {"<", QWEN35_TEST(return compare(v, arg0("<", a), "<");)},
      {"le", QWEN35_TEST(return compare(v, arg0("le", a), "<=");)},
      {"<=", QWEN35_TEST(return compare(v, arg0("<=", a), "<=");)},
      {"gt", QWEN35_TEST(return compare(v, arg0("gt", a), ">");)},
      {"greaterthan", QWEN35_TEST(return compare(v, arg0("greaterthan", a), ">");)},
      {">", QWEN35_TEST(return compare(v, arg0(">", a), ">");)},
      {"ge", QWEN35_TEST(return compare(v, arg0("ge", a), ">=");)},
      {">=", QWEN35_TEST(return compare(v, arg0(">=", a), ">=");)},
      {"filter", QWEN35_TEST(return v.is_string() && has_filter(v.str());)},
      {"test", QWEN35_TEST(return v.is_string() && has_test(v.str());)},
  };
  return *kTests;
}

#undef QWEN35_TEST

}  // namespace

bool has_test(std::string_view name) { return tests().count(std::string(name)) != 0; }

std::string unknown_test_message(std::string_view name) {
  return "No test named '" + std::string(name) + "'.";
}

bool apply_test(Interpreter& in, const std::string& name, const Value& v, CallArgs args) {
  const auto it = tests().find(name);
  if (it == tests().end()) throw TemplateError(unknown_test_message(name));
  return it->second(in, v, std::move(args));
}

}  // namespace qwen35::tmpl::jinja
