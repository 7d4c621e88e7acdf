// OpenAI request bodies -> validated generation requests. Every malformed field gives an
// ApiError (api_error.h) that names the field in the client's API's terms; nothing here throws
// or asserts on client input.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/drafter.h"
#include "runtime/sampler.h"
#include "server/api_error.h"
#include "server/http.h"
#include "server/json_limits.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace qwen35::server {

class GrammarCache;  // server/structured.h

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

// How the client's API names what the chat parser reads. Responses and Messages requests are
// read by the chat parser too, as the chat body they map onto; an error names its field by
// asking here, where it arises: of("max_tokens") is "max_output_tokens" for a Responses request.
// Lookups are exact (a path the table does not list is the API's own, as in chat).
struct FieldNames {
  std::vector<std::pair<std::string, std::string>> fields;  // chat path -> the API's path
  // For each chat message index, the API's path of what it came from ("input[3]"); empty for
  // chat, whose messages are the client's own.
  std::vector<std::string> origin;

  std::string of(const std::string& chat) const;
  // Message i's sub-path `sub` (".content"): the item it came from when the message was mapped
  // from another API (the item as a whole), else "messages[i]" + sub.
  std::string message(size_t i, const std::string& sub = "") const;
};

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
  // The field a prompt over the context is blamed on, in the client's API's terms.
  std::string prompt_param = "prompt";
};

// names: the API's terms for the fields of `body` (identity for chat itself).
std::optional<ApiError> parse_chat_request(const Json& body, const ModelInfo& mi,
                                           CompletionRequest* out, const FieldNames& names = {});
std::optional<ApiError> parse_completion_request(const Json& body, const ModelInfo& mi,
                                                 CompletionRequest* out);

// Renders `messages` (validated) through the chat template: for /apply-template and /tokenize.
std::optional<ApiError> render_messages(const Json& body, const ModelInfo& mi, std::string* text);

// Checks the "model" field: absent, the served name, or the checkpoint path.
std::optional<ApiError> check_model(const Json& body, const ModelInfo& mi);

}  // namespace qwen35::server
