// POST /v1/messages and /v1/messages/count_tokens, the Anthropic Messages API (what Claude Code
// speaks), on top of the chat path: a request is translated into the equivalent
// chat-completions body (messages_request.cc), parsed by parse_chat_request, run by the shared
// driver (generation.h), and answered as a Message or its SSE events (messages.cc). Errors are
// Anthropic's: {"type": "error", "error": {"type", "message"}}.
#pragma once

#include <memory>
#include <optional>

#include "server/generation.h"

namespace qwen35::server {

struct MessagesOptions {
  bool parallel_tool_calls = true;  // tool_choice.disable_parallel_tool_use: false
};

// A Messages request body -> the equivalent chat-completions body (*chat), and the renaming of
// chat's field names into the request's (*names) for the errors parse_chat_request gives.
// count_tokens: the body of /v1/messages/count_tokens (max_tokens is not required there).
std::optional<ApiError> messages_to_chat(const Json& body, bool count_tokens, Json* chat,
                                         MessagesOptions* opt, FieldNames* names);

// An error as Anthropic's clients read it, with the HTTP status of `e`: the error type follows
// the status (400 invalid_request_error, 401 authentication_error, 404 not_found_error, 429
// rate_limit_error, 503 overloaded_error, 500 api_error, ...).
Json anthropic_error_body(const ApiError& e);
HttpResponse anthropic_error_response(const ApiError& e);

// The formatter of a Messages answer to `req`: the Message, its SSE events, errors in
// Anthropic's format renamed by `names`.
std::unique_ptr<Formatter> make_messages_formatter(MessagesOptions opt, FieldNames names,
                                                   const CompletionRequest& req);

// count_tokens = true: /v1/messages/count_tokens ({"input_tokens": N}, nothing generated).
void handle_messages(Context& ctx, bool count_tokens, const HttpRequest& req,
                     std::shared_ptr<Responder> r);

}  // namespace qwen35::server
