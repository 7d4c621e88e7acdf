// serve --cache-dir on a model split over MPI ranks (dist/pipeline.h; docs/design.md "Past one
// machine: ranks over MPI"). Rank 0 keeps the tree and its own part of each snapshot in files of
// its own (runtime/prefix_cache_file.cc); every other rank keeps its part of the same snapshot,
// under the same node id, in a file of its own folder: the same format (model/snapshot_file.h),
// the same name (the snapshot's token ids hashed), its own fingerprint (the folders and
// fingerprints name the rank, the world size and the rank's layers: cli/cmd_serve.cc).
//
// Messages (down the pipe as steps go; each rank passes it on before its own work, so the ranks
// read and write their files at once): a kind (kCacheLoad, kCacheSave), the state ops rank 0 has
// not sent yet (applied first, as a step's), then rank 0's nodes, parents first: id, parent,
// depth, whether it holds an ordinary snapshot, its kKvBlock token ids. Each rank answers rank 0
// directly (kCacheTag): a count, then per snapshot it could not load (or, saving, node 0 and why
// its save failed) the node and a line naming the rank. Rank 0 waits for every answer: a rank
// that died or stalls is noticed by the heartbeat, so this ends too.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "dist/pipeline.h"
#include "dist/wire.h"
#include "model/snapshot_file.h"

namespace qwen35::dist {
namespace {

namespace sf = model::snapshot_file;

constexpr int kCacheTag = 20;  // rank r -> rank 0: the verdicts on its parts
enum CacheOp : uint32_t { kCacheLoad = 20, kCacheSave = 21 };
constexpr int64_t kBlock = kernels::kKvBlock;

}  // namespace

bool PipelineStage::cache_message(uint32_t op) { return op == kCacheLoad || op == kCacheSave; }

void PipelineStage::set_cache_files(std::string dir, uint64_t fingerprint) {
  cache_dir_ = std::move(dir);
  cache_fingerprint_ = fingerprint;
}

core::Result<std::vector<model::CacheVerdict>> PipelineStage::cache_parts(
    std::span<const model::StateOp> ops, std::span<const model::CacheEntry> entries, bool save) {
  // The kind written in place: GCC 12 takes a first insert into an empty vector here for an
  // overflow (-Wstringop-overflow, a false positive).
  const uint32_t kind = save ? kCacheSave : kCacheLoad;
  std::vector<uint8_t> msg(sizeof kind);
  std::memcpy(msg.data(), &kind, sizeof kind);
  put_ops(msg, ops);
  put(msg, uint64_t(entries.size()));
  for (const model::CacheEntry& e : entries) {
    put(msg, e.node);
    put(msg, e.parent);
    put(msg, e.depth);
    put(msg, uint8_t(e.snapshot));
    put(msg, e.key.data(), e.key.size() * sizeof(int32_t));
  }
  QWEN35_RETURN_IF_ERROR(forward_to_next(msg));  // down the pipe, as a step goes
  std::vector<model::CacheVerdict> verdicts;
  for (int r = 1; r < comm_.size(); ++r) {
    QWEN35_ASSIGN_OR_RETURN(const std::vector<uint8_t> back, comm_.recv(r, kCacheTag));
    Reader rd{back};
    const uint32_t n = rd.get<uint32_t>();
    for (uint32_t i = 0; i < n && rd.ok; ++i) {
      model::CacheVerdict v;
      v.node = rd.get<uint64_t>();
      const uint32_t len = rd.get<uint32_t>();
      if (len > back.size()) rd.ok = false;
      if (!rd.ok) break;
      v.why.resize(len);
      rd.read(v.why.data(), v.why.size());
      verdicts.push_back(std::move(v));
    }
    if (!rd.ok)
      return core::error("rank " + std::to_string(r) + " sent a malformed prefix-cache answer");
  }
  return verdicts;
}

// Ranks after 0: one cache message (already passed on), answered to rank 0.
core::Status PipelineStage::serve_cache(const std::vector<uint8_t>& msg) {
  Reader rd{msg};
  const bool save = rd.get<uint32_t>() == kCacheSave;
  for (const model::StateOp& op : read_ops(rd)) {
    if (op.kind == model::StateOp::kPool) cache_mtp_ = op.seq == 1;  // the engine drafts with MTP
    QWEN35_RETURN_IF_ERROR(apply_op(op));
  }
  const uint64_t n = rd.get<uint64_t>();
  if (!rd.ok || n > msg.size()) return core::error("a malformed cache message");
  std::vector<model::CacheEntry> entries(n);
  std::map<uint64_t, const model::CacheEntry*> by_id;
  for (model::CacheEntry& e : entries) {
    e.node = rd.get<uint64_t>();
    e.parent = rd.get<uint64_t>();
    e.depth = rd.get<int64_t>();
    e.snapshot = rd.get<uint8_t>() != 0;
    e.key.resize(size_t(kBlock));
    rd.read(e.key.data(), e.key.size() * sizeof(int32_t));
    if (!rd.ok || e.node == 0 || by_id.count(e.node) || (e.parent && !by_id.count(e.parent)))
      return core::error("a malformed cache message (its nodes)");
    by_id[e.node] = &e;
  }
  if (!pool_) return core::error("a cache message before the engine's pool");
  const std::string me = "rank " + std::to_string(comm_.rank()) + ": ";
  std::vector<model::CacheVerdict> verdicts;
  // A rank started without --cache-dir (the ranks' flags differ) has no part to give.
  const std::string none = cache_dir_.empty() ? "started without --cache-dir" : "";
  if (save) {
    if (std::string why = none.empty() ? save_parts(entries) : none; !why.empty())
      verdicts.push_back({0, me + why});
  } else {
    // Rank 0's tree, loaded there: every node here, its block from the first of its files that
    // loads. A node whose files all fail keeps block -1; rank 0 drops every snapshot at or below
    // it, and so the node, before any step can use it.
    for (const model::CacheEntry& e : entries) {
      if (nodes_.count(e.node)) return core::error("a cache message naming a node this rank holds");
      nodes_[e.node] = {e.parent, -1};
    }
    const uint64_t floats = state(0, 0)->recurrent_bytes() / sizeof(float);
    for (const model::CacheEntry& e : entries)
      if (e.snapshot)
        if (std::string why = none.empty() ? load_part(e, by_id, floats) : none; !why.empty())
          verdicts.push_back({e.node, me + why});
  }
  std::vector<uint8_t> back;
  put(back, uint32_t(verdicts.size()));
  for (const model::CacheVerdict& v : verdicts) {
    put(back, v.node);
    put(back, uint32_t(v.why.size()));
    put(back, v.why.data(), v.why.size());
  }
  bytes_sent_ += back.size();
  return comm_.send(0, kCacheTag, back);
}

// The fingerprint of this rank's files: an engine that drafts with MTP keeps its files apart,
// as rank 0 does (its last rank's states hold the head's cache).
uint64_t PipelineStage::file_key() const {
  return cache_fingerprint_ ^ (cache_mtp_ ? 0x6d7470ull : 0);
}

// This rank's layers' part of a snapshot (its states' other layers are never computed here).
model::snapshot_file::Part PipelineStage::file_part() {
  return sf::layers_part(model_.config(), *state(0, 0), *pool_, share().first, share().end,
                         share().head);
}

std::string PipelineStage::path_of(uint64_t id,
                                   const std::map<uint64_t, const model::CacheEntry*>& by_id,
                                   std::vector<int32_t>* tokens, std::vector<uint64_t>* nodes) {
  nodes->clear();
  for (uint64_t n = id; n != 0;) {
    auto e = by_id.find(n);
    auto here = nodes_.find(n);
    if (e == by_id.end() || here == nodes_.end() || here->second.parent != e->second->parent)
      return "node " + std::to_string(n) + " is not rank 0's";
    nodes->push_back(n);
    n = e->second->parent;
  }
  std::reverse(nodes->begin(), nodes->end());
  tokens->clear();
  for (uint64_t n : *nodes)
    tokens->insert(tokens->end(), by_id.at(n)->key.begin(), by_id.at(n)->key.end());
  if (int64_t(nodes->size()) != by_id.at(id)->depth)
    return "node " + std::to_string(id) + " at the wrong depth";
  return "";
}

// Node e's part from this rank's file: the blocks its path lacks and its snapshot. A file that
// fails gives back the blocks it took.
std::string PipelineStage::load_part(const model::CacheEntry& e,
                                     const std::map<uint64_t, const model::CacheEntry*>& by_id,
                                     uint64_t recurrent_floats) {
  std::vector<int32_t> tokens, want;
  std::vector<uint64_t> path;
  if (std::string why = path_of(e.node, by_id, &want, &path); !why.empty()) return why;
  const std::string file =
      cache_dir_ + "/" + sf::file_name(file_key(), *pool_, sf::fnv(want.data(), want.size() * 4));
  sf::Reader in;
  if (std::string why = in.open(file, *pool_, file_part(), file_key()); !why.empty())
    return file + ": " + why;
  if (in.n_tokens() != want.size()) return file + ": holds another prefix";
  tokens.resize(want.size());
  std::vector<float> snapshot(recurrent_floats);
  std::vector<uint64_t> taken;  // the nodes whose block this file gives
  bool ok = in.read_tokens(tokens);
  if (ok && tokens != want) return file + ": holds another prefix";
  std::string why;
  for (size_t d = 0; ok && d < path.size(); ++d) {
    Node& node = nodes_[path[d]];
    int32_t block = -1;  // read and dropped: the node has its block
    if (node.block < 0) {
      block = pool_->allocate();
      if (block < 0) {
        why = "the KV pool is full";
        ok = false;
        break;
      }
      node.block = block;
      taken.push_back(path[d]);
    }
    ok = in.read_block(*pool_, block);
  }
  ok = ok && in.read_recurrent(snapshot);
  if (!ok || !in.checksum_matches()) {
    for (uint64_t n : taken) {
      pool_->release(nodes_[n].block);
      nodes_[n].block = -1;
    }
    return file + ": " +
           (!why.empty() ? why
            : ok         ? "checksum mismatch"
                         : "unreadable (shorter than its size said)");
  }
  snapshots_[e.node] = std::move(snapshot);
  return "";
}

// This rank's part of every ordinary snapshot, crash-safely as rank 0 writes its own: each file
// written as <name>.tmp, fsynced, renamed; the folder fsynced; only then the folder's other
// files of this fingerprint removed. "" or why not.
std::string PipelineStage::save_parts(std::span<const model::CacheEntry> entries) {
  std::map<uint64_t, const model::CacheEntry*> by_id;
  for (const model::CacheEntry& e : entries) by_id[e.node] = &e;
  std::error_code ec;
  std::filesystem::create_directories(cache_dir_, ec);
  if (ec) return "cannot create '" + cache_dir_ + "': " + ec.message();
  std::vector<std::string> written;
  std::vector<int32_t> tokens, blocks;
  std::vector<uint64_t> path;
  for (const model::CacheEntry& e : entries) {
    if (!e.snapshot) continue;
    auto snap = snapshots_.find(e.node);
    if (std::string why = path_of(e.node, by_id, &tokens, &path);
        !why.empty() || snap == snapshots_.end())
      return "out of step with rank 0 (" +
             (why.empty() ? "no snapshot at node " + std::to_string(e.node) : why) + ")";
    blocks.clear();
    for (uint64_t n : path) {
      blocks.push_back(nodes_[n].block);
      if (blocks.back() < 0)
        return "out of step with rank 0 (node " + std::to_string(n) + " holds no block)";
    }
    const std::string name =
        sf::file_name(file_key(), *pool_, sf::fnv(tokens.data(), tokens.size() * 4));
    const std::string final_path = cache_dir_ + "/" + name, tmp = final_path + sf::kTmp;
    written.push_back(name);
    if (std::string why =
            sf::write(tmp, *pool_, file_part(), file_key(), tokens, blocks, snap->second);
        !why.empty()) {
      ::unlink(tmp.c_str());
      return "cannot write '" + tmp + "': " + why;
    }
    if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
      const std::string why = std::strerror(errno);
      ::unlink(tmp.c_str());
      return "cannot rename '" + tmp + "': " + why;
    }
  }
  if (auto st = sf::sync_dir(cache_dir_); !st.ok()) return st.message();
  auto stale = sf::stale_files(cache_dir_, sf::key_prefix(file_key(), *pool_), written);
  if (!stale.ok()) return stale.message();
  for (const std::string& p : *stale)
    if (!std::filesystem::remove(p, ec) && ec) return "cannot remove '" + p + "': " + ec.message();
  if (auto st = sf::sync_dir(cache_dir_); !st.ok()) return st.message();
  return "";
}

}  // namespace qwen35::dist
