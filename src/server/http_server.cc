#include "server/http_server.h"

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

#include "server/http_session.h"

namespace qwen35::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {
// An I/O thread. A handler that runs out of memory (a body read into memory, an answer built)
// throws out of run(); the exchange it served is dropped with it (its connection's last owner
// was the handler), and the thread runs the loop again instead of ending the process.
void run_io(net::io_context& ioc) {
  for (;;) {
    try {
      ioc.run();
      return;
    } catch (const std::bad_alloc&) {
    } catch (const std::length_error&) {
    }
  }
}
}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (beast::iequals(k, beast::string_view(name.data(), name.size()))) return v;
  return "";
}

using http_detail::Connection;
using http_detail::Shared;
using http_detail::status_line;

struct HttpServer::Impl {
  std::shared_ptr<Shared> shared = std::make_shared<Shared>();
  std::unique_ptr<net::io_context> ioc = std::make_unique<net::io_context>();
  std::optional<tcp::acceptor> acceptor;
  std::vector<std::thread> threads;
  int io_threads = 2;
  bool stopped = false;
  void accept();
  void on_accept(beast::error_code ec, tcp::socket s);
  void close_sessions(bool all);
};


void HttpServer::Impl::accept() {
  acceptor->async_accept(net::make_strand(*ioc), [this](beast::error_code ec, tcp::socket s) {
    on_accept(ec, std::move(s));
  });
}

void HttpServer::Impl::on_accept(beast::error_code ec, tcp::socket s) {
  if (!acceptor->is_open() || shared->draining.load()) return;
  if (ec) {  // out of descriptors, or the client gave up: try again shortly
    auto t = std::make_shared<net::steady_timer>(acceptor->get_executor(),
                                                 std::chrono::milliseconds(20));
    t->async_wait([this, t](beast::error_code) { accept(); });
    return;
  }
  beast::error_code aec;
  const auto ep = s.remote_endpoint(aec);
  std::string addr = aec ? std::string("?") : canonical_address(ep.address().to_string());
  if (addr.empty()) addr = "?";
  // A trusted proxy's connections carry many clients: they count per request (Session).
  const bool proxy = is_trusted(shared->limits.trusted_proxies, addr);
  bool refuse = false;
  {
    std::lock_guard lk(shared->mu);
    if (shared->open.load() >= shared->limits.max_connections) {
      refuse = true;
    } else if (proxy) {
      ++shared->open;
    } else {
      int& n = shared->per_client[addr];
      if (n >= shared->limits.max_connections_per_client) {
        refuse = true;
        if (n == 0) shared->per_client.erase(addr);
      } else {
        ++n;
        ++shared->open;
      }
    }
  }
  if (refuse) {
    // Cheap: one non-blocking send of a 503, then close; nothing is read.
    const HttpResponse r = shared->error_page(503, "too many connections");
    std::string extra;
    for (const auto& [k, v] : shared->limits.headers) extra += "\r\n" + k + ": " + v;
    const std::string msg = status_line(503) + "Content-Type: " + r.content_type +
                            "\r\nContent-Length: " + std::to_string(r.body.size()) +
                            extra + "\r\nConnection: close\r\n\r\n" + r.body;
    (void)::send(s.native_handle(), msg.data(), msg.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    s.close(aec);
  } else {
    // Answers and SSE chunks are small writes: Nagle's algorithm would hold each one back until
    // the client acknowledges the last (up to its delayed-ACK time, tens of ms per token).
    s.set_option(tcp::no_delay(true), aec);
    http_detail::start_session(std::move(s), shared, addr, proxy);
  }
  accept();
}

void HttpServer::Impl::close_sessions(bool all) {
  std::vector<std::shared_ptr<Connection>> live;
  {
    std::lock_guard lk(shared->mu);
    for (auto& [p, w] : shared->sessions)
      if (auto s = w.lock()) live.push_back(std::move(s));
  }
  for (auto& s : live) s->drop(all);
}

HttpServer::HttpServer(HttpLimits limits, HttpHandler handler, HttpErrorPage error_page,
                       int io_threads)
    : impl_(std::make_unique<Impl>()) {
  impl_->shared->limits = limits;
  impl_->shared->handler = std::move(handler);
  impl_->shared->error_page = std::move(error_page);
  impl_->io_threads = std::max(1, io_threads);
}

HttpServer::~HttpServer() { stop(std::chrono::milliseconds(0)); }

core::Result<int> HttpServer::bind(const std::string& host, int port) {
  beast::error_code ec;
  tcp::endpoint ep;
  if (const auto addr = net::ip::make_address(host, ec); !ec) {
    ep = tcp::endpoint(addr, uint16_t(port));
  } else {  // a host name
    tcp::resolver resolver(*impl_->ioc);
    const auto found = resolver.resolve(host, std::to_string(port), ec);
    if (ec || found.empty()) return core::error("[server] cannot resolve host '" + host + "'");
    ep = found.begin()->endpoint();
  }
  auto& a = impl_->acceptor.emplace(net::make_strand(*impl_->ioc));
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    impl_->acceptor.reset();
    return core::error("[server] cannot bind " + host + ":" + std::to_string(port) + " (" +
                       ec.message() + ")");
  }
  return int(a.local_endpoint().port());
}

void HttpServer::start() {
  if (!impl_->acceptor) return;
  impl_->accept();
  for (int i = 0; i < impl_->io_threads; ++i)
    impl_->threads.emplace_back([ioc = impl_->ioc.get()] { run_io(*ioc); });
}

void HttpServer::stop_accepting() {
  if (impl_->shared->draining.exchange(true)) return;
  if (impl_->acceptor)
    net::post(impl_->acceptor->get_executor(), [impl = impl_.get()] {
      beast::error_code ec;
      impl->acceptor->close(ec);
    });
  impl_->close_sessions(false);
}

int HttpServer::in_flight() const { return impl_->shared->in_flight.load(); }
int HttpServer::open_connections() const { return impl_->shared->open.load(); }

void HttpServer::stop(std::chrono::milliseconds grace) {
  if (impl_->stopped) return;
  impl_->stopped = true;
  stop_accepting();
  const auto until = std::chrono::steady_clock::now() + grace;
  while (in_flight() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  impl_->close_sessions(true);
  if (!impl_->threads.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  impl_->ioc->stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  impl_->acceptor.reset();
  impl_->ioc.reset();  // destroys the pending handlers and the connections they hold
}

}  // namespace qwen35::server
