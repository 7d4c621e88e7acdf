// The OpenAI-compatible HTTP server (cpp-httplib): routes, authentication, request limits, and
// the bridge from HTTP threads to the engine. The server listens before the model is loaded
// (/health answers 503 until set_ready) so clients and tests can watch it come up.
//
// Thread-safety: httplib runs handlers on its own thread pool; they only read the immutable
// ModelInfo, submit to the engine (thread-safe) and drain their own result streams.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "core/result.h"
#include "runtime/engine.h"
#include "server/metrics.h"
#include "server/request.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace qwen35::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                   // 0: any free port
  std::string api_key;               // non-empty: "Authorization: Bearer KEY" required
  size_t max_body_bytes = 8u << 20;  // larger bodies get 413
  int http_threads = 0;              // 0: sized from the engine's slots and queue
};

// What the generation handlers share; owned by the Server, outlives every response.
struct Context {
  ModelInfo mi;
  runtime::Engine* engine = nullptr;
  Metrics metrics;
  std::atomic<bool> ready{false}, shutting_down{false};
};

class Server {
 public:
  Server(ServerOptions opts, int http_threads);
  ~Server();

  core::Result<int> bind();  // returns the bound port
  void start();              // accept loop on a thread of its own
  void set_ready(ModelInfo mi, runtime::Engine* engine);
  void begin_shutdown();  // generation requests now get 503
  void stop();            // closes the listener and joins the accept loop

 private:
  core::Result<int> bind_port();
  void routes();
  bool authorized(const httplib::Request& req, httplib::Response& res);

  ServerOptions opts_;
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<Context> ctx_;
  std::thread thread_;
};

// Handlers of POST /v1/chat/completions (chat = true) and /v1/completions.
void handle_generate(Context& ctx, bool chat, const httplib::Request& req, httplib::Response& res);
// Sends an OpenAI-style error.
void send_error(httplib::Response& res, const ApiError& e);
// JSON text that never throws on invalid UTF-8 (replaced by U+FFFD).
std::string dump(const Json& j);

}  // namespace qwen35::server
