#include "tokenizer/bpe.h"

#include <limits>
#include <mutex>
#include <queue>

namespace qwen35::tokenizer {

Bpe::Bpe() : cache_(std::make_unique<Cache>()) {}

void Bpe::init(std::array<int32_t, 256> byte_ids, int32_t unk_id, bool fuse_unk, bool ignore_merges,
               StringMap<int32_t> vocab_bytes) {
  byte_ids_ = byte_ids;
  unk_id_ = unk_id;
  fuse_unk_ = fuse_unk;
  ignore_merges_ = ignore_merges;
  vocab_bytes_ = std::move(vocab_bytes);
}

void Bpe::encode_word(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (word.size() == 1 && byte_ids_[static_cast<uint8_t>(word[0])] >= 0) {
    out->push_back(byte_ids_[static_cast<uint8_t>(word[0])]);
    return;
  }
  if (ignore_merges_) {
    auto it = vocab_bytes_.find(word);
    if (it != vocab_bytes_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kCacheMaxWord;
  if (cacheable) {
    std::shared_lock lock(cache_->mu);
    auto it = cache_->map.find(word);
    if (it != cache_->map.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out->size();
  merge_word(word, out);
  if (cacheable) {
    std::unique_lock lock(cache_->mu);
    if (cache_->map.size() < kCacheCapacity) {
      cache_->map.try_emplace(std::string(word), out->begin() + start, out->end());
    }
  }
}

// Initial symbols of a word: one per byte (unknown bytes become unk or are dropped, as in HF).
size_t Bpe::initial_symbols(std::string_view word, int32_t* syms) const {
  size_t n = 0;
  bool prev_unk = false;
  for (char c : word) {
    int32_t id = byte_ids_[static_cast<uint8_t>(c)];
    if (id < 0) {
      if (unk_id_ < 0 || (fuse_unk_ && prev_unk)) continue;
      id = unk_id_;
      prev_unk = true;
    } else {
      prev_unk = false;
    }
    syms[n++] = id;
  }
  return n;
}

// Repeatedly merges the adjacent pair with the lowest rank (leftmost on ties) until no pair has
// a merge. Short words: ranks[i] caches the rank of the pair (syms[i], syms[i+1]) and each step
// scans for the minimum, O(n^2) with a tiny constant and no allocation. Long words use a heap.
void Bpe::merge_word(std::string_view word, std::vector<int32_t>* out) const {
  constexpr int32_t kNone = std::numeric_limits<int32_t>::max();
  constexpr size_t kShort = 64;
  if (word.size() > kShort) {
    merge_long_word(word, out);
    return;
  }
  int32_t syms[kShort], ranks[kShort], merged[kShort];
  size_t n = initial_symbols(word, syms);
  auto rank_of = [&](size_t i, int32_t* merged_id) {
    auto it = merges_.find(key(syms[i], syms[i + 1]));
    if (it == merges_.end()) return kNone;
    *merged_id = it->second.id;
    return it->second.rank;
  };
  for (size_t i = 0; i + 1 < n; ++i) ranks[i] = rank_of(i, &merged[i]);
  while (n > 1) {
    size_t best = 0;
    int32_t best_rank = kNone;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (ranks[i] < best_rank) {
        best_rank = ranks[i];
        best = i;
      }
    }
    if (best_rank == kNone) break;
    syms[best] = merged[best];
    for (size_t i = best + 1; i + 1 < n; ++i) syms[i] = syms[i + 1];
    for (size_t i = best + 1; i + 2 < n; ++i) {
      ranks[i] = ranks[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best + 1 < n) ranks[best] = rank_of(best, &merged[best]);
    if (best > 0) ranks[best - 1] = rank_of(best - 1, &merged[best - 1]);
  }
  out->insert(out->end(), syms, syms + n);
}

// The same merge order for long words in O(n log n): symbols in a linked list, candidate pairs
// in a min-heap on (rank, left position); a popped candidate is stale when either side changed.
void Bpe::merge_long_word(std::string_view word, std::vector<int32_t>* out) const {
  std::vector<int32_t> syms(word.size());
  const auto n = static_cast<int32_t>(initial_symbols(word, syms.data()));
  std::vector<int32_t> next(n), prev(n);
  for (int32_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  struct Cand {
    int32_t rank, left, right, left_id, right_id, merged_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    auto it = merges_.find(key(syms[l], syms[r]));
    if (it != merges_.end()) heap.push({it->second.rank, l, r, syms[l], syms[r], it->second.id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i, i + 1);
  std::vector<bool> dead(n, false);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    if (dead[c.left] || dead[c.right] || next[c.left] != c.right || syms[c.left] != c.left_id ||
        syms[c.right] != c.right_id) {
      continue;
    }
    syms[c.left] = c.merged_id;
    dead[c.right] = true;
    next[c.left] = next[c.right];
    if (next[c.right] >= 0) prev[next[c.right]] = c.left;
    push(prev[c.left], c.left);
    push(c.left, next[c.left]);
  }
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = next[i]) out->push_back(syms[i]);
}

}  // namespace qwen35::tokenizer
