// Built-in filters, tests, attribute lookup, str/dict/list methods and global functions of the
// chat-template interpreter, with jinja2's (Python's) semantics.
#pragma once

#include <string>
#include <string_view>

#include "template/jinja_value.h"

namespace qwen35::tmpl::jinja {

class Interpreter;

// Parse-time checks: a name jinja2 knows but this interpreter does not implement gives
// "filter 'x' is not supported"; an unknown one gives jinja2's "No filter named 'x'.".
bool has_filter(std::string_view name);
bool has_test(std::string_view name);
std::string unknown_filter_message(std::string_view name);
std::string unknown_test_message(std::string_view name);

Value apply_filter(Interpreter& in, const std::string& name, const Value& v, CallArgs args);
bool apply_test(Interpreter& in, const std::string& name, const Value& v, CallArgs args);

// jinja2's sandboxed getattr (obj.name) and getitem (obj[key]).
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);

// Python's printf-style `fmt % args` (args: a tuple, a mapping for %(name)s, or one value).
std::string printf_format(const std::string& fmt, const Value& args);

// The template globals (range, namespace, dict, raise_exception, strftime_now ...).
void add_globals(Dict& globals);

// Bound args of a builtin: positional then keyword, by parameter name; missing ones are unset.
struct BoundArgs {
  std::vector<Value> values;
  std::vector<bool> given;
  bool has(size_t i) const { return given[i]; }
  const Value& operator[](size_t i) const { return values[i]; }
};
BoundArgs bind_args(const std::string& what, CallArgs args,
                    std::initializer_list<const char*> params);

// Python iteration: list items, dict keys, str characters; Undefined iterates as empty.
std::vector<Value> iterate(const Value& v);

}  // namespace qwen35::tmpl::jinja
