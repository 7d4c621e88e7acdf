#include "tools/synth/st_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

namespace qwen35::tools {

using core::Result;
using core::Status;
using json = nlohmann::json;

namespace {

constexpr uint64_t kChunkBytes = uint64_t(8) << 20;  // multiple of every dtype size and block

double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

class FileOut {
 public:
  static Result<std::unique_ptr<FileOut>> create(const std::string& path) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return core::error("[synth] cannot create '" + path + "': " + std::strerror(errno));
    return std::unique_ptr<FileOut>(new FileOut(fd, path));
  }
  ~FileOut() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status write(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      const ssize_t w = ::write(fd_, c, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0)
        return core::error("[synth] write to '" + path_ + "' failed: " + std::strerror(errno));
      c += w;
      n -= size_t(w);
    }
    return core::ok_status();
  }
  Status close() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0)
      return core::error("[synth] closing '" + path_ + "' failed: " + std::strerror(errno));
    return core::ok_status();
  }

 private:
  FileOut(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

std::string format_header(const std::vector<const TensorSpec*>& tensors,
                          const std::string& format) {
  json h = json::object();
  h["__metadata__"] = {{"format", format}};
  uint64_t off = 0;
  for (const TensorSpec* t : tensors) {
    h[t->name] = {{"dtype", std::string(core::dtype_name(t->dtype))},
                  {"shape", t->shape},
                  {"data_offsets", {off, off + t->nbytes()}}};
    off += t->nbytes();
  }
  std::string s = h.dump();
  s.append((8 - s.size() % 8) % 8, ' ');  // data section 8-byte aligned
  return s;
}

Status write_shard(const std::string& path, const std::vector<const TensorSpec*>& tensors,
                   const std::string& format, uint64_t seed, std::vector<uint8_t>* buf,
                   Progress* progress) {
  QWEN35_ASSIGN_OR_RETURN(auto out, FileOut::create(path));
  const std::string header = format_header(tensors, format);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  QWEN35_RETURN_IF_ERROR(out->write(len, 8));
  QWEN35_RETURN_IF_ERROR(out->write(header.data(), header.size()));
  for (const TensorSpec* t : tensors) {
    const uint64_t esize = core::dtype_size(t->dtype);
    const uint64_t per_chunk = kChunkBytes / esize;
    const uint64_t n = t->numel();
    for (uint64_t e = 0; e < n; e += per_chunk) {
      const uint64_t cnt = std::min(per_chunk, n - e);
      fill_tensor(*t, seed, e, cnt, buf->data());
      QWEN35_RETURN_IF_ERROR(out->write(buf->data(), cnt * esize));
      progress->add(cnt * esize);
    }
  }
  return out->close();
}

}  // namespace

void Progress::add(uint64_t bytes) {
  done_ += bytes;
  draw(false);
}

void Progress::finish() {
  draw(true);
  if (enabled_) std::fputc('\n', stderr);
}

void Progress::draw(bool force) {
  if (!enabled_) return;
  const double t = now_s();
  if (start_ < 0) start_ = t;
  if (!force && t - last_draw_ < 0.1) return;
  last_draw_ = t;
  constexpr int kWidth = 30;
  const double frac = total_ ? double(done_) / double(total_) : 1.0;
  char bar[kWidth + 1];
  const int fill = int(frac * kWidth);
  for (int i = 0; i < kWidth; ++i) bar[i] = i < fill ? '#' : '.';
  bar[kWidth] = '\0';
  const double el = t - start_;
  const double rate = el > 0 ? double(done_) / el / 1e6 : 0.0;
  std::fprintf(stderr, "\r[synth] [%s] %5.1f%%  %.2f / %.2f GB  %.0f MB/s ", bar, 100.0 * frac,
               double(done_) / 1e9, double(total_) / 1e9, rate);
  std::fflush(stderr);
}

uint64_t plan_bytes(const TensorPlan& plan) {
  uint64_t n = 0;
  for (const TensorSpec& t : plan.tensors) n += t.nbytes();
  return n;
}

Result<ShardedOutput> write_checkpoint_tensors(const std::string& dir, const TensorPlan& plan,
                                               Dialect dialect, uint64_t seed,
                                               uint64_t max_shard_bytes, bool progress) {
  namespace fs = std::filesystem;
  ShardedOutput res;
  res.total_bytes = plan_bytes(plan);
  // Greedy split in name order: a new shard starts when the next tensor would overflow this one.
  std::vector<std::vector<const TensorSpec*>> shards(1);
  uint64_t acc = 0;
  for (const TensorSpec& t : plan.tensors) {
    if (!shards.back().empty() && acc + t.nbytes() > max_shard_bytes) {
      shards.emplace_back();
      acc = 0;
    }
    shards.back().push_back(&t);
    acc += t.nbytes();
  }
  const size_t n = shards.size();
  for (size_t i = 0; i < n; ++i) {
    if (n == 1) {
      res.files.push_back("model.safetensors");
      break;
    }
    char name[80];
    std::snprintf(name, sizeof(name),
                  dialect == Dialect::kHf ? "model.safetensors-%05zu-of-%05zu.safetensors"
                                        : "model-%05zu-of-%05zu.safetensors",
                  i + 1, n);
    res.files.push_back(name);
  }
  const std::string format = dialect == Dialect::kHf ? "pt" : "mlx";
  std::vector<uint8_t> buf(kChunkBytes);
  Progress bar(res.total_bytes, progress);
  for (size_t i = 0; i < n; ++i)
    QWEN35_RETURN_IF_ERROR(
        write_shard((fs::path(dir) / res.files[i]).string(), shards[i], format, seed, &buf, &bar));
  bar.finish();
  if (n > 1) {
    json wm = json::object();
    for (size_t i = 0; i < n; ++i)
      for (const TensorSpec* t : shards[i]) wm[t->name] = res.files[i];
    json index = {{"metadata", {{"total_size", res.total_bytes}}}, {"weight_map", wm}};
    const std::string text = index.dump(2) + "\n";
    QWEN35_ASSIGN_OR_RETURN(
        auto out, FileOut::create((fs::path(dir) / "model.safetensors.index.json").string()));
    QWEN35_RETURN_IF_ERROR(out->write(text.data(), text.size()));
    QWEN35_RETURN_IF_ERROR(out->close());
  }
  return res;
}

}  // namespace qwen35::tools
