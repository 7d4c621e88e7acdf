// Template lexer: splits a Jinja source into data and tag tokens exactly as jinja2's lexer does
// with transformers' settings (trim_blocks and lstrip_blocks on, `{%-`/`-%}`/`{{-`/`-}}`
// whitespace control, `+` opt-outs, comments, raw blocks, newline normalization and the removal of
// one trailing newline), then tokenizes the expressions inside `{{ }}` and `{% %}`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qwen35::tmpl::jinja {

enum class TokType {
  kData,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInteger,
  kFloat,
  kOp,
  kEof
};

struct Token {
  TokType type = TokType::kEof;
  int line = 1;
  std::string text;  // data, name, operator, or the decoded string literal
  int64_t int_value = 0;
  double float_value = 0;
};

// Throws TemplateError (with the line) on a malformed template.
std::vector<Token> lex_template(std::string_view source);

// For messages: "'end of statement block'", "'name'", ...
std::string describe(const Token& t);

}  // namespace qwen35::tmpl::jinja
