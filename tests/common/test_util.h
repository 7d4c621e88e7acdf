// Helpers shared by the tests: temporary directories, a minimal safetensors writer for building
// broken and modified checkpoints, fixture paths, and running the qwen35 binary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qwen35::testing {

// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct RawTensor {
  std::string name;
  std::string dtype;  // safetensors spelling
  std::vector<int64_t> shape;
  std::string bytes;
};

// Serialises tensors into safetensors bytes (header + data in the given order).
std::string safetensors_bytes(const std::vector<RawTensor>& tensors);
void write_file(const std::string& path, const std::string& bytes);
std::string read_file(const std::string& path);

// Absolute paths of test fixtures.
std::string source_dir();
std::string fixture_models_dir();
std::vector<std::string> fixture_model_names();  // every case folder under fixtures/models

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs the qwen35 binary with `args` (shell-quoted by the caller where needed).
CommandResult run_qwen35(const std::string& args);

}  // namespace qwen35::testing
