#include "server/api_error.h"

namespace qwen35::server {
namespace {

struct KindInfo {
  int status;
  const char* openai;     // OpenAI's error type
  const char* anthropic;  // Anthropic's
};

KindInfo info(ErrorKind k) {
  switch (k) {
    case ErrorKind::kInvalidRequest:
      return {400, "invalid_request_error", "invalid_request_error"};
    case ErrorKind::kContextLength:
      return {400, "invalid_request_error", "invalid_request_error"};
    case ErrorKind::kModelNotFound:
      return {400, "model_not_found", "invalid_request_error"};
    case ErrorKind::kAuthentication:
      return {401, "authentication_error", "authentication_error"};
    case ErrorKind::kNotFound:
      return {404, "not_found_error", "not_found_error"};
    case ErrorKind::kNoSuchModel:
      return {404, "invalid_request_error", "not_found_error"};
    case ErrorKind::kMethodNotAllowed:
      return {405, "invalid_request_error", "invalid_request_error"};
    case ErrorKind::kTooLarge:
      return {413, "invalid_request_error", "request_too_large"};
    case ErrorKind::kHeadersTooLarge:
      return {431, "invalid_request_error", "invalid_request_error"};
    case ErrorKind::kRateLimited:
      return {429, "rate_limit_error", "rate_limit_error"};
    case ErrorKind::kServer:
      return {500, "server_error", "api_error"};
    case ErrorKind::kUnavailable:
      return {503, "service_unavailable", "overloaded_error"};
    case ErrorKind::kNotImplemented:
      return {501, "invalid_request_error", "invalid_request_error"};
  }
  return {500, "server_error", "api_error"};
}

HttpResponse answer(const ApiError& e, const Json& body) {
  HttpResponse res;
  res.status = e.status();
  if (e.retry_after_s > 0) res.headers.emplace_back("Retry-After", std::to_string(e.retry_after_s));
  res.set_content(dump(body), "application/json");
  return res;
}

}  // namespace

const char* openai_error_type(ErrorKind kind) { return info(kind).openai; }

int ApiError::status() const { return info(kind).status; }

ApiError invalid(std::string param, std::string message) {
  ApiError e;
  e.param = std::move(param);
  e.message = std::move(message);
  return e;
}

ApiError context_length(std::string param, int64_t n, int64_t max) {
  ApiError e;
  e.kind = ErrorKind::kContextLength;
  e.param = std::move(param);
  e.prompt_tokens = n;
  e.max_prompt_tokens = max;
  e.message = "This model's maximum context length is " + std::to_string(max + 1) +
              " tokens, and a prompt may use at most " + std::to_string(max) +
              " of them. However, your prompt has " + std::to_string(n) +
              " tokens. Please reduce the length of the messages.";
  return e;
}

ApiError api_error(ErrorKind kind, std::string message) {
  ApiError e;
  e.kind = kind;
  e.message = std::move(message);
  return e;
}

ErrorKind kind_of_status(int status) {
  switch (status) {
    case 413:
      return ErrorKind::kTooLarge;
    case 431:
      return ErrorKind::kHeadersTooLarge;
    case 501:
      return ErrorKind::kNotImplemented;
    case 503:
      return ErrorKind::kUnavailable;
    default:
      return status >= 500 ? ErrorKind::kServer : ErrorKind::kInvalidRequest;
  }
}

Json error_body(const ApiError& e) {
  Json err = {{"message", e.message}, {"type", info(e.kind).openai}};
  err["param"] = e.param.empty() ? Json(nullptr) : Json(e.param);
  // OpenAI's code is a string for these two; for the rest we give the HTTP status.
  err["code"] = e.kind == ErrorKind::kContextLength ? Json("context_length_exceeded")
                : e.kind == ErrorKind::kNoSuchModel ? Json("model_not_found")
                                                     : Json(e.status());
  return Json{{"error", err}};
}

Json anthropic_error_body(const ApiError& e) {
  std::string message = e.param.empty() ? e.message : e.param + ": " + e.message;
  if (e.kind == ErrorKind::kContextLength)
    message = "prompt is too long: " + std::to_string(e.prompt_tokens) + " tokens > " +
              std::to_string(e.max_prompt_tokens) + " maximum";
  return Json{{"type", "error"},
              {"error", {{"type", info(e.kind).anthropic}, {"message", message}}}};
}

HttpResponse error_response(const ApiError& e) { return answer(e, error_body(e)); }

HttpResponse anthropic_error_response(const ApiError& e) {
  return answer(e, anthropic_error_body(e));
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace qwen35::server
