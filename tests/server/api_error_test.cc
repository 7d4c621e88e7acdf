// Typed errors (api_error.h): each kind in each API's own shape, and the Responses and Messages
// parsers naming their own fields where the error arises, also for what the shared chat stage
// (finish_chat_request) finds, with nothing renamed afterwards.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

#include "server/messages.h"
#include "server/responses.h"
#include "bundled_model_info.h"

namespace qwen35::server {
namespace {

TEST(ApiErrors, OpenAiShapeByKind) {
  ApiError e = invalid("temperature", "'temperature' must be a number");
  EXPECT_EQ(error_body(e), Json::parse(R"({"error": {"message": "'temperature' must be a number",
      "type": "invalid_request_error", "param": "temperature", "code": 400}})"));
  e = api_error(ErrorKind::kRateLimited, "the queue is full");
  e.retry_after_s = 1;
  EXPECT_EQ(error_body(e), Json::parse(R"({"error": {"message": "the queue is full",
      "type": "rate_limit_error", "param": null, "code": 429}})"));
  const HttpResponse res = error_response(e);
  EXPECT_EQ(res.status, 429);
  ASSERT_EQ(res.headers.size(), 1u);
  EXPECT_EQ(res.headers[0].first, "Retry-After");
  EXPECT_EQ(res.headers[0].second, "1");
  const std::vector<std::tuple<ErrorKind, int, const char*>> kinds = {
      {ErrorKind::kModelNotFound, 400, "model_not_found"},
      {ErrorKind::kAuthentication, 401, "authentication_error"},
      {ErrorKind::kNotFound, 404, "not_found_error"},
      {ErrorKind::kMethodNotAllowed, 405, "invalid_request_error"},
      {ErrorKind::kTooLarge, 413, "invalid_request_error"},
      {ErrorKind::kServer, 500, "server_error"},
      {ErrorKind::kUnavailable, 503, "service_unavailable"},
      {ErrorKind::kNotImplemented, 501, "invalid_request_error"}};
  for (const auto& [kind, status, type] : kinds) {
    const Json b = error_body(api_error(kind, "x"));
    EXPECT_EQ(b["error"]["code"], status) << b;
    EXPECT_EQ(b["error"]["type"], type) << b;
  }
  // The statuses the transport answers itself keep their code (a 501 is not a 500).
  for (const int status : {400, 413, 431, 501, 503})
    EXPECT_EQ(api_error(kind_of_status(status), "x").status(), status);
}

TEST(ApiErrors, AnthropicShapeByKind) {
  // No param in Anthropic's shape: the message leads with it, as Anthropic's own errors do.
  EXPECT_EQ(anthropic_error_body(invalid("max_tokens", "'max_tokens' is required")),
            Json::parse(R"({"type": "error", "error": {"type": "invalid_request_error",
                "message": "max_tokens: 'max_tokens' is required"}})"));
  EXPECT_EQ(anthropic_error_body(api_error(ErrorKind::kUnavailable, "shutting down")),
            Json::parse(R"({"type": "error", "error": {"type": "overloaded_error",
                "message": "shutting down"}})"));
  const std::vector<std::tuple<ErrorKind, int, const char*>> kinds = {
      {ErrorKind::kModelNotFound, 400, "invalid_request_error"},
      {ErrorKind::kAuthentication, 401, "authentication_error"},
      {ErrorKind::kNotFound, 404, "not_found_error"},
      {ErrorKind::kTooLarge, 413, "request_too_large"},
      {ErrorKind::kRateLimited, 429, "rate_limit_error"},
      {ErrorKind::kServer, 500, "api_error"}};
  for (const auto& [kind, status, type] : kinds) {
    const ApiError e = api_error(kind, "x");
    EXPECT_EQ(anthropic_error_response(e).status, status);
    EXPECT_EQ(anthropic_error_body(e)["error"]["type"], type);
  }
}

using testing_model::BundledModelInfo;
BundledModelInfo& error_model() { return testing_model::bundled_model_info(); }

// The error of a Responses body.
ApiError responses_error(const Json& body) {
  ResponsesOptions opt;
  CompletionRequest r;
  auto e = parse_responses_request(body, error_model().mi, &r, &opt);
  EXPECT_TRUE(e.has_value()) << body;
  return e.value_or(ApiError{});
}

ApiError messages_error(const Json& body) {
  MessagesOptions opt;
  CompletionRequest r;
  auto e = parse_messages_request(body, false, error_model().mi, &r, &opt);
  EXPECT_TRUE(e.has_value()) << body;
  return e.value_or(ApiError{});
}

TEST(ApiErrors, ResponsesErrorsNameResponsesFields) {
  const Json ok = {{"input", "hi"}, {"max_output_tokens", 4}};
  auto with = [&](const char* key, Json v) {
    Json b = ok;
    b[key] = std::move(v);
    return b;
  };
  const std::vector<std::tuple<Json, std::string, std::string>> cases = {
      {with("max_output_tokens", 0), "max_output_tokens",
       "'max_output_tokens' must be in [1, 9223372036854775807], got 0"},
      {with("reasoning", {{"effort", "extreme"}}), "reasoning.effort",
       "'reasoning.effort' must be \"none\", \"minimal\", \"low\", \"medium\", \"high\" or "
       "\"xhigh\""},
      {with("temperature", -1), "temperature", "'temperature' must be >= 0"},
      {with("input", Json::array({{{"role", "user"}, {"content", "x"}},
                                  {{"type", "function_call"},
                                   {"call_id", "c"},
                                   {"name", "f"},
                                   {"arguments", std::string(100, '[') + std::string(100, ']')}}})),
       "input[1]", "tool call arguments nest JSON deeper than the limit of 64 levels"},
      // Forced tool call without tools: the shared chat stage's check, in Responses terms.
      {with("tool_choice", "required"), "tool_choice",
       "'tool_choice' forces a tool call, but the request has no 'tools'"},
  };
  for (const auto& [body, param, message] : cases) {
    const ApiError e = responses_error(body);
    EXPECT_EQ(e.kind, ErrorKind::kInvalidRequest) << body;
    EXPECT_EQ(error_body(e), (Json{{"error",
                                    {{"message", message},
                                     {"type", "invalid_request_error"},
                                     {"param", param},
                                     {"code", 400}}}}))
        << body;
  }
}

TEST(ApiErrors, MessagesErrorsNameMessagesFields) {
  const Json msgs = {{{"role", "user"}, {"content", "hi"}}};
  const std::vector<std::pair<Json, std::string>> cases = {
      {Json{{"messages", msgs}, {"max_tokens", 0}},
       "max_tokens: 'max_tokens' must be in [1, 9223372036854775807], got 0"},
      {Json{{"messages", msgs}, {"max_tokens", 4}, {"stop_sequences", {""}}},
       "stop_sequences: the strings of 'stop_sequences' must not be empty"},
      {Json{{"messages", msgs}, {"max_tokens", 4}, {"stop_sequences", 5}},
       "stop_sequences: 'stop_sequences' must be a string or a list of strings"},
      {Json{{"messages", msgs},
            {"max_tokens", 4},
            {"thinking", {{"type", "enabled"}, {"budget_tokens", -1}}}},
       "thinking.budget_tokens: 'thinking.budget_tokens' must be in [0, 9223372036854775807], "
       "got -1"},
      {Json{{"messages", msgs}, {"max_tokens", 4}, {"top_k", "many"}},
       "top_k: 'top_k' must be an integer"},
  };
  for (const auto& [body, message] : cases) {
    const ApiError e = messages_error(body);
    EXPECT_EQ(anthropic_error_body(e),
              (Json{{"type", "error"},
                    {"error", {{"type", "invalid_request_error"}, {"message", message}}}}))
        << body;
  }
}

// Both APIs send function tools flat; one mapping makes the chat form of each, and its errors
// name the schema by each API's key.
TEST(ApiErrors, FlatToolsMapOnceNamedInEachApi) {
  const Json schema = {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}};
  ResponsesOptions ropt;
  MessagesOptions mopt;
  CompletionRequest rreq, mreq;
  ASSERT_FALSE(parse_responses_request(
      Json{{"input", "hi"},
           {"tools", {{{"type", "function"}, {"name", "w"}, {"description", "d"},
                       {"parameters", schema}}}}},
      error_model().mi, &rreq, &ropt));
  ASSERT_FALSE(parse_messages_request(
      Json{{"messages", {{{"role", "user"}, {"content", "hi"}}}},
           {"max_tokens", 4},
           {"tools", {{{"name", "w"}, {"description", "d"}, {"input_schema", schema}}}}},
      false, error_model().mi, &mreq, &mopt));
  const Json want = {{{"type", "function"},
                      {"function", {{"name", "w"}, {"description", "d"}, {"parameters", schema}}}}};
  EXPECT_EQ(rreq.tools, want);
  EXPECT_EQ(mreq.tools, want);
  EXPECT_TRUE(rreq.parse_tools && mreq.parse_tools);
  const ApiError re = responses_error(
      Json{{"input", "hi"}, {"tools", {{{"type", "function"}, {"name", "w"}, {"parameters", 3}}}}});
  EXPECT_EQ(re.param, "tools[0].parameters");
  EXPECT_EQ(re.message, "'tools[0].parameters' must be a JSON schema (an object)");
  const ApiError me = messages_error(Json{{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                          {"max_tokens", 4},
                                          {"tools", {{{"name", "w"}}}}});
  EXPECT_EQ(me.param, "tools[0].input_schema");
  EXPECT_EQ(me.message, "'tools[0].input_schema' must be a JSON schema (an object)");
}

TEST(ApiErrors, ChatKeepsItsOwnNames) {
  CompletionRequest r;
  const Json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"stop", {""}}};
  auto e = parse_chat_request(body, error_model().mi, &r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "stop");
  EXPECT_EQ(e->message, "the strings of 'stop' must not be empty");
  CompletionRequest r2;
  auto e2 = parse_chat_request(Json{{"messages", {{{"role", "robot"}, {"content", "x"}}}}},
                               error_model().mi, &r2);
  ASSERT_TRUE(e2);
  EXPECT_EQ(e2->param, "messages[0].role");
}

// The validation gaps of the second hostile round: each refused by name, in the client's terms.
TEST(ApiErrors, OutOfRangeAndUnsupportedFieldsAreNamed) {
  const Json msgs = {{{"role", "user"}, {"content", "hi"}}};
  auto chat_error = [&](Json extra) {
    Json b = {{"messages", msgs}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    CompletionRequest r;
    auto e = parse_chat_request(b, error_model().mi, &r);
    EXPECT_TRUE(e) << b;
    return e.value_or(ApiError{});
  };
  ApiError e = chat_error({{"temperature", 1e308}});
  EXPECT_EQ(e.param, "temperature");
  EXPECT_EQ(e.message, "'temperature' must be a finite number within float range");
  e = chat_error({{"top_p", -1e300}});
  EXPECT_EQ(e.param, "top_p");
  // -1 would alias 2^64 - 1: refused, not mapped.
  e = chat_error({{"seed", -1}});
  EXPECT_EQ(e.param, "seed");
  CompletionRequest big;
  EXPECT_FALSE(parse_chat_request(Json{{"messages", msgs}, {"seed", UINT64_MAX}},
                                  error_model().mi, &big));
  EXPECT_EQ(big.sampling.seed, UINT64_MAX);
  e = chat_error({{"prompt_logprobs", 1}});
  EXPECT_EQ(e.param, "prompt_logprobs");
  CompletionRequest c;
  auto ce = parse_completion_request(Json{{"prompt", "hi"}, {"prompt_logprobs", 1}},
                                     error_model().mi, &c);
  ASSERT_TRUE(ce);
  EXPECT_EQ(ce->param, "prompt_logprobs");
  EXPECT_NE(ce->message.find("'echo': true"), std::string::npos) << ce->message;
  // Template kwargs cannot replace what the template's own code calls.
  for (const char* name : {"range", "namespace", "raise_exception", "eos_token"}) {
    e = chat_error({{"chat_template_kwargs", {{name, 1}}}});
    EXPECT_EQ(e.param, "chat_template_kwargs") << name;
    EXPECT_NE(e.message.find(std::string("'") + name + "'"), std::string::npos) << e.message;
  }
  // A template's refusal says the template's words, not where in its code they are.
  e = chat_error({{"messages", {{{"role", "system"}, {"content", "alone"}}}}});
  EXPECT_EQ(e.param, "messages");
  EXPECT_EQ(e.message, "the chat template refused the request: No user query found in messages.");
}

// Roles other than user, assistant and system (agent_parse_test.cc has the system turns).
TEST(ApiErrors, MessagesRefusesUnknownRoles) {
  const ApiError e = messages_error(Json{{"messages", {{{"role", "tool"}, {"content", "x"}},
                                                       {{"role", "user"}, {"content", "hi"}}}},
                                         {"max_tokens", 4}});
  EXPECT_EQ(e.param, "messages[0].role");
  EXPECT_NE(e.message.find("'tool'"), std::string::npos) << e.message;
}

// "kv_type" (an extension, as serve --kv-type) only confirms the pool's type: the same type
// (either spelling) passes, any other, an unknown name or a non-string is a 400 naming the
// field, in every API.
TEST(ApiErrors, KvTypeMustBeThePoolsType) {
  ModelInfo mi = error_model().mi;
  mi.kv_types = {kernels::KvType::kQ8_0, kernels::KvType::kQ8_0};
  auto completion = [&](Json v) {
    CompletionRequest r;
    return parse_completion_request(Json{{"prompt", "hi"}, {"max_tokens", 2}, {"kv_type", v}}, mi, &r);
  };
  EXPECT_FALSE(completion("q8_0").has_value());
  EXPECT_FALSE(completion("q8_0,q8_0").has_value());
  const std::vector<std::pair<Json, std::string>> bad = {
      {"f32", "'kv_type' f32 is not this server's KV cache type (q8_0; it is set per server, by "
              "serve --kv-type)"},
      {"q8_0,turbo4", "'kv_type' q8_0,turbo4 is not this server's KV cache type (q8_0; it is set "
                      "per server, by serve --kv-type)"},
      {"q9", "'kv_type': unknown kv type 'q9' (f32, bf16, q8_0, q4_0, turbo4, turbo3)"},
      {8, "'kv_type' must be a string such as \"q8_0\" or \"q8_0,turbo4\""}};
  for (const auto& [v, message] : bad) {
    const auto e = completion(v);
    ASSERT_TRUE(e.has_value()) << v;
    EXPECT_EQ(e->kind, ErrorKind::kInvalidRequest);
    EXPECT_EQ(e->param, "kv_type");
    EXPECT_EQ(e->message, message);
  }
  ResponsesOptions ro;
  MessagesOptions mo;
  CompletionRequest r;
  const auto re = parse_responses_request(Json{{"input", "hi"}, {"kv_type", "bf16"}}, mi, &r, &ro);
  ASSERT_TRUE(re.has_value());
  EXPECT_EQ(re->param, "kv_type");
  const Json msgs = {{{"role", "user"}, {"content", "hi"}}};
  const auto me = parse_messages_request(
      Json{{"messages", msgs}, {"max_tokens", 2}, {"kv_type", "bf16"}}, false, mi, &r, &mo);
  ASSERT_TRUE(me.has_value());
  EXPECT_EQ(me->param, "kv_type");
}

}  // namespace
}  // namespace qwen35::server
