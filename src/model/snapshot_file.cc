#include "model/snapshot_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

namespace qwen35::model::snapshot_file {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'Q', '3', '5', 'P', 'C', 'v', '2', '\0'};
constexpr int64_t kBlock = kernels::kKvBlock;
constexpr uint64_t kMaxTokens = uint64_t(1) << 24;  // no context is longer

// The header after the magic (six u64, no padding).
struct Header {
  uint64_t fingerprint, kv, n_tokens, n_layers, stride, recurrent;
};
static_assert(sizeof(Header) == 48);
constexpr uint64_t kHeaderBytes = 8 + sizeof(Header);

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string errno_text() { return std::strerror(errno); }

// What a tag names ("q8_0,turbo4 (rotated K, V)"), for the warning of a file of another type.
std::string kv_tag_name(uint64_t tag) {
  const auto type = [](uint64_t b) -> std::string {
    return b < std::size(kernels::kAllKvTypes)
               ? std::string(kernels::kv_type_name(kernels::KvType(b)))
               : "type " + std::to_string(b);
  };
  std::string s = type(tag & 0xff) + "," + type(tag >> 16 & 0xff);
  if (tag >> 8 & 1) s += " (K rotated)";
  if (tag >> 24 & 1) s += " (V rotated)";
  return s;
}

// Writes a new file through a small buffer, hashing what it writes. The first error sticks and
// finish() reports it.
class FileOut {
 public:
  explicit FileOut(const std::string& path)
      : fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644)) {
    if (fd_ < 0) error_ = errno_text();
  }
  ~FileOut() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileOut(const FileOut&) = delete;
  FileOut& operator=(const FileOut&) = delete;

  void put(const void* p, size_t n) {
    hash_ = fnv(p, n, hash_);
    if (buf_.size() + n > kBuffer) flush();
    if (n >= kBuffer) {
      write_all(p, n);
    } else {
      const char* c = static_cast<const char*>(p);
      buf_.insert(buf_.end(), c, c + n);
    }
  }
  void u64(uint64_t v) { put(&v, 8); }
  // Appends the checksum and fsyncs: "" once the whole file is on disk, else why not.
  std::string finish() {
    const uint64_t sum = hash_;
    put(&sum, 8);
    flush();
    if (error_.empty() && ::fsync(fd_) != 0) error_ = errno_text();
    if (fd_ >= 0 && ::close(fd_) != 0 && error_.empty()) error_ = errno_text();
    fd_ = -1;
    return error_;
  }

 private:
  static constexpr size_t kBuffer = size_t(1) << 16;
  void flush() {
    write_all(buf_.data(), buf_.size());
    buf_.clear();
  }
  void write_all(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0 && error_.empty()) {
      const ssize_t w = ::write(fd_, c, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        error_ = w < 0 ? errno_text() : "nothing written";
        return;
      }
      c += w;
      n -= size_t(w);
    }
  }
  int fd_;
  std::string error_;
  std::vector<char> buf_;
  uint64_t hash_ = kFnvBasis;
};

}  // namespace

uint64_t fnv(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

std::string hex16(uint64_t v) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", (unsigned long long)v);
  return s;
}

uint64_t kv_tag(const KvPool& pool) {
  const auto& k = pool.k_format();
  const auto& v = pool.v_format();
  const uint64_t seed = kernels::kKvRotationSeed;
  return uint64_t(k.type) | uint64_t(k.rotated) << 8 | uint64_t(v.type) << 16 |
         uint64_t(v.rotated) << 24 | ((seed ^ (seed >> 32)) & 0xffffffffull) << 32;
}

// An fp32 pool's formats are 0: its files keep the fingerprint's name.
std::string key_prefix(uint64_t fingerprint, const KvPool& pool) {
  const uint64_t formats = kv_tag(pool) & 0xffffffffull;
  return hex16(fingerprint ^ (formats * 0x9e3779b97f4a7c15ull)) + "-";
}

std::string file_name(uint64_t fingerprint, const KvPool& pool, uint64_t tokens_hash) {
  return key_prefix(fingerprint, pool) + hex16(tokens_hash) + kExt;
}

uint64_t Part::recurrent_floats() const {
  uint64_t n = 0;
  for (const auto& r : recurrent) n += uint64_t(r.second);
  return n;
}

Part whole(const KvPool& pool, uint64_t recurrent_floats) {
  Part p{0, pool.n_layers(), {}};
  if (recurrent_floats > 0) p.recurrent.push_back({0, int64_t(recurrent_floats)});
  return p;
}

// Layers are numbered in order within each kind: the attention layers of [first, end) are one
// run of the pool's, and their conv and recurrent states one run of each array.
Part layers_part(const ModelConfig& c, const SequenceState& st, const KvPool& pool, int64_t first,
                 int64_t end, bool head) {
  Part p;
  int64_t lin_first = -1, n_lin = 0, n_lin_all = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const bool full = c.layers[size_t(l)] == LayerKind::kFullAttention;
    if (full && l < first) ++p.kv_first;
    if (full && l < end) ++p.kv_end;
    if (!full) ++n_lin_all;
    if (!full && l >= first && l < end) {
      if (lin_first < 0) lin_first = l;
      ++n_lin;
    }
  }
  if (head && pool.mtp()) p.kv_end = pool.n_layers();  // the MTP head's layer is the pool's last
  if (n_lin > 0) {
    // Every linear layer's conv (recurrent) state has one size: the first linear layer's
    // recurrent state starts after every conv state, and the MTP row after every recurrent state.
    int64_t l0 = 0;
    while (c.layers[size_t(l0)] == LayerKind::kFullAttention) ++l0;
    const int64_t conv = st.delta_offset(l0) / n_lin_all;
    const int64_t delta = (st.mtp_offset() - st.delta_offset(l0)) / n_lin_all;
    p.recurrent.push_back({st.conv_offset(lin_first), n_lin * conv});
    p.recurrent.push_back({st.delta_offset(lin_first), n_lin * delta});
  }
  const int64_t mtp_row = int64_t(st.recurrent_bytes() / 4) - st.mtp_offset();
  if (head && mtp_row > 0) p.recurrent.push_back({st.mtp_offset(), mtp_row});
  return p;
}

std::string write(const std::string& path, const KvPool& pool, const Part& part,
                  uint64_t fingerprint, std::span<const int32_t> tokens,
                  std::span<const int32_t> blocks, std::span<const float> recurrent) {
  for (const auto& [at, n] : part.recurrent)
    if (at < 0 || n < 0 || size_t(at + n) > recurrent.size())
      return "the part lies beyond the snapshot";
  FileOut f(path);
  f.put(kMagic, 8);
  f.u64(fingerprint);
  f.u64(kv_tag(pool));
  f.u64(tokens.size());
  f.u64(uint64_t(part.kv_end - part.kv_first));
  f.u64(uint64_t(pool.k_block_bytes() + pool.v_block_bytes()));
  f.u64(part.recurrent_floats());
  f.put(tokens.data(), tokens.size() * 4);
  pool.mirror().host_read();
  for (int32_t b : blocks)
    for (int64_t l = part.kv_first; l < part.kv_end; ++l) {
      f.put(pool.k(l, b), pool.k_block_bytes());
      f.put(pool.v(l, b), pool.v_block_bytes());
    }
  for (const auto& [at, n] : part.recurrent) f.put(recurrent.data() + at, size_t(n) * 4);
  return f.finish();
}

Reader::~Reader() {
  if (fd_ >= 0) ::close(fd_);
}

bool Reader::read(void* dst, size_t n) {
  char* c = static_cast<char*>(dst);
  for (size_t left = n; left > 0;) {
    const ssize_t r = ::read(fd_, c, left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    left -= size_t(r);
  }
  hash_ = fnv(dst, n, hash_);
  return true;
}

// The path is stat()ed first, so a FIFO or a device is never opened; O_NONBLOCK keeps one
// swapped in after the stat from blocking the open, and fstat() then rejects it. The header's
// fields are checked against this model (its n_tokens only for its bounds), then the size they
// imply against the file's: a file claiming a huge size costs its first 56 bytes.
std::string Reader::open(const std::string& path, const KvPool& pool, const Part& part,
                         uint64_t fingerprint) {
  part_ = part;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "cannot stat (" + errno_text() + ")";
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd_ < 0) return "cannot open (" + errno_text() + ")";
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) return "not a regular file";
  size_ = uint64_t(st.st_size);
  if (size_ < kHeaderBytes + 8) return "not a snapshot file (size)";
  char magic[8];
  Header h;
  if (!read(magic, 8) || !read(&h, sizeof h)) return "unreadable";
  if (std::memcmp(magic, kMagic, 6) == 0 && std::memcmp(magic, kMagic, 8) != 0)
    return "a snapshot file of another version";
  if (std::memcmp(magic, kMagic, 8) != 0) return "not a snapshot file (magic)";
  if (h.fingerprint != fingerprint) return "made by another checkpoint or mode";
  if (h.kv != kv_tag(pool))
    return "KV cache of type " + kv_tag_name(h.kv) + ", not this pool's " +
           kv_tag_name(kv_tag(pool));
  if (h.n_tokens == 0 || h.n_tokens % kBlock != 0 || h.n_tokens > kMaxTokens ||
      h.n_layers != uint64_t(part.kv_end - part.kv_first) ||
      h.stride != pool.k_block_bytes() + pool.v_block_bytes() ||
      h.recurrent != part.recurrent_floats())
    return "geometry does not match this model";
  // No overflow: every factor is this model's or at most kMaxTokens.
  const uint64_t n_blocks = h.n_tokens / kBlock;
  const uint64_t size =
      kHeaderBytes + h.n_tokens * 4 + n_blocks * h.n_layers * h.stride + h.recurrent * 4 + 8;
  if (size != size_) return "truncated or padded";
  n_tokens_ = h.n_tokens;
  return "";
}

bool Reader::read_block(const KvPool& pool, int32_t block) {
  // A block's bytes written on the host: the device's twin is current elsewhere (pulled first)
  // and stale from here on.
  if (block >= 0) pool.mirror().host_read();
  struct Wrote {
    const KvPool& pool;
    bool on;
    ~Wrote() {
      if (on) pool.mirror().host_wrote();
    }
  } wrote{pool, block >= 0};
  for (int64_t l = part_.kv_first; l < part_.kv_end; ++l) {
    if (block >= 0) {
      if (!read(pool.k(l, block), pool.k_block_bytes()) ||
          !read(pool.v(l, block), pool.v_block_bytes()))
        return false;
      continue;
    }
    scratch_.resize(std::max(pool.k_block_bytes(), pool.v_block_bytes()));
    if (!read(scratch_.data(), pool.k_block_bytes()) ||
        !read(scratch_.data(), pool.v_block_bytes()))
      return false;
  }
  return true;
}

bool Reader::read_recurrent(std::span<float> dst) {
  for (const auto& [at, n] : part_.recurrent)
    if (at < 0 || n < 0 || size_t(at + n) > dst.size() || !read(dst.data() + at, size_t(n) * 4))
      return false;
  return true;
}

bool Reader::checksum_matches() {
  const uint64_t want = hash_;
  uint64_t sum = 0;
  return read(&sum, 8) && sum == want;
}

core::Status sync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return core::error("[prefix cache] cannot open '" + dir + "': " + errno_text());
  const int r = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (r != 0 && err != EINVAL)
    return core::error("[prefix cache] cannot sync '" + dir + "': " + std::strerror(err));
  return core::Status();
}

core::Result<std::vector<std::string>> stale_files(const std::string& dir,
                                                   const std::string& prefix,
                                                   const std::vector<std::string>& keep) {
  const std::set<std::string> kept(keep.begin(), keep.end());
  std::error_code ec;
  std::vector<std::string> stale;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) == 0 && !kept.count(name) &&
        (ends_with(name, kExt) || ends_with(name, std::string(kExt) + kTmp)))
      stale.push_back(it->path().string());
  }
  if (ec) return core::error("[prefix cache] cannot list '" + dir + "': " + ec.message());
  return stale;
}

}  // namespace qwen35::model::snapshot_file
