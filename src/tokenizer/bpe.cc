#include "tokenizer/bpe.h"

#include <limits>
#include <mutex>

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

// Repeatedly merges the adjacent pair with the lowest rank (leftmost on ties) until no pair has
// a merge. ranks[i] caches the rank of the pair (syms[i], syms[i+1]). O(n^2) in the worst case
// with a tiny constant; pieces are short.
void Bpe::merge_word(std::string_view word, std::vector<int32_t>* out) const {
  constexpr int32_t kNone = std::numeric_limits<int32_t>::max();
  // Small words use stack storage: no allocation in the common case.
  constexpr size_t kStack = 64;
  int32_t syms_buf[kStack], ranks_buf[kStack], ids_buf[kStack];
  std::vector<int32_t> syms_vec, ranks_vec, ids_vec;
  int32_t *syms = syms_buf, *ranks = ranks_buf, *merged = ids_buf;
  if (word.size() > kStack) {
    syms_vec.resize(word.size());
    ranks_vec.resize(word.size());
    ids_vec.resize(word.size());
    syms = syms_vec.data();
    ranks = ranks_vec.data();
    merged = ids_vec.data();
  }
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

}  // namespace qwen35::tokenizer
