// The transport-neutral HTTP types the route handlers see: a parsed request, a whole response,
// and a Responder, the connection's side of an exchange that is answered later or in pieces (SSE).
// The Beast connection (server/http_server.h) implements Responder; handlers never see sockets.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qwen35::server {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // target without the query string
  std::string body;
  // The client's address: the connection's peer, or behind a trusted proxy the client it names.
  std::string remote_addr;
  std::vector<std::pair<std::string, std::string>> headers;
  // The first header of that name (case-insensitive), "" when absent.
  std::string header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
  void set_content(std::string b, std::string type) {
    body = std::move(b);
    content_type = std::move(type);
  }
};

// One request's answer. Thread-safe: every method may be called from any thread; the work runs
// in order on the connection's strand. Exactly one of send() or start_stream() ... end_stream()
// answers a request. After the client has gone (closed, reset, or too slow to read), writes
// complete with ok = false and closed() is true.
class Responder {
 public:
  virtual ~Responder() = default;
  // The whole response; ends the exchange.
  virtual void send(HttpResponse res) = 0;
  // A chunked response: the head now (res.body is ignored), then write()s, then end_stream().
  virtual void start_stream(HttpResponse head) = 0;
  // Writes one chunk; `done(ok)` runs on the strand once it is written (or has failed).
  virtual void write(std::string data, std::function<void(bool ok)> done) = 0;
  virtual void end_stream() = 0;
  // Runs `fn` on the strand, after what is queued there (a driver woken by the engine).
  virtual void post(std::function<void()> fn) = 0;
  // Runs `fn` on the strand once the client hangs up or the connection is dropped (at once when
  // that has happened), at most once; forgotten when the exchange ends.
  virtual void on_close(std::function<void()> fn) = 0;
  // True once the client has hung up or the connection was dropped.
  virtual bool closed() const = 0;
  // A header for this exchange's answer (send or start_stream, whichever comes later); the first
  // value given for a name is kept, so a handler's explicit value wins over a later default.
  virtual void add_header(std::string name, std::string value) = 0;
};

}  // namespace qwen35::server
