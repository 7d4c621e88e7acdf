#include "server/peer.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace qwen35::server {
namespace {

// Address and port of a socket address, as text and number.
bool split(const sockaddr_storage& a, std::string* addr, int* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto* s = reinterpret_cast<const sockaddr_in*>(&a);
    if (!inet_ntop(AF_INET, &s->sin_addr, buf, sizeof buf)) return false;
    *port = ntohs(s->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* s = reinterpret_cast<const sockaddr_in6*>(&a);
    if (!inet_ntop(AF_INET6, &s->sin6_addr, buf, sizeof buf)) return false;
    *port = ntohs(s->sin6_port);
  } else {
    return false;
  }
  *addr = buf;
  return true;
}

}  // namespace

int find_connection(const std::string& remote_addr, int remote_port, int local_port) {
  if (remote_port <= 0) return -1;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int found = -1;
  while (dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2) continue;
    sockaddr_storage peer{}, self{};
    socklen_t pl = sizeof peer, sl = sizeof self;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &sl) != 0) continue;
    std::string pa, sa;
    int pp = -1, sp = -1;
    if (!split(peer, &pa, &pp) || !split(self, &sa, &sp)) continue;
    if (pp == remote_port && (local_port <= 0 || sp == local_port) && pa == remote_addr) {
      found = fd;
      break;
    }
  }
  closedir(d);
  return found;
}

bool peer_closed(int fd) {
  if (fd < 0) return false;
  char c;
  const ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (r > 0) return false;
  if (r == 0) return true;
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace qwen35::server
