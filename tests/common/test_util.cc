#include "test_util.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

namespace qwen35::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  std::random_device rd;
  for (;;) {
    fs::path p = fs::temp_directory_path() / ("qwen35_test_" + std::to_string(rd()));
    if (fs::create_directory(p)) {
      path_ = p.string();
      return;
    }
  }
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string safetensors_bytes(const std::vector<RawTensor>& tensors) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  size_t off = 0;
  std::string data;
  for (const auto& t : tensors) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
    data += t.bytes;
  }
  std::string header = h.dump();
  while ((8 + header.size()) % 8) header += ' ';
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out + header + data;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string source_dir() { return QWEN35_SOURCE_DIR; }
std::string fixture_models_dir() { return source_dir() + "/tests/fixtures/models"; }

std::vector<std::string> fixture_model_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(fixture_models_dir()))
    if (e.is_directory() && fs::exists(e.path() / "ckpt" / "config.json"))
      names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

CommandResult run_qwen35(const std::string& args) {
  TempDir tmp;
  const std::string out = tmp.file("out"), err = tmp.file("err");
  const std::string cmd = std::string(QWEN35_BINARY) + " " + args + " >" + out + " 2>" + err;
  int rc = std::system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + (WIFSIGNALED(rc) ? WTERMSIG(rc) : 0);
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

}  // namespace qwen35::testing
