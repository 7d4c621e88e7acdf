// Python str semantics on UTF-8 strings, for the chat-template interpreter: code-point length and
// slicing, str.isspace / strip / split / replace / case mapping, repr(), float repr and the JSON
// string escaping of Python's json.dumps. Inputs are UTF-8; an invalid byte decodes as U+FFFD.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qwen35::tmpl::jinja {

std::u32string decode_utf8(std::string_view s);
void append_utf8(std::string& out, char32_t c);
std::string encode_utf8(const std::u32string& s);
bool valid_utf8(std::string_view s);
size_t utf8_length(std::string_view s);

// Python str.isspace() for one code point (includes U+001C..U+001F and U+0085).
bool py_isspace(char32_t c);

// str.strip/lstrip/rstrip: chars == nullopt strips whitespace, otherwise the given code points.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right);
// str.split / str.rsplit. sep == nullopt splits on whitespace runs. Throws on an empty separator.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right);
std::string py_replace(std::string_view s, std::string_view old_s, std::string_view new_s,
                       int64_t count);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_title(std::string_view s);
// str.islower / isupper / isalpha / isdigit / isalnum / isspace (false on "").
bool py_is(std::string_view s, std::string_view what);
// str.splitlines(keepends)
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);

// repr() of a str: single quotes unless the text holds ' and no ".
std::string py_repr_str(std::string_view s);
// repr() of a float: shortest round-trip digits, exponent form below 1e-4 and from 1e16.
std::string py_float_repr(double v);
// json.dumps of a str (with the quotes).
std::string json_quote(std::string_view s, bool ensure_ascii);
// markupsafe.escape.
std::string html_escape(std::string_view s);

}  // namespace qwen35::tmpl::jinja
