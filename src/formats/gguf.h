// GGUF v3 reader (the llama.cpp file format): mmap, zero-copy tensor views, metadata, split sets
// (`NAME-00001-of-0000N.gguf`). Every count, length, offset and size is checked against the file
// before it is used: a malformed file is a one-line error naming the key or tensor, never a crash.
//
// Layout: "GGUF", u32 version, u64 tensor count, u64 key/value count; the key/value pairs (string
// key, u32 value type, value); the tensor infos (string name, u32 n_dims, u64 ne[n_dims] with
// ne[0] the contiguous dimension, u32 ggml type, u64 offset into the data section); padding to
// `general.alignment` (default 32); the data section. Strings are u64 length + bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/mmap.h"
#include "core/result.h"

namespace qwen35::formats {

// ggml tensor types, with their file numbers.
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15, kIQ2_XXS = 16,
  kIQ2_XS = 17, kIQ3_XXS = 18, kIQ1_S = 19, kIQ4_NL = 20, kIQ3_S = 21, kIQ2_S = 22, kIQ4_XS = 23,
  kI8 = 24, kI16 = 25, kI32 = 26, kI64 = 27, kF64 = 28, kIQ1_M = 29, kBF16 = 30, kTQ1_0 = 34,
  kTQ2_0 = 35, kMXFP4 = 39,
};

// Elements and bytes per block of a type; {0, 0} for a number that is no known type.
struct GgmlBlock {
  int64_t elements = 0;
  int64_t bytes = 0;
};
GgmlBlock ggml_block(GgmlType t);
// "Q4_K", or "type 77" for an unknown number.
std::string ggml_type_name(GgmlType t);

enum class GgufValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8,
  kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
std::string_view gguf_value_type_name(GgufValueType t);

// One metadata value. Integers and bools are held in `i` (u64 values above INT64_MAX are refused
// at parse time), floats in `f`, strings in `s`; arrays hold their elements in `ints`, `floats`
// or `strings` by element type (arrays of arrays are refused).
struct GgufValue {
  GgufValueType type = GgufValueType::kU8;
  GgufValueType elem = GgufValueType::kU8;  // arrays only
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;

  bool is_int() const;    // an integer or bool type
  bool is_float() const;  // f32 or f64
  bool is_array() const { return type == GgufValueType::kArray; }
  size_t array_size() const;
};

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> ne;  // ggml order: ne[0] contiguous
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // file name, for messages

  int64_t numel() const;
  // "[ne0, ne1, ...]" in ggml order.
  std::string shape_str() const;
};

// One .gguf file.
class GgufFile {
 public:
  static core::Result<std::shared_ptr<GgufFile>> open(const std::string& path,
                                                      core::LoadMode mode = core::LoadMode::kMmap);
  // Parses memory already mapped (tests, fuzzing); `bytes` must outlive the result.
  static core::Result<std::shared_ptr<GgufFile>> parse(const uint8_t* bytes, size_t size,
                                                       const std::string& label);

  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const std::string& label() const { return label_; }
  const core::MappedFile* mapping() const { return file_.get(); }

 private:
  std::shared_ptr<core::MappedFile> file_;
  std::string label_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensor> tensors_;
};

// A model: one .gguf file, or every shard of a split set given its first (or any) shard. The
// metadata is the first shard's; tensors are looked up across all shards.
class GgufModel {
 public:
  static core::Result<std::shared_ptr<GgufModel>> open(const std::string& path,
                                                       core::LoadMode mode = core::LoadMode::kMmap);
  // From files already parsed, the first holding the metadata (tests).
  static core::Result<std::shared_ptr<GgufModel>> from_files(
      std::vector<std::shared_ptr<GgufFile>> files);

  const std::map<std::string, GgufValue>& metadata() const { return files_.front()->metadata(); }
  const GgufValue* find_value(const std::string& key) const;
  const GgufTensor* find(const std::string& name) const;
  const std::map<std::string, const GgufTensor*>& tensors() const { return tensors_; }
  const std::vector<std::shared_ptr<GgufFile>>& files() const { return files_; }
  const std::string& path() const { return path_; }
  size_t total_bytes() const;
  // Reads every page of the tensor data once (see TensorStore::prefault).
  void prefault(const std::function<void(size_t, size_t)>& progress) const;

  // Typed metadata access. Each fails with an error naming the key when it is absent, of another
  // type or out of range.
  core::Result<int64_t> get_int(const std::string& key) const;
  core::Result<double> get_float(const std::string& key) const;  // an int is accepted too
  core::Result<std::string> get_string(const std::string& key) const;
  // The integer, or `fallback` when the key is absent (still an error when it has another type).
  core::Result<int64_t> get_int_or(const std::string& key, int64_t fallback) const;

 private:
  std::vector<std::shared_ptr<GgufFile>> files_;
  std::map<std::string, const GgufTensor*> tensors_;
  std::string path_;
};

// Whether `path` names a GGUF file (by its extension).
bool is_gguf_path(const std::string& path);

// The files of the model `path` names: every shard of a split set NAME-0000i-of-0000N.gguf (from
// any shard's name), or `path` alone.
std::vector<std::string> gguf_file_set(const std::string& path);

}  // namespace qwen35::formats
