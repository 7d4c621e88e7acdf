#include "cli/cache_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

namespace qwen35::cli {

std::string cache_lock_name(int rank) {
  return rank < 0 ? ".qwen35-serve.lock" : ".qwen35-serve-rank" + std::to_string(rank) + ".lock";
}

CacheDirLock& CacheDirLock::operator=(CacheDirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

CacheDirLock::~CacheDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (removing it would race)
}

core::Result<CacheDirLock> CacheDirLock::acquire(const std::string& dir, int rank) {
  namespace fs = std::filesystem;
  const std::string what = "--cache-dir " + dir + ": ";
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    return core::error(what + "exists and is not a directory");
  fs::create_directories(dir, ec);
  if (ec) return core::error(what + "cannot create it: " + ec.message());
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return core::error(what + "cannot write there (" + std::strerror(errno) +
                       "): the prefix cache could not be saved");
  CacheDirLock lock;
  lock.path_ = dir + "/" + cache_lock_name(rank);
  lock.fd_ = ::open(lock.path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock.fd_ < 0)
    return core::error(what + "cannot write there (" + std::strerror(errno) +
                       "): the prefix cache could not be saved");
  if (::flock(lock.fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) return core::error(what + "cannot lock it: " + std::strerror(err));
    char buf[32] = {};
    const ssize_t n = ::pread(lock.fd_, buf, sizeof buf - 1, 0);
    std::string holder = n > 0 ? std::string(buf, size_t(n)) : "";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    return core::error(what + "in use by another qwen35 serve" +
                       (holder.empty() ? "" : " (pid " + holder + ")") +
                       "; two servers on one folder would delete each other's snapshots: give "
                       "each its own --cache-dir");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(lock.fd_, 0) != 0 || ::pwrite(lock.fd_, pid.data(), pid.size(), 0) != ssize_t(pid.size()))
    return core::error(what + "cannot write there (" + std::strerror(errno) +
                       "): the prefix cache could not be saved");
  return lock;
}

}  // namespace qwen35::cli
