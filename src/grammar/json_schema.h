// JSON Schema to grammar: the JSON texts a schema admits (a subset of them: see below), for
// constrained decoding of response_format, forced tool calls and `qwen35 run --json-schema`.
//
// Keywords: type (one or a list), properties, required, additionalProperties (false, true or a
// schema; extra properties are produced only by an object schema that declares none), items,
// minItems, maxItems, enum, const, anyOf, allOf of one schema, $ref to "#", "#/$defs/NAME" or
// "#/definitions/NAME" (recursion included), minLength, maxLength, pattern (regex.h), format
// (date, time, date-time, uuid, email, ipv4). Annotations (title, description, default,
// examples, $schema, $id, $comment, deprecated, readOnly, writeOnly) are ignored. Any other
// keyword is an error that names it and where it is ("'minimum' at #/properties/age").
//
// What the grammar produces of the admitted texts: properties in the schema's order, whitespace
// between tokens of at most one newline and 24 spaces or tabs (or one space), integers of at
// most 16 digits, numbers with at most 16 fraction digits and a 2-digit exponent, strings whose
// escapes are the short ones and \uXXXX (no surrogate pairs). Each is valid under the schema.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/result.h"
#include "grammar/text.h"

namespace qwen35::grammar {

using Json = nlohmann::ordered_json;

// Largest minLength/maxLength/minItems/maxItems the grammar expands (a larger count is an error).
constexpr int64_t kMaxCount = 4096;

class JsonSchemaCompiler {
 public:
  // `root` is the document $ref resolves in (the schema itself for response_format).
  JsonSchemaCompiler(Builder& b, const Json& root);

  // The JSON text of a value valid under `schema`; `path` names it in errors ("#/items").
  core::Result<Sym> value(const Json& schema, const std::string& path);
  // A string valid under `schema` (type string; enum and const of strings too) written raw,
  // without quotes or escapes, and never containing '<' followed by '/' (so it cannot close the
  // tag around it; where a constraint decides the characters, no '<' at all).
  core::Result<Sym> raw_string(const Json& schema, const std::string& path);
  Sym ws();
  Sym any_value();
  Sym any_object();

 private:
  void check_keywords(const Json& schema, const std::string& path);
  Sym compile(const Json& schema, const std::string& path);
  Sym typed(const std::string& type, const Json& schema, const std::string& path);
  Sym string_body(const Json& schema, const std::string& path, Encoding enc);
  Sym object(const Json& schema, const std::string& path);
  Sym array(const Json& schema, const std::string& path);
  Sym ref(const std::string& ref, const std::string& path);
  int64_t count(const Json& schema, const char* key, int64_t dflt, const std::string& path);

  Builder& b_;
  CharSyms chars_;
  const Json& root_;
  std::map<std::string, Sym> refs_;
  int ref_depth_ = 0;
  Sym ws_{}, any_{}, any_object_{}, string_{}, number_{}, integer_{};
};

// A whole document: the value, with up to two newlines before and after it. A grammar of more
// than max_states states (Builder::states) is an error that says so.
core::Result<Grammar> json_schema_grammar(const Json& schema, int64_t max_states = Builder::kInf);
// Any JSON object ({"type": "json_object"}).
core::Result<Grammar> json_object_grammar();

}  // namespace qwen35::grammar
