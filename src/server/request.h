// OpenAI request bodies -> validated generation requests. Every malformed field gives an
// ApiError (api_error.h) that names the field in the client's API's terms; nothing here throws
// or asserts on client input.
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kernels/kv_format.h"
#include "runtime/drafter.h"
#include "runtime/image_budget.h"
#include "runtime/image_encoder.h"
#include "runtime/sampler.h"
#include "server/api_error.h"
#include "server/http.h"
#include "server/json_limits.h"
#include "server/output_parser.h"
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
  kernels::KvTypes kv_types{};  // the KV pool's (a request's "kv_type" must name it)
  int max_json_depth = kDefaultMaxJsonDepth;  // nesting bound of request bodies (json_limits.h)
  int64_t reasoning_budget = -1;  // chat requests' default thinking budget (-1: no cap)
  // How the model writes tool calls: from its chat template (tool_call_format(), chat_request.h).
  ToolCallFormat tool_format = ToolCallFormat::kXml;
  // Control tokens typed into chat content are matched as tokens (prompt_tokens.h): off by
  // default, where they stay text.
  bool special_tokens_in_content = false;
  // Tools the server cannot run or offer (web_search, MCP, ...) are refused (serve
  // --strict-tools), rather than left out of the prompt with a warning (server/agent_tools.h).
  bool strict_tools = false;
  // Compiled grammars of structured outputs (null: response_format and forced tool calls are
  // refused).
  std::shared_ptr<GrammarCache> grammars;
  // Images (server/image_parts.h): the encoder (null: image input is off in this server), the
  // prompt token an image's rows replace, and the most images one request may carry.
  runtime::ImageEncoder* images = nullptr;
  int32_t image_token = -1;
  int max_images = 8;
  // The memory decoding a request's images may take (0: no bound), and the server's bound on
  // all requests' at once (null: none): docs/design.md "Image admission".
  int64_t image_request_bytes = 0;
  runtime::ImageBudget* image_budget = nullptr;
  // Tests only (serve sets it from QWEN35_TEST_IMAGE_HOLD): once a request's image memory is
  // reserved, its decoding waits until this file exists (a minute at most), so a test can hold a
  // reservation while another request arrives.
  std::string test_image_hold_file;
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
  int32_t think_end = -1;     // chat: the </think> token's id (-1: the vocabulary has none)
  // Chat: the prompt neither opened nor closed a thinking block, so the model may open one
  // (Qwen3's template leaves <think> to it); a grammar then waits it out.
  bool think_may_open = false;
  bool parse_reasoning = true, parse_tools = false;
  Json tools;  // the request's tools (for parameter types)
  // Tool calls kept per choice (-1: all; 1 for chat's parallel_tool_calls false: later calls
  // are dropped, so a client that runs one call per turn never gets more).
  int max_tool_calls = -1;
  ToolCallFormat tool_format = ToolCallFormat::kXml;  // ModelInfo::tool_format
  // Chat: prompt positions where other requests' prompts are likely to diverge (the end of the
  // shared system part); the prefix cache snapshots below them.
  std::vector<int64_t> snapshot_hints;
  // "speculative": the method and draft length this request asks for (unset: the server's).
  std::optional<runtime::SpecMethod> spec_method;
  std::optional<int> spec_draft_tokens;
  std::vector<int32_t> prediction;  // "prediction": tokens the answer is expected to repeat
  // What the server changed or left out of the request (tools it cannot run, ...): sent as
  // the X-Qwen35-Warnings header (agent_tools.h), and in the body where the API has room.
  std::vector<std::string> warnings;
  // The field a prompt over the context is blamed on, in the client's API's terms.
  std::string prompt_param = "prompt";
  // Chat with images: each image's rows, in prompt order, and the token whose runs stand for
  // them in batch[0].ids; image_tokens of the prompt's ids are those runs (usage reports them).
  std::vector<runtime::PromptImage> images;
  int32_t image_token = -1;
  int64_t image_tokens = 0;
};

// POST /v1/chat/completions (chat_body.cc) and /v1/completions. The Responses and Messages
// APIs have their own parsers (responses.h, messages.h); all three chat-like ones read into a
// ChatRequest (chat_request.h).
std::optional<ApiError> parse_chat_request(const Json& body, const ModelInfo& mi,
                                           CompletionRequest* out);
std::optional<ApiError> parse_completion_request(const Json& body, const ModelInfo& mi,
                                                 CompletionRequest* out);

// The building blocks each API's parser composes, every field read under the name the API
// gives it (`key`), which its errors name.
// The start of every request: the "model" check, the "kv_type" check (it must be the pool's),
// the served name, the sampling defaults (generation_config.json) and the end tokens.
std::optional<ApiError> start_request(const Json& body, const ModelInfo& mi,
                                      CompletionRequest* r);
// The fields OpenAI's chat and completions share (start_request, sampling, lengths, stop, n,
// stream, the extras); fields they do not implement are refused by name.
std::optional<ApiError> read_openai_common(const Json& body, const ModelInfo& mi,
                                           CompletionRequest* r);
// Sampling fields that every API names alike: any of temperature, top_p, top_k, min_p,
// presence_penalty, frequency_penalty, repetition_penalty.
std::optional<ApiError> read_sampling(const Json& body, std::initializer_list<const char*> keys,
                                      CompletionRequest* r);
// The answer's length cap (max_tokens, max_completion_tokens, max_output_tokens).
std::optional<ApiError> read_max_tokens(const Json& body, const char* key, CompletionRequest* r);
// Stop strings: a string or a list of non-empty strings (stop, stop_sequences).
std::optional<ApiError> read_stop(const Json& body, const char* key, CompletionRequest* r);
// After every sampling field is read: the combination is valid.
std::optional<ApiError> check_sampling(const CompletionRequest& r);
// Sets the sampler's reasoning budget (budget < 0: none); `open`: the prompt ends inside
// <think>. `param` names what set the budget.
std::optional<ApiError> set_reasoning_budget(int64_t budget, bool open, const ModelInfo& mi,
                                             const std::string& param, CompletionRequest* r);
// Whether a rendered prompt ends inside an open <think> (its last non-blank text).
bool opens_thinking(const std::string& text);
// Whether it ends right after a closed thinking block (its last non-blank text is </think>: an
// empty block written because thinking is off).
bool closes_thinking(const std::string& text);

// Renders `messages` (validated) through the chat template: for /apply-template and /tokenize;
// *ids (when given) are the prompt's ids as a chat request's (prompt_tokens.h).
std::optional<ApiError> render_messages(const Json& body, const ModelInfo& mi, std::string* text,
                                        std::vector<int32_t>* ids = nullptr);

// Checks the "model" field: absent, the served name, or the checkpoint path.
std::optional<ApiError> check_model(const Json& body, const ModelInfo& mi);

}  // namespace qwen35::server
