#include "server/http_framing.h"

#include <algorithm>

namespace qwen35::server {
namespace {

constexpr std::string_view kCrlf = "\r\n";

bool is_ows(char c) { return c == ' ' || c == '\t'; }

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && is_ows(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ows(s.back())) s.remove_suffix(1);
  return s;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x >= 'A' && x <= 'Z' ? char(x - 'A' + 'a') : x) ==
                  (y >= 'A' && y <= 'Z' ? char(y - 'A' + 'a') : y);
         });
}

// tchar (RFC 9110 §5.6.2): what a coding's name is made of.
bool is_token(std::string_view s) {
  constexpr std::string_view kSpecials = "!#$%&'*+-.^_`|~";
  return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           kSpecials.find(c) != std::string_view::npos;
  });
}

// The codings of all Transfer-Encoding lines, in order, without empty list elements. An
// element is kept whole (a coding with parameters, "chunked;x=1", is not `chunked`).
std::vector<std::string_view> codings(const std::vector<std::string_view>& values) {
  std::vector<std::string_view> out;
  for (std::string_view v : values) {
    while (true) {
      const size_t comma = v.find(',');
      const std::string_view element = trim_ows(v.substr(0, comma));
      if (!element.empty()) out.push_back(element);
      if (comma == std::string_view::npos) break;
      v.remove_prefix(comma + 1);
    }
  }
  return out;
}

}  // namespace

size_t head_length(std::string_view bytes, size_t limit) {
  const size_t end = bytes.substr(0, limit).find("\r\n\r\n");
  return end == std::string_view::npos ? 0 : end + 4;
}

std::optional<FramingError> check_head(std::string_view head) {
  // Every line after the request line up to the empty one is a field line; none may start with
  // whitespace. (A line right after the request line that does is whitespace before the first
  // field, which RFC 9112 §2.2 also lets a server reject.)
  size_t at = head.find(kCrlf);
  while (at != std::string_view::npos && at + 2 < head.size()) {
    const char first = head[at + 2];
    if (is_ows(first))
      return FramingError{400, "malformed HTTP request (obsolete line folding in the header)"};
    at = head.find(kCrlf, at + 2);
  }
  return std::nullopt;
}

bool is_head_request(std::string_view head) { return head.starts_with("HEAD "); }

std::optional<FramingError> check_transfer_encoding(const std::vector<std::string_view>& values,
                                                    bool has_content_length, unsigned version) {
  if (values.empty()) return std::nullopt;
  if (has_content_length)
    return FramingError{400, "malformed HTTP request (both Transfer-Encoding and Content-Length)"};
  // HTTP/1.0 has no transfer codings: its recipients frame the body otherwise (RFC 9112 §6.1).
  if (version < 11)
    return FramingError{400, "malformed HTTP request (Transfer-Encoding in an HTTP/1.0 request)"};
  const std::vector<std::string_view> list = codings(values);
  const auto chunked = std::count_if(list.begin(), list.end(),
                                     [](std::string_view c) { return iequals(c, "chunked"); });
  if (list.empty() || chunked != 1 || !iequals(list.back(), "chunked"))
    return FramingError{400,
                        "malformed HTTP request (Transfer-Encoding must end with chunked, "
                        "once)"};
  // A coding is a name and parameters (transfer-coding = token *( OWS ";" OWS param )).
  for (std::string_view c : list)
    if (!is_token(trim_ows(c.substr(0, c.find(';')))))
      return FramingError{400,
                          "malformed HTTP request (a Transfer-Encoding coding is not a token)"};
  if (list.size() > 1)
    return FramingError{501, "transfer coding '" + std::string(list.front()) +
                                 "' is not implemented (only chunked is)"};
  return std::nullopt;
}

}  // namespace qwen35::server
