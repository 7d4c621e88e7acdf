// The prefix cache's snapshot files (serve --cache-dir): the format and its reading and writing,
// shared by the cache of one process (runtime/prefix_cache_file.cc) and by the ranks after 0 of a
// model split over MPI ranks, which keep their own layers' part of each snapshot
// (dist/pipeline_cache.cc).
//
// A file, little-endian: the magic "Q35PCv2\0"; u64 fingerprint, kv (the pool's K and V formats
// and the rotation's seed: kv_tag below), n_tokens (a multiple of kKvBlock), n_attention_layers,
// stride (bytes of K then V of one block and layer), n_recurrent; then the i32 token ids; for
// each block, for each attention layer, its K then V bytes; the f32 recurrent state; and an
// FNV-1a 64-bit checksum of everything before it. A file may hold a part of a snapshot (Part
// below: a rank's layers): then its layers and recurrent floats are the part's, and the header
// counts those. Each file holds the whole KV prefix of its
// snapshot, so nested snapshots repeat the KV they share. It is named
// <key>-<FNV-1a of its token ids>.q35pc (16 hex digits each; key: the fingerprint mixed with kv's
// formats, so pools of other KV types keep their own files side by side; an fp32 pool's key is
// the fingerprint); while being written it is <name>.tmp, which a reader never opens.
//
// Reading opens regular files only (a FIFO or a device could block or never end), checks the
// header against the model and pool and the file's size before anything else is read, then reads
// the body in file order straight into the caller's memory, hashing as it goes: no buffer holds
// a file.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/result.h"
#include "model/config.h"
#include "model/kv_pool.h"
#include "model/state.h"

namespace qwen35::model::snapshot_file {

inline constexpr char kExt[] = ".q35pc";
inline constexpr char kTmp[] = ".tmp";
inline constexpr uint64_t kFnvBasis = 1469598103934665603ull;

uint64_t fnv(const void* data, size_t n, uint64_t h = kFnvBasis);
std::string hex16(uint64_t v);
// Byte 0 K's type, byte 1 whether K is rotated, bytes 2 and 3 V's, bytes 4..7 the rotation's
// seed folded to 32 bits (rows rotated with other signs are another format).
uint64_t kv_tag(const KvPool& pool);
// The name prefix "<key>-" of a pool's files under `fingerprint`.
std::string key_prefix(uint64_t fingerprint, const KvPool& pool);
// A snapshot's file name: key_prefix, the FNV-1a of its token ids, kExt.
std::string file_name(uint64_t fingerprint, const KvPool& pool, uint64_t tokens_hash);

// What of a snapshot a file holds: the pool's attention layers [kv_first, kv_end) and these
// [offset, offset + count) ranges of the recurrent array (SequenceState::save_recurrent), in
// order. A process of one rank writes the whole; a rank of a model split by layers its own
// layers' part (the rest of its states is never computed there). The header's layer count and
// recurrent size are the part's.
struct Part {
  int64_t kv_first = 0, kv_end = 0;
  std::vector<std::pair<int64_t, int64_t>> recurrent;
  uint64_t recurrent_floats() const;
};
Part whole(const KvPool& pool, uint64_t recurrent_floats);
// The part of layers [first, end) of `c` (with the MTP head's layer and hidden row when `head`),
// laid out as `st` (a state of `pool`) lays out its snapshots.
Part layers_part(const ModelConfig& c, const SequenceState& st, const KvPool& pool, int64_t first,
                 int64_t end, bool head);

// Writes one snapshot file at `path` (a temporary name) and fsyncs it: its tokens, the KV of
// `blocks` (the pool's block of each kKvBlock positions) in the part's attention layers, and
// the part's ranges of `recurrent` (the whole array). "" or why not.
std::string write(const std::string& path, const KvPool& pool, const Part& part,
                  uint64_t fingerprint, std::span<const int32_t> tokens,
                  std::span<const int32_t> blocks, std::span<const float> recurrent);

// Reads one file in order. Every read hashes what it reads; checksum_matches() ends it.
class Reader {
 public:
  Reader() = default;
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  // "" when `path` is a regular file holding a snapshot of this pool's model under
  // `fingerprint` holding `part`, with the size its header implies; else why not. Then
  // n_tokens() is known and the body is next.
  std::string open(const std::string& path, const KvPool& pool, const Part& part,
                   uint64_t fingerprint);
  uint64_t n_tokens() const { return n_tokens_; }
  bool read_tokens(std::span<int32_t> dst) { return read(dst.data(), dst.size_bytes()); }
  // The next block's K and V of the part's attention layers into pool block `block`; with
  // block -1 they are read (and hashed) and dropped.
  bool read_block(const KvPool& pool, int32_t block);
  // The part's ranges of the recurrent array into `dst` (the whole array; the rest is left).
  bool read_recurrent(std::span<float> dst);
  // Reads the trailing checksum: whether it is the hash of everything read before it.
  bool checksum_matches();

 private:
  bool read(void* dst, size_t n);
  int fd_ = -1;
  Part part_;
  uint64_t size_ = 0, n_tokens_ = 0;
  uint64_t hash_ = kFnvBasis;
  std::vector<uint8_t> scratch_;  // a dropped block's layer
};

// fsyncs a directory, so that renames and removals in it survive a power cut. A filesystem
// that cannot sync directories (EINVAL) is not an error.
core::Status sync_dir(const std::string& dir);
// The files of `dir` named `prefix`* (snapshots and temporaries) that are not in `keep`.
core::Result<std::vector<std::string>> stale_files(const std::string& dir,
                                                   const std::string& prefix,
                                                   const std::vector<std::string>& keep);

}  // namespace qwen35::model::snapshot_file
