// A GGUF v3 writer for tests: metadata and tensors in, file bytes out, with the hooks a broken
// file needs (raw dimension lists, types and offsets written as given). Also copies a parsed file,
// so a fixture can be rewritten with one thing changed.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "formats/gguf.h"

namespace qwen35::testing {

class GgufBuilder {
 public:
  using VT = formats::GgufValueType;

  struct Tensor {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type = 0;
    std::string data;        // written at the tensor's offset
    int64_t offset = -1;     // -1: the next aligned offset
  };

  // Scalars and strings: the value's bytes as written after the type.
  template <typename T>
  void scalar(const std::string& key, VT t, T v) {
    std::string b(sizeof(T), '\0');
    std::memcpy(b.data(), &v, sizeof(T));
    raw_kv(key, uint32_t(t), b);
  }
  void u32(const std::string& k, uint32_t v) { scalar(k, VT::kU32, v); }
  void i32(const std::string& k, int32_t v) { scalar(k, VT::kI32, v); }
  void u64(const std::string& k, uint64_t v) { scalar(k, VT::kU64, v); }
  void f32(const std::string& k, float v) { scalar(k, VT::kF32, v); }
  void boolean(const std::string& k, bool v) { scalar(k, VT::kBool, uint8_t(v)); }
  void str(const std::string& k, const std::string& v) { raw_kv(k, uint32_t(VT::kString), gstr(v)); }
  void strings(const std::string& k, const std::vector<std::string>& v) {
    std::string b = le(uint32_t(VT::kString)) + le(uint64_t(v.size()));
    for (const auto& s : v) b += gstr(s);
    raw_kv(k, uint32_t(VT::kArray), b);
  }
  void ints(const std::string& k, const std::vector<int32_t>& v) {
    std::string b = le(uint32_t(VT::kI32)) + le(uint64_t(v.size()));
    for (int32_t x : v) b += le(x);
    raw_kv(k, uint32_t(VT::kArray), b);
  }
  // A key/value pair exactly as given: the type number and the bytes after it.
  void raw_kv(const std::string& key, uint32_t type, const std::string& value_bytes) {
    erase_kv(key);
    kv_.push_back({key, type, value_bytes});
  }
  void erase_kv(const std::string& key) {
    for (size_t i = 0; i < kv_.size(); ++i)
      if (kv_[i].key == key) kv_.erase(kv_.begin() + long(i--));
  }

  void tensor(Tensor t) { tensors_.push_back(std::move(t)); }
  Tensor* find_tensor(const std::string& name) {
    for (auto& t : tensors_)
      if (t.name == name) return &t;
    return nullptr;
  }
  void erase_tensor(const std::string& name) {
    for (size_t i = 0; i < tensors_.size(); ++i)
      if (tensors_[i].name == name) tensors_.erase(tensors_.begin() + long(i--));
  }

  // Every key and tensor of a parsed file.
  void copy_from(const formats::GgufFile& f) {
    for (const auto& [key, v] : f.metadata()) raw_kv(key, uint32_t(v.type), value_bytes(v));
    for (const auto& t : f.tensors()) {
      Tensor c;
      c.name = t.name;
      for (int64_t d : t.ne) c.ne.push_back(uint64_t(d));
      c.type = uint32_t(t.type);
      c.data.assign(reinterpret_cast<const char*>(t.data), t.nbytes);
      tensors_.push_back(std::move(c));
    }
  }

  // The file. `alignment` pads the data section and each tensor (a general.alignment key, if any,
  // is the caller's to add).
  std::string build(uint64_t alignment = 32, uint32_t version = 3) const {
    std::string out = std::string("GGUF") + le(version) + le(uint64_t(tensors_.size())) + le(uint64_t(kv_.size()));
    for (const auto& kv : kv_) out += gstr(kv.key) + le(kv.type) + kv.bytes;
    std::vector<uint64_t> offsets;
    uint64_t at = 0;
    for (const auto& t : tensors_) {
      const uint64_t off = t.offset >= 0 ? uint64_t(t.offset) : at;
      offsets.push_back(off);
      at = std::max(at, (off + t.data.size() + alignment - 1) / alignment * alignment);
      out += gstr(t.name) + le(uint32_t(t.ne.size()));
      for (uint64_t d : t.ne) out += le(d);
      out += le(t.type) + le(off);
    }
    out.resize((out.size() + alignment - 1) / alignment * alignment, '\0');
    const size_t data_start = out.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const size_t end = data_start + offsets[i] + tensors_[i].data.size();
      if (out.size() < end) out.resize(end, '\0');
      std::memcpy(out.data() + data_start + offsets[i], tensors_[i].data.data(), tensors_[i].data.size());
    }
    return out;
  }

  template <typename T>
  static std::string le(T v) {
    std::string b(sizeof(T), '\0');
    std::memcpy(b.data(), &v, sizeof(T));
    return b;
  }
  static std::string gstr(const std::string& s) { return le(uint64_t(s.size())) + s; }

 private:
  struct Kv {
    std::string key;
    uint32_t type;
    std::string bytes;
  };

  static std::string scalar_bytes(VT t, int64_t i, double f) {
    switch (t) {
      case VT::kU8: case VT::kI8: case VT::kBool: return le(uint8_t(i));
      case VT::kU16: case VT::kI16: return le(uint16_t(i));
      case VT::kU32: case VT::kI32: return le(uint32_t(i));
      case VT::kF32: return le(float(f));
      case VT::kF64: return le(f);
      default: return le(uint64_t(i));
    }
  }
  static std::string value_bytes(const formats::GgufValue& v) {
    if (v.type == VT::kString) return gstr(v.s);
    if (v.type != VT::kArray) return scalar_bytes(v.type, v.i, v.f);
    std::string b = le(uint32_t(v.elem)) + le(uint64_t(v.array_size()));
    for (const auto& s : v.strings) b += gstr(s);
    for (int64_t i : v.ints) b += scalar_bytes(v.elem, i, 0);
    for (double f : v.floats) b += scalar_bytes(v.elem, 0, f);
    return b;
  }

  std::vector<Kv> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace qwen35::testing
