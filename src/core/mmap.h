// Read-only memory-mapped files. The mapping lives as long as the MappedFile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/result.h"

namespace qwen35::core {

enum class LoadMode {
  kMmap,          // lazy file-backed mapping
  kMmapPopulate,  // file-backed, pre-faulted (MAP_POPULATE) and advised WILLNEED
  kAnonymous,     // read into anonymous memory on huge pages (immune to page-cache reclaim);
                  // a file that does not fit the available memory with room to spare is
                  // mapped as kMmap instead
};

class MappedFile {
 public:
  static Result<std::shared_ptr<MappedFile>> open(const std::string& path,
                                                  LoadMode mode = LoadMode::kMmap);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // A file-backed mapping: takes every page out of this process's page tables (the pages stay
  // in the page cache; a later read maps them again). Nothing for an anonymous copy.
  void drop_pages() const;
  bool anonymous() const { return anonymous_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool anonymous_ = false;
  std::string path_;
};

// Whole-file read into a string (small files: configs, indexes).
Result<std::string> read_text_file(const std::string& path);

}  // namespace qwen35::core
