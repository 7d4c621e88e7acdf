// JSON parsing with a nesting-depth bound checked *while parsing*, for every JSON text that comes
// from a client (request bodies, tool-call argument strings) or from the model (tool calls).
//
// Why: nlohmann::basic_json copies and compares values recursively, so a value nested ~100k deep
// (a few hundred KiB of "[") overflows the stack in the copy constructor (issue 14). The check is
// a SAX pass that counts open containers and stops at the first one past the limit, so a deep
// text is refused after reading `max_depth` brackets, before any value is built.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

namespace qwen35::server {

// Deep enough for any real request (OpenAI tool schemas nest ~10 levels), shallow enough that
// recursive copies stay a few KiB of stack. `qwen35 serve --max-json-depth` overrides it.
inline constexpr int kDefaultMaxJsonDepth = 64;

enum class JsonStatus { kOk, kInvalid, kTooDeep };

// Depth counts containers: `1` is 0, `{}` is 1, `{"a": [1]}` is 2.
JsonStatus check_json(std::string_view text, int max_depth);

// Parses `text`; a discarded value (is_discarded()) when it is not JSON or nests deeper than
// `max_depth` (*status, when given, tells which). Never throws.
nlohmann::ordered_json parse_json(std::string_view text, int max_depth,
                                  JsonStatus* status = nullptr);

}  // namespace qwen35::server
