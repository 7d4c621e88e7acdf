// A raw loopback TCP connection to a test server: the bytes real clients cannot be made to send
// (hostile, malformed or ambiguous requests) and everything the server answers, unparsed.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace qwen35::testing {

class Raw {
 public:
  explicit Raw(int port, int rcvbuf = 0) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Raw() { close(fd_); }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;

  bool ok() const { return ok_; }
  bool send_all(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += size_t(n);
    }
    return true;
  }
  // Reads what arrives within `seconds` (until the peer closes); *closed says whether it did.
  std::string read_for(double seconds, bool* closed = nullptr, size_t want = SIZE_MAX) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    const auto since = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
    std::string out;
    if (closed) *closed = false;
    while (since() < seconds && out.size() < want) {
      pollfd p{fd_, POLLIN, 0};
      const int ms = int((seconds - since()) * 1000) + 1;
      if (poll(&p, 1, ms) <= 0) break;
      char buf[65536];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        if (closed) *closed = true;
        break;
      }
      out.append(buf, size_t(n));
    }
    return out;
  }
  // Non-blocking: whatever has arrived.
  std::string peek() {
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    return n > 0 ? std::string(buf, size_t(n)) : std::string();
  }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

}  // namespace qwen35::testing
