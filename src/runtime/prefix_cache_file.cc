// PrefixCache::save / load (prefix_cache.h): the snapshot files of serve --cache-dir.
//
// A file, little-endian: the magic "Q35PCv2\0"; u64 fingerprint, kv (the pool's K and V formats
// and the rotation's seed: kv_tag below), n_tokens (a multiple of kKvBlock), n_attention_layers,
// stride (bytes of K then V of one block and layer), n_recurrent; then the i32 token ids; for
// each block, for each attention layer, its K then V bytes; the f32 recurrent state; and an
// FNV-1a 64-bit checksum of everything before it. Each file holds the whole KV prefix of its
// snapshot, so nested snapshots repeat the KV they share. It is named <key>-<FNV-1a of its token
// ids>.q35pc (16 hex digits each; key: the fingerprint mixed with kv's formats, so pools of
// other KV types keep their own files side by side; an fp32 pool's key is the fingerprint), so a prefix keeps its name from one save to the next and
// its new file replaces its old one in one rename; while being written it is <name>.tmp, which
// load() never reads.
//
// Loading: a path that is not a regular file is never opened (a FIFO or a device could block
// or never end); the header is checked against this process's model and pool (a file of another
// KV type is skipped, its warning naming both types), the file's size and the cache's bounds
// before anything else is read, so a file claiming a huge size costs its first 56 bytes; then
// the token ids, each KV block straight into a pool block, and the recurrent state are read in
// file order into their destinations while the checksum is computed. No buffer holds the file:
// memory beyond the destinations is O(1).
//
// Saving: write <name>.tmp, fsync it, rename it to <name>, and after every snapshot is in
// place fsync the directory (so the renames outlive a power cut) and only then remove the
// key's other files. At every instant each prefix has its old file or its new one.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/check.h"
#include "runtime/prefix_cache.h"

namespace qwen35::runtime {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'Q', '3', '5', 'P', 'C', 'v', '2', '\0'};
constexpr int64_t kBlock = kernels::kKvBlock;
constexpr uint64_t kFnvBasis = 1469598103934665603ull;
constexpr uint64_t kMaxTokens = uint64_t(1) << 24;  // no context is longer
constexpr char kExt[] = ".q35pc";
constexpr char kTmp[] = ".tmp";

// The header after the magic (six u64, no padding).
struct Header {
  uint64_t fingerprint, kv, n_tokens, n_layers, stride, recurrent;
};
static_assert(sizeof(Header) == 48);
constexpr uint64_t kHeaderBytes = 8 + sizeof(Header);

uint64_t fnv(const void* data, size_t n, uint64_t h = kFnvBasis) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

std::string hex16(uint64_t v) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", (unsigned long long)v);
  return s;
}

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

// The name prefix of a pool's files: the fingerprint mixed with its KV formats (an fp32 pool's
// formats are 0: its files keep the fingerprint's name).
std::string file_key(uint64_t fingerprint, const model::KvPool& pool) {
  const uint64_t formats = PrefixCache::kv_tag(pool) & 0xffffffffull;
  return hex16(fingerprint ^ (formats * 0x9e3779b97f4a7c15ull)) + "-";
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

// Reads a file in order, exactly the bytes asked for, into the caller's memory, hashing them.
class FileIn {
 public:
  ~FileIn() {
    if (fd_ >= 0) ::close(fd_);
  }
  // "" when `path` is a regular file, now open. It is stat()ed first, so a FIFO or a device is
  // never opened; O_NONBLOCK keeps one swapped in after the stat from blocking the open, and
  // fstat() then rejects it.
  std::string open(const std::string& path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return "cannot stat (" + errno_text() + ")";
    if (!S_ISREG(st.st_mode)) return "not a regular file";
    fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd_ < 0) return "cannot open (" + errno_text() + ")";
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) return "not a regular file";
    size_ = uint64_t(st.st_size);
    return "";
  }
  uint64_t size() const { return size_; }
  bool read(void* dst, size_t n) {
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
  // Reads the trailing checksum: whether it is the hash of everything read before it.
  bool checksum_matches() {
    const uint64_t want = hash_;
    uint64_t sum = 0;
    return read(&sum, 8) && sum == want;
  }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  uint64_t hash_ = kFnvBasis;
};

// Reads and checks a header: the magic, every field against `want` (this model; its n_tokens
// is not compared), then the size the fields imply against the file's. "" and *n_tokens when
// the file is one of this model's.
std::string read_header(FileIn& in, const Header& want, uint64_t* n_tokens) {
  if (in.size() < kHeaderBytes + 8) return "not a snapshot file (size)";
  char magic[8];
  Header h;
  if (!in.read(magic, 8) || !in.read(&h, sizeof h)) return "unreadable";
  if (std::memcmp(magic, kMagic, 6) == 0 && std::memcmp(magic, kMagic, 8) != 0)
    return "a snapshot file of another version";
  if (std::memcmp(magic, kMagic, 8) != 0) return "not a snapshot file (magic)";
  if (h.fingerprint != want.fingerprint) return "made by another checkpoint or mode";
  if (h.kv != want.kv)
    return "KV cache of type " + kv_tag_name(h.kv) + ", not this pool's " + kv_tag_name(want.kv);
  if (h.n_tokens == 0 || h.n_tokens % kBlock != 0 || h.n_tokens > kMaxTokens ||
      h.n_layers != want.n_layers || h.stride != want.stride || h.recurrent != want.recurrent)
    return "geometry does not match this model";
  // No overflow: every factor is this model's or at most kMaxTokens.
  const uint64_t n_blocks = h.n_tokens / kBlock;
  const uint64_t size = kHeaderBytes + h.n_tokens * 4 + n_blocks * h.n_layers * h.stride +
                        h.recurrent * 4 + 8;
  if (size != in.size()) return "truncated or padded";
  *n_tokens = h.n_tokens;
  return "";
}

// Writes one snapshot file at `path` (a temporary name) and fsyncs it; "" or why not.
std::string write_file(const std::string& path, const model::KvPool& pool, uint64_t fingerprint,
                       std::span<const int32_t> tokens, std::span<const int32_t> blocks,
                       std::span<const float> snapshot) {
  FileOut f(path);
  f.put(kMagic, 8);
  f.u64(fingerprint);
  f.u64(PrefixCache::kv_tag(pool));
  f.u64(tokens.size());
  f.u64(uint64_t(pool.n_layers()));
  f.u64(uint64_t(pool.k_block_bytes() + pool.v_block_bytes()));
  f.u64(snapshot.size());
  f.put(tokens.data(), tokens.size() * 4);
  for (int32_t b : blocks)
    for (int64_t l = 0; l < pool.n_layers(); ++l) {
      f.put(pool.k(l, b), pool.k_block_bytes());
      f.put(pool.v(l, b), pool.v_block_bytes());
    }
  f.put(snapshot.data(), snapshot.size() * 4);
  return f.finish();
}

// fsyncs a directory: the renames and removals in it survive a power cut. A filesystem that
// cannot sync directories (EINVAL) has no more to offer, and that is not an error.
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

// save()'s last step: removes the files named `prefix`* (this fingerprint's snapshots and
// temporaries) that are not in `keep`, the files this save wrote.
core::Status remove_stale(const std::string& dir, const std::string& prefix,
                          const std::set<std::string>& keep, const PrefixCache::SaveHook& hook) {
  std::error_code ec;
  std::vector<fs::path> stale;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) == 0 && !keep.count(name) &&
        (ends_with(name, kExt) || ends_with(name, std::string(kExt) + kTmp)))
      stale.push_back(it->path());
  }
  if (ec) return core::error("[prefix cache] cannot list '" + dir + "': " + ec.message());
  core::Status st;
  for (const auto& p : stale) {
    if (hook) hook(PrefixCache::SaveStep::kRemoving, p.string());
    if (!fs::remove(p, ec) && ec && st.ok())
      st = core::error("[prefix cache] cannot remove '" + p.string() + "': " + ec.message());
    if (hook) hook(PrefixCache::SaveStep::kRemoved, p.string());
  }
  return st;
}

}  // namespace

// Byte 0 K's type, byte 1 whether K is rotated, bytes 2 and 3 V's, bytes 4..7 the rotation's
// seed folded to 32 bits (rows rotated with other signs are another format).
uint64_t PrefixCache::kv_tag(const model::KvPool& pool) {
  const auto& k = pool.k_format();
  const auto& v = pool.v_format();
  const uint64_t seed = kernels::kKvRotationSeed;
  return uint64_t(k.type) | uint64_t(k.rotated) << 8 | uint64_t(v.type) << 16 |
         uint64_t(v.rotated) << 24 | ((seed ^ (seed >> 32)) & 0xffffffffull) << 32;
}

core::Status PrefixCache::save(const std::string& dir, uint64_t fingerprint,
                               const SaveHook& hook) const {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return core::error("[prefix cache] cannot create '" + dir + "': " + ec.message());
  const auto step = [&](SaveStep s, const std::string& path) {
    if (hook) hook(s, path);
  };
  // Every name starts with the key: another checkpoint's (or KV type's) files never match
  // `prefix`.
  const std::string prefix = file_key(fingerprint, *pool_);
  std::set<std::string> written;
  std::vector<const Node*> stack = {root_.get()};
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    for (const auto& c : node->children) stack.push_back(c.get());
    if (!node->has_snapshot || node->provisional) continue;  // provisional ones are not kept
    std::vector<int32_t> tokens(size_t(node->depth * kBlock)), blocks(size_t(node->depth));
    for (const Node* p = node; p != root_.get(); p = p->parent) {
      blocks[size_t(p->depth - 1)] = p->block;
      std::copy(p->key.begin(), p->key.end(), tokens.begin() + (p->depth - 1) * kBlock);
    }
    // Two prefixes whose hashes collide would share a name, the later written winning: one
    // snapshot lost, never a wrong one (a file carries its tokens).
    const std::string name = prefix + hex16(fnv(tokens.data(), tokens.size() * 4)) + kExt;
    const std::string path = dir + "/" + name, tmp = path + kTmp;
    written.insert(name);
    step(SaveStep::kWriting, tmp);
    if (std::string why = write_file(tmp, *pool_, fingerprint, tokens, blocks, node->snapshot);
        !why.empty()) {
      ::unlink(tmp.c_str());
      return core::error("[prefix cache] cannot write '" + tmp + "': " + why);
    }
    step(SaveStep::kWritten, tmp);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const std::string why = errno_text();
      ::unlink(tmp.c_str());
      return core::error("[prefix cache] cannot rename '" + tmp + "': " + why);
    }
    step(SaveStep::kRenamed, path);
  }
  // A failure above returns before anything is removed: the old files stay.
  QWEN35_RETURN_IF_ERROR(sync_dir(dir));
  QWEN35_RETURN_IF_ERROR(remove_stale(dir, prefix, written, hook));
  return sync_dir(dir);
}

std::string PrefixCache::load_file(const std::string& path, uint64_t fingerprint,
                                   uint64_t recurrent_floats) {
  FileIn in;
  if (std::string why = in.open(path); !why.empty()) return why;
  const Header want{fingerprint,
                    PrefixCache::kv_tag(*pool_),
                    0,
                    uint64_t(pool_->n_layers()),
                    uint64_t(pool_->k_block_bytes() + pool_->v_block_bytes()),
                    recurrent_floats};
  uint64_t n_tokens = 0;
  if (std::string why = read_header(in, want, &n_tokens); !why.empty()) return why;
  // The bounds before the body: a header that fits its file but not the cache or the pool
  // costs nothing more. Room is made by eviction only when the pool is full, and before the
  // checksum is known: a damaged file can then cost an entry, never put a wrong one in.
  const int64_t n_blocks = int64_t(n_tokens) / kBlock;
  if (recurrent_floats * 4 + size_t(n_blocks) * pool_->block_bytes() > max_bytes_)
    return "over --cache-mb";
  if (n_blocks > pool_->n_blocks()) return "larger than the KV pool";
  if (!free_blocks(n_blocks)) return "the KV pool is full";
  // Allocated before any block is taken: a failed allocation holds no block.
  std::vector<int32_t> tokens(static_cast<size_t>(n_tokens)), blocks;
  std::vector<float> snapshot(static_cast<size_t>(recurrent_floats));
  blocks.reserve(size_t(n_blocks));
  bool ok = in.read(tokens.data(), tokens.size() * 4);
  for (int64_t d = 0; ok && d < n_blocks; ++d) {
    const int32_t b = pool_->allocate();
    QWEN35_CHECK(b >= 0);  // free_blocks(n_blocks) above
    blocks.push_back(b);
    for (int64_t l = 0; ok && l < pool_->n_layers(); ++l)
      ok = in.read(pool_->k(l, b), pool_->k_block_bytes()) &&
           in.read(pool_->v(l, b), pool_->v_block_bytes());
  }
  ok = ok && in.read(snapshot.data(), snapshot.size() * 4);
  if (!ok || !in.checksum_matches()) {
    for (int32_t b : blocks) pool_->release(b);
    return ok ? "checksum mismatch" : "unreadable (shorter than its size said)";
  }
  return insert_blocks(tokens, blocks, std::move(snapshot)) ? "" : "over --cache-mb";
}

int64_t PrefixCache::load(const std::string& dir, uint64_t fingerprint, int64_t recurrent_floats,
                          std::vector<std::string>* warnings) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return 0;
  int64_t loaded = 0;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const fs::path& path = it->path();
    if (path.extension() != kExt) continue;  // save()'s temporaries end in .tmp
    std::string why;
    try {
      why = load_file(path.string(), fingerprint, uint64_t(recurrent_floats));
    } catch (const std::exception& e) {  // a file is never fatal, even one that exhausts memory
      why = std::string("failed (") + e.what() + ")";
    }
    if (why.empty())
      ++loaded;
    else
      warnings->push_back(path.string() + ": " + why + "; skipped");
  }
  if (ec) warnings->push_back(dir + ": cannot list (" + ec.message() + "); the rest skipped");
  return loaded;
}

}  // namespace qwen35::runtime
