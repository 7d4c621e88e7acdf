// The event-driven HTTP/1.1 transport on Boost.Beast and Asio: one io_context run by a few I/O
// threads, a listener, and one small state machine per connection (read a request within a
// deadline, hand it to the handler, write the answer or a chunked stream, keep-alive).
//
// Why Beast: a Debian package (libboost-dev, header-only), asynchronous accept/read/write with
// per-operation deadlines (beast::tcp_stream), and a parser whose header_limit and body_limit hold
// whatever the transfer encoding. Thousands of idle or slow connections cost a socket and a few
// KiB each, not a thread.
//
// Limits: a whole request (header and body) must arrive within read_timeout of its first wait
// (the deadline is set once per request, not per byte); every write must finish within
// write_timeout (a client that stops reading is dropped); connections over max_connections, or
// over max_connections_per_client from one address, are closed at accept (behind a trusted proxy,
// the per-client count is of requests by forwarded client instead: HttpLimits::trusted_proxies).
//
// Framing: a head is read whole and checked raw before Beast parses it, and the body's framing
// after (server/http_framing.h: no folded lines, Transfer-Encoding only as a single final
// `chunked`, never with Content-Length); a refused request is answered 400 or 501 and its
// connection closed. A HEAD request's answer is sent as a head alone, with the Content-Length
// (or the Transfer-Encoding) its body would have had.
//
// While a request is being answered the connection keeps one read posted: a client that hangs up
// is seen at once (Responder::closed()), with no polling of sockets. Bytes of a pipelined next
// request are kept for later.
//
// Thread-safety: the public methods may be called from any thread. The handler runs on an I/O
// thread and must not block; it answers through the Responder, from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"
#include "server/client_address.h"
#include "server/http.h"

namespace qwen35::server {

struct HttpLimits {
  size_t max_header_bytes = 16u << 10;
  size_t max_body_bytes = 8u << 20;
  std::chrono::milliseconds read_timeout{30000};
  std::chrono::milliseconds write_timeout{30000};
  // An event stream (text/event-stream) that has sent nothing for this long gets an SSE comment
  // (`: keep-alive`), e.g. while its prompt prefills; 0: never.
  std::chrono::milliseconds sse_keepalive{15000};
  int max_connections = 4096;
  int max_connections_per_client = 1024;
  // Headers every answer carries (the transport's own errors too): X-Qwen35-Replica.
  std::vector<std::pair<std::string, std::string>> headers;
  // Connections from these networks are proxies (a load balancer): they are not counted against
  // max_connections_per_client at accept; each request on them is, under the client its
  // X-Forwarded-For / Forwarded names (client_address.h), from its head's arrival to the end of
  // its answer, and HttpRequest::remote_addr is that client.
  std::vector<Cidr> trusted_proxies;
};

using HttpHandler = std::function<void(HttpRequest req, std::shared_ptr<Responder> r)>;
// The body of an error the transport answers itself (400, 413, 431, 503).
using HttpErrorPage = std::function<HttpResponse(int status, const std::string& message)>;

class HttpServer {
 public:
  HttpServer(HttpLimits limits, HttpHandler handler, HttpErrorPage error_page, int io_threads);
  ~HttpServer();  // stop(0) if still running

  core::Result<int> bind(const std::string& host, int port);  // returns the bound port
  void start();                                               // the I/O threads
  // Closes the listener and every connection that is not answering a request; answered ones
  // close after their answer.
  void stop_accepting();
  // Exchanges being answered now, and open connections.
  int in_flight() const;
  int open_connections() const;
  // Waits up to `grace` for in-flight answers to finish, then drops every connection, joins the
  // I/O threads and destroys what is still pending (its handlers' state included).
  void stop(std::chrono::milliseconds grace);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace qwen35::server
