#include "formats/npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/mmap.h"

namespace qwen35::formats {

using core::error;

core::Status write_npy_f32(const std::string& path, const float* data,
                           const std::vector<int64_t>& shape) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  size_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]);
    dict += (shape.size() == 1 || i + 1 < shape.size()) ? "," : "";
    if (i + 1 < shape.size()) dict += " ";
    n *= size_t(shape[i]);
  }
  dict += "), }";
  size_t total = 10 + dict.size() + 1;
  size_t pad = (64 - total % 64) % 64;
  dict.append(pad, ' ');
  dict += '\n';
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f) return error("[npy] cannot write '" + path + "': " + std::strerror(errno));
  const uint16_t hlen = uint16_t(dict.size());
  const char magic[] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
  bool ok = std::fwrite(magic, 1, 8, f.get()) == 8;
  const uint8_t hl[2] = {uint8_t(hlen & 0xff), uint8_t(hlen >> 8)};
  ok = ok && std::fwrite(hl, 1, 2, f.get()) == 2;
  ok = ok && std::fwrite(dict.data(), 1, dict.size(), f.get()) == dict.size();
  ok = ok && (n == 0 || std::fwrite(data, sizeof(float), n, f.get()) == n);
  if (std::fflush(f.get()) != 0) ok = false;
  if (!ok) return error("[npy] short write to '" + path + "'");
  return core::Status();
}

core::Result<NpyArray> read_npy(const std::string& path) {
  auto mf = core::MappedFile::open(path);
  if (!mf.ok()) return error("[npy] " + mf.message());
  const uint8_t* p = (*mf)->data();
  const size_t size = (*mf)->size();
  if (size < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0) return error("[npy] '" + path + "' is not a .npy file");
  size_t hlen, off;
  if (p[6] == 1) {
    hlen = p[8] | (size_t(p[9]) << 8);
    off = 10;
  } else {
    if (size < 12) return error("[npy] '" + path + "' truncated");
    hlen = p[8] | (size_t(p[9]) << 8) | (size_t(p[10]) << 16) | (size_t(p[11]) << 24);
    off = 12;
  }
  if (off + hlen > size) return error("[npy] '" + path + "' header past end");
  std::string h(reinterpret_cast<const char*>(p + off), hlen);
  int width = 0;
  bool integer = false;
  if (h.find("'<f4'") != std::string::npos) width = 4;
  else if (h.find("'<f8'") != std::string::npos) width = 8;
  else if (h.find("'<i4'") != std::string::npos) width = 4, integer = true;
  else if (h.find("'<i8'") != std::string::npos) width = 8, integer = true;
  else return error("[npy] '" + path + "': only little-endian f4/f8/i4/i8 arrays are read");
  if (h.find("'fortran_order': False") == std::string::npos)
    return error("[npy] '" + path + "': Fortran order not supported");
  auto lp = h.find('('), rp = h.find(')');
  if (lp == std::string::npos || rp == std::string::npos || rp < lp) return error("[npy] bad shape in '" + path + "'");
  NpyArray a;
  std::string dims = h.substr(lp + 1, rp - lp - 1);
  size_t n = 1;
  for (size_t i = 0; i < dims.size();) {
    while (i < dims.size() && (dims[i] == ' ' || dims[i] == ',')) ++i;
    if (i >= dims.size()) break;
    size_t j = i;
    while (j < dims.size() && dims[j] >= '0' && dims[j] <= '9') ++j;
    if (j == i) return error("[npy] bad shape in '" + path + "'");
    a.shape.push_back(std::stoll(dims.substr(i, j - i)));
    n *= size_t(a.shape.back());
    i = j;
  }
  off += hlen;
  if (n > size || off + n * width > size) return error("[npy] '" + path + "' data truncated");
  if (integer) {
    a.ints.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (width == 4) {
        int32_t v;
        std::memcpy(&v, p + off + 4 * i, 4);
        a.ints[i] = v;
      } else {
        std::memcpy(&a.ints[i], p + off + 8 * i, 8);
      }
    }
    return a;
  }
  a.data.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (width == 4) {
      std::memcpy(&a.data[i], p + off + 4 * i, 4);
    } else {
      double d;
      std::memcpy(&d, p + off + 8 * i, 8);
      a.data[i] = float(d);
    }
  }
  return a;
}

}  // namespace qwen35::formats
