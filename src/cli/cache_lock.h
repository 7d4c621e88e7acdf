// One server per --cache-dir. The prefix cache's files are written at exit and every file of the
// same checkpoint that the writer did not write is pruned then (model/snapshot_file.h), so two
// servers sharing a folder would delete each other's snapshots. `serve` therefore holds an
// exclusive flock(2) on a lock file in the folder for as long as it runs: a second server on the
// same folder is refused at start with one line naming the holder's pid. The kernel drops the
// lock when its holder dies in any way (SIGKILL included), so a restarted server never finds a
// stale lock. Under MPI each rank writes its own subfolder of --cache-dir; each rank locks
// its own file (rank-numbered), so the ranks of one job on one machine do not exclude each
// other, while a second job on the same folder is refused.
//
// Taking the lock also checks the folder at start: it is created when missing, and one that is
// not a directory or cannot be written refuses the start (a cache that would be lost at exit is
// a configuration error, said before any work is done rather than at exit).
#pragma once

#include <string>

#include "core/result.h"

namespace qwen35::cli {

class CacheDirLock {
 public:
  CacheDirLock() = default;
  CacheDirLock(CacheDirLock&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
  CacheDirLock& operator=(CacheDirLock&& o) noexcept;
  CacheDirLock(const CacheDirLock&) = delete;
  CacheDirLock& operator=(const CacheDirLock&) = delete;
  ~CacheDirLock();

  // Locks `dir` for this process (rank: its MPI rank when the job has several, else -1).
  // Errors are one line: "--cache-dir DIR: ...".
  static core::Result<CacheDirLock> acquire(const std::string& dir, int rank);

  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// The lock file's name in the folder: ".qwen35-serve.lock", or ".qwen35-serve-rankR.lock".
std::string cache_lock_name(int rank);

}  // namespace qwen35::cli
