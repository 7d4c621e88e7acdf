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

// A Messages request body -> the equivalent chat-completions body (*chat), and the Messages
// names of the chat fields (*names), which parse_chat_request names its errors by.
// count_tokens: the body of /v1/messages/count_tokens (max_tokens is not required there).
std::optional<ApiError> messages_to_chat(const Json& body, bool count_tokens, Json* chat,
                                         MessagesOptions* opt, FieldNames* names);

// The formatter of a Messages answer to `req`: the Message, its SSE events, errors in
// Anthropic's format (api_error.h).
std::unique_ptr<Formatter> make_messages_formatter(MessagesOptions opt,
                                                   const CompletionRequest& req);

// count_tokens = true: /v1/messages/count_tokens ({"input_tokens": N}, nothing generated). After
// the route prelude (server.cc) parsed the body.
void handle_messages(Context& ctx, bool count_tokens, const Json& body,
                     std::shared_ptr<Responder> r);

}  // namespace qwen35::server
