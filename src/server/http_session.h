// One HTTP connection of server/http_server.h: its reads, its exchanges in order, its writes
// and its limits (docs/design.md "HTTP layer"). Internal to the HTTP server: the listener
// (http_server.cc) accepts a socket, counts it and starts a session here; the session serves
// it until it closes, and leaves the shared registry as it goes.
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "server/http_server.h"

namespace qwen35::server::http_detail {

// What the listener can ask of a connection.
class Connection {
 public:
  virtual ~Connection() = default;
  // From stop_accepting()/stop(): closes an idle connection (or any, when `all`).
  virtual void drop(bool all) = 0;
};

// State shared by the listener and every connection; connections hold it by shared_ptr, so it
// outlives them whatever the order of destruction.
struct Shared {
  HttpLimits limits;
  HttpHandler handler;
  HttpErrorPage error_page;
  std::atomic<int> open{0}, in_flight{0};
  std::atomic<bool> draining{false};
  std::mutex mu;  // guards per_client and sessions
  std::unordered_map<std::string, int> per_client;
  std::map<Connection*, std::weak_ptr<Connection>> sessions;
};

// "HTTP/1.1 STATUS REASON\r\n".
std::string status_line(int status);

// Serves an accepted socket, already counted in sh->open (and, unless `proxy`, in
// sh->per_client under `addr`): registered in sh->sessions until it closes. `proxy`: the peer is
// a trusted proxy, whose requests are counted by the client they name.
void start_session(boost::asio::ip::tcp::socket s, std::shared_ptr<Shared> sh, std::string addr, bool proxy);

}  // namespace qwen35::server::http_detail
