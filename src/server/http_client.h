// A small blocking HTTP/1.1 client on Boost.Beast, for `qwen35 loadtest` and the server tests:
// one connection per request, a deadline on every step, streamed bodies handed out as they
// arrive (chunked or not). Not thread-safe; use one per thread.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qwen35::server {

struct ClientResponse {
  int status = -1;    // -1: no response (error says why)
  std::string body;   // empty when a body callback took it
  std::string error;  // connect, write or read failure
  std::vector<std::pair<std::string, std::string>> headers;
  std::string header(std::string_view name) const;  // case-insensitive, "" when absent
  explicit operator bool() const { return status >= 0; }
};

class HttpClient {
 public:
  HttpClient(std::string host, int port, double timeout_s = 120)
      : host_(std::move(host)), port_(port), timeout_s_(timeout_s) {}

  // Sent with every request.
  void set_header(std::string name, std::string value);
  void set_bearer_token(const std::string& key) { set_header("Authorization", "Bearer " + key); }
  void set_timeout(double seconds) { timeout_s_ = seconds; }
  // Sends each request `piece` bytes at a time with `gap` between pieces (a slow upload);
  // piece 0: all at once.
  void set_pacing(size_t piece, std::chrono::milliseconds gap) {
    piece_ = piece;
    gap_ = gap;
  }

  ClientResponse get(const std::string& path) { return send("GET", path, "", nullptr); }
  ClientResponse post(const std::string& path, const std::string& body,
                      const std::string& content_type = "application/json");
  // With on_data, the body goes to it piece by piece as it arrives; returning false hangs up
  // (the response then has error "aborted by the callback").
  ClientResponse send(const std::string& method, const std::string& path, const std::string& body,
                      const std::function<bool(std::string_view)>& on_data,
                      const std::string& content_type = "application/json");

 private:
  std::string host_;
  int port_;
  double timeout_s_;
  std::vector<std::pair<std::string, std::string>> headers_;
  size_t piece_ = 0;
  std::chrono::milliseconds gap_{0};
};

}  // namespace qwen35::server
