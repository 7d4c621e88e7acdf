// What the JSON Schema compiler's source files share (json_schema.cc, json_schema_numbers.cc,
// json_schema_containers.cc); not for other users.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "grammar/json_schema.h"

namespace qwen35::grammar::schema_detail {

// A schema the compiler cannot compile: JsonSchemaCompiler::value() turns it into an error.
struct SchemaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] inline void fail(const std::string& msg) { throw SchemaError(msg); }

// Whether a JSON value has the JSON Schema type t.
inline bool matches_type(const Json& v, const std::string& t) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "integer")
    return v.is_number_integer() ||
           (v.is_number_float() && v.get<double>() == double(int64_t(v.get<double>())));
  if (t == "number") return v.is_number();
  if (t == "string") return v.is_string();
  if (t == "array") return v.is_array();
  if (t == "object") return v.is_object();
  return false;
}

// A value's JSON text (invalid UTF-8 replaced).
inline std::string text(const Json& v) {
  return v.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace qwen35::grammar::schema_detail
