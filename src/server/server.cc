#include "server/server.h"

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "server/auth.h"
#include "server/messages.h"
#include "server/responses.h"

namespace qwen35::server {
namespace {

ApiError unavailable(const std::string& why) { return api_error(ErrorKind::kUnavailable, why); }

HttpResponse json_response(const Json& j) {
  HttpResponse res;
  res.set_content(dump(j), "application/json");
  return res;
}

// The transport's own errors (malformed requests, 413, 431, too many connections).
HttpResponse transport_error(int status, const std::string& message) {
  return error_response(api_error(kind_of_status(status), message));
}

// A float setting as the decimal it was written as (0.7f, not 0.699999988).
double decimal(float v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", double(v));
  return std::strtod(b, nullptr);
}

// GET /props: what a client (the web page) shows and starts its settings from, in the spirit of
// llama-server's /props.
Json props(const Context& ctx) {
  const runtime::SamplingParams& d = ctx.mi.defaults;
  return Json{{"model", ctx.mi.name},
              {"n_ctx", ctx.mi.ctx},
              {"total_slots", ctx.engine ? ctx.engine->stats().slots : 0},
              {"chat", ctx.mi.tmpl != nullptr},
              {"default_generation_settings",
               {{"temperature", decimal(d.temperature)},
                {"top_p", decimal(d.top_p)},
                {"top_k", d.top_k},
                {"min_p", decimal(d.min_p)},
                {"presence_penalty", decimal(d.presence_penalty)},
                {"frequency_penalty", decimal(d.frequency_penalty)},
                {"repetition_penalty", decimal(d.repetition_penalty)}}}};
}

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(int64_t(std::max(0.001, seconds) * 1000));
}

}  // namespace

Server::Server(ServerOptions opts) : opts_(std::move(opts)), ctx_(std::make_unique<Context>()) {
  if (opts_.web) web_ = std::make_unique<WebPage>(opts_.web_dir);
  workers_ = std::make_unique<boost::asio::thread_pool>(
      size_t(opts_.http_threads > 0 ? opts_.http_threads : 4));
  HttpLimits lim;
  lim.max_header_bytes = opts_.max_header_bytes;
  lim.max_body_bytes = opts_.max_body_bytes;
  lim.read_timeout = ms(opts_.read_timeout_s);
  lim.write_timeout = ms(opts_.write_timeout_s);
  lim.max_connections = std::max(1, opts_.max_connections);
  lim.max_connections_per_client = std::max(1, opts_.max_connections_per_client);
  http_ = std::make_unique<HttpServer>(
      lim, [this](HttpRequest req, std::shared_ptr<Responder> r) { dispatch(std::move(req), r); },
      transport_error, opts_.io_threads);
}

Server::~Server() { stop(); }

core::Result<int> Server::bind() { return http_->bind(opts_.host, opts_.port); }

void Server::start() { http_->start(); }

void Server::set_ready(ModelInfo mi, runtime::Engine* engine) {
  ctx_->mi = std::move(mi);
  ctx_->engine = engine;
  ctx_->ready.store(true);
}

void Server::begin_shutdown() {
  ctx_->shutting_down.store(true);
  http_->stop_accepting();
}

void Server::stop() {
  if (stopped_) return;
  stopped_ = true;
  ctx_->shutting_down.store(true);
  http_->stop_accepting();
  workers_->join();  // the queued requests still run (and answer 503: shutting down)
  http_->stop(ms(opts_.shutdown_grace_s));
}

bool Server::authorized(const HttpRequest& req) const {
  if (opts_.api_key.empty() || req.path == "/health") return true;
  return api_key_matches(req.header("Authorization"), req.header("x-api-key"), opts_.api_key);
}

// On an I/O thread: must not block. GET routes answer here; POST routes go to the workers.
void Server::dispatch(HttpRequest req, std::shared_ptr<Responder> r) {
  Context& ctx = *ctx_;
  const bool get = req.method == "GET", post = req.method == "POST";
  // The page and its files load without the API key: they hold no data, and the page asks for
  // the key and sends it with its API calls, which are checked below.
  if (get && web_ && WebPage::owns(req.path))
    return r->send(web_->answer(req.path, req.header("If-None-Match")));
  // Anthropic's clients read errors in Anthropic's format, on every /v1/messages route.
  const bool anthropic = req.path == "/v1/messages" || req.path.rfind("/v1/messages/", 0) == 0;
  const auto answer_error = [&](const ApiError& e) {
    r->send(anthropic ? anthropic_error_response(e) : error_response(e));
  };
  if (!authorized(req))
    return answer_error(api_error(ErrorKind::kAuthentication,
                                  "missing or wrong API key (Authorization: Bearer KEY, or "
                                  "x-api-key: KEY)"));
  if (get && req.path == "/health") {
    if (!ctx.ready.load()) return r->send(error_response(unavailable("the model is loading")));
    if (ctx.shutting_down.load())
      return r->send(error_response(unavailable("the server is shutting down")));
    HttpResponse res;
    res.set_content("{\"status\":\"ok\"}", "application/json");
    return r->send(std::move(res));
  }
  if (get && req.path == "/v1/models") {
    if (!ctx.ready.load()) return r->send(error_response(unavailable("the model is loading")));
    Json m = {
        {"id", ctx.mi.name},    {"object", "model"},   {"created", int64_t(std::time(nullptr))},
        {"owned_by", "qwen35"}, {"root", ctx.mi.path}, {"max_model_len", ctx.mi.ctx}};
    return r->send(json_response(Json{{"object", "list"}, {"data", Json::array({m})}}));
  }
  if (get && req.path == "/props") {
    if (!ctx.ready.load()) return r->send(error_response(unavailable("the model is loading")));
    return r->send(json_response(props(ctx)));
  }
  if (get && req.path == "/metrics") {
    runtime::EngineStats st;
    const runtime::EngineStats* sp = nullptr;
    if (ctx.ready.load() && ctx.engine) {
      st = ctx.engine->stats();
      sp = &st;
    }
    HttpResponse res;
    res.set_content(ctx.metrics.render(sp, http_->open_connections()), "text/plain; version=0.0.4");
    return r->send(std::move(res));
  }
  static const char* const kPosts[] = {"/v1/chat/completions",
                                       "/v1/completions",
                                       "/v1/responses",
                                       "/v1/messages",
                                       "/v1/messages/count_tokens",
                                       "/tokenize",
                                       "/detokenize",
                                       "/apply-template"};
  bool known = false;
  for (const char* p : kPosts) known = known || req.path == p;
  if (!post || !known) {
    return answer_error(
        api_error(ErrorKind::kNotFound, "no route for " + req.method + " " + req.path));
  }
  boost::asio::post(*workers_, [this, req = std::move(req), r = std::move(r)] {
    try {
      const bool chat = req.path == "/v1/chat/completions";
      const bool anthropic = req.path.rfind("/v1/messages", 0) == 0;
      if (!ctx_->ready.load()) {
        const ApiError e = unavailable("the model is loading");
        return r->send(anthropic ? anthropic_error_response(e) : error_response(e));
      }
      if (chat || req.path == "/v1/completions") return handle_generate(*ctx_, chat, req, r);
      if (req.path == "/v1/responses") return handle_responses(*ctx_, req, r);
      if (anthropic) return handle_messages(*ctx_, req.path == "/v1/messages/count_tokens", req, r);
      answer_utility(*ctx_, req, *r);
    } catch (const std::exception& ex) {
      const ApiError e = api_error(ErrorKind::kServer, ex.what());
      r->send(req.path.rfind("/v1/messages", 0) == 0 ? anthropic_error_response(e)
                                                      : error_response(e));
    }
  });
}

}  // namespace qwen35::server
