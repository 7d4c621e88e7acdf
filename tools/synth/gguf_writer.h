// A streaming GGUF v3 writer (the layout src/formats/gguf.h reads): the metadata and the tensor
// infos are collected first, then the header is written and each tensor's bytes follow in the
// order the tensors were declared, in pieces of any size. Every tensor starts at a multiple of
// the alignment (general.alignment, 32), and the data section is padded after each tensor, as
// ggml's and gguf-py's writers do.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "formats/gguf.h"

namespace qwen35::tools {

class GgufWriter {
 public:
  static constexpr uint32_t kAlignment = 32;

  GgufWriter() = default;
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;
  ~GgufWriter();  // closes a file left open by an error

  // Metadata, written in the order given. Integers are u32 as llama.cpp's converter writes counts;
  // floats are f32.
  void add_string(const std::string& key, const std::string& v);
  void add_u32(const std::string& key, uint32_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_strings(const std::string& key, const std::vector<std::string>& v);
  void add_i32s(const std::string& key, const std::vector<int32_t>& v);
  void add_f32s(const std::string& key, const std::vector<float>& v);
  void add_bools(const std::string& key, const std::vector<bool>& v);

  // Declares a tensor (ne in ggml order, ne[0] contiguous) of `nbytes` bytes of data.
  void add_tensor(const std::string& name, const std::vector<int64_t>& ne, formats::GgmlType type,
                  uint64_t nbytes);

  // Creates `path` and writes the header, metadata and tensor infos.
  core::Status begin(const std::string& path);
  // Appends bytes of the current tensor; a tensor is complete when its nbytes have been written,
  // and the next call starts the next tensor (after the padding).
  core::Status write(const uint8_t* data, size_t n);
  // Checks that every tensor was written in full, and closes the file.
  core::Status finish();

  uint64_t data_bytes() const;  // the sum of the tensors' nbytes
  size_t n_tensors() const { return tensors_.size(); }

 private:
  struct Info {
    std::string name;
    std::vector<int64_t> ne;
    formats::GgmlType type;
    uint64_t nbytes;
    uint64_t offset;
  };
  void kv_header(const std::string& key, formats::GgufValueType t);
  core::Status put(const void* p, size_t n);
  core::Status pad_to(uint64_t multiple);

  std::string kv_;  // the metadata section's bytes
  uint64_t n_kv_ = 0;
  std::vector<Info> tensors_;
  uint64_t next_offset_ = 0;
  int fd_ = -1;
  std::string path_;
  uint64_t pos_ = 0;       // bytes written to the file
  uint64_t data_start_ = 0;
  size_t current_ = 0;     // the tensor being written
  uint64_t written_ = 0;   // of the current tensor
};

}  // namespace qwen35::tools
