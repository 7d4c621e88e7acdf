// JSON Schema `pattern` (an ECMAScript regular expression, as ajv and browsers read it with the
// u flag) compiled to a grammar symbol over a string's characters. The match is a search, as
// JSON Schema defines it: without ^ or $ anything may come before or after.
//
// The subset: literals, `.`, classes `[...]` (ranges, negation, escapes), \d \D \w \W \s \S,
// \t \n \r \f \v \0 \xHH \uHHHH \u{H...}, escaped punctuation, groups `( )`, `(?: )`,
// `(?<name> )`, alternation, the quantifiers * + ? {n} {n,} {n,m} (lazy forms too: the language
// is the same), ^ at the start and $ at the end of a top-level alternative. Anything else
// (backreferences, lookaround, \b, \p{...}, anchors elsewhere) is an error that says what.
#pragma once

#include <string_view>

#include "core/result.h"
#include "grammar/text.h"

namespace qwen35::grammar {

// Largest count a quantifier may give (a larger one is an error). Nested quantifiers multiply:
// a pattern over the Builder's max_states (Builder::states) is an error too.
constexpr int64_t kMaxRepeat = 1000;

core::Result<Sym> compile_pattern(std::string_view pattern, Builder& b, CharSyms& chars,
                                  Encoding enc);

}  // namespace qwen35::grammar
