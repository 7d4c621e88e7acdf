#include "server/server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>

#include <httplib.h>

#include <ctime>

#include "server/auth.h"

namespace qwen35::server {
namespace {

ApiError unavailable(const std::string& why) {
  ApiError e;
  e.status = 503;
  e.type = "service_unavailable";
  e.message = why;
  return e;
}

// Parses a JSON object body (request.h: UTF-8, depth bound); on failure answers 400.
bool parse_body(const Context& ctx, const httplib::Request& req, httplib::Response& res,
                Json* out) {
  if (auto e = parse_request_body(req.body, ctx.mi, out)) {
    send_error(res, *e);
    return false;
  }
  return true;
}

bool ensure_ready(Context& ctx, httplib::Response& res) {
  if (ctx.ready.load()) return true;
  send_error(res, unavailable("the model is loading"));
  return false;
}

}  // namespace

Server::Server(ServerOptions opts, int http_threads)
    : opts_(std::move(opts)),
      http_(std::make_unique<httplib::Server>()),
      ctx_(std::make_unique<Context>()) {
  const int n = opts_.http_threads > 0 ? opts_.http_threads : std::max(16, http_threads);
  http_->new_task_queue = [n] { return new httplib::ThreadPool(size_t(n)); };
  http_->set_payload_max_length(opts_.max_body_bytes);
  http_->set_keep_alive_max_count(1000);
  http_->set_read_timeout(30, 0);
  http_->set_write_timeout(30, 0);
  routes();
}

Server::~Server() { stop(); }

namespace {
// Debian's libcpp-httplib (0.11) is compiled with a listen backlog of 5: a burst of more
// connections than that overflows the SYN queue, clients retransmit after a second and some fail
// with a read error. Linux lets listen() be called again on a listening socket to raise the
// backlog, so find our socket (listening, bound to `port`) among this process's descriptors.
void raise_listen_backlog(int port) {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2) continue;
    int listening = 0;
    socklen_t len = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    int p = -1;
    if (addr.ss_family == AF_INET) p = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) p = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    if (p == port) ::listen(fd, SOMAXCONN);
  }
  closedir(d);
}
}  // namespace

core::Result<int> Server::bind() {
  auto r = bind_port();
  if (r.ok()) raise_listen_backlog(*r);
  return r;
}

core::Result<int> Server::bind_port() {
  int port = opts_.port;
  if (port == 0) {
    port = http_->bind_to_any_port(opts_.host);
    if (port < 0) return core::error("[server] cannot bind " + opts_.host + " to a free port");
  } else if (!http_->bind_to_port(opts_.host, port)) {
    return core::error("[server] cannot bind " + opts_.host + ":" + std::to_string(port) +
                       " (in use, or not an address of this machine)");
  }
  return port;
}

void Server::start() {
  thread_ = std::thread([this] { http_->listen_after_bind(); });
}

void Server::set_ready(ModelInfo mi, runtime::Engine* engine) {
  ctx_->mi = std::move(mi);
  ctx_->engine = engine;
  ctx_->ready.store(true);
}

void Server::begin_shutdown() { ctx_->shutting_down.store(true); }

void Server::stop() {
  if (http_) http_->stop();
  if (thread_.joinable()) thread_.join();
}

bool Server::authorized(const httplib::Request& req, httplib::Response& res) {
  if (opts_.api_key.empty() || req.path == "/health") return true;
  if (bearer_matches(req.get_header_value("Authorization"), opts_.api_key)) return true;
  send_error(res, ApiError{401, "missing or wrong API key (Authorization: Bearer KEY)", "",
                           "authentication_error"});
  return false;
}

void Server::routes() {
  Context& ctx = *ctx_;
  auto& h = *http_;
  h.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return authorized(req, res) ? httplib::Server::HandlerResponse::Unhandled
                                : httplib::Server::HandlerResponse::Handled;
  });
  h.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // a handler already wrote an error object
    ApiError e;
    e.status = res.status;
    if (res.status == 404) {
      e.type = "not_found_error";
      e.message = "no route for " + req.method + " " + req.path;
    } else if (res.status == 413) {
      e.message = "the request body is too large";
    } else {
      e.message = "HTTP " + std::to_string(res.status);
    }
    send_error(res, e);
  });
  h.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& ex) {
          what = ex.what();
        } catch (...) {
        }
        send_error(res, ApiError{500, what, "", "server_error"});
      });

  h.Get("/health", [&ctx](const httplib::Request&, httplib::Response& res) {
    if (!ctx.ready.load()) return send_error(res, unavailable("the model is loading"));
    if (ctx.shutting_down.load())
      return send_error(res, unavailable("the server is shutting down"));
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  h.Get("/v1/models", [&ctx](const httplib::Request&, httplib::Response& res) {
    if (!ensure_ready(ctx, res)) return;
    Json m = {
        {"id", ctx.mi.name},    {"object", "model"},   {"created", int64_t(std::time(nullptr))},
        {"owned_by", "qwen35"}, {"root", ctx.mi.path}, {"max_model_len", ctx.mi.ctx}};
    res.set_content(dump(Json{{"object", "list"}, {"data", Json::array({m})}}), "application/json");
  });
  h.Get("/metrics", [&ctx](const httplib::Request&, httplib::Response& res) {
    runtime::EngineStats st;
    const runtime::EngineStats* sp = nullptr;
    if (ctx.ready.load() && ctx.engine) {
      st = ctx.engine->stats();
      sp = &st;
    }
    res.set_content(ctx.metrics.render(sp), "text/plain; version=0.0.4");
  });
  h.Post("/v1/chat/completions", [&ctx](const httplib::Request& req, httplib::Response& res) {
    if (ensure_ready(ctx, res)) handle_generate(ctx, true, req, res);
  });
  h.Post("/v1/completions", [&ctx](const httplib::Request& req, httplib::Response& res) {
    if (ensure_ready(ctx, res)) handle_generate(ctx, false, req, res);
  });
  h.Post("/tokenize", [&ctx](const httplib::Request& req, httplib::Response& res) {
    Json b;
    if (!ensure_ready(ctx, res) || !parse_body(ctx, req, res, &b)) return;
    if (auto e = check_model(b, ctx.mi)) return send_error(res, *e);
    std::string text;
    if (b.contains("messages")) {
      if (auto e = render_messages(b, ctx.mi, &text)) return send_error(res, *e);
    } else if (b.contains("prompt") && b["prompt"].is_string()) {
      text = b["prompt"];
    } else {
      return send_error(res, ApiError{400, "'prompt' (a string) or 'messages' is required",
                                      "prompt", "invalid_request_error"});
    }
    auto ids = ctx.mi.tok->encode(text);
    if (!ids.ok())
      return send_error(res, ApiError{400, ids.message(), "prompt", "invalid_request_error"});
    Json out = {{"count", ids->size()}, {"max_model_len", ctx.mi.ctx}, {"tokens", *ids}};
    res.set_content(dump(out), "application/json");
  });
  h.Post("/detokenize", [&ctx](const httplib::Request& req, httplib::Response& res) {
    Json b;
    if (!ensure_ready(ctx, res) || !parse_body(ctx, req, res, &b)) return;
    std::vector<int32_t> ids;
    if (auto e = parse_detokenize(b, ctx.mi, &ids)) return send_error(res, *e);
    res.set_content(dump(Json{{"prompt", ctx.mi.tok->decode(ids)}}), "application/json");
  });
  h.Post("/apply-template", [&ctx](const httplib::Request& req, httplib::Response& res) {
    Json b;
    if (!ensure_ready(ctx, res) || !parse_body(ctx, req, res, &b)) return;
    std::string text;
    if (auto e = render_messages(b, ctx.mi, &text)) return send_error(res, *e);
    res.set_content(dump(Json{{"prompt", text}}), "application/json");
  });
}

}  // namespace qwen35::server
