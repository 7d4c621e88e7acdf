// What went wrong with a request, typed: the parsers, the driver and the router produce an
// ApiError (a kind, the offending parameter, a sentence), and each API writes it in its own
// shape:
//   OpenAI (chat, completions, Responses, the utilities)
//       {"error": {"message", "type", "param", "code"}}
//   Anthropic (/v1/messages...)
//       {"type": "error", "error": {"type", "message"}}
// The parameter is named in the client's API's terms where the error arises (each parser is
// reads its own API's fields, ChatNames in chat_request.h); no formatter renames anything.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "server/http.h"

namespace qwen35::server {

using Json = nlohmann::ordered_json;

enum class ErrorKind {
  kInvalidRequest,   // 400: a malformed or refused field
  kContextLength,    // 400: the prompt does not fit the context (each API's own wording)
  kModelNotFound,    // 400: "model" names another model (issue 6: a bad field like any other)
  kAuthentication,   // 401
  kNotFound,         // 404: no such route
  kNoSuchModel,      // 404: GET /v1/models/{id} of another model (OpenAI's model_not_found)
  kMethodNotAllowed, // 405: the route exists for another method
  kTooLarge,         // 413: the body is over the limit
  kHeadersTooLarge,  // 431
  kRateLimited,      // 429: the queue is full now (retryable)
  kServer,           // 500: the server failed (an engine error, a runaway template)
  kUnavailable,      // 503: loading, shutting down, too many connections, cancelled
  kNotImplemented,   // 501: a method or transfer coding the server does not implement at all
};

struct ApiError {
  ErrorKind kind = ErrorKind::kInvalidRequest;
  std::string param;    // the offending field in the client's API's terms, "" when none
  std::string message;  // a sentence for the client
  int retry_after_s = 0;  // > 0: the transport sends "Retry-After: N" (429, 503)
  // kContextLength: the prompt's tokens and the most the context takes.
  int64_t prompt_tokens = 0, max_prompt_tokens = 0;

  int status() const;
};

// A 400 that names `param` (may be "").
ApiError invalid(std::string param, std::string message);
// A prompt of n tokens over the most the context takes (max), blamed on `param`. OpenAI's shape
// says code "context_length_exceeded"; Anthropic's message is "prompt is too long: N tokens > M
// maximum", the wording clients (Claude Code) recognise.
ApiError context_length(std::string param, int64_t n, int64_t max);
// An error of `kind` about no field in particular.
ApiError api_error(ErrorKind kind, std::string message);
// The kind of an HTTP status the transport answers itself (400, 413, 431, 500, 501, 503).
ErrorKind kind_of_status(int status);

// OpenAI's name of the kind ("invalid_request_error", "rate_limit_error", ...).
const char* openai_error_type(ErrorKind kind);

// OpenAI's error object: type from the kind, param (null when none), code = the HTTP status.
Json error_body(const ApiError& e);
// Anthropic's: type from the kind; it has no param, so the message leads with it ("param: ..."),
// as Anthropic's own errors do.
Json anthropic_error_body(const ApiError& e);

// The HTTP answers of an error: its status, the body, Retry-After when the error says when.
HttpResponse error_response(const ApiError& e);
HttpResponse anthropic_error_response(const ApiError& e);

// JSON text that never throws on invalid UTF-8 (replaced by U+FFFD).
std::string dump(const Json& j);

}  // namespace qwen35::server
