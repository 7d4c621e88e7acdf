// OpenAI request bodies -> validated generation requests. Every malformed field gives an
// ApiError (HTTP 400 with an OpenAI-style error object) that names the field; nothing here
// throws or asserts on client input.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/drafter.h"
#include "runtime/sampler.h"
#include "server/http.h"
#include "server/json_limits.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace qwen35::server {

using Json = nlohmann::ordered_json;
class GrammarCache;  // server/structured.h

struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // the offending field, "" when none
  std::string type = "invalid_request_error";
  int retry_after_s = 0;  // > 0: the transport sends "Retry-After: N" (429, 503)
};

// Error object as OpenAI clients expect: {"error": {"message", "type", "param", "code"}}.
Json error_body(const ApiError& e);
// The HTTP answer of an error: error_body, with Retry-After when the error says when to retry.
HttpResponse error_response(const ApiError& e);
// JSON text that never throws on invalid UTF-8 (replaced by U+FFFD).
std::string dump(const Json& j);

// What request parsing needs from the server.
struct ModelInfo {
  const tokenizer::Tokenizer* tok = nullptr;
  const tmpl::ChatTemplate* tmpl = nullptr;  // null: the checkpoint has no chat template
  runtime::SamplingParams defaults;               // from generation_config.json
  std::vector<int32_t> eos_ids;
  std::string name;  // served model name
  std::string path;  // also accepted as the model name
  int64_t ctx = 0;
  int max_json_depth = kDefaultMaxJsonDepth;  // nesting bound of request bodies (json_limits.h)
  int64_t reasoning_budget = -1;  // chat requests' default thinking budget (-1: no cap)
  // Compiled grammars of structured outputs (null: response_format and forced tool calls are
  // refused).
  std::shared_ptr<GrammarCache> grammars;
};

// Reads a request body: valid UTF-8, JSON nested at most mi.max_json_depth deep (checked while
// parsing), an object. Every endpoint that takes JSON goes through here.
std::optional<ApiError> parse_request_body(std::string_view body, const ModelInfo& mi, Json* out);

// A token id from a request: an integer, range-checked as a 64-bit value before it is narrowed.
std::optional<ApiError> get_token_id(const Json& x, const tokenizer::Tokenizer& tok,
                                     const char* param, int32_t* out);

// /detokenize: {"tokens": [id, ...]} -> ids (each checked by get_token_id).
std::optional<ApiError> parse_detokenize(const Json& body, const ModelInfo& mi,
                                         std::vector<int32_t>* ids);

struct CompletionRequest {
  bool chat = false;
  std::string model;
  bool stream = false, include_usage = false;
  int n = 1;
  // The prompts: one for chat and for most completions; completions may send a batch (a list of
  // strings or of token-id lists). Choice index = prompt index * n + i, as in OpenAI/vLLM.
  struct Prompt {
    std::vector<int32_t> ids;
    std::string text;  // completions: for echo
  };
  std::vector<Prompt> batch;
  runtime::SamplingParams sampling;  // logprobs = top alternatives (-1: no logprobs)
  int64_t max_tokens = -1;
  std::vector<std::string> stops;
  std::vector<int32_t> eos_ids;
  bool echo = false;
  int32_t prompt_logprobs = -1;  // completions echo + logprobs: prompt tokens too
  bool return_token_ids = false;
  bool skip_special = true;
  bool in_reasoning = false;  // the prompt opened <think>
  bool parse_reasoning = true, parse_tools = false;
  Json tools;  // the request's tools (for parameter types)
  // Chat: prompt positions where other requests' prompts are likely to diverge (the end of the
  // shared system part); the prefix cache snapshots below them.
  std::vector<int64_t> snapshot_hints;
  // "speculative": the method and draft length this request asks for (unset: the server's).
  std::optional<runtime::SpecMethod> spec_method;
  std::optional<int> spec_draft_tokens;
  std::vector<int32_t> prediction;  // "prediction": tokens the answer is expected to repeat
};

std::optional<ApiError> parse_chat_request(const Json& body, const ModelInfo& mi,
                                           CompletionRequest* out);
std::optional<ApiError> parse_completion_request(const Json& body, const ModelInfo& mi,
                                                 CompletionRequest* out);

// Renders `messages` (validated) through the chat template: for /apply-template and /tokenize.
std::optional<ApiError> render_messages(const Json& body, const ModelInfo& mi, std::string* text);

// Checks the "model" field: absent, the served name, or the checkpoint path.
std::optional<ApiError> check_model(const Json& body, const ModelInfo& mi);

}  // namespace qwen35::server
