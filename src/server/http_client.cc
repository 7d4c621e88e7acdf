#include "server/http_client.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <sstream>
#include <thread>

namespace qwen35::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {
std::string str(beast::string_view s) { return std::string(s.data(), s.size()); }
}  // namespace

std::string ClientResponse::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (beast::iequals(k, beast::string_view(name.data(), name.size()))) return v;
  return "";
}

void HttpClient::set_header(std::string name, std::string value) {
  for (auto& [k, v] : headers_)
    if (beast::iequals(k, name)) {
      v = std::move(value);
      return;
    }
  headers_.emplace_back(std::move(name), std::move(value));
}

ClientResponse HttpClient::post(const std::string& path, const std::string& body,
                                const std::string& content_type) {
  return send("POST", path, body, nullptr, content_type);
}

namespace {

// One request's connection: each step is an asynchronous operation run to completion on a
// private io_context, so that beast::tcp_stream's deadline applies (blocking Asio calls have
// none). Each step returns an error message, empty on success.
struct Exchange {
  net::io_context ioc;
  beast::tcp_stream stream{ioc};
  std::chrono::milliseconds deadline;
  beast::error_code ec;

  void run() {
    ioc.restart();
    ioc.run();
  }
  std::string connect(const std::string& host, int port) {
    tcp::resolver resolver(ioc);
    const auto eps = resolver.resolve(host, std::to_string(port), ec);
    if (ec) return "resolve: " + ec.message();
    stream.expires_after(deadline);
    stream.async_connect(eps, [&](beast::error_code e, const tcp::endpoint&) { ec = e; });
    run();
    if (ec) return "connect: " + ec.message();
    stream.socket().set_option(tcp::no_delay(true), ec);  // paced uploads are small writes
    ec = {};
    return "";
  }
  // The whole request at once, or `piece` bytes at a time with `gap` between pieces.
  std::string write(const http::request<http::string_body>& req, size_t piece,
                    std::chrono::milliseconds gap) {
    stream.expires_after(deadline);
    if (piece == 0) {
      http::async_write(stream, req, [&](beast::error_code e, size_t) { ec = e; });
      run();
    } else {
      std::ostringstream os;
      os << req;
      const std::string bytes = os.str();
      for (size_t off = 0; off < bytes.size() && !ec; off += piece) {
        if (off > 0) std::this_thread::sleep_for(gap);
        net::async_write(stream, net::buffer(bytes.data() + off, std::min(piece, bytes.size() - off)),
                         [&](beast::error_code e, size_t) { ec = e; });
        run();
      }
    }
    return ec ? "write: " + ec.message() : "";
  }
  void read(const std::function<bool(std::string_view)>& on_data, ClientResponse* out);
};

void Exchange::read(const std::function<bool(std::string_view)>& on_data, ClientResponse* out) {
  beast::flat_buffer buf;
  http::response_parser<http::string_body> p;
  p.body_limit(std::numeric_limits<std::uint64_t>::max());
  bool aborted = false;
  std::function<size_t(uint64_t, beast::string_view, beast::error_code&)> on_chunk =
      [&](uint64_t, beast::string_view piece, beast::error_code& e) -> size_t {
    if (!on_data(std::string_view(piece.data(), piece.size()))) {
      aborted = true;
      e = net::error::operation_aborted;
    }
    return piece.size();
  };
  if (on_data) p.on_chunk_body(on_chunk);
  stream.expires_after(deadline);
  while (!p.is_done()) {
    http::async_read_some(stream, buf, p, [&](beast::error_code e, size_t) { ec = e; });
    run();
    if (ec) break;
  }
  if (p.is_header_done()) {
    out->status = int(p.get().result_int());
    for (const auto& f : p.get()) out->headers.emplace_back(str(f.name_string()), str(f.value()));
  }
  if (aborted) {
    out->error = "aborted by the callback";
    return;
  }
  if (ec) {
    out->error = "read: " + ec.message();
    if (!p.is_done()) out->status = -1;
    return;
  }
  out->body = std::move(p.get().body());
  if (on_data && !p.chunked() && !out->body.empty() && !on_data(out->body))
    out->error = "aborted by the callback";
}

}  // namespace

ClientResponse HttpClient::send(const std::string& method, const std::string& path,
                                const std::string& body,
                                const std::function<bool(std::string_view)>& on_data,
                                const std::string& content_type) {
  ClientResponse out;
  Exchange x;
  x.deadline = std::chrono::milliseconds(int64_t(timeout_s_ * 1000));
  if (out.error = x.connect(host_, port_); !out.error.empty()) return out;
  http::request<http::string_body> req{http::string_to_verb(method), path, 11};
  req.set(http::field::host, host_ + ":" + std::to_string(port_));
  for (const auto& [k, v] : headers_) req.set(k, v);
  if (!body.empty() || method == "POST") {
    req.set(http::field::content_type, content_type);
    req.body() = body;
  }
  req.keep_alive(false);
  req.prepare_payload();
  if (out.error = x.write(req, piece_, gap_); !out.error.empty()) return out;
  x.read(on_data, &out);
  return out;
}

}  // namespace qwen35::server
