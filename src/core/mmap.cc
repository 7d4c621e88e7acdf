#include "core/mmap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace qwen35::core {

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
  if (mode == LoadMode::kAnonymous) {
    void* p = mmap(nullptr, f->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return error("cannot allocate " + std::to_string(f->size_) + " bytes for '" + path + "'");
    }
    size_t done = 0;
    while (done < f->size_) {
      ssize_t r = pread(fd, static_cast<uint8_t*>(p) + done, f->size_ - done, off_t(done));
      if (r <= 0) {
        int e = errno;
        munmap(p, f->size_);
        ::close(fd);
        return error("cannot read '" + path + "': " + (r == 0 ? "short read" : std::strerror(e)));
      }
      done += size_t(r);
    }
    mprotect(p, f->size_, PROT_READ);
    f->data_ = static_cast<const uint8_t*>(p);
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
