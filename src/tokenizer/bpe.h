// Byte-level BPE model: ranked merges over byte strings. Tokens are stored as raw bytes (the
// byte-level alphabet is undone at load time), so encoding works on the UTF-8 bytes directly.
//
// Thread-safety: encode_word() is const and safe to call concurrently; the word cache is guarded
// by a shared mutex.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace qwen35::tokenizer {

// Hash for heterogeneous lookup of std::string keys by std::string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

class Bpe {
 public:
  struct Merge {
    int32_t rank;
    int32_t id;  // id of the merged token
  };

  Bpe();
  // byte_ids[b] is the id of the single-byte token for byte b, or -1 when the vocab lacks it.
  // `unk_id` (or -1) replaces a byte without a token (HF drops such bytes when there is no unk).
  // `vocab_bytes` maps a token's bytes to its id; used when `ignore_merges` is set.
  void init(std::array<int32_t, 256> byte_ids, int32_t unk_id, bool fuse_unk, bool ignore_merges,
            StringMap<int32_t> vocab_bytes);
  void add_merge(int32_t left, int32_t right, Merge m) { merges_[key(left, right)] = m; }
  void reserve_merges(size_t n) { merges_.reserve(n); }
  bool has_merge(int32_t left, int32_t right) const { return merges_.count(key(left, right)) != 0; }

  // Appends the ids of one pre-tokenized piece (raw bytes).
  void encode_word(std::string_view word, std::vector<int32_t>* out) const;

 private:
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  size_t initial_symbols(std::string_view word, int32_t* syms) const;
  void merge_word(std::string_view word, std::vector<int32_t>* out) const;
  void merge_long_word(std::string_view word, std::vector<int32_t>* out) const;

  std::array<int32_t, 256> byte_ids_{};
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  StringMap<int32_t> vocab_bytes_;
  std::unordered_map<uint64_t, Merge> merges_;

  // Word cache: piece bytes -> ids. Bounded; when full, new words are not cached.
  static constexpr size_t kCacheCapacity = 1 << 16;
  static constexpr size_t kCacheMaxWord = 256;
  struct Cache {
    std::shared_mutex mu;
    StringMap<std::vector<int32_t>> map;
  };
  std::unique_ptr<Cache> cache_;
};

}  // namespace qwen35::tokenizer
