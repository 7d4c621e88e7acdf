#include "server/server.h"

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <new>
#include <stdexcept>
#include <string_view>

#include "server/affinity.h"
#include "server/auth.h"
#include "server/image_parts.h"
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

HttpResponse get_health(const Context& ctx, const HttpServer&) {
  if (!ctx.ready.load()) return error_response(unavailable("the model is loading"));
  if (ctx.shutting_down.load()) return error_response(unavailable("the server is shutting down"));
  if (std::string why = ctx.failed(); !why.empty()) return error_response(unavailable(why));
  HttpResponse res;
  res.set_content("{\"status\":\"ok\"}", "application/json");
  return res;
}

// GET /ready: whether a balancer should send this replica requests now. The model is loaded
// (and with --cache-dir the cache with it: the engine loads it before set_ready), the server is
// not draining, and fewer than --ready-queue requests wait for a slot. /health stays liveness.
HttpResponse get_ready(const Context& ctx, const HttpServer&) {
  if (!ctx.ready.load()) return error_response(unavailable("the model is loading"));
  if (ctx.draining.load() || ctx.shutting_down.load())
    return error_response(unavailable("the server is draining"));
  if (std::string why = ctx.failed(); !why.empty()) return error_response(unavailable(why));
  if (ctx.ready_queue > 0 && ctx.engine && ctx.engine->stats().queued >= ctx.ready_queue)
    return error_response(unavailable("the queue is full (--ready-queue)"));
  HttpResponse res;
  res.set_content("{\"status\":\"ready\"}", "application/json");
  return res;
}

Json model_object(const Context& ctx) {
  return {{"id", ctx.mi.name},    {"object", "model"},   {"created", int64_t(std::time(nullptr))},
          {"owned_by", "qwen35"}, {"root", ctx.mi.path}, {"max_model_len", ctx.mi.ctx}};
}

HttpResponse get_models(const Context& ctx, const HttpServer&) {
  if (!ctx.ready.load()) return error_response(unavailable("the model is loading"));
  return json_response(Json{{"object", "list"}, {"data", Json::array({model_object(ctx)})}});
}

// GET /v1/models/{id}: the served model under either of its names (the id percent-decoded, as
// clients send a name with '/' in it); any other id is OpenAI's 404 model_not_found.
HttpResponse get_model(const Context& ctx, const std::string& path) {
  if (!ctx.ready.load()) return error_response(unavailable("the model is loading"));
  const std::string raw = path.substr(std::string_view("/v1/models/").size());
  std::string id;
  for (size_t i = 0; i < raw.size(); ++i) {
    const auto hex = [](char c) {
      return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                             : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    };
    if (raw[i] == '%' && i + 2 < raw.size() && hex(raw[i + 1]) >= 0 && hex(raw[i + 2]) >= 0) {
      id += char(hex(raw[i + 1]) * 16 + hex(raw[i + 2]));
      i += 2;
    } else {
      id += raw[i];
    }
  }
  if (id != ctx.mi.name && id != ctx.mi.path) {
    ApiError e = api_error(ErrorKind::kNoSuchModel, "The model '" + id +
                                                        "' does not exist (this server serves '" +
                                                        ctx.mi.name + "')");
    e.param = "model";
    return error_response(e);
  }
  return json_response(model_object(ctx));
}

HttpResponse get_props(const Context& ctx, const HttpServer&) {
  if (!ctx.ready.load()) return error_response(unavailable("the model is loading"));
  return json_response(props(ctx));
}

HttpResponse get_metrics(const Context& ctx, const HttpServer& http) {
  runtime::EngineStats st;
  const runtime::EngineStats* sp = nullptr;
  if (ctx.ready.load() && ctx.engine) {
    st = ctx.engine->stats();
    sp = &st;
  }
  std::string text = ctx.metrics.render(sp, http.open_connections());
  if (ctx.ready.load() && ctx.mi.images && ctx.mi.images->available()) {
    const runtime::ImageEncoder::Stats is = ctx.mi.images->stats();
    const ImageLane::Stats ls = ctx.lane ? ctx.lane->stats() : ImageLane::Stats{};
    const std::pair<const char*, std::pair<const char*, double>> lines[] = {
        {"qwen35_image_encodes_total", {"images run through the vision tower", double(st.images_encoded)}},
        {"qwen35_image_tower_stages_total",
         {"vision tower stages run in the engine's steps (a block of one frame, the embedding, the merger)",
          double(st.tower_stages)}},
        {"qwen35_image_decodes_total", {"images decoded and resized", double(is.misses)}},
        {"qwen35_image_cache_hits_total", {"images answered from the image cache", double(is.hits)}},
        {"qwen35_image_cache_bytes", {"memory of the image cache", double(is.cached_bytes)}},
        {"qwen35_image_lane_busy", {"requests with images being decoded on the image lane", double(ls.busy)}},
        {"qwen35_image_lane_queued", {"requests with images waiting for the image lane", double(ls.queued)}},
        {"qwen35_image_lane_threads", {"image lane threads started", double(ls.threads)}},
        {"qwen35_image_lane_refused_total",
         {"requests with images refused by the image lane (queue full, no thread)", double(ls.refused)}},
        {"qwen35_image_memory_bytes",
         {"image memory reserved by requests being decoded (--image-mem-mb)",
          double(ctx.mi.image_budget ? ctx.mi.image_budget->used() : 0)}}};
    for (const auto& [name, hv] : lines) {
      const bool counter = std::string_view(name).ends_with("_total");
      text += std::string("# HELP ") + name + " " + hv.first + "\n# TYPE " + name + (counter ? " counter\n" : " gauge\n") +
              name + " " + std::to_string(int64_t(hv.second)) + "\n";
    }
  }
  if (ctx.ready.load() && ctx.extra_metrics) text += ctx.extra_metrics();
  HttpResponse res;
  res.set_content(text, "text/plain; version=0.0.4");
  return res;
}

using R = std::shared_ptr<Responder>;

void utility(Context& c, const HttpRequest& q, const Json& b, R r) {
  answer_utility(c, q.path, b, *r);
}

// Which API's shape a route's errors take.
enum class Api { kOpenAi, kAnthropic };

// One route. GET routes answer on the I/O thread (`get` must not block); POST routes run `post`
// on a worker after the prelude (Server::run_post).
struct Route {
  const char* method;
  const char* path;
  Api api;
  // A generation: refused while shutting down, its answers counted in /metrics by status.
  bool generates;
  HttpResponse (*get)(const Context&, const HttpServer&);
  void (*post)(Context&, const HttpRequest&, const Json& body, R r);
  // A GET route over every path under `path` (which ends in '/'), answered with the path.
  HttpResponse (*get_under)(const Context&, const std::string& path) = nullptr;
};

// Every route the server has: the 404s and 405s are this table's complement (with the 501s of
// recognized_method below). A GET route answers HEAD too.
const Route kRoutes[] = {
    {"GET", "/health", Api::kOpenAi, false, get_health, nullptr},
    {"GET", "/ready", Api::kOpenAi, false, get_ready, nullptr},
    {"GET", "/v1/models", Api::kOpenAi, false, get_models, nullptr},
    {"GET", "/v1/models/", Api::kOpenAi, false, nullptr, nullptr, get_model},
    {"GET", "/props", Api::kOpenAi, false, get_props, nullptr},
    {"GET", "/metrics", Api::kOpenAi, false, get_metrics, nullptr},
    {"POST", "/v1/chat/completions", Api::kOpenAi, true, nullptr,
     [](Context& c, const HttpRequest&, const Json& b, R r) { handle_generate(c, true, b, r); }},
    {"POST", "/v1/completions", Api::kOpenAi, true, nullptr,
     [](Context& c, const HttpRequest&, const Json& b, R r) { handle_generate(c, false, b, r); }},
    {"POST", "/v1/responses", Api::kOpenAi, true, nullptr,
     [](Context& c, const HttpRequest&, const Json& b, R r) { handle_responses(c, b, r); }},
    {"POST", "/v1/messages", Api::kAnthropic, true, nullptr,
     [](Context& c, const HttpRequest&, const Json& b, R r) { handle_messages(c, false, b, r); }},
    {"POST", "/v1/messages/count_tokens", Api::kAnthropic, true, nullptr,
     [](Context& c, const HttpRequest&, const Json& b, R r) { handle_messages(c, true, b, r); }},
    {"POST", "/tokenize", Api::kOpenAi, false, nullptr,
     utility},
    {"POST", "/detokenize", Api::kOpenAi, false, nullptr,
     utility},
    {"POST", "/apply-template", Api::kOpenAi, false, nullptr,
     utility},
};

// Methods. GET, HEAD and POST are what the routes take; HEAD is answered as GET (the transport
// sends the head alone). PUT, DELETE, PATCH and OPTIONS are methods an HTTP API takes on its
// resources: on a path the table lists they are a 405 with the path's Allow, and a 404
// elsewhere, like GET and POST. Every other method (TRACE, CONNECT, any other token) is a 501 on
// every path: no resource here could ever take it (TRACE echoes the request, credentials
// included; CONNECT asks for a tunnel, a proxy's job) and RFC 9110 §9.1 gives 501 for a method
// the server does not recognize, where 405 and its Allow would claim the method is understood.
bool recognized_method(std::string_view m) {
  for (std::string_view x : {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
    if (m == x) return true;
  return false;
}

// The methods a route answers to: HEAD wherever GET is.
std::string_view allowed(const Route& r) {
  return std::string_view(r.method) == "GET" ? "GET, HEAD" : r.method;
}

// The route of (method, path), or null; *allow gets the methods the path takes when the method
// is not one of them, and *api the API of a path the table lists.
const Route* find_route(const HttpRequest& req, std::string* allow, Api* api) {
  const Route* found = nullptr;
  // Both branches string_views: a mixed conditional would be a std::string temporary.
  const std::string_view method =
      req.method == "HEAD" ? std::string_view("GET") : std::string_view(req.method);
  for (const Route& x : kRoutes) {
    const std::string_view p = x.path;
    if (x.get_under ? !(req.path.size() > p.size() && req.path.compare(0, p.size(), p) == 0)
                    : req.path != p)
      continue;
    *api = x.api;
    if (method == x.method)
      found = &x;
    else
      *allow += std::string(allow->empty() ? "" : ", ") + std::string(allowed(x));
  }
  return found;
}

HttpResponse error_in(Api api, const ApiError& e) {
  return api == Api::kAnthropic ? anthropic_error_response(e) : error_response(e);
}

// What escaped a route's handler (a library's exception, an allocation that failed) is the
// server's failure: a 500 for this request, while the worker thread goes on. An allocation
// failure says so rather than "std::bad_alloc". Nothing may escape from here (an exception out
// of a worker's task ends the process): if even the answer cannot be made, the exchange is left
// to the connection's timeouts.
void answer_failure(Api api, const std::exception& ex, Responder& r) noexcept {
  try {
    const bool oom = dynamic_cast<const std::bad_alloc*>(&ex) != nullptr ||
                     dynamic_cast<const std::length_error*>(&ex) != nullptr;
    r.send(error_in(api, api_error(ErrorKind::kServer,
                                   oom ? "the server ran out of memory while handling the request"
                                       : ex.what())));
  } catch (...) {
  }
}

// The prelude of every POST route, on a worker: the model is loaded, a generation is not
// refused for a shutdown, the body is a JSON object; then the handler. Errors take the route's
// API's shape.
void run_post(Context& ctx, const Route& route, const HttpRequest& req, R r) {
  const auto fail = [&](const ApiError& e) {
    if (route.generates) ctx.metrics.count_request(route.path, e.status());
    r->send(error_in(route.api, e));
  };
  if (!ctx.ready.load()) return r->send(error_in(route.api, unavailable("the model is loading")));
  if (route.generates && ctx.shutting_down.load())
    return fail(unavailable("the server is shutting down"));
  if (route.generates)
    if (std::string why = ctx.failed(); !why.empty()) return fail(unavailable(why));
  Json body;
  if (auto e = parse_request_body(req.body, ctx.mi, &body)) return fail(*e);
  // The key a balancer routes this conversation by, when the client named one; otherwise the
  // generation derives one from the prompt (generation.cc) and that is the one answered.
  if (route.generates)
    if (std::string key = affinity_key(body, req.header("X-Session-Id")); !key.empty())
      r->add_header(kAffinityHeader, std::move(key));
  if (!ctx.lane || !mentions_images(body)) return route.post(ctx, req, body, std::move(r));
  // Images are decoded on the image lane, so that this worker is free for the next request.
  HttpRequest slim;  // what a handler reads of the request besides the body
  slim.method = req.method;
  slim.path = req.path;
  slim.remote_addr = req.remote_addr;
  slim.headers = req.headers;
  auto job = [&ctx, &route, slim = std::move(slim), body = std::move(body), r]() {
    try {
      // A request that waited in the lane through a SIGTERM is answered at once.
      if (route.generates && ctx.shutting_down.load()) {
        ctx.metrics.count_request(route.path, 503);
        return r->send(error_in(route.api, unavailable("the server is shutting down")));
      }
      route.post(ctx, slim, body, r);
    } catch (const std::exception& ex) {
      answer_failure(route.api, ex, *r);
    }
  };
  if (auto e = ctx.lane->submit(std::move(job))) return fail(*e);
}

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(int64_t(std::max(0.001, seconds) * 1000));
}

}  // namespace

Server::Server(ServerOptions opts) : opts_(std::move(opts)), ctx_(std::make_unique<Context>()) {
  if (opts_.web) web_ = std::make_unique<WebPage>(opts_.web_dir);
  workers_ = std::make_unique<boost::asio::thread_pool>(
      size_t(opts_.http_threads > 0 ? opts_.http_threads : 4));
  lane_ = std::make_unique<ImageLane>(opts_.image_lane);
  ctx_->lane = lane_.get();
  HttpLimits lim;
  lim.max_header_bytes = opts_.max_header_bytes;
  lim.max_body_bytes = opts_.max_body_bytes;
  lim.read_timeout = ms(opts_.read_timeout_s);
  lim.write_timeout = ms(opts_.write_timeout_s);
  lim.sse_keepalive = ms(opts_.sse_keepalive_s);
  lim.max_connections = std::max(1, opts_.max_connections);
  lim.max_connections_per_client = std::max(1, opts_.max_connections_per_client);
  if (!opts_.replica_id.empty()) lim.headers.emplace_back("X-Qwen35-Replica", opts_.replica_id);
  lim.trusted_proxies = opts_.trusted_proxies;
  ctx_->ready_queue = opts_.ready_queue;
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

void Server::set_failure_probe(std::function<std::string()> failure) { ctx_->failure = std::move(failure); }
void Server::set_metrics_source(std::function<std::string()> lines) { ctx_->extra_metrics = std::move(lines); }

void Server::begin_drain() {
  ctx_->draining.store(true);
  http_->stop_accepting();
}

int Server::in_flight() const { return http_->in_flight(); }

void Context::add_job(std::weak_ptr<Wake> wake) {
  std::lock_guard<std::mutex> lock(jobs_mu_);
  // Answered jobs leave expired entries: dropped once they could double the list.
  if (jobs_.size() >= 64 && jobs_.size() == jobs_.capacity())
    std::erase_if(jobs_, [](const std::weak_ptr<Wake>& w) { return w.expired(); });
  jobs_.push_back(std::move(wake));
}

std::string Context::abandoned() const {
  std::lock_guard<std::mutex> lock(jobs_mu_);
  return abandoned_;
}

std::vector<std::shared_ptr<Wake>> Context::abandon(const std::string& why) {
  std::lock_guard<std::mutex> lock(jobs_mu_);
  if (abandoned_.empty()) abandoned_ = why.empty() ? "the engine can no longer answer" : why;
  std::vector<std::shared_ptr<Wake>> live;
  for (const auto& w : jobs_)
    if (auto p = w.lock()) live.push_back(std::move(p));
  jobs_.clear();
  return live;
}

int Server::abandon_jobs(const std::string& why) {
  const auto live = ctx_->abandon(why);
  for (const auto& w : live) w->notify();  // outside the lock: notify posts the driver
  return int(live.size());
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
  lane_->stop();     // so do the image lane's, after the workers have handed it their last
  http_->stop(ms(opts_.shutdown_grace_s));
}

bool Server::authorized(const HttpRequest& req) const {
  if (opts_.api_key.empty() || req.path == "/health") return true;
  return api_key_matches(req.header("Authorization"), req.header("x-api-key"), opts_.api_key);
}

// On an I/O thread: must not block. GET routes answer here; POST routes go to the workers.
void Server::dispatch(HttpRequest req, std::shared_ptr<Responder> r) {
  // The page and its files load without the API key: they hold no data, and the page asks for
  // the key and sends it with its API calls, which are checked below.
  if ((req.method == "GET" || req.method == "HEAD") && web_ && WebPage::owns(req.path))
    return r->send(web_->answer(req.path, req.header("If-None-Match")));
  // Anthropic's clients read errors in Anthropic's format, on every /v1/messages route (the
  // unknown ones under it too).
  Api api = req.path.rfind("/v1/messages/", 0) == 0 ? Api::kAnthropic : Api::kOpenAi;
  std::string allow;
  const Route* route = find_route(req, &allow, &api);
  if (!authorized(req))
    return r->send(error_in(api, api_error(ErrorKind::kAuthentication,
                                           "missing or wrong API key (Authorization: Bearer KEY, "
                                           "or x-api-key: KEY)")));
  if (!recognized_method(req.method))
    return r->send(error_in(api, api_error(ErrorKind::kNotImplemented,
                                           "method " + req.method + " is not implemented")));
  if (!route && allow.empty())
    return r->send(
        error_in(api, api_error(ErrorKind::kNotFound,
                                "no route for " + req.method + " " + req.path)));
  if (!route) {
    const std::string why = req.path + " takes " + allow + ", not " + req.method;
    HttpResponse res = error_in(api, api_error(ErrorKind::kMethodNotAllowed, why));
    res.headers.emplace_back("Allow", allow);
    return r->send(std::move(res));
  }
  if (route->get) return r->send(route->get(*ctx_, *http_));
  if (route->get_under) return r->send(route->get_under(*ctx_, req.path));
  boost::asio::post(*workers_, [this, route, req = std::move(req), r = std::move(r)]() mutable {
    try {
      run_post(*ctx_, *route, req, r);
    } catch (const std::exception& ex) {
      answer_failure(route->api, ex, *r);
    }
  });
}

}  // namespace qwen35::server
