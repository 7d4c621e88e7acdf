// POST /v1/responses, the OpenAI Responses API (what Codex CLI speaks): a request is read into
// the chat-like ChatRequest (responses_request.cc, chat_request.h), run by the shared driver
// (generation.h), and answered as a Response object or its SSE events (responses.cc).
//
// Stateless: previous_response_id, conversation and item references are refused (a client
// sends the whole conversation as items); store is accepted and ignored.
#pragma once

#include <memory>
#include <optional>

#include "server/agent_tools.h"
#include "server/generation.h"

namespace qwen35::server {

// What the answer needs besides the chat request: the request's fields a Response echoes.
struct ResponsesOptions {
  Json instructions = nullptr;
  Json tools = Json::array();  // the request's function tools, in the Responses form
  Json tool_choice = "auto";
  Json max_output_tokens = nullptr;
  Json text = {{"format", {{"type", "text"}}}};
  Json reasoning_effort = nullptr;
  Json metadata = Json::object();
  Json user = nullptr;
  bool store = true;
  bool parallel_tool_calls = true;
  AgentTools agent_tools;  // what the model's tool names stand for; warnings
};

// A Responses request body -> the generation request *r (read into a ChatRequest,
// chat_request.h) and the fields to echo (*opt). Errors name the Responses fields.
std::optional<ApiError> parse_responses_request(const Json& body, const ModelInfo& mi,
                                                CompletionRequest* r, ResponsesOptions* opt);

// The formatter of a Responses answer to `req` (parsed by parse_responses_request): the Response object, its SSE events, errors in OpenAI's format.
std::unique_ptr<Formatter> make_responses_formatter(ResponsesOptions opt,
                                                    const CompletionRequest& req);

// The handler of POST /v1/responses, after the route prelude (server.cc) parsed the body.
void handle_responses(Context& ctx, const Json& body, std::shared_ptr<Responder> r);

}  // namespace qwen35::server
