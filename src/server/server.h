// The OpenAI-compatible HTTP server: routes, authentication, and the bridge from the HTTP layer
// (server/http_server.h, Boost.Beast) to the engine. The server listens before the model is
// loaded (/health answers 503 until set_ready) so clients and tests can watch it come up.
//
// Thread-safety: GET routes (/health, /v1/models, /props, /metrics, the web page) answer on an
// I/O thread, so they answer while the engine and the workers are busy. POST routes parse,
// render templates and tokenize on a small worker pool (a request whose body carries images
// goes on, once parsed, to the image lane: image_lane.h), then submit to the engine (thread-safe);
// the engine's output is drained on the connection's strand when the engine wakes it
// (generation.h), never by a timer or a thread per request. Handlers only read the immutable
// ModelInfo.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/result.h"
#include "runtime/engine.h"
#include "server/http.h"
#include "server/http_server.h"
#include "server/image_lane.h"
#include "server/metrics.h"
#include "server/request.h"
#include "server/web_page.h"

namespace boost::asio {
class thread_pool;
}  // namespace boost::asio

namespace qwen35::server {

class Wake;  // generation.h

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                   // 0: any free port
  std::string api_key;               // non-empty: "Authorization: Bearer KEY" required
  size_t max_body_bytes = 8u << 20;  // larger bodies get 413, whatever the transfer encoding
  size_t max_header_bytes = 16u << 10;  // larger request heads get 431
  int io_threads = 2;                // threads running the event loop (all connections)
  int http_threads = 0;              // workers that parse, render and tokenize (0: 4)
  double read_timeout_s = 30;        // a whole request (head and body) must arrive within this
  double write_timeout_s = 30;       // each write; a client that stops reading is dropped
  double sse_keepalive_s = 15;       // an idle event stream gets a comment line this often (0: off)
  int max_connections = 4096;        // open connections in all; more are refused at accept
  int max_connections_per_client = 1024;  // from one client address
  double shutdown_grace_s = 1;       // SIGTERM: time in-flight answers get to finish
  bool web = true;                   // GET / serves the chat page (server/web_page.h)
  std::string web_dir;               // non-empty: the page's files are read from here first
  // Behind a load balancer (docs/design.md "Replicas behind a load balancer"):
  std::string replica_id;            // non-empty: every answer says X-Qwen35-Replica: ID
  std::vector<Cidr> trusted_proxies;  // networks whose X-Forwarded-For / Forwarded is believed
  int ready_queue = 0;               // /ready fails while this many requests wait (0: never)
  ImageLaneOptions image_lane;       // requests with images run there (server/image_lane.h)
};

// What the generation handlers share; owned by the Server, outlives every response.
struct Context {
  ModelInfo mi;
  runtime::Engine* engine = nullptr;
  Metrics metrics;
  std::atomic<bool> ready{false}, shutting_down{false};
  // SIGTERM with --drain-s: /ready fails and no connection is accepted, while requests already
  // here are still served (shutting_down refuses them only once the drain ends).
  std::atomic<bool> draining{false};
  int ready_queue = 0;
  // Non-empty answer: the engine can no longer compute (a rank of a split model is gone, named
  // in the answer): /health, /ready and new generations get 503 with it. Set before `ready`.
  std::function<std::string()> failure;
  std::string failed() const { return failure ? failure() : std::string(); }
  // More /metrics lines (Prometheus text) from outside the engine: the device's memory.
  std::function<std::string()> extra_metrics;
  // Where POST requests that carry images run, instead of the HTTP workers (image_lane.h).
  ImageLane* lane = nullptr;

  // The generation jobs being answered, for Server::abandon_jobs (weak: a job lives as long as
  // its connection's answer does), and, once set, the error every job answers with at its next
  // pass instead of waiting for the engine.
  void add_job(std::weak_ptr<Wake> wake);
  std::string abandoned() const;
  // Sets the error (the first one stays) and returns the jobs' wakes still alive.
  std::vector<std::shared_ptr<Wake>> abandon(const std::string& why);

 private:
  mutable std::mutex jobs_mu_;
  std::vector<std::weak_ptr<Wake>> jobs_;  // guarded by jobs_mu_
  std::string abandoned_;                 // guarded by jobs_mu_
};

class Server {
 public:
  explicit Server(ServerOptions opts);
  ~Server();

  core::Result<int> bind();  // returns the bound port
  void start();              // accept loop on a thread of its own
  void set_ready(ModelInfo mi, runtime::Engine* engine);
  // `failure` (Context::failure) is read from the I/O threads until stop(): it must stay callable
  // that long, and be thread-safe. Call before set_ready.
  void set_failure_probe(std::function<std::string()> failure);
  // Lines appended to /metrics, under the same rules as the failure probe.
  void set_metrics_source(std::function<std::string()> lines);
  // Readiness fails and the listener and idle connections close; requests that arrive on open
  // connections are still served. Then begin_shutdown (or stop) when the drain ends.
  void begin_drain();
  // Generation requests now get 503; the listener and idle connections close.
  void begin_shutdown();
  // Exchanges being answered now.
  int in_flight() const;
  // The engine can no longer answer (a rank of a split model died while the engine thread was
  // inside a step that may never return): every generation in flight, and any that gets past the
  // failure probe later, answers `why` as a server error at once. The first call's `why` stays.
  // Returns how many answers were still open.
  int abandon_jobs(const std::string& why);
  // Gives in-flight answers up to shutdown_grace_s, then closes everything and joins the threads.
  void stop();

 private:
  // Routes a request by the table in server.cc: GET answers on the I/O thread, POST runs the
  // prelude and its handler on a worker.
  void dispatch(HttpRequest req, std::shared_ptr<Responder> r);
  bool authorized(const HttpRequest& req) const;

  ServerOptions opts_;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<boost::asio::thread_pool> workers_;
  std::unique_ptr<ImageLane> lane_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<WebPage> web_;  // null: --no-web
  bool stopped_ = false;
};

// The POST handlers run after the route prelude (server.cc: the model is loaded, a generation is
// not refused for a shutdown, the body is a JSON object), on a worker.
// POST /v1/chat/completions (chat = true) and /v1/completions: they answer through `r`, later
// (the engine's output is drained asynchronously on the connection's strand).
void handle_generate(Context& ctx, bool chat, const Json& body, std::shared_ptr<Responder> r);
// POST /tokenize, /detokenize and /apply-template (`path`; utility_routes.cc): they need the
// tokenizer and template only, never the engine, and answer before returning.
void answer_utility(const Context& ctx, const std::string& path, const Json& body, Responder& r);

}  // namespace qwen35::server
