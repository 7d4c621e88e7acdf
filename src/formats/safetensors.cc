#include "formats/safetensors.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace qwen35::formats {

using core::DType;
using core::error;
using core::Result;
using json = nlohmann::json;

namespace {
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // safetensors' own limit

bool supported_dtype(DType t) {
  switch (t) {
    case DType::kF64: case DType::kF32: case DType::kF16: case DType::kBF16:
    case DType::kI32: case DType::kU32: case DType::kU8:
      return true;
    default:
      return false;
  }
}
}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string TensorView::shape_str() const { return shape_to_string(shape); }

Result<std::shared_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path,
                                                               core::LoadMode mode) {
  auto mf = core::MappedFile::open(path, mode);
  if (!mf.ok()) return error("[safetensors] " + mf.message());
  const std::string label = std::filesystem::path(path).filename().string();
  auto parsed = parse((*mf)->data(), (*mf)->size(), label);
  if (!parsed.ok()) return parsed.status();
  (*parsed)->file_ = *mf;
  return parsed;
}

Result<std::shared_ptr<SafetensorsFile>> SafetensorsFile::parse(const uint8_t* bytes, size_t size,
                                                                const std::string& label) {
  const std::string where = "[safetensors] '" + label + "'";
  if (size < 8) return error(where + ": file too short for a header (" + std::to_string(size) + " bytes)");
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | bytes[i];
  if (hlen > kMaxHeaderBytes)
    return error(where + ": header length " + std::to_string(hlen) + " exceeds the 100 MiB limit");
  if (hlen > size - 8)
    return error(where + ": header length " + std::to_string(hlen) + " runs past the end of the " +
                 std::to_string(size) + "-byte file (truncated?)");
  const char* hbeg = reinterpret_cast<const char*>(bytes + 8);
  json header = json::parse(hbeg, hbeg + hlen, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return error(where + ": header is not valid JSON");
  if (!header.is_object()) return error(where + ": header is not a JSON object");

  const uint8_t* data = bytes + 8 + hlen;
  const uint64_t data_size = size - 8 - hlen;
  auto out = std::shared_ptr<SafetensorsFile>(new SafetensorsFile());
  struct Span {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) return error(where + ": __metadata__ is not an object");
      for (auto m = e.begin(); m != e.end(); ++m)
        if (m.value().is_string()) out->metadata_[m.key()] = m.value().get<std::string>();
      continue;
    }
    const std::string tw = where + " tensor '" + name + "'";
    if (!e.is_object()) return error(tw + ": entry is not an object");
    auto dt = e.find("dtype");
    auto sh = e.find("shape");
    auto of = e.find("data_offsets");
    if (dt == e.end() || !dt->is_string()) return error(tw + ": missing or non-string 'dtype'");
    if (sh == e.end() || !sh->is_array()) return error(tw + ": missing or non-array 'shape'");
    if (of == e.end() || !of->is_array() || of->size() != 2 || !(*of)[0].is_number_unsigned() ||
        !(*of)[1].is_number_unsigned())
      return error(tw + ": 'data_offsets' must be two non-negative integers");
    TensorView v;
    v.name = name;
    v.file = label;
    const std::string dname = dt->get<std::string>();
    v.dtype = core::dtype_from_name(dname);
    if (!supported_dtype(v.dtype)) return error(tw + ": unsupported dtype '" + dname + "'");
    uint64_t numel = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned()) return error(tw + ": shape entries must be non-negative integers");
      uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && numel > (uint64_t(1) << 62) / dim) return error(tw + ": shape overflows");
      numel *= dim;
      v.shape.push_back(int64_t(dim));
    }
    const uint64_t b = (*of)[0].get<uint64_t>(), en = (*of)[1].get<uint64_t>();
    if (b > en) return error(tw + ": data_offsets begin " + std::to_string(b) + " > end " + std::to_string(en));
    if (en > data_size)
      return error(tw + ": data offset " + std::to_string(en) + " past end of file (data section is " +
                   std::to_string(data_size) + " bytes)");
    const uint64_t want = numel * core::dtype_size(v.dtype);
    if (en - b != want)
      return error(tw + ": " + dname + " x " + v.shape_str() + " needs " + std::to_string(want) +
                   " bytes but data_offsets span " + std::to_string(en - b));
    v.data = data + b;
    v.nbytes = size_t(en - b);
    spans.push_back({b, en, name});
    out->tensors_.emplace(name, std::move(v));
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& x, const Span& y) { return x.begin < y.begin || (x.begin == y.begin && x.end < y.end); });
  uint64_t cursor = 0;
  for (const auto& s : spans) {
    if (s.begin < cursor)
      return error(where + " tensor '" + s.name + "': data overlaps the previous tensor");
    if (s.begin > cursor)
      return error(where + " tensor '" + s.name + "': gap in the data section before offset " +
                   std::to_string(s.begin) + " (out-of-order or padded data)");
    cursor = s.end;
  }
  if (cursor != data_size)
    return error(where + ": " + std::to_string(data_size - cursor) +
                 " trailing bytes after the last tensor");
  return out;
}

Result<TensorStore> TensorStore::open_dir(const std::string& dir, core::LoadMode mode) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return error("[checkpoint] '" + dir + "' does not exist");
  if (!fs::is_directory(dir, ec)) return error("[checkpoint] '" + dir + "' is not a directory");
  TensorStore store;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> files;
  json weight_map;
  if (fs::exists(index, ec)) {
    auto text = core::read_text_file(index.string());
    if (!text.ok()) return error("[safetensors] " + text.message());
    json j = json::parse(*text, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      return error("[safetensors] 'model.safetensors.index.json' is not valid JSON");
    auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object())
      return error("[safetensors] 'model.safetensors.index.json' has no 'weight_map' object");
    weight_map = *wm;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string())
        return error("[safetensors] index entry for '" + it.key() + "' is not a file name");
      const std::string f = it.value().get<std::string>();
      if (f.find('/') != std::string::npos || f == "..")
        return error("[safetensors] index names a file outside the directory: '" + f + "'");
      if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
    }
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".safetensors") files.push_back(e.path().filename().string());
    std::sort(files.begin(), files.end());
  }
  if (files.empty()) return error("[checkpoint] no .safetensors files in '" + dir + "'");
  for (const auto& f : files) {
    auto sf = SafetensorsFile::open((fs::path(dir) / f).string(), mode);
    if (!sf.ok()) return sf.status();
    for (const auto& [name, view] : (*sf)->tensors()) {
      if (!weight_map.is_null()) {
        auto it = weight_map.find(name);
        if (it == weight_map.end() || it->get<std::string>() != f) continue;  // not the index's copy
      }
      if (!store.tensors_.emplace(name, view).second)
        return error("[safetensors] tensor '" + name + "' appears in more than one file");
    }
    store.files_.push_back(*sf);
  }
  if (!weight_map.is_null())
    for (auto it = weight_map.begin(); it != weight_map.end(); ++it)
      if (store.tensors_.find(it.key()) == store.tensors_.end())
        return error("[safetensors] index lists tensor '" + it.key() + "' in '" +
                     it.value().get<std::string>() + "' but that file does not hold it");
  return store;
}

const TensorView* TensorStore::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

void TensorStore::prefault(const std::function<void(size_t, size_t)>& progress) const {
  size_t total = 0, done = 0;
  for (const auto& f : files_)
    if (f->mapping()) total += f->mapping()->size();
  constexpr size_t kPage = 4096, kStep = size_t(16) << 20;
  volatile uint8_t sink = 0;
  for (const auto& f : files_) {
    const core::MappedFile* m = f->mapping();
    if (m == nullptr) continue;
    for (size_t off = 0; off < m->size(); off += kStep) {
      const size_t end = std::min(m->size(), off + kStep);
      for (size_t p = off; p < end; p += kPage) sink = sink + m->data()[p];
      done += end - off;
      if (progress) progress(done, total);
    }
  }
}

size_t TensorStore::total_bytes() const {
  size_t n = 0;
  for (const auto& [_, v] : tensors_) n += v.nbytes;
  return n;
}

}  // namespace qwen35::formats
