// JSON Schema to grammar: the JSON texts a schema admits (a subset of them: see below), for
// constrained decoding of response_format, strict tool calls and `qwen35 run --json-schema`.
//
// Keywords and what the grammar enforces of them (docs/design.md has the table):
//   type (one or a list), enum, const, $ref to "#", "#/$defs/NAME" or "#/definitions/NAME"
//   (recursion included), allOf of one schema: exactly.
//   anyOf, oneOf: one of the schemas; oneOf's "exactly one" is not enforced (a value valid under
//   two of its schemas can be written).
//   minimum, maximum, exclusiveMinimum, exclusiveMaximum (draft 4's boolean forms too): exact
//   for integers; for numbers a subset of the range, exact at integer bounds
//   (json_schema_numbers.cc says which decimals).
//   minLength, maxLength, pattern (regex.h), format (date, time, date-time, uuid, email, ipv4).
//   properties, required, additionalProperties (false, true or a schema), patternProperties
//   (one pattern), propertyNames (a string schema: pattern, enum, const, lengths, format):
//   extra members are written only by an object schema that declares no properties, with keys
//   under propertyNames or the pattern; declared properties outside an enum/const
//   propertyNames are left out (an error when required).
//   items, prefixItems (the tuple, then items for the rest; items false ends it), minItems,
//   maxItems, uniqueItems (enforced where the items are a finite set of values: enum, const,
//   boolean, null, written in that set's order; with at most one item trivially; otherwise an
//   error).
// Annotations (title, description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly) are ignored. Any other keyword is an error that names it and where it is
// ("'not' at #/properties/age").
//
// What the grammar produces of the admitted texts: properties in the schema's order, whitespace
// between tokens of at most one newline and 24 spaces or tabs (or one space), integers of at
// most 16 digits, numbers with at most 16 fraction digits and a 2-digit exponent (none under a
// bound), strings whose escapes are the short ones and \uXXXX (no surrogate pairs). Each is
// valid under the schema.
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
  Sym key(const Json& schema, const std::string& path);  // a member's key under propertyNames
  Sym array(const Json& schema, const std::string& path);
  Sym unique_array(const Json& schema, const std::string& path, int64_t lo, int64_t hi);
  // json_schema_numbers.cc: integers and numbers under minimum/maximum and their exclusive forms.
  Sym bounded_number(const std::string& type, const Json& schema, const std::string& path);
  Sym integer_range(int64_t lo, int64_t hi);
  Sym natural_range(int64_t lo, int64_t hi);
  Sym digits_between(const std::string& x, const std::string& y);
  Sym sep();
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
