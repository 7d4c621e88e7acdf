// The prefix cache: sequence states at grid boundaries, kept so that a later prompt with the
// same beginning resumes instead of recomputing it (issue 15). A hybrid model cannot resume from
// KV rows alone: the Gated DeltaNet layers need their conv and recurrent state at the resume
// point. So an entry is a snapshot of that state at a position p, a multiple of
// kernels::kKvBlock, plus references to the KV blocks below p.
//
// Exactness (*resumed == fresh*): prompts are computed in chunks cut at absolute multiples of
// kKvBlock, so the state after the first p tokens is the same bits whoever computes it. Entries
// are only ever taken from prompt computation (never from decode, whose token-by-token
// recurrence gives other bits), at positions on that grid.
//
// Provisional snapshots: a prompt's prefill also copies the state at every grid line it computes
// (model::StateCapture, a copy, no extra arithmetic), so that a later prompt that parts from it
// anywhere resumes at the grid line at or below where they part, however long the first
// prompt's tail. They live only in room nothing else needs: while the cache is over its bound,
// the least recently made provisional snapshot goes first, before any other entry. One that a
// prompt resumes from becomes an ordinary snapshot (a branch point), and so does one that a
// prompt would have snapshotted anyway. save() writes only ordinary snapshots.
//
// The tree: a radix tree whose edges are kKvBlock-token blocks of ids; node depth d stands for
// positions [0, d·kKvBlock) and holds the KV block of its last kKvBlock positions (a pool
// reference), and a snapshot when one was taken there. Prompts that share a prefix share its
// nodes and blocks. Bounded by max_bytes (snapshots + blocks), evicting the least recently used
// leaves; a running sequence holds its own block references, so eviction never breaks it.
//
// Thread-safety: none; the engine thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/result.h"

#include "model/kv_pool.h"
#include "model/snapshot_file.h"
#include "model/snapshot_store.h"
#include "model/state.h"
#include "model/state_op.h"

namespace qwen35::runtime {

struct PrefixCacheStats {
  int64_t hits = 0, misses = 0, hit_tokens = 0, evictions = 0, inserts = 0;
  int64_t snapshots = 0, blocks = 0, bytes = 0;
  int64_t provisional = 0;  // of `snapshots`, the provisional ones held
  int64_t promoted = 0;     // provisional snapshots that became ordinary ones
  int64_t device_snapshots = 0, device_bytes = 0;  // of `snapshots`, those in device memory
};

class PrefixCache {
 public:
  // `max_bytes` bounds host memory (snapshots and KV blocks). With a `store` (a device's,
  // model/snapshot_store.h), snapshots are kept in device memory while the store's snapshots
  // (those a prefill is filling included) stay within `max_device_bytes` (serve
  // --cache-device-mb), and restored there; past it, and where the device cannot make one, they
  // are host memory as without. Provisional snapshots take device room only where it is free;
  // an ordinary snapshot that finds none moves the oldest provisional ones there to host memory
  // first (so they never keep it off the device), and a cache over max_bytes drops the oldest
  // provisional one whose going frees host memory first.
  PrefixCache(model::KvPool* pool, size_t max_bytes, model::SnapshotStore* store = nullptr,
              size_t max_device_bytes = 0);
  ~PrefixCache();  // gives every block reference back to the pool
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // Resumes `state` (just reset, of the cache's pool) from the longest cached prefix of
  // `prompt` that leaves at least one token to compute. Returns the positions resumed (0: a
  // miss, nothing changed).
  int64_t resume(std::span<const int32_t> prompt, model::SequenceState* state);
  // What resume() would give a state of `recurrent_bytes`, changing nothing (admission counts
  // the blocks a request would share with the cache).
  int64_t resumable(std::span<const int32_t> prompt, size_t recurrent_bytes) const;
  // How far `prompt` follows a cached path by KV blocks, snapshot or not: the deepest node's
  // positions that leave at least one token to compute (a multiple of kKvBlock; 0: none).
  // Where this passes what resume() found, the prompt parts from a cached path between
  // snapshots: its prefill snapshots this branch point, so the next prompt that parts there
  // resumes (a branch-point snapshot; evicted like any other).
  int64_t matched(std::span<const int32_t> prompt) const;
  // Stores `state`, which stands at pos() = p, a multiple of kKvBlock, after computing
  // tokens[0, p) from an empty state. Nothing when p is 0 or the entry alone exceeds the bound.
  void insert(std::span<const int32_t> tokens, const model::SequenceState& state);
  // The grid lines L with from < L <= to (and L <= tokens.size()) where the tree holds no
  // snapshot of `tokens`' first L positions: where a prompt's prefill makes provisional ones.
  // Empty when one such snapshot could never fit the bound.
  std::vector<int64_t> missing(std::span<const int32_t> tokens, int64_t from, int64_t to,
                               size_t snapshot_bytes) const;
  // A provisional snapshot: `snapshot` (save_recurrent's layout) is the state after tokens
  // [0, L), L = tokens.size() a multiple of kKvBlock, and `state` (which stands at L or past it,
  // computed from an empty state) holds the blocks below L. Nothing when the tree has one there.
  void insert_provisional(std::span<const int32_t> tokens, const model::SequenceState& state,
                          std::vector<float> snapshot);
  // The same for a snapshot in device memory (device_buffers, filled by the prefill's step, or
  // device_copy), counted in the device's bytes.
  void insert_provisional_on_device(std::span<const int32_t> tokens,
                                    const model::SequenceState& state,
                                    std::shared_ptr<const model::SnapshotStore::Snapshot> device);
  // Device snapshots of `bytes` (a state's recurrent_bytes()) for a prefill's captures
  // (model::StateCapture::device), up to `n`, as many as the device budget has room for now;
  // none without a store. A chunk's captures past them are host memory.
  std::vector<std::shared_ptr<model::SnapshotStore::Snapshot>> device_buffers(size_t n, size_t bytes);
  // A device copy of `state` (SnapshotStore::keep) where the budget has room for it; else null.
  std::shared_ptr<const model::SnapshotStore::Snapshot> device_copy(const model::SequenceState& state);
  // Evicts least recently used entries until `blocks` pool blocks are free, only entries whose
  // eviction frees a block (not those whose blocks running sequences hold too). Returns
  // whether they are.
  bool free_blocks(int64_t blocks);
  void clear();

  PrefixCacheStats stats() const;
  size_t max_bytes() const { return max_bytes_; }

  // A model split over ranks (dist/pipeline.h): every change to the tree's nodes, snapshots and
  // block references, and every resume, told as it happens, as the model::StateOp the other
  // ranks repeat (its `seq` left -1, `state` naming the state instead). Node ids are never
  // reused; the root is 0.
  using Observer = std::function<void(const model::StateOp& op, const model::SequenceState* state)>;
  void set_observer(Observer f) { observer_ = std::move(f); }

  // Persistence (serve --cache-dir): one file per snapshot, holding its tokens, the KV rows
  // below it and the recurrent state, tagged with `fingerprint` (the checkpoint and the
  // arithmetic mode that computed it, and naming the file) and a checksum.
  //
  // save() replaces the directory's files of that fingerprint, crash-safely: each file is
  // written under a temporary name, fsynced and renamed over its final name (which a prefix
  // keeps from one save to the next); the directory is fsynced; only then are the
  // fingerprint's other files (stale snapshots, a crashed save's temporaries) removed. Killed
  // at any point, it leaves every prefix either its old file or its new one, each whole. Files
  // of other fingerprints are never touched. `hook`, when set, is told each step as it happens.
  //
  // load() inserts every valid file whose fingerprint matches, as far as the pool and the bound
  // allow, and skips the others with a line in *warnings each, never failing: a file is never
  // trusted. Only regular files are opened; the header is checked against the model, the
  // file's size and the bounds before the body is read, and the body goes in pieces straight
  // into its destinations (no buffer holds a file). save()'s temporaries are ignored.
  enum class SaveStep {
    kWriting,   // before a snapshot's temporary file is written
    kWritten,   // it is written and fsynced, not yet renamed
    kRenamed,   // it has its final name: this prefix's new snapshot is in place
    kRemoving,  // before a stale file (or a crashed save's temporary) is removed
    kRemoved,
  };
  using SaveHook = std::function<void(SaveStep, const std::string& path)>;
  core::Status save(const std::string& dir, uint64_t fingerprint, const SaveHook& hook = {}) const;
  int64_t load(const std::string& dir, uint64_t fingerprint, int64_t recurrent_floats,
               std::vector<std::string>* warnings);
  // A file header's `kv` field for a pool: its K and V formats (type, rotated) and the
  // rotation's seed (prefix_cache_file.cc). A file whose field differs is skipped.
  static uint64_t kv_tag(const model::KvPool& pool);
  // A snapshot file's name for these tokens (model/snapshot_file.h).
  static uint64_t tokens_hash(std::span<const int32_t> tokens);

  // A model split over ranks with --cache-dir (runtime/stepper.h): every node, parents first,
  // marked where it holds an ordinary snapshot (whose file the other ranks load or save their
  // part of); and the way to drop a snapshot that a rank could not load (the node, and its
  // ancestors left as leaves without one, go; the observer is told as always).
  std::vector<model::CacheEntry> entries() const;
  void drop_snapshot(uint64_t node);
  // What of each snapshot its file holds (model/snapshot_file.h): the whole by default; a rank
  // of a split model its own layers' part.
  void set_file_part(model::snapshot_file::Part part) { part_ = std::move(part); }

 private:
  struct Node {
    Node* parent = nullptr;
    uint64_t id = 0;           // its name to the observer; 0 at the root
    std::vector<int32_t> key;  // the kKvBlock token ids of this node's positions
    int32_t block = -1;        // their KV block (a pool reference); -1 at the root
    int64_t depth = 0;         // positions [0, depth · kKvBlock)
    std::vector<std::unique_ptr<Node>> children;
    // The recurrent state at depth · kKvBlock, when has_snapshot. A model without Gated DeltaNet
    // layers (Qwen3) has none to keep: its snapshots are empty, the KV blocks alone.
    bool has_snapshot = false;
    bool provisional = false;  // a provisional snapshot (see above)
    std::vector<float> snapshot;  // in host memory, or empty with on_device
    std::shared_ptr<const model::SnapshotStore::Snapshot> on_device;
    size_t floats = 0;  // the snapshot's size, wherever it is
    uint64_t used = 0;       // this node or a descendant last touched (leaf eviction order)
    uint64_t made = 0;       // when the provisional snapshot was made (its eviction order)
  };
  // The nodes of tokens' first `depth` blocks, made where missing with `state`'s blocks.
  Node* extend(std::span<const int32_t> tokens, int64_t depth, const model::SequenceState& state);
  void promote(Node* n);
  // The oldest provisional snapshot whose going frees host memory (held there, or a leaf,
  // whose blocks go), or with `on_device` the oldest held in device memory; null when none is.
  Node* oldest_provisional(bool on_device) const;
  bool drop_provisional();   // oldest_provisional(false) goes; false when there is none
  bool spill_provisional();  // oldest_provisional(true) into host memory; false when none is
  // Whether the device budget has room for a snapshot of `bytes` more.
  bool device_room(size_t bytes) const;
  // A provisional snapshot of `bytes` at tokens' last grid line: the node, marked, its data the
  // caller's to set; null when there is none to make (see insert_provisional). `host_bytes`:
  // what of it counts against max_bytes.
  Node* provisional_node(std::span<const int32_t> tokens, const model::SequenceState& state,
                         size_t bytes, size_t host_bytes);
  void shrink();            // drops and evicts until the cache is within its bound
  Node* child(Node* n, std::span<const int32_t> key) const;
  void touch(Node* n);
  // The least recently used leaf (with `freeing`, whose block only the cache holds); false
  // when there is none.
  bool evict_one(bool freeing = false);
  // load() of one file: its blocks and state into the pool and the tree; "" when inserted,
  // else why not (the blocks it took are given back).
  std::string load_file(const std::string& path, uint64_t fingerprint, uint64_t recurrent_floats);
  // insert() for a loaded snapshot: the blocks are the file's (each with one reference, handed
  // over); positions already in the tree keep their blocks and the file's go back.
  bool insert_blocks(std::span<const int32_t> tokens, std::span<const int32_t> blocks,
                     std::vector<float> snapshot);
  void remove_leaf(Node* n);
  // n's snapshot data and its bytes in the counts go (has_snapshot is the caller's).
  void drop_data(Node* n);
  // n's snapshot into host memory `out` (n->floats floats), wherever it is.
  core::Status read_snapshot(const Node* n, float* out) const;
  size_t bytes() const;
  void tell(uint32_t kind, const Node* n, const model::SequenceState* state = nullptr, int64_t c = 0) const;

  model::KvPool* pool_;
  size_t max_bytes_;
  std::unique_ptr<Node> root_;
  uint64_t clock_ = 0;
  uint64_t next_id_ = 0;
  Observer observer_;
  std::optional<model::snapshot_file::Part> part_;
  int64_t n_nodes_ = 0, n_snapshots_ = 0, n_provisional_ = 0;
  size_t snapshot_bytes_ = 0;  // host snapshots
  model::SnapshotStore* store_ = nullptr;
  size_t max_device_bytes_ = 0, device_bytes_ = 0;
  int64_t n_device_ = 0;
  PrefixCacheStats counts_;
};

}  // namespace qwen35::runtime
