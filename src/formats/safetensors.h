// safetensors reader: mmap, zero-copy views, sharded checkpoints (model.safetensors.index.json).
// Every read is bounds-checked: a malformed file is an error naming the file and the tensor,
// never a crash.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mmap.h"
#include "core/result.h"

namespace qwen35::formats {

struct TensorView {
  std::string name;
  core::DType dtype = core::DType::kUnknown;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // points into the mapping; valid while the store lives
  size_t nbytes = 0;
  std::string file;  // file name (no directory), for messages

  int64_t numel() const;
  std::string shape_str() const;  // "[3, 4]"
};

std::string shape_to_string(const std::vector<int64_t>& shape);

// One .safetensors file. Parses and validates the header on open.
class SafetensorsFile {
 public:
  static core::Result<std::shared_ptr<SafetensorsFile>> open(
      const std::string& path, core::LoadMode mode = core::LoadMode::kMmap);
  // Parses from memory already mapped (for tests and fuzzing); `bytes` must outlive the result.
  static core::Result<std::shared_ptr<SafetensorsFile>> parse(const uint8_t* bytes, size_t size,
                                                              const std::string& label);

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const core::MappedFile* mapping() const { return file_.get(); }

 private:
  std::shared_ptr<core::MappedFile> file_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint directory: model.safetensors.index.json when present, otherwise
// every *.safetensors file in the directory.
class TensorStore {
 public:
  static core::Result<TensorStore> open_dir(const std::string& dir,
                                            core::LoadMode mode = core::LoadMode::kMmap);
  const TensorView* find(const std::string& name) const;
  const std::map<std::string, TensorView>& all() const { return tensors_; }
  size_t total_bytes() const;
  // Reads every page of the mapped files once (so decoding never waits on a page fault),
  // calling progress(done_bytes, total_bytes) along the way.
  void prefault(const std::function<void(size_t, size_t)>& progress) const;
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorView> tensors_;
};

}  // namespace qwen35::formats
