// PrefixCache::save / load (prefix_cache.h): the snapshot files of serve --cache-dir.
//
// A file, little-endian: the magic "Q35PCv1\0"; u64 fingerprint, n_tokens (a multiple of
// kKvBlock), n_attention_layers, block_floats (K or V of one block and layer), n_recurrent; then
// the i32 token ids; for each block, for each attention layer, its K then V floats; the f32
// recurrent state; and an FNV-1a 64-bit checksum of everything before it. load() checks every
// field against this process's model and the file's length before reading anything else. Each
// file holds the whole KV prefix of its snapshot, so nested snapshots repeat the KV they share.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/prefix_cache.h"

namespace qwen35::runtime {
namespace {

constexpr char kMagic[8] = {'Q', '3', '5', 'P', 'C', 'v', '1', '\0'};
constexpr int64_t kBlock = kernels::kKvBlock;

uint64_t fnv(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Streams to a file, hashing what it writes.
class Writer {
 public:
  explicit Writer(const std::string& path) : f_(path, std::ios::binary) {}
  void put(const void* p, size_t n) {
    f_.write(static_cast<const char*>(p), std::streamsize(n));
    hash_ = fnv(p, n, hash_);
  }
  void u64(uint64_t v) { put(&v, 8); }
  bool finish() {
    const uint64_t h = hash_;
    f_.write(reinterpret_cast<const char*>(&h), 8);
    f_.close();
    return bool(f_);
  }

 private:
  std::ofstream f_;
  uint64_t hash_ = 1469598103934665603ull;
};

}  // namespace

core::Status PrefixCache::save(const std::string& dir, uint64_t fingerprint) const {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return core::error("[prefix cache] cannot create '" + dir + "': " + ec.message());
  // Files are named by fingerprint: another checkpoint's (sharing the directory) stay.
  char prefix[24];
  std::snprintf(prefix, sizeof prefix, "%016llx-", (unsigned long long)fingerprint);
  std::vector<fs::path> old;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".q35pc" && e.path().filename().string().rfind(prefix, 0) == 0)
      old.push_back(e.path());
  for (const auto& f : old) fs::remove(f, ec);
  std::vector<const Node*> stack = {root_.get()};
  int n = 0;
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    for (const auto& c : node->children) stack.push_back(c.get());
    if (node->snapshot.empty()) continue;
    std::vector<const Node*> path;
    for (const Node* p = node; p != root_.get(); p = p->parent) path.insert(path.begin(), p);
    const int64_t stride = pool_->block_floats();
    const std::string path_name = dir + "/" + prefix + std::to_string(n++) + ".q35pc";
    Writer w(path_name);
    w.put(kMagic, 8);
    w.u64(fingerprint);
    w.u64(uint64_t(node->depth * kBlock));
    w.u64(uint64_t(pool_->n_layers()));
    w.u64(uint64_t(stride));
    w.u64(node->snapshot.size());
    for (const Node* p : path) w.put(p->key.data(), p->key.size() * 4);
    for (const Node* p : path)
      for (int64_t l = 0; l < pool_->n_layers(); ++l) {
        w.put(pool_->k(l, p->block), size_t(stride) * 4);
        w.put(pool_->v(l, p->block), size_t(stride) * 4);
      }
    w.put(node->snapshot.data(), node->snapshot.size() * 4);
    if (!w.finish()) return core::error("[prefix cache] cannot write '" + path_name + "'");
  }
  return core::Status();
}

namespace {

// What this process's model expects of a file.
struct Geometry {
  uint64_t fingerprint, n_layers, stride, recurrent;
};

// Reads one snapshot file into *b when its header matches `g` and its length and checksum are
// right; otherwise says why not. The header is checked before the body is read, so a file of
// another model or of the wrong length costs no more than its first bytes.
std::string read_snapshot(const std::filesystem::path& path, const Geometry& g,
                          std::vector<char>* b, uint64_t* n_tokens) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || size < 56) return "not a snapshot file (size)";
  std::ifstream f(path, std::ios::binary);
  char head[48];
  if (!f.read(head, sizeof head)) return "unreadable";
  if (std::memcmp(head, kMagic, 8) != 0) return "not a snapshot file (magic)";
  uint64_t h[5];
  std::memcpy(h, head + 8, sizeof h);
  if (h[0] != g.fingerprint) return "made by another checkpoint or mode";
  *n_tokens = h[1];
  if (h[1] == 0 || h[1] % kBlock != 0 || h[1] > (uint64_t(1) << 24) || h[2] != g.n_layers ||
      h[3] != g.stride || h[4] != g.recurrent)
    return "geometry does not match this model";
  const uint64_t n_blocks = h[1] / kBlock;
  const uint64_t want = 48 + h[1] * 4 + n_blocks * h[2] * 2 * h[3] * 4 + h[4] * 4 + 8;
  if (want != size) return "truncated or padded";
  b->resize(static_cast<size_t>(size));
  std::memcpy(b->data(), head, sizeof head);
  if (!f.read(b->data() + 48, std::streamsize(size - 48))) return "unreadable";
  uint64_t sum;
  std::memcpy(&sum, b->data() + b->size() - 8, 8);
  if (fnv(b->data(), b->size() - 8) != sum) return "checksum mismatch";
  return "";
}

}  // namespace

std::string PrefixCache::restore(const std::vector<char>& b, uint64_t n_tokens) {
  const int64_t stride = pool_->block_floats();
  const uint64_t n_blocks = n_tokens / kBlock;
  std::vector<int32_t> tokens(static_cast<size_t>(n_tokens));
  const char* p = b.data() + 48;
  std::memcpy(tokens.data(), p, tokens.size() * 4);
  p += tokens.size() * 4;
  std::vector<int32_t> blocks;
  for (uint64_t d = 0; d < n_blocks; ++d) {
    int32_t blk = pool_->allocate();
    if (blk < 0 && free_blocks(1)) blk = pool_->allocate();
    if (blk < 0) break;
    blocks.push_back(blk);
    for (int64_t l = 0; l < pool_->n_layers(); ++l) {
      std::memcpy(pool_->k(l, blk), p, size_t(stride) * 4);
      p += stride * 4;
      std::memcpy(pool_->v(l, blk), p, size_t(stride) * 4);
      p += stride * 4;
    }
  }
  if (blocks.size() != n_blocks) {
    for (int32_t blk : blocks) pool_->release(blk);
    return "the KV pool is full";
  }
  const size_t n_snap = (b.size() - 8 - size_t(p - b.data())) / 4;
  std::vector<float> snap(n_snap);
  std::memcpy(snap.data(), p, snap.size() * 4);
  return insert_blocks(tokens, blocks, std::move(snap)) ? "" : "over --cache-mb";
}

int64_t PrefixCache::load(const std::string& dir, uint64_t fingerprint, int64_t recurrent_floats,
                          std::vector<std::string>* warnings) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int64_t loaded = 0;
  if (!fs::is_directory(dir, ec)) return 0;
  const Geometry g{fingerprint, uint64_t(pool_->n_layers()), uint64_t(pool_->block_floats()),
                   uint64_t(recurrent_floats)};
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".q35pc") continue;
    std::vector<char> b;
    uint64_t n_tokens = 0;
    std::string why = read_snapshot(e.path(), g, &b, &n_tokens);
    if (why.empty()) why = restore(b, n_tokens);
    if (why.empty())
      ++loaded;
    else
      warnings->push_back(e.path().string() + ": " + why + "; skipped");
  }
  return loaded;
}

}  // namespace qwen35::runtime
