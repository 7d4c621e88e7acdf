// POST /v1/messages and /v1/messages/count_tokens, the Anthropic Messages API (what Claude Code
// speaks): a request is read into the chat-like ChatRequest (messages_request.cc,
// chat_request.h), run by the shared driver (generation.h), and answered as a Message or its SSE
// events (messages.cc). Errors are Anthropic's: {"type": "error", "error": {"type", "message"}}.
#pragma once

#include <memory>
#include <optional>

#include "server/generation.h"

namespace qwen35::server {

struct MessagesOptions {
  bool parallel_tool_calls = true;  // tool_choice.disable_parallel_tool_use: false
};

// A Messages request body -> the generation request *r (read into a ChatRequest,
// chat_request.h). count_tokens: the body of /v1/messages/count_tokens (max_tokens is not
// required there, and stream is not read). Errors name the Messages fields.
std::optional<ApiError> parse_messages_request(const Json& body, bool count_tokens,
                                               const ModelInfo& mi, CompletionRequest* r,
                                               MessagesOptions* opt);

// The formatter of a Messages answer to `req`: the Message, its SSE events, errors in
// Anthropic's format (api_error.h).
std::unique_ptr<Formatter> make_messages_formatter(MessagesOptions opt,
                                                   const CompletionRequest& req);

// count_tokens = true: /v1/messages/count_tokens ({"input_tokens": N}, nothing generated). After
// the route prelude (server.cc) parsed the body.
void handle_messages(Context& ctx, bool count_tokens, const Json& body,
                     std::shared_ptr<Responder> r);

}  // namespace qwen35::server
