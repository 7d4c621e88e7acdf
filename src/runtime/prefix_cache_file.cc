// PrefixCache::save / load (prefix_cache.h): the snapshot files of serve --cache-dir, in the
// format of model/snapshot_file.h. A prefix keeps its file's name from one save to the next, so
// its new file replaces its old one in one rename.
//
// Loading: the header is checked against this process's model and pool (a file of another KV
// type is skipped, its warning naming both types), the file's size and the cache's bounds before
// anything else is read; then the token ids, each KV block straight into a pool block, and the
// recurrent state are read in file order into their destinations while the checksum is
// computed. Memory beyond the destinations is O(1).
//
// Saving: write <name>.tmp, fsync it, rename it to <name>, and after every snapshot is in
// place fsync the directory (so the renames outlive a power cut) and only then remove the
// key's other files. At every instant each prefix has its old file or its new one.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "core/check.h"
#include "model/snapshot_file.h"
#include "runtime/prefix_cache.h"

namespace qwen35::runtime {
namespace {

namespace fs = std::filesystem;
namespace sf = model::snapshot_file;

constexpr int64_t kBlock = kernels::kKvBlock;

}  // namespace

uint64_t PrefixCache::kv_tag(const model::KvPool& pool) { return sf::kv_tag(pool); }

uint64_t PrefixCache::tokens_hash(std::span<const int32_t> tokens) { return sf::fnv(tokens.data(), tokens.size() * 4); }

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
  const std::string prefix = sf::key_prefix(fingerprint, *pool_);
  std::vector<std::string> written;
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
    const std::string name = sf::file_name(fingerprint, *pool_, tokens_hash(tokens));
    const std::string path = dir + "/" + name, tmp = path + sf::kTmp;
    written.push_back(name);
    step(SaveStep::kWriting, tmp);
    std::vector<float> pulled;  // a device snapshot's bytes
    std::span<const float> snapshot = node->snapshot;
    if (node->on_device) {
      pulled.resize(node->floats);
      if (core::Status st = read_snapshot(node, pulled.data()); !st.ok())
        return core::error("[prefix cache] cannot read the snapshot for '" + tmp + "': " + st.message());
      snapshot = pulled;
    }
    const sf::Part part = part_ ? *part_ : sf::whole(*pool_, snapshot.size());
    if (std::string why = sf::write(tmp, *pool_, part, fingerprint, tokens, blocks, snapshot);
        !why.empty()) {
      ::unlink(tmp.c_str());
      return core::error("[prefix cache] cannot write '" + tmp + "': " + why);
    }
    step(SaveStep::kWritten, tmp);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const std::string why = std::strerror(errno);
      ::unlink(tmp.c_str());
      return core::error("[prefix cache] cannot rename '" + tmp + "': " + why);
    }
    step(SaveStep::kRenamed, path);
  }
  // A failure above returns before anything is removed: the old files stay.
  QWEN35_RETURN_IF_ERROR(sf::sync_dir(dir));
  QWEN35_ASSIGN_OR_RETURN(const std::vector<std::string> stale, sf::stale_files(dir, prefix, written));
  core::Status st;
  for (const std::string& p : stale) {
    step(SaveStep::kRemoving, p);
    if (!fs::remove(p, ec) && ec && st.ok())
      st = core::error("[prefix cache] cannot remove '" + p + "': " + ec.message());
    step(SaveStep::kRemoved, p);
  }
  QWEN35_RETURN_IF_ERROR(st);
  return sf::sync_dir(dir);
}

std::string PrefixCache::load_file(const std::string& path, uint64_t fingerprint,
                                   uint64_t recurrent_floats) {
  sf::Reader in;
  const sf::Part part = part_ ? *part_ : sf::whole(*pool_, recurrent_floats);
  if (std::string why = in.open(path, *pool_, part, fingerprint); !why.empty()) return why;
  // The bounds before the body: a header that fits its file but not the cache or the pool
  // costs nothing more. Room is made by eviction only when the pool is full, and before the
  // checksum is known: a damaged file can then cost an entry, never put a wrong one in.
  const int64_t n_blocks = int64_t(in.n_tokens()) / kBlock;
  if (recurrent_floats * 4 + size_t(n_blocks) * pool_->block_bytes() > max_bytes_)
    return "over --cache-mb";
  if (n_blocks > pool_->n_blocks()) return "larger than the KV pool";
  if (!free_blocks(n_blocks)) return "the KV pool is full";
  // Allocated before any block is taken: a failed allocation holds no block.
  std::vector<int32_t> tokens(static_cast<size_t>(in.n_tokens())), blocks;
  std::vector<float> snapshot(static_cast<size_t>(recurrent_floats));
  blocks.reserve(size_t(n_blocks));
  bool ok = in.read_tokens(tokens);
  for (int64_t d = 0; ok && d < n_blocks; ++d) {
    const int32_t b = pool_->allocate();
    QWEN35_CHECK(b >= 0);  // free_blocks(n_blocks) above
    blocks.push_back(b);
    ok = in.read_block(*pool_, b);
  }
  ok = ok && in.read_recurrent(snapshot);
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
    if (path.extension() != sf::kExt) continue;  // save()'s temporaries end in .tmp
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

std::vector<model::CacheEntry> PrefixCache::entries() const {
  std::vector<model::CacheEntry> out;
  // Breadth first: parents before children.
  std::vector<const Node*> level = {root_.get()}, next;
  while (!level.empty()) {
    for (const Node* n : level)
      for (const auto& c : n->children) {
        out.push_back({c->id, n->id, c->depth, c->has_snapshot && !c->provisional, c->key});
        next.push_back(c.get());
      }
    level.swap(next);
    next.clear();
  }
  return out;
}

void PrefixCache::drop_snapshot(uint64_t id) {
  Node* node = nullptr;
  std::vector<Node*> stack = {root_.get()};
  while (!stack.empty() && !node) {
    Node* n = stack.back();
    stack.pop_back();
    if (n->id == id && n != root_.get()) node = n;
    for (auto& c : n->children) stack.push_back(c.get());
  }
  if (!node || !node->has_snapshot) return;
  if (node->children.empty()) {
    remove_leaf(node);  // with the ancestors it leaves as leaves without a snapshot
    return;
  }
  if (node->provisional) --n_provisional_;
  node->provisional = false;
  node->has_snapshot = false;
  tell(model::StateOp::kSnapshotGone, node);
  drop_data(node);
  --n_snapshots_;
}

}  // namespace qwen35::runtime
