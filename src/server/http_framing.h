// The request framing rules the transport (http_server.cc) enforces on top of Beast's parser.
//
// A proxy in front of the server (HAProxy, nginx) and the server must agree on where each
// request ends; where they could disagree, a second request hidden in the first one's body is
// read by one side and not the other (request smuggling). Beast is lenient in the places RFC 9112
// lets a recipient choose, so the transport refuses those forms outright, and answers with the
// connection closed:
//   - obsolete line folding (a field line starting with SP or HTAB, RFC 9112 §5.2): 400. Beast
//     joins such a line to the field before it, so a folded Content-Length counts for Beast
//     while a proxy may drop or reject it. Checked on the raw head: once Beast has parsed a
//     field, the fold is gone.
//   - Transfer-Encoding (RFC 9112 §6.1, §6.3), over every Transfer-Encoding line of the head as
//     one list (empty elements ignored, RFC 9110 §5.6.1): with Content-Length, 400; in an
//     HTTP/1.0 request, 400; a list in which `chunked` is not there exactly once and last, 400,
//     since the body's length cannot be known; a coding whose name is not a token, 400;
//     `chunked` last after other codings (gzip, chunked), 501: the framing is readable but the
//     server decodes no other transfer coding, and using the body undecoded would be wrong.
//     `chunked` is matched without regard to case and only bare: "chunked;x=1" is another
//     coding.
// The functions are pure, so the unit tests state the rules without a socket.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qwen35::server {

struct FramingError {
  int status = 400;  // 400, 501
  std::string message;
};

// The length of the request head at the start of `bytes` (request line, field lines and the
// empty line that ends them, as Beast finds it: the first CRLF CRLF), or 0 while it has not
// arrived. Only the first `limit` bytes are searched.
size_t head_length(std::string_view bytes, size_t limit);

// The whole raw head (head_length bytes): a 400 for a folded line.
std::optional<FramingError> check_head(std::string_view head);

// Whether the raw head's request line is a HEAD request (the method token is case-sensitive).
bool is_head_request(std::string_view head);

// The framing fields of a parsed head: every Transfer-Encoding field value in order, whether a
// Content-Length was sent, and the HTTP version (10, 11). nullopt: the framing is accepted (no
// Transfer-Encoding, or exactly `chunked`, any case).
std::optional<FramingError> check_transfer_encoding(const std::vector<std::string_view>& values,
                                                    bool has_content_length, unsigned version);

}  // namespace qwen35::server
