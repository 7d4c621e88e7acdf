#include "tools/synth/gguf_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace qwen35::tools {

using core::Status;
using formats::GgufValueType;

namespace {

template <typename T>
void append(std::string* s, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  s->append(b, sizeof(T));
}

void append_str(std::string* s, const std::string& v) {
  append(s, uint64_t(v.size()));
  s->append(v);
}

uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

}  // namespace

GgufWriter::~GgufWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void GgufWriter::kv_header(const std::string& key, GgufValueType t) {
  append_str(&kv_, key);
  append(&kv_, uint32_t(t));
  ++n_kv_;
}

void GgufWriter::add_string(const std::string& key, const std::string& v) {
  kv_header(key, GgufValueType::kString);
  append_str(&kv_, v);
}

void GgufWriter::add_u32(const std::string& key, uint32_t v) {
  kv_header(key, GgufValueType::kU32);
  append(&kv_, v);
}

void GgufWriter::add_f32(const std::string& key, float v) {
  kv_header(key, GgufValueType::kF32);
  append(&kv_, v);
}

void GgufWriter::add_bool(const std::string& key, bool v) {
  kv_header(key, GgufValueType::kBool);
  append(&kv_, uint8_t(v));
}

void GgufWriter::add_strings(const std::string& key, const std::vector<std::string>& v) {
  kv_header(key, GgufValueType::kArray);
  append(&kv_, uint32_t(GgufValueType::kString));
  append(&kv_, uint64_t(v.size()));
  for (const std::string& s : v) append_str(&kv_, s);
}

void GgufWriter::add_i32s(const std::string& key, const std::vector<int32_t>& v) {
  kv_header(key, GgufValueType::kArray);
  append(&kv_, uint32_t(GgufValueType::kI32));
  append(&kv_, uint64_t(v.size()));
  for (int32_t x : v) append(&kv_, x);
}

void GgufWriter::add_f32s(const std::string& key, const std::vector<float>& v) {
  kv_header(key, GgufValueType::kArray);
  append(&kv_, uint32_t(GgufValueType::kF32));
  append(&kv_, uint64_t(v.size()));
  for (float x : v) append(&kv_, x);
}

void GgufWriter::add_bools(const std::string& key, const std::vector<bool>& v) {
  kv_header(key, GgufValueType::kArray);
  append(&kv_, uint32_t(GgufValueType::kBool));
  append(&kv_, uint64_t(v.size()));
  for (bool x : v) append(&kv_, uint8_t(x));
}

void GgufWriter::add_tensor(const std::string& name, const std::vector<int64_t>& ne,
                            formats::GgmlType type, uint64_t nbytes) {
  tensors_.push_back(Info{name, ne, type, nbytes, next_offset_});
  next_offset_ = round_up(next_offset_ + nbytes, kAlignment);
}

uint64_t GgufWriter::data_bytes() const {
  uint64_t n = 0;
  for (const Info& t : tensors_) n += t.nbytes;
  return n;
}

Status GgufWriter::put(const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd_, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return core::error("[synth] write to '" + path_ + "' failed: " + std::strerror(errno));
    c += w;
    n -= size_t(w);
    pos_ += uint64_t(w);
  }
  return core::ok_status();
}

Status GgufWriter::pad_to(uint64_t multiple) {
  static const char zeros[kAlignment] = {};
  return put(zeros, size_t(round_up(pos_, multiple) - pos_));
}

Status GgufWriter::begin(const std::string& path) {
  path_ = path;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) return core::error("[synth] cannot create '" + path + "': " + std::strerror(errno));
  std::string h = "GGUF";
  append(&h, uint32_t(3));
  append(&h, uint64_t(tensors_.size()));
  append(&h, n_kv_);
  h += kv_;
  for (const Info& t : tensors_) {
    append_str(&h, t.name);
    append(&h, uint32_t(t.ne.size()));
    for (int64_t d : t.ne) append(&h, uint64_t(d));
    append(&h, uint32_t(t.type));
    append(&h, t.offset);
  }
  QWEN35_RETURN_IF_ERROR(put(h.data(), h.size()));
  QWEN35_RETURN_IF_ERROR(pad_to(kAlignment));
  data_start_ = pos_;
  current_ = 0;
  written_ = 0;
  return core::ok_status();
}

Status GgufWriter::write(const uint8_t* data, size_t n) {
  while (n > 0) {
    if (current_ >= tensors_.size())
      return core::error("[synth] '" + path_ + "': more tensor data than the tensors declared");
    const Info& t = tensors_[current_];
    if (written_ == 0 && pos_ != data_start_ + t.offset)
      return core::error("[synth] '" + path_ + "': tensor '" + t.name + "' is not at its offset");
    const size_t k = size_t(std::min<uint64_t>(n, t.nbytes - written_));
    QWEN35_RETURN_IF_ERROR(put(data, k));
    data += k;
    n -= k;
    written_ += k;
    if (written_ == t.nbytes) {
      QWEN35_RETURN_IF_ERROR(pad_to(kAlignment));
      ++current_;
      written_ = 0;
    }
  }
  return core::ok_status();
}

Status GgufWriter::finish() {
  if (current_ != tensors_.size())
    return core::error("[synth] '" + path_ + "': tensor '" + tensors_[current_].name +
                       "' was not written in full");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0)
    return core::error("[synth] closing '" + path_ + "' failed: " + std::strerror(errno));
  return core::ok_status();
}

}  // namespace qwen35::tools
