// libFuzzer: raw bytes on a connection to the HTTP transport (server/http_server.h), answered by
// the server's own request handling: the JSON body parse with its depth bound, the request
// parsers of the four generation APIs (chat, completions, Responses, Messages and its
// count_tokens), /tokenize, /detokenize and /apply-template with the bundled model's tokenizer
// and chat template, and image parts (chat image_url, Responses input_image, Anthropic image
// blocks) through the image encoder of the bundled vision model: base64, the decoders and the
// processor, up to the patch rows (the tower runs in the engine). Generation itself is not run (a parsed request is answered 200 with what
// was parsed), so each input costs milliseconds, not a forward.
//
// Per input: one loopback connection gets the bytes, its write side is shut, and everything the
// server answers is read until it closes. The answers must be well-formed HTTP responses (as
// Beast's response parser reads them) and none may be a 500: a handler exception is a bug.
// Crashes, hangs (the read deadline is 2 s) and sanitizer reports are findings.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kernels/ops.h"
#include "model/model.h"
#include "model/weights.h"
#include "runtime/image_encoder.h"
#include "server/http_server.h"
#include "server/messages.h"
#include "server/request.h"
#include "server/responses.h"
#include "server/server.h"

namespace {

using namespace qwen35;
namespace http = boost::beast::http;

struct Harness {
  Harness() {
    auto t = tokenizer::Tokenizer::load(QWEN35_FUZZ_MODEL_DIR);
    auto c = tmpl::load_chat_template(QWEN35_FUZZ_MODEL_DIR);
    if (!t.ok() || !c.ok()) std::abort();
    tok = std::make_unique<tokenizer::Tokenizer>(std::move(*t));
    chat = std::make_unique<tmpl::ChatTemplate>(std::move(*c));
    ctx.mi.tok = tok.get();
    ctx.mi.tmpl = chat.get();
    ctx.mi.name = "fuzz";
    ctx.mi.ctx = 4096;
    ctx.mi.eos_ids = {tok->eos_id()};
    add_images();
    ctx.ready.store(true);
    server::HttpLimits lim;
    lim.max_header_bytes = 4096;
    lim.max_body_bytes = 16384;
    lim.read_timeout = std::chrono::milliseconds(2000);
    lim.write_timeout = std::chrono::milliseconds(2000);
    http_ = std::make_unique<server::HttpServer>(
        lim, [this](server::HttpRequest req, std::shared_ptr<server::Responder> r) {
          handle(req, *r);
        },
        [](int status, const std::string& message) {
          return server::error_response(server::api_error(server::kind_of_status(status), message));
        },
        1);
    auto p = http_->bind("127.0.0.1", 0);
    if (!p.ok()) std::abort();
    port = *p;
    http_->start();
  }

  // The bundled vision model's encoder, with limits that keep an input's decode cheap.
  void add_images() {
    auto w = model::load_weights(QWEN35_FUZZ_VISION_DIR);
    auto pc = runtime::read_processor_config(QWEN35_FUZZ_VISION_DIR);
    if (!w.ok() || !pc.ok()) std::abort();
    vision = std::make_unique<model::Model>(std::move(*w), kernels::cpu_ops(), nullptr);
    runtime::ImageEncoderOptions o;
    o.threads = 1;
    o.processor = *pc;
    o.limits.max_bytes = 16384;
    o.limits.max_pixels = 1 << 20;
    o.cache_bytes = size_t{1} << 20;
    images = std::make_unique<runtime::ImageEncoder>(*vision, o);
    if (!images->available()) std::abort();
    ctx.mi.images = images.get();
    ctx.mi.max_images = 4;
    ctx.mi.image_token = int32_t(vision->config().vision.image_token_id);
  }

  // The routes of server.cc, without the engine.
  void handle(const server::HttpRequest& req, server::Responder& r) {
    {
      std::lock_guard lk(mu);
      heads.push_back(req.method == "HEAD");
    }
    if ((req.method == "GET" || req.method == "HEAD") && req.path == "/health") {
      server::HttpResponse res;
      res.set_content("{\"status\":\"ok\"}", "application/json");
      return r.send(std::move(res));
    }
    if (req.method == "POST" && generation_api(req.path) != Api::kNone)
      return generation(generation_api(req.path), req, r);
    if (req.method == "POST" &&
        (req.path == "/tokenize" || req.path == "/detokenize" || req.path == "/apply-template")) {
      server::Json body;
      if (auto e = server::parse_request_body(req.body, ctx.mi, &body))
        return r.send(server::error_response(*e));
      return server::answer_utility(ctx, req.path, body, r);
    }
    r.send(server::error_response(server::api_error(server::ErrorKind::kNotFound, "no route")));
  }

  enum class Api { kNone, kChat, kCompletions, kResponses, kMessages, kCountTokens };
  static Api generation_api(const std::string& path) {
    if (path == "/v1/chat/completions") return Api::kChat;
    if (path == "/v1/completions") return Api::kCompletions;
    if (path == "/v1/responses") return Api::kResponses;
    if (path == "/v1/messages") return Api::kMessages;
    if (path == "/v1/messages/count_tokens") return Api::kCountTokens;
    return Api::kNone;
  }

  // A generation route up to its parsed request: the body, then the API's own request parser
  // (which renders the template, encodes and compiles any grammar). Errors take the API's shape.
  void generation(Api api, const server::HttpRequest& req, server::Responder& r) {
    const bool anthropic = api == Api::kMessages || api == Api::kCountTokens;
    const auto fail = [&](const server::ApiError& e) {
      r.send(anthropic ? server::anthropic_error_response(e) : server::error_response(e));
    };
    server::Json body;
    if (auto e = server::parse_request_body(req.body, ctx.mi, &body)) return fail(*e);
    server::CompletionRequest parsed;
    server::ResponsesOptions responses;
    server::MessagesOptions messages;
    std::optional<server::ApiError> e;
    switch (api) {
      case Api::kChat:
        e = server::parse_chat_request(body, ctx.mi, &parsed);
        break;
      case Api::kCompletions:
        e = server::parse_completion_request(body, ctx.mi, &parsed);
        break;
      case Api::kResponses:
        e = server::parse_responses_request(body, ctx.mi, &parsed, &responses);
        break;
      case Api::kMessages:
      case Api::kCountTokens:
        e = server::parse_messages_request(body, api == Api::kCountTokens, ctx.mi, &parsed,
                                           &messages);
        break;
      case Api::kNone:
        break;
    }
    if (e) return fail(*e);
    server::HttpResponse res;
    res.set_content(server::dump(server::Json{{"prompts", parsed.batch.size()}, {"n", parsed.n}}),
                    "application/json");
    r.send(std::move(res));
  }

  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::unique_ptr<tmpl::ChatTemplate> chat;
  std::unique_ptr<model::Model> vision;
  std::unique_ptr<runtime::ImageEncoder> images;
  server::Context ctx;
  std::unique_ptr<server::HttpServer> http_;
  int port = 0;
  // Per input: whether each request the handler answered was a HEAD request, in order (the
  // transport sends the answer to one as a head alone).
  std::mutex mu;
  std::vector<bool> heads;
};

Harness& harness() {
  static Harness* h = new Harness();
  return *h;
}

// Everything the server sends on one connection that gets `in`, until it closes.
std::string exchange(int port, const uint8_t* data, size_t size) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    // Interrupted (libFuzzer's alarm): the connection goes on; wait until it is made.
    if (errno != EINTR) std::abort();
    pollfd p{fd, POLLOUT, 0};
    while (poll(&p, 1, 5000) < 0 && errno == EINTR) {
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) std::abort();
  }
  std::string out;
  size_t off = 0;
  bool open = true;
  char buf[65536];
  // Write and read together: the server may answer (and close) before it has read everything.
  while (true) {
    pollfd p{fd, short(POLLIN | (off < size ? POLLOUT : 0)), 0};
    const int ready = poll(&p, 1, 5000);
    if (ready < 0 && errno == EINTR) continue;  // libFuzzer's -timeout alarm
    if (ready <= 0) std::abort();  // nothing for 5 s, and the server's deadlines are 2 s: a hang
    if (p.revents & POLLIN || p.revents & (POLLHUP | POLLERR)) {
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, size_t(n));
    }
    if (open && off < size && (p.revents & POLLOUT)) {
      const ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno != EAGAIN) open = false;
      if (n > 0) off += size_t(n);
    }
    if (open && off >= size) {
      shutdown(fd, SHUT_WR);
      open = false;
    }
  }
  close(fd);
  return out;
}

// One answer at out[*off], advanced past it; `head_only`: an answer to a HEAD request (a head
// whose Content-Length counts no bytes that follow). False when it is not a complete answer.
bool parse_answer(const std::string& out, size_t* off, bool head_only, unsigned* status) {
  http::response_parser<http::string_body> p;
  p.body_limit(1u << 24);
  p.eager(true);
  p.skip(head_only);
  boost::beast::error_code ec;
  const size_t n = p.put(boost::asio::buffer(out.data() + *off, out.size() - *off), ec);
  if (ec || !p.is_done()) return false;
  *off += n;
  *status = p.get().result_int();
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Harness& h = harness();
  {
    std::lock_guard lk(h.mu);
    h.heads.clear();
  }
  const std::string out = exchange(h.port, data, size);
  // The server has closed the connection; wait until it has let go of it too, so that what the
  // input allocated is freed within the input (libFuzzer's leak check counts per input).
  for (int i = 0; h.http_->open_connections() > 0; ++i) {
    if (i > 500000) std::abort();  // a connection that outlives its socket by seconds
    std::this_thread::sleep_for(std::chrono::microseconds(10));
  }
  // The answers: a sequence of complete HTTP responses, none a 500. The k-th final answer (not
  // a 100 Continue) answers the k-th request the handler saw; after those can come only the
  // transport's own refusal of a request (then it closes), which is a head alone when that
  // request was a HEAD one, and the harness cannot know whether it was.
  std::lock_guard lk(h.mu);
  size_t off = 0, k = 0;
  while (off < out.size()) {
    unsigned status = 0;
    const bool known = k < h.heads.size();
    if (!parse_answer(out, &off, known && h.heads[k], &status) &&
        (known || !parse_answer(out, &off, true, &status)))
      std::abort();
    if (status == 500 || status < 100) std::abort();
    if (status >= 200) ++k;
  }
  return 0;
}
