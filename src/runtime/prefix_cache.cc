#include "runtime/prefix_cache.h"

#include <algorithm>

#include "core/check.h"

namespace qwen35::runtime {

constexpr int64_t kBlock = kernels::kKvBlock;


PrefixCache::PrefixCache(model::KvPool* pool, size_t max_bytes, model::SnapshotStore* store,
                         size_t max_device_bytes)
    : pool_(pool),
      max_bytes_(max_bytes),
      root_(std::make_unique<Node>()),
      store_(max_device_bytes > 0 ? store : nullptr),
      max_device_bytes_(max_device_bytes) {}

PrefixCache::~PrefixCache() { clear(); }

void PrefixCache::clear() {
  while (evict_one()) {
  }
}

PrefixCache::Node* PrefixCache::child(Node* n, std::span<const int32_t> key) const {
  for (auto& c : n->children)
    if (std::equal(c->key.begin(), c->key.end(), key.begin(), key.end())) return c.get();
  return nullptr;
}

void PrefixCache::tell(uint32_t kind, const Node* n, const model::SequenceState* state, int64_t c) const {
  if (!observer_) return;
  model::StateOp op;
  op.kind = kind;
  op.a = n->id;
  op.b = n->parent ? n->parent->id : 0;
  op.c = c;
  observer_(op, state);
}

void PrefixCache::touch(Node* n) {
  const uint64_t t = ++clock_;
  for (; n; n = n->parent) n->used = t;
}

int64_t PrefixCache::resume(std::span<const int32_t> prompt, model::SequenceState* state) {
  QWEN35_CHECK(state->pos() == 0 && state->blocks_held() == 0 && state->pool() == pool_);
  const int64_t n = int64_t(prompt.size());
  Node* best = nullptr;
  Node* cur = root_.get();
  // At least one prompt token is left to compute: its logits start the answer.
  for (int64_t d = 1; d * kBlock <= n - 1; ++d) {
    cur = child(cur, prompt.subspan(size_t((d - 1) * kBlock), size_t(kBlock)));
    if (!cur) break;
    if (cur->has_snapshot && cur->floats * 4 == state->recurrent_bytes()) best = cur;
  }
  if (!best) {
    ++counts_.misses;
    return 0;
  }
  std::vector<int32_t> blocks(size_t(best->depth));
  for (Node* p = best; p != root_.get(); p = p->parent) blocks[size_t(p->depth - 1)] = p->block;
  state->adopt(blocks, best->depth * kBlock);
  if (!best->on_device || !store_->restore(*best->on_device, *state)) {
    if (best->on_device) {
      // The state has no twin yet (or the device failed): through host memory.
      std::vector<float> tmp(best->floats);
      (void)store_->read(*best->on_device, tmp.data());  // a failure reaches the next step
      state->load_recurrent(tmp.data());
    } else {
      state->load_recurrent(best->snapshot.data());
    }
  }
  tell(model::StateOp::kResume, best, state, best->depth * kBlock);
  promote(best);  // a prompt parted here: a branch point
  touch(best);
  ++counts_.hits;
  counts_.hit_tokens += best->depth * kBlock;
  return best->depth * kBlock;
}

int64_t PrefixCache::resumable(std::span<const int32_t> prompt, size_t recurrent_bytes) const {
  const int64_t n = int64_t(prompt.size());
  int64_t best = 0;
  Node* cur = root_.get();
  for (int64_t d = 1; d * kBlock <= n - 1; ++d) {
    cur = child(cur, prompt.subspan(size_t((d - 1) * kBlock), size_t(kBlock)));
    if (!cur) break;
    if (cur->has_snapshot && cur->floats * 4 == recurrent_bytes) best = d * kBlock;
  }
  return best;
}

int64_t PrefixCache::matched(std::span<const int32_t> prompt) const {
  const int64_t n = int64_t(prompt.size());
  Node* cur = root_.get();
  int64_t d = 0;
  for (; (d + 1) * kBlock <= n - 1; ++d) {
    cur = child(cur, prompt.subspan(size_t(d * kBlock), size_t(kBlock)));
    if (!cur) break;
  }
  return d * kBlock;
}

PrefixCache::Node* PrefixCache::extend(std::span<const int32_t> tokens, int64_t depth,
                                       const model::SequenceState& state) {
  Node* cur = root_.get();
  for (int64_t d = 1; d <= depth; ++d) {
    const auto key = tokens.subspan(size_t((d - 1) * kBlock), size_t(kBlock));
    Node* next = child(cur, key);
    if (!next) {
      auto node = std::make_unique<Node>();
      node->parent = cur;
      node->key.assign(key.begin(), key.end());
      node->block = state.blocks()[size_t(d - 1)];
      pool_->retain(node->block);
      node->depth = d;
      node->id = ++next_id_;
      next = node.get();
      cur->children.push_back(std::move(node));
      ++n_nodes_;
      tell(model::StateOp::kNode, next, &state, d - 1);
    }
    cur = next;
  }
  return cur;
}

void PrefixCache::promote(Node* n) {
  if (!n->provisional) return;
  n->provisional = false;
  --n_provisional_;
  ++counts_.promoted;
}

void PrefixCache::insert(std::span<const int32_t> tokens, const model::SequenceState& state) {
  const int64_t p = state.pos();
  if (p <= 0 || p % kBlock != 0 || int64_t(tokens.size()) < p || state.pool() != pool_) return;
  const int64_t depth = p / kBlock;
  const size_t snap = state.recurrent_bytes();
  if (snap + size_t(depth) * pool_->block_bytes() > max_bytes_) return;
  Node* cur = extend(tokens, depth, state);
  if (!cur->has_snapshot) {
    cur->has_snapshot = true;
    cur->floats = snap / 4;
    if (store_ && snap > 0) {
      // Provisional snapshots hold device room only while nothing else needs it: the oldest
      // go to host memory (its bytes over the bus, as this one's would be).
      while (!device_room(snap) && spill_provisional()) {
      }
      if (device_room(snap)) cur->on_device = store_->keep(state);
    }
    if (cur->on_device) {
      device_bytes_ += snap;
      ++n_device_;
    } else {  // past the device's budget, or not makeable there: host memory
      cur->snapshot.resize(snap / 4);
      state.save_recurrent(cur->snapshot.data());
      snapshot_bytes_ += snap;
    }
    tell(model::StateOp::kSnapshot, cur, &state);
    ++n_snapshots_;
    ++counts_.inserts;
  }
  promote(cur);  // a snapshot the prompt takes anyway is an ordinary one
  touch(cur);
  shrink();
}

std::vector<int64_t> PrefixCache::missing(std::span<const int32_t> tokens, int64_t from,
                                          int64_t to, size_t snapshot_bytes) const {
  std::vector<int64_t> lines;
  to = std::min<int64_t>(to, int64_t(tokens.size()));
  if (to / kBlock * kBlock <= from) return lines;
  if (snapshot_bytes + size_t(to / kBlock) * pool_->block_bytes() > max_bytes_) return lines;
  Node* cur = root_.get();
  for (int64_t d = 1; d * kBlock <= to; ++d) {
    cur = cur ? child(cur, tokens.subspan(size_t((d - 1) * kBlock), size_t(kBlock))) : nullptr;
    if (d * kBlock > from && !(cur && cur->has_snapshot)) lines.push_back(d * kBlock);
  }
  return lines;
}

PrefixCache::Node* PrefixCache::provisional_node(std::span<const int32_t> tokens,
                                                 const model::SequenceState& state, size_t bytes,
                                                 size_t host_bytes) {
  const int64_t p = int64_t(tokens.size());
  if (p <= 0 || p % kBlock != 0 || state.pos() < p || state.pool() != pool_ ||
      bytes != state.recurrent_bytes())
    return nullptr;
  const int64_t depth = p / kBlock;
  if (host_bytes + size_t(depth) * pool_->block_bytes() > max_bytes_) return nullptr;
  Node* cur = extend(tokens, depth, state);
  touch(cur);
  if (cur->has_snapshot) return nullptr;
  cur->has_snapshot = true;
  cur->provisional = true;
  cur->made = ++clock_;
  cur->floats = bytes / 4;
  tell(model::StateOp::kCaptured, cur, &state, p);
  ++n_snapshots_;
  ++n_provisional_;
  return cur;
}

void PrefixCache::insert_provisional(std::span<const int32_t> tokens,
                                     const model::SequenceState& state,
                                     std::vector<float> snapshot) {
  const size_t bytes = snapshot.size() * 4;
  if (Node* cur = provisional_node(tokens, state, bytes, bytes)) {
    snapshot_bytes_ += bytes;
    cur->snapshot = std::move(snapshot);
  }
  shrink();
}

void PrefixCache::insert_provisional_on_device(
    std::span<const int32_t> tokens, const model::SequenceState& state,
    std::shared_ptr<const model::SnapshotStore::Snapshot> device) {
  QWEN35_CHECK(store_ && device);
  const size_t bytes = device->bytes();
  if (Node* cur = provisional_node(tokens, state, bytes, 0)) {
    device_bytes_ += bytes;
    ++n_device_;
    cur->on_device = std::move(device);
  }
  shrink();
}

bool PrefixCache::device_room(size_t bytes) const {
  return store_ && store_->bytes() + bytes <= max_device_bytes_;
}

std::vector<std::shared_ptr<model::SnapshotStore::Snapshot>> PrefixCache::device_buffers(
    size_t n, size_t bytes) {
  std::vector<std::shared_ptr<model::SnapshotStore::Snapshot>> out;
  if (bytes == 0) return out;
  // store_->bytes() counts the buffers made here at once: the budget holds them too.
  while (out.size() < n && device_room(bytes)) {
    auto s = store_->make(bytes);
    if (!s) break;
    out.push_back(std::move(s));
  }
  return out;
}

std::shared_ptr<const model::SnapshotStore::Snapshot> PrefixCache::device_copy(
    const model::SequenceState& state) {
  const size_t bytes = state.recurrent_bytes();
  return bytes > 0 && device_room(bytes) ? store_->keep(state) : nullptr;
}

void PrefixCache::shrink() {
  while (bytes() > max_bytes_ && (drop_provisional() || evict_one())) {
  }
}

PrefixCache::Node* PrefixCache::oldest_provisional(bool on_device) const {
  Node* victim = nullptr;
  std::vector<Node*> stack = {root_.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    const bool fits = on_device ? n->on_device != nullptr : !n->on_device || n->children.empty();
    if (n->provisional && fits && (!victim || n->made < victim->made)) victim = n;
    for (auto& c : n->children) stack.push_back(c.get());
  }
  return victim;
}

bool PrefixCache::spill_provisional() {
  Node* n = n_provisional_ > 0 ? oldest_provisional(true) : nullptr;
  if (!n) return false;
  std::vector<float> host(n->floats);
  const bool read = store_->read(*n->on_device, host.data()).ok();
  device_bytes_ -= n->floats * 4;
  --n_device_;
  n->on_device.reset();
  if (!read) {  // the device failed (the next step says so): the snapshot goes
    n->floats = 0;
    n->provisional = false;
    --n_provisional_;
    n->has_snapshot = false;
    --n_snapshots_;
    tell(model::StateOp::kSnapshotGone, n);
    if (n->children.empty()) remove_leaf(n);
    return true;
  }
  snapshot_bytes_ += host.size() * 4;
  n->snapshot = std::move(host);
  return true;  // the caller's insert shrinks the cache to its bound
}

bool PrefixCache::drop_provisional() {
  Node* victim = n_provisional_ > 0 ? oldest_provisional(false) : nullptr;
  if (!victim) return false;
  if (victim->children.empty()) {
    remove_leaf(victim);  // its blocks go too, up to the next snapshot
  } else {
    victim->provisional = false;
    --n_provisional_;
    victim->has_snapshot = false;
    tell(model::StateOp::kSnapshotGone, victim);
    drop_data(victim);
    --n_snapshots_;
  }
  ++counts_.evictions;
  return true;
}

bool PrefixCache::insert_blocks(std::span<const int32_t> tokens, std::span<const int32_t> blocks,
                                std::vector<float> snapshot) {
  const int64_t depth = int64_t(blocks.size());
  QWEN35_CHECK(int64_t(tokens.size()) == depth * kBlock && depth > 0);
  if (snapshot.size() * 4 + size_t(depth) * pool_->block_bytes() > max_bytes_) {
    for (int32_t b : blocks) pool_->release(b);
    return false;
  }
  Node* cur = root_.get();
  for (int64_t d = 1; d <= depth; ++d) {
    const auto key = tokens.subspan(size_t((d - 1) * kBlock), size_t(kBlock));
    const int32_t block = blocks[size_t(d - 1)];
    if (Node* next = child(cur, key)) {
      pool_->release(block);  // the tree already holds these positions
      cur = next;
      continue;
    }
    auto node = std::make_unique<Node>();
    node->parent = cur;
    node->key.assign(key.begin(), key.end());
    node->block = block;
    node->depth = d;
    node->id = ++next_id_;
    Node* next = node.get();
    cur->children.push_back(std::move(node));
    ++n_nodes_;
    cur = next;
  }
  if (!cur->has_snapshot) {
    cur->has_snapshot = true;
    snapshot_bytes_ += snapshot.size() * 4;
    cur->floats = snapshot.size();
    cur->snapshot = std::move(snapshot);
    ++n_snapshots_;
  }
  touch(cur);
  shrink();
  return true;
}

bool PrefixCache::free_blocks(int64_t blocks) {
  while (pool_->free_blocks() < blocks)
    if (!evict_one(true)) return false;
  return true;
}

bool PrefixCache::evict_one(bool freeing) {
  // The least recently used leaf (a leaf always holds a snapshot: see remove_leaf). With
  // `freeing`, only a leaf whose block the cache alone holds: a running sequence that holds a
  // leaf's block holds its ancestors' too, so evicting that leaf would free nothing.
  Node* victim = nullptr;
  std::vector<Node*> stack = {root_.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (n->children.empty() && n != root_.get() && (!freeing || pool_->refs(n->block) == 1) &&
        (!victim || n->used < victim->used))
      victim = n;
    for (auto& c : n->children) stack.push_back(c.get());
  }
  if (!victim) return false;
  remove_leaf(victim);
  ++counts_.evictions;
  return true;
}

// Removes leaf n, then its ancestors that are left as leaves without a snapshot.
void PrefixCache::remove_leaf(Node* n) {
  while (n != root_.get() && n->children.empty()) {
    Node* parent = n->parent;
    if (n->has_snapshot) {
      drop_data(n);
      --n_snapshots_;
    }
    if (n->provisional) --n_provisional_;
    tell(model::StateOp::kNodeGone, n);
    pool_->release(n->block);
    --n_nodes_;
    auto& sib = parent->children;
    sib.erase(std::find_if(sib.begin(), sib.end(), [n](const auto& c) { return c.get() == n; }));
    n = parent;
    if (n->has_snapshot) break;
  }
}

void PrefixCache::drop_data(Node* n) {
  if (n->on_device) {
    device_bytes_ -= n->floats * 4;
    --n_device_;
    n->on_device.reset();
  } else {
    snapshot_bytes_ -= n->snapshot.size() * 4;
    std::vector<float>().swap(n->snapshot);
  }
  n->floats = 0;
}

core::Status PrefixCache::read_snapshot(const Node* n, float* out) const {
  if (n->on_device) return store_->read(*n->on_device, out);
  std::copy(n->snapshot.begin(), n->snapshot.end(), out);
  return core::ok_status();
}

size_t PrefixCache::bytes() const {
  return snapshot_bytes_ + size_t(n_nodes_) * pool_->block_bytes();
}

PrefixCacheStats PrefixCache::stats() const {
  PrefixCacheStats s = counts_;
  s.snapshots = n_snapshots_;
  s.provisional = n_provisional_;
  s.blocks = n_nodes_;
  s.bytes = int64_t(bytes());
  s.device_snapshots = n_device_;
  s.device_bytes = int64_t(device_bytes_);
  return s;
}

}  // namespace qwen35::runtime
