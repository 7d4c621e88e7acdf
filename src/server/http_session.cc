#include "server/http_session.h"

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "server/http_framing.h"

namespace qwen35::server::http_detail {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {
std::string owned(beast::string_view s) { return std::string(s.data(), s.size()); }
constexpr size_t kPipelineKeep = 64u << 10;  // pipelined bytes kept while answering

class Session final : public Connection, public Responder, public std::enable_shared_from_this<Session> {
 public:
  // `proxy`: the peer is a trusted proxy, not counted at accept; its requests are counted by
  // the client they name (count_client).
  Session(tcp::socket s, std::shared_ptr<Shared> sh, std::string addr, bool proxy)
      : stream_(std::move(s)), sh_(std::move(sh)), addr_(std::move(addr)), proxy_(proxy) {
    if (!proxy_) counted_ = addr_;
  }
  ~Session() override {
    if (exchange_open_) --sh_->in_flight;
    --sh_->open;
    std::lock_guard lk(sh_->mu);
    release_locked();
    sh_->sessions.erase(this);
  }

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_request(); });
  }
  // From stop_accepting()/stop(): closes an idle connection (or any, when `all`).
  void drop(bool all) override {
    net::post(stream_.get_executor(), [self = shared_from_this(), all] {
      if (all || !self->exchange_open_) self->close();
    });
  }

  // Responder.
  void send(HttpResponse res) override {
    net::post(stream_.get_executor(),
              [self = shared_from_this(), res = std::move(res)]() mutable {
                self->do_send(std::move(res));
              });
  }
  void start_stream(HttpResponse head) override {
    net::post(stream_.get_executor(), [self = shared_from_this(), head = std::move(head)] {
      if (self->responded_) return;
      self->responded_ = true;
      self->keep_alive_ = self->keep_alive_ && !self->sh_->draining.load();
      std::string h = status_line(head.status) + "Content-Type: " + head.content_type + "\r\n";
      for (const auto& [k, v] : head.headers) h += k + ": " + v + "\r\n";
      for (const auto& [k, v] : self->answer_headers_) h += k + ": " + v + "\r\n";
      for (const auto& [k, v] : self->sh_->limits.headers) h += k + ": " + v + "\r\n";
      h += "Transfer-Encoding: chunked\r\n";
      h += self->keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
      self->queue_write(std::move(h), nullptr);
      if (head.content_type == "text/event-stream" && !self->head_request_ &&
          self->sh_->limits.sse_keepalive.count() > 0)
        self->arm_keepalive();
    });
  }
  void write(std::string data, std::function<void(bool)> done) override {
    net::post(stream_.get_executor(), [self = shared_from_this(), data = std::move(data),
                                       done = std::move(done)]() mutable {
      // An empty chunk would end the body; a HEAD request's answer has none.
      if (data.empty() || self->head_request_) {
        if (done) done(!self->closed_);
        return;
      }
      self->last_write_ = Clock::now();
      self->queue_write(chunk(std::move(data)), std::move(done));
    });
  }
  void end_stream() override {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      self->event_stream_ = false;
      if (self->keepalive_) self->keepalive_->cancel();
      // After what is queued, in order: the exchange ends once the head is out.
      self->queue_write(self->head_request_ ? "" : "0\r\n\r\n",
                        [self](bool) { self->end_exchange(); });
    });
  }
  void post(std::function<void()> fn) override {
    net::post(stream_.get_executor(), [self = shared_from_this(), fn = std::move(fn)] { fn(); });
  }
  void on_close(std::function<void()> fn) override {
    net::post(stream_.get_executor(), [self = shared_from_this(), fn = std::move(fn)]() mutable {
      if (self->closed_) return fn();
      self->on_close_ = std::move(fn);
    });
  }
  bool closed() const override { return closed_.load(); }
  void add_header(std::string name, std::string value) override {
    net::post(stream_.get_executor(), [self = shared_from_this(), name = std::move(name),
                                       value = std::move(value)]() mutable {
      for (const auto& [k, v] : self->answer_headers_)
        if (beast::iequals(k, name)) return;
      self->answer_headers_.emplace_back(std::move(name), std::move(value));
    });
  }

 private:
  void read_request() {
    if (sh_->draining.load()) return close();
    parser_.emplace();
    parser_->header_limit(uint32_t(std::min<size_t>(sh_->limits.max_header_bytes, UINT32_MAX)));
    parser_->body_limit(sh_->limits.max_body_bytes);
    head_request_ = false;
    answer_headers_.clear();
    // The deadline of the whole request: set once, every read of this request shares it.
    stream_.expires_after(sh_->limits.read_timeout);
    read_head();
  }

  // Reads until the whole head is in buf_ and checks it raw (http_framing.h), then lets Beast
  // parse it from buf_. Beast parses a head only once its empty line has arrived too, so it sees
  // the same bytes, and no more are read for it.
  void read_head() {
    const std::string_view got(static_cast<const char*>(buf_.data().data()), buf_.size());
    const size_t limit = sh_->limits.max_header_bytes;
    if (const size_t n = head_length(got, limit)) {
      const std::string_view head = got.substr(0, n);
      head_request_ = is_head_request(head);
      if (auto e = check_head(head)) return fail(e->status, e->message);
      http::async_read_header(
          stream_, buf_, *parser_,
          [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
      return;
    }
    if (got.size() >= limit) return fail(431, "the request header is too large");
    // Grown as Beast grows it: the room the buffer already has, at least 512 bytes, so that a
    // connection's buffer stays the size of what it sent, not of the head limit (thousands of
    // slow or idle connections each holding 64 KiB would add up).
    const size_t room = std::max<size_t>(512, buf_.capacity() - buf_.size());
    stream_.async_read_some(buf_.prepare(std::min({room, limit - got.size(), size_t(65536)})),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              self->buf_.commit(n);
                              if (ec) return self->close();  // gone, reset, deadline passed
                              self->read_head();
                            });
  }

  void on_header(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    if (auto e = check_framing()) return fail(e->status, e->message);
    if (proxy_ && !count_client()) return fail(503, "too many connections from " + client_);
    if (beast::iequals(parser_->get()[http::field::expect], "100-continue") &&
        !parser_->is_done()) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(stream_, net::buffer(kContinue),
                       [self = shared_from_this()](beast::error_code ec, size_t) {
                         if (ec) return self->close();
                         self->read_body();
                       });
      return;
    }
    read_body();
  }

  // The body's framing as http_framing.h states it. Accepted, a Transfer-Encoding is exactly
  // `chunked`: then Beast must be reading the body as chunked too, or the two would disagree
  // on where the request ends.
  std::optional<FramingError> check_framing() const {
    const auto& h = parser_->get();
    std::vector<std::string_view> te;
    for (auto [it, end] = h.equal_range(http::field::transfer_encoding); it != end; ++it)
      te.emplace_back(it->value().data(), it->value().size());
    if (auto e = check_transfer_encoding(te, h.count(http::field::content_length) > 0, h.version()))
      return e;
    if (!te.empty() && !parser_->chunked())
      return FramingError{400, "malformed HTTP request (bad Transfer-Encoding)"};
    return std::nullopt;
  }

  void read_body() {
    if (parser_->is_done()) return on_request();
    http::async_read(stream_, buf_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->on_read_error(ec);
                       self->on_request();
                     });
  }

  void on_read_error(beast::error_code ec) {
    if (ec == http::error::body_limit) return fail(413, "the request body is too large");
    if (ec == http::error::header_limit) return fail(431, "the request header is too large");
    if (ec.category() == http::make_error_code(http::error::end_of_stream).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message)
      return fail(400, "malformed HTTP request (" + ec.message() + ")");
    close();  // end of stream, reset, deadline passed (slow or idle client), or shut down
  }

  // Answers a request that cannot be read on, then closes without resetting the connection
  // under the client's feet (a reset can destroy the answer before the client reads it).
  void fail(int status, const std::string& message) {
    keep_alive_ = false;
    exchange_open_ = true;
    ++sh_->in_flight;
    responded_ = false;
    lingering_ = true;
    do_send(sh_->error_page(status, message));
  }

  void on_request() {
    auto msg = parser_->release();
    HttpRequest req;
    req.method = owned(msg.method_string());
    const std::string target = owned(msg.target());
    req.path = target.substr(0, target.find('?'));
    req.remote_addr = proxy_ ? client_ : addr_;
    for (const auto& f : msg) req.headers.emplace_back(owned(f.name_string()), owned(f.value()));
    req.body = std::move(msg.body());
    keep_alive_ = msg.keep_alive();
    responded_ = false;
    exchange_open_ = true;
    ++sh_->in_flight;
    watch();
    try {
      sh_->handler(std::move(req), shared_from_this());
    } catch (const std::exception& e) {
      do_send(sh_->error_page(500, e.what()));
    }
  }

  // One read kept posted while the answer is produced: it fails at once when the client hangs
  // up. Pipelined bytes go to buf_ for the next request.
  void watch() {
    if (watching_ || closed_ || buf_.size() >= kPipelineKeep) return;
    watching_ = true;
    stream_.expires_never();  // no write is pending here: both deadlines are off until a write
    stream_.async_read_some(buf_.prepare(4096),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              self->on_watch(ec, n);
                            });
  }

  void on_watch(beast::error_code ec, size_t n) {
    watching_ = false;
    buf_.commit(n);
    if (ec && ec != net::error::operation_aborted) return close();  // the client is gone
    if (exchange_open_) return watch();
    if (!closed_) read_request();  // the answer is out: cancelled to read the next request
  }

  void do_send(HttpResponse res) {
    if (responded_ || closed_) return;
    responded_ = true;
    auto msg = std::make_shared<http::response<http::string_body>>();
    msg->result(unsigned(res.status));
    msg->version(11);
    msg->set(http::field::content_type, res.content_type);
    for (const auto& [k, v] : res.headers) msg->set(k, v);
    for (const auto& [k, v] : answer_headers_) msg->set(k, v);
    for (const auto& [k, v] : sh_->limits.headers) msg->set(k, v);
    msg->body() = std::move(res.body);
    msg->keep_alive(keep_alive_ && !sh_->draining.load());
    keep_alive_ = msg->keep_alive();
    msg->prepare_payload();  // Content-Length: what GET sends, for a HEAD request too
    stream_.expires_after(sh_->limits.write_timeout);
    auto done = [self = shared_from_this(), msg](beast::error_code ec, size_t) {
      if (ec) self->close();
      self->end_exchange();
    };
    if (!head_request_) return http::async_write(stream_, *msg, std::move(done));
    // HEAD: the head alone (RFC 9110 §9.3.2), so the connection's next answer starts right
    // after it.
    auto sr = std::make_shared<http::response_serializer<http::string_body>>(*msg);
    http::async_write_header(
        stream_, *sr,
        [sr, done = std::move(done)](beast::error_code ec, size_t n) { done(ec, n); });
  }

  void queue_write(std::string bytes, std::function<void(bool)> done) {
    if (closed_) {
      if (done) net::post(stream_.get_executor(), [done] { done(false); });
      return;
    }
    out_.push_back({std::move(bytes), std::move(done)});
    if (out_.size() == 1) write_front();
  }

  void write_front() {
    stream_.expires_after(sh_->limits.write_timeout);  // only the write deadline: a read is pending
    net::async_write(stream_, net::buffer(out_.front().bytes),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       auto done = std::move(self->out_.front().done);
                       self->out_.pop_front();
                       if (ec) self->close();
                       if (done) done(!ec);
                       if (self->closed_) {
                         while (!self->out_.empty()) {
                           auto d = std::move(self->out_.front().done);
                           self->out_.pop_front();
                           if (d) d(false);
                         }
                       } else if (!self->out_.empty()) {
                         self->write_front();
                       }
                     });
  }

  void end_exchange() {
    if (!exchange_open_) return;
    exchange_open_ = false;
    on_close_ = nullptr;  // the answer is out: nothing waits on this exchange any more
    --sh_->in_flight;
    if (proxy_) {
      std::lock_guard lk(sh_->mu);
      release_locked();
    }
    if (closed_) return;
    if (lingering_) return linger();
    if (!keep_alive_ || sh_->draining.load()) return close();
    if (watching_)
      stream_.socket().cancel();  // on_watch reads the next request
    else
      read_request();
  }

  void linger() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (watching_) return;  // the posted read discards until the client closes
    stream_.expires_after(std::chrono::seconds(1));
    discard_ = std::make_shared<std::array<char, 4096>>();
    stream_.async_read_some(net::buffer(*discard_),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              self->lingered_ += n;
                              if (ec || self->lingered_ > (1u << 20)) return self->close();
                              self->lingering_ = true;
                              self->linger();
                            });
  }

  // An event stream that has written nothing for limits.sse_keepalive gets an SSE comment line,
  // which every client skips: clients and balancers that drop a response idle for a while (Node's
  // fetch after 300 s without a body chunk) keep a stream whose prompt takes long to prefill.
  void arm_keepalive() {
    event_stream_ = true;
    last_write_ = Clock::now();
    if (!keepalive_) keepalive_.emplace(stream_.get_executor());
    wait_keepalive();
  }
  void wait_keepalive() {
    keepalive_->expires_at(last_write_ + sh_->limits.sse_keepalive);
    keepalive_->async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || !self->event_stream_ || self->closed_) return;
      if (Clock::now() >= self->last_write_ + self->sh_->limits.sse_keepalive) {
        self->last_write_ = Clock::now();
        self->queue_write(chunk(": keep-alive\n\n"), nullptr);
      }
      self->wait_keepalive();
    });
  }
  static std::string chunk(std::string data) {
    char hex[20];
    std::snprintf(hex, sizeof hex, "%zx\r\n", data.size());
    return hex + std::move(data) + "\r\n";
  }

  void close() {
    closed_ = true;
    event_stream_ = false;
    if (keepalive_) keepalive_->cancel();
    if (auto fn = std::exchange(on_close_, nullptr)) fn();
    if (!stream_.socket().is_open()) return;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  // A proxied request: its client (client_address.h) is counted against the per-client cap, from
  // its head's arrival to the end of its answer. False (not counted) when the cap is reached.
  bool count_client() {
    std::vector<std::string> xff, fwd;
    const auto& h = parser_->get();
    for (auto [it, end] = h.equal_range("X-Forwarded-For"); it != end; ++it)
      xff.push_back(owned(it->value()));
    for (auto [it, end] = h.equal_range("Forwarded"); it != end; ++it)
      fwd.push_back(owned(it->value()));
    client_ = forwarded_client(addr_, xff, fwd, sh_->limits.trusted_proxies);
    std::lock_guard lk(sh_->mu);
    int& n = sh_->per_client[client_];
    if (n >= sh_->limits.max_connections_per_client) {
      if (n == 0) sh_->per_client.erase(client_);
      return false;
    }
    ++n;
    counted_ = client_;
    return true;
  }
  // Under sh_->mu: gives back what this connection holds of the per-client count.
  void release_locked() {
    if (counted_.empty()) return;
    if (--sh_->per_client[counted_] <= 0) sh_->per_client.erase(counted_);
    counted_.clear();
  }

  struct Out {
    std::string bytes;
    std::function<void(bool)> done;
  };
  beast::tcp_stream stream_;
  std::shared_ptr<Shared> sh_;
  std::string addr_;
  const bool proxy_;
  std::string client_;   // proxied: the client of the current request
  std::string counted_;  // the per_client key this connection holds a count under ("": none)
  std::vector<std::pair<std::string, std::string>> answer_headers_;  // Responder::add_header
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<Out> out_;
  std::shared_ptr<std::array<char, 4096>> discard_;
  std::function<void()> on_close_;  // Responder::on_close, on the strand
  size_t lingered_ = 0;
  bool keep_alive_ = false, responded_ = false, exchange_open_ = false, watching_ = false;
  bool lingering_ = false;
  bool head_request_ = false;  // this exchange answers a HEAD request: heads only, no body
  using Clock = std::chrono::steady_clock;
  bool event_stream_ = false;                  // an event stream is open (arm_keepalive)
  Clock::time_point last_write_;               // its last bytes
  std::optional<net::steady_timer> keepalive_;
  std::atomic<bool> closed_{false};
};

}  // namespace

std::string status_line(int status) {
  const auto reason = http::obsolete_reason(http::int_to_status(unsigned(status)));
  return "HTTP/1.1 " + std::to_string(status) + " " + owned(reason) + "\r\n";
}

void start_session(tcp::socket s, std::shared_ptr<Shared> sh, std::string addr, bool proxy) {
  auto session = std::make_shared<Session>(std::move(s), sh, std::move(addr), proxy);
  {
    std::lock_guard lk(sh->mu);
    sh->sessions[session.get()] = session;
  }
  session->start();
}

}  // namespace qwen35::server::http_detail
