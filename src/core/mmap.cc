#include "core/mmap.h"

#include "core/log.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

namespace qwen35::core {

namespace {

// MemAvailable from /proc/meminfo in bytes; SIZE_MAX when it cannot be read.
size_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  size_t kb = 0;
  while (in >> key >> kb) {
    if (key == "MemAvailable:") return kb << 10;
    std::getline(in, unit);
  }
  return SIZE_MAX;
}

}  // namespace

Result<std::shared_ptr<MappedFile>> MappedFile::open(const std::string& path, LoadMode mode) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return error("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return error("cannot stat '" + path + "': " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return error("'" + path + "' is not a regular file");
  }
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = size_t(st.st_size);
  if (f->size_ == 0) {
    ::close(fd);
    return f;
  }
  // The copy must leave room for the rest (other shards, caches, activations): with less than an
  // eighth of its size plus 512 MiB to spare, the file is mapped instead, where the kernel can
  // drop and re-read its pages under pressure rather than fail.
  const size_t avail = available_memory();
  if (mode == LoadMode::kAnonymous && f->size_ + f->size_ / 8 + (size_t(512) << 20) > avail) {
    QWEN35_LOG_WARN("'%s' (%zu MB) does not fit the available memory (%zu MB) with room to spare; mapping it from "
                    "the file instead of copying it",
                    path.c_str(), f->size_ >> 20, avail >> 20);
    mode = LoadMode::kMmap;
  }
  if (mode == LoadMode::kAnonymous) {
    // Reserve 2 MiB more than needed so the copy can start on a 2 MiB boundary and be backed by
    // transparent huge pages: streaming the weights every token then walks 512x fewer page-table
    // entries (measured +5-15 % read bandwidth on 2 cores). The slack is unmapped again.
    constexpr size_t kHuge = size_t(2) << 20;
    const size_t reserve = f->size_ + kHuge;
    void* raw = mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
      ::close(fd);
      return error("cannot allocate " + std::to_string(f->size_) + " bytes for '" + path + "'");
    }
    auto* base = static_cast<uint8_t*>(raw);
    auto* p = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(base) + kHuge - 1) & ~(kHuge - 1));
    if (p > base) munmap(base, size_t(p - base));
    const size_t tail = size_t(base + reserve - (p + f->size_));
    if (tail > 0) munmap(p + f->size_, tail);
    madvise(p, f->size_, MADV_HUGEPAGE);  // advisory: ignored where THP is off
    size_t done = 0;
    while (done < f->size_) {
      ssize_t r = pread(fd, p + done, f->size_ - done, off_t(done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        int e = errno;
        munmap(p, f->size_);
        ::close(fd);
        return error("cannot read '" + path + "': " + (r == 0 ? "short read" : std::strerror(e)));
      }
      done += size_t(r);
    }
    mprotect(p, f->size_, PROT_READ);
    f->data_ = p;
    f->anonymous_ = true;
  } else {
    int flags = MAP_PRIVATE | (mode == LoadMode::kMmapPopulate ? MAP_POPULATE : 0);
    void* p = mmap(nullptr, f->size_, PROT_READ, flags, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return error("cannot mmap '" + path + "': " + std::strerror(e));
    }
    if (mode == LoadMode::kMmapPopulate) madvise(p, f->size_, MADV_WILLNEED);
    f->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

void MappedFile::drop_pages() const {
  // Read-only and private: the pages are never written, so dropping them loses nothing.
  if (data_ != nullptr && !anonymous_) madvise(const_cast<uint8_t*>(data_), size_, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), size_);
}

Result<std::string> read_text_file(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return error("cannot open '" + path + "': " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return error("'" + path + "' is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return error("cannot open '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return error("cannot read '" + path + "'");
  return ss.str();
}

}  // namespace qwen35::core
