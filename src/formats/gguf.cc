#include "formats/gguf.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

namespace qwen35::formats {

using core::error;
using core::Result;
using core::Status;

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint32_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;               // GGML_MAX_DIMS
constexpr uint64_t kMaxKeyBytes = 1 << 16;

struct TypeRow {
  GgmlType type;
  const char* name;
  GgmlBlock block;
};

constexpr TypeRow kTypes[] = {
    {GgmlType::kF32, "F32", {1, 4}},          {GgmlType::kF16, "F16", {1, 2}},
    {GgmlType::kQ4_0, "Q4_0", {32, 18}},      {GgmlType::kQ4_1, "Q4_1", {32, 20}},
    {GgmlType::kQ5_0, "Q5_0", {32, 22}},      {GgmlType::kQ5_1, "Q5_1", {32, 24}},
    {GgmlType::kQ8_0, "Q8_0", {32, 34}},      {GgmlType::kQ8_1, "Q8_1", {32, 36}},
    {GgmlType::kQ2_K, "Q2_K", {256, 84}},     {GgmlType::kQ3_K, "Q3_K", {256, 110}},
    {GgmlType::kQ4_K, "Q4_K", {256, 144}},    {GgmlType::kQ5_K, "Q5_K", {256, 176}},
    {GgmlType::kQ6_K, "Q6_K", {256, 210}},    {GgmlType::kQ8_K, "Q8_K", {256, 292}},
    {GgmlType::kIQ2_XXS, "IQ2_XXS", {256, 66}}, {GgmlType::kIQ2_XS, "IQ2_XS", {256, 74}},
    {GgmlType::kIQ3_XXS, "IQ3_XXS", {256, 98}}, {GgmlType::kIQ1_S, "IQ1_S", {256, 50}},
    {GgmlType::kIQ4_NL, "IQ4_NL", {32, 18}},  {GgmlType::kIQ3_S, "IQ3_S", {256, 110}},
    {GgmlType::kIQ2_S, "IQ2_S", {256, 82}},   {GgmlType::kIQ4_XS, "IQ4_XS", {256, 136}},
    {GgmlType::kI8, "I8", {1, 1}},            {GgmlType::kI16, "I16", {1, 2}},
    {GgmlType::kI32, "I32", {1, 4}},          {GgmlType::kI64, "I64", {1, 8}},
    {GgmlType::kF64, "F64", {1, 8}},          {GgmlType::kIQ1_M, "IQ1_M", {256, 56}},
    {GgmlType::kBF16, "BF16", {1, 2}},        {GgmlType::kTQ1_0, "TQ1_0", {256, 54}},
    {GgmlType::kTQ2_0, "TQ2_0", {256, 66}},   {GgmlType::kMXFP4, "MXFP4", {32, 17}},
};

const TypeRow* type_row(GgmlType t) {
  for (const TypeRow& r : kTypes)
    if (r.type == t) return &r;
  return nullptr;
}

// A bounds-checked reader over the file's bytes.
class Cursor {
 public:
  Cursor(const uint8_t* p, size_t n, std::string where) : p_(p), n_(n), where_(std::move(where)) {}
  size_t pos() const { return pos_; }
  size_t left() const { return n_ - pos_; }
  Status fail(const std::string& what) const {
    return error(where_ + ": " + what + " (at byte " + std::to_string(pos_) + ")");
  }
  template <typename T>
  Status read(T* out, const char* what) {
    if (left() < sizeof(T)) return fail(std::string("file ends inside ") + what);
    std::memcpy(out, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status();
  }
  Status string(std::string* out, const std::string& what, uint64_t max_len) {
    uint64_t len = 0;
    QWEN35_RETURN_IF_ERROR(read(&len, (what + " length").c_str()));
    if (len > left()) return fail(what + ": length " + std::to_string(len) + " runs past the end of the file");
    if (len > max_len) return fail(what + ": length " + std::to_string(len) + " exceeds " + std::to_string(max_len));
    out->assign(reinterpret_cast<const char*>(p_ + pos_), size_t(len));
    pos_ += size_t(len);
    return Status();
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
  std::string where_;
};

size_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8: case GgufValueType::kI8: case GgufValueType::kBool: return 1;
    case GgufValueType::kU16: case GgufValueType::kI16: return 2;
    case GgufValueType::kU32: case GgufValueType::kI32: case GgufValueType::kF32: return 4;
    case GgufValueType::kU64: case GgufValueType::kI64: case GgufValueType::kF64: return 8;
    default: return 0;
  }
}

bool known_value_type(uint32_t t) { return t <= uint32_t(GgufValueType::kF64); }

// One scalar of type t (not string/array) as an integer or a double.
Status read_scalar(Cursor& c, GgufValueType t, const std::string& what, int64_t* i, double* f,
                   bool* is_float) {
  *is_float = false;
  switch (t) {
#define QWEN35_INT(ENUM, CTYPE)                                     \
  case GgufValueType::ENUM: {                                       \
    CTYPE v = 0;                                                    \
    QWEN35_RETURN_IF_ERROR(c.read(&v, what.c_str()));               \
    *i = int64_t(v);                                                \
    return Status();                                                \
  }
    QWEN35_INT(kU8, uint8_t)
    QWEN35_INT(kI8, int8_t)
    QWEN35_INT(kU16, uint16_t)
    QWEN35_INT(kI16, int16_t)
    QWEN35_INT(kU32, uint32_t)
    QWEN35_INT(kI32, int32_t)
    QWEN35_INT(kI64, int64_t)
#undef QWEN35_INT
    case GgufValueType::kBool: {
      uint8_t v = 0;
      QWEN35_RETURN_IF_ERROR(c.read(&v, what.c_str()));
      if (v > 1) return c.fail(what + ": bool value " + std::to_string(v));
      *i = v;
      return Status();
    }
    case GgufValueType::kU64: {
      uint64_t v = 0;
      QWEN35_RETURN_IF_ERROR(c.read(&v, what.c_str()));
      if (v > uint64_t(std::numeric_limits<int64_t>::max()))
        return c.fail(what + ": u64 value " + std::to_string(v) + " out of range");
      *i = int64_t(v);
      return Status();
    }
    case GgufValueType::kF32: {
      float v = 0;
      QWEN35_RETURN_IF_ERROR(c.read(&v, what.c_str()));
      *f = v;
      *is_float = true;
      return Status();
    }
    case GgufValueType::kF64: {
      double v = 0;
      QWEN35_RETURN_IF_ERROR(c.read(&v, what.c_str()));
      *f = v;
      *is_float = true;
      return Status();
    }
    default:
      return c.fail(what + ": not a scalar type");
  }
}

Status read_value(Cursor& c, const std::string& key, GgufValue* v) {
  uint32_t t = 0;
  QWEN35_RETURN_IF_ERROR(c.read(&t, ("type of '" + key + "'").c_str()));
  if (!known_value_type(t)) return c.fail("key '" + key + "': unknown value type " + std::to_string(t));
  v->type = GgufValueType(t);
  const std::string what = "value of '" + key + "'";
  if (v->type == GgufValueType::kString) return c.string(&v->s, what, c.left());
  if (v->type != GgufValueType::kArray) {
    bool is_float;
    return read_scalar(c, v->type, what, &v->i, &v->f, &is_float);
  }
  uint32_t et = 0;
  uint64_t count = 0;
  QWEN35_RETURN_IF_ERROR(c.read(&et, ("element type of '" + key + "'").c_str()));
  QWEN35_RETURN_IF_ERROR(c.read(&count, ("element count of '" + key + "'").c_str()));
  if (!known_value_type(et)) return c.fail("key '" + key + "': unknown array element type " + std::to_string(et));
  v->elem = GgufValueType(et);
  if (v->elem == GgufValueType::kArray) return c.fail("key '" + key + "': arrays of arrays are not supported");
  // Each element takes at least this many bytes: a count the rest of the file cannot hold is
  // refused before anything is allocated for it.
  const size_t min_elem = v->elem == GgufValueType::kString ? 8 : scalar_size(v->elem);
  if (count > c.left() / min_elem)
    return c.fail("key '" + key + "': " + std::to_string(count) + " elements cannot fit in the rest of the file");
  if (v->elem == GgufValueType::kString) {
    v->strings.resize(size_t(count));
    for (uint64_t k = 0; k < count; ++k)
      QWEN35_RETURN_IF_ERROR(c.string(&v->strings[k], what + "[" + std::to_string(k) + "]", c.left()));
    return Status();
  }
  const bool floats = v->elem == GgufValueType::kF32 || v->elem == GgufValueType::kF64;
  if (floats) v->floats.resize(size_t(count));
  else v->ints.resize(size_t(count));
  for (uint64_t k = 0; k < count; ++k) {
    int64_t iv = 0;
    double fv = 0;
    bool is_float;
    QWEN35_RETURN_IF_ERROR(read_scalar(c, v->elem, what, &iv, &fv, &is_float));
    if (floats) v->floats[k] = fv;
    else v->ints[k] = iv;
  }
  return Status();
}

}  // namespace

GgmlBlock ggml_block(GgmlType t) {
  const TypeRow* r = type_row(t);
  return r ? r->block : GgmlBlock{};
}

std::string ggml_type_name(GgmlType t) {
  const TypeRow* r = type_row(t);
  return r ? r->name : "type " + std::to_string(uint32_t(t));
}

std::string_view gguf_value_type_name(GgufValueType t) {
  static constexpr const char* kNames[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                           "bool", "string", "array", "u64", "i64", "f64"};
  return uint32_t(t) <= uint32_t(GgufValueType::kF64) ? kNames[uint32_t(t)] : "unknown";
}

bool GgufValue::is_int() const {
  return type != GgufValueType::kString && type != GgufValueType::kArray && type != GgufValueType::kF32 &&
         type != GgufValueType::kF64;
}
bool GgufValue::is_float() const { return type == GgufValueType::kF32 || type == GgufValueType::kF64; }
size_t GgufValue::array_size() const { return ints.size() + floats.size() + strings.size(); }

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

std::string GgufTensor::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

Result<std::shared_ptr<GgufFile>> GgufFile::open(const std::string& path, core::LoadMode mode) {
  auto mf = core::MappedFile::open(path, mode);
  if (!mf.ok()) return error("[gguf] " + mf.message());
  auto parsed = parse((*mf)->data(), (*mf)->size(), std::filesystem::path(path).filename().string());
  if (!parsed.ok()) return parsed.status();
  (*parsed)->file_ = *mf;
  return parsed;
}

Result<std::shared_ptr<GgufFile>> GgufFile::parse(const uint8_t* bytes, size_t size,
                                                  const std::string& label) {
  auto f = std::shared_ptr<GgufFile>(new GgufFile());
  f->label_ = label;
  const std::string where = "[gguf] '" + label + "'";
  Cursor c(bytes, size, where);
  uint32_t magic = 0;
  QWEN35_RETURN_IF_ERROR(c.read(&magic, "the magic"));
  if (magic != kMagic) return error(where + ": not a GGUF file (bad magic)");
  QWEN35_RETURN_IF_ERROR(c.read(&f->version_, "the version"));
  if (f->version_ != 2 && f->version_ != 3)
    return error(where + ": GGUF version " + std::to_string(f->version_) + " (supported: 2, 3)");
  uint64_t n_tensors = 0, n_kv = 0;
  QWEN35_RETURN_IF_ERROR(c.read(&n_tensors, "the tensor count"));
  QWEN35_RETURN_IF_ERROR(c.read(&n_kv, "the key/value count"));
  // A key/value pair takes at least 13 bytes (key length, type, one byte), a tensor info 24.
  if (n_kv > c.left() / 13) return c.fail(std::to_string(n_kv) + " key/value pairs cannot fit in the file");
  if (n_tensors > c.left() / 24) return c.fail(std::to_string(n_tensors) + " tensors cannot fit in the file");
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key;
    QWEN35_RETURN_IF_ERROR(c.string(&key, "key " + std::to_string(k), kMaxKeyBytes));
    if (key.empty()) return c.fail("key " + std::to_string(k) + " is empty");
    if (f->kv_.count(key)) return c.fail("key '" + key + "' appears twice");
    GgufValue v;
    QWEN35_RETURN_IF_ERROR(read_value(c, key, &v));
    f->kv_.emplace(std::move(key), std::move(v));
  }
  uint64_t alignment = kDefaultAlignment;
  if (auto it = f->kv_.find("general.alignment"); it != f->kv_.end()) {
    if (!it->second.is_int() || it->second.i <= 0 || it->second.i > (1 << 20) ||
        (it->second.i & (it->second.i - 1)) != 0)
      return error(where + ": 'general.alignment' must be a power of two up to 1 MiB");
    alignment = uint64_t(it->second.i);
  }
  struct Info {
    uint64_t offset;
    size_t nbytes;
  };
  std::vector<Info> infos;
  std::set<std::string> names;
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensor t;
    QWEN35_RETURN_IF_ERROR(c.string(&t.name, "tensor " + std::to_string(k) + " name", kMaxKeyBytes));
    const std::string tw = "tensor '" + t.name + "'";
    if (!names.insert(t.name).second) return c.fail(tw + " appears twice");
    uint32_t n_dims = 0;
    QWEN35_RETURN_IF_ERROR(c.read(&n_dims, (tw + " dimension count").c_str()));
    if (n_dims == 0 || n_dims > uint32_t(kMaxDims))
      return c.fail(tw + ": " + std::to_string(n_dims) + " dimensions (1 to 4 supported)");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      QWEN35_RETURN_IF_ERROR(c.read(&ne, (tw + " dimensions").c_str()));
      if (ne == 0 || ne > (uint64_t(1) << 40) || numel > (uint64_t(1) << 50) / ne)
        return c.fail(tw + ": dimension " + std::to_string(d) + " = " + std::to_string(ne) + " out of range");
      numel *= ne;
      t.ne.push_back(int64_t(ne));
    }
    uint32_t type = 0;
    QWEN35_RETURN_IF_ERROR(c.read(&type, (tw + " type").c_str()));
    t.type = GgmlType(type);
    const GgmlBlock blk = ggml_block(t.type);
    if (blk.elements == 0) return c.fail(tw + ": unknown ggml type " + std::to_string(type));
    if (t.ne[0] % blk.elements != 0)
      return c.fail(tw + ": " + ggml_type_name(t.type) + " rows of " + std::to_string(t.ne[0]) +
                    " elements are not whole blocks of " + std::to_string(blk.elements));
    uint64_t offset = 0;
    QWEN35_RETURN_IF_ERROR(c.read(&offset, (tw + " offset").c_str()));
    if (offset % alignment != 0)
      return c.fail(tw + ": data offset " + std::to_string(offset) + " is not a multiple of the alignment " +
                    std::to_string(alignment));
    infos.push_back({offset, size_t(numel / uint64_t(blk.elements) * uint64_t(blk.bytes))});
    f->tensors_.push_back(std::move(t));
  }
  // The data section starts at the next multiple of the alignment.
  const uint64_t data_start = (uint64_t(c.pos()) + alignment - 1) / alignment * alignment;
  if (!f->tensors_.empty() && data_start > size)
    return error(where + ": file ends before the data section (byte " + std::to_string(data_start) + ")");
  const uint64_t data_size = data_start <= size ? size - data_start : 0;
  for (size_t k = 0; k < f->tensors_.size(); ++k) {
    GgufTensor& t = f->tensors_[k];
    if (infos[k].offset > data_size || infos[k].nbytes > data_size - infos[k].offset)
      return error(where + ": tensor '" + t.name + "' data [" + std::to_string(infos[k].offset) + ", +" +
                   std::to_string(infos[k].nbytes) + ") runs past the end of the file (data section of " +
                   std::to_string(data_size) + " bytes)");
    t.data = bytes + data_start + infos[k].offset;
    t.nbytes = infos[k].nbytes;
    t.file = label;
  }
  return f;
}

bool is_gguf_path(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  return ext == ".gguf" || ext == ".GGUF";
}

namespace {
// "NAME-00001-of-00003.gguf" -> ("NAME", 1, 3); false when not a split name.
bool split_name(const std::string& path, std::string* stem, int* index, int* count) {
  const std::string suffix = ".gguf";
  if (path.size() < 20 || path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
  const size_t p = path.size() - suffix.size() - 15;  // "-00001-of-00003"
  const std::string part = path.substr(p, 15);
  if (part[0] != '-' || part.compare(6, 4, "-of-") != 0) return false;
  for (int i : {1, 2, 3, 4, 5, 10, 11, 12, 13, 14})
    if (part[size_t(i)] < '0' || part[size_t(i)] > '9') return false;
  *stem = path.substr(0, p);
  *index = std::stoi(part.substr(1, 5));
  *count = std::stoi(part.substr(10, 5));
  return *index >= 1 && *count >= 1 && *index <= *count;
}

std::string shard_path(const std::string& stem, int index, int count) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "-%05d-of-%05d.gguf", index, count);
  return stem + buf;
}
}  // namespace

std::vector<std::string> gguf_file_set(const std::string& path) {
  std::string stem;
  int index = 0, count = 0;
  if (!split_name(path, &stem, &index, &count)) return {path};
  std::vector<std::string> paths;
  for (int i = 1; i <= count; ++i) paths.push_back(shard_path(stem, i, count));
  return paths;
}

Result<std::shared_ptr<GgufModel>> GgufModel::open(const std::string& path, core::LoadMode mode) {
  std::vector<std::shared_ptr<GgufFile>> files;
  for (const std::string& p : gguf_file_set(path)) {
    QWEN35_ASSIGN_OR_RETURN(auto f, GgufFile::open(p, mode));
    files.push_back(std::move(f));
  }
  QWEN35_ASSIGN_OR_RETURN(auto m, from_files(std::move(files)));
  m->path_ = path;
  return m;
}

Result<std::shared_ptr<GgufModel>> GgufModel::from_files(std::vector<std::shared_ptr<GgufFile>> files) {
  if (files.empty()) return error("[gguf] no files");
  auto m = std::shared_ptr<GgufModel>(new GgufModel());
  m->files_ = std::move(files);
  const size_t n = m->files_.size();
  for (size_t i = 0; i < n; ++i) {
    const GgufFile& f = *m->files_[i];
    const std::string where = "[gguf] '" + f.label() + "'";
    // A split set names its shard count and number in every shard.
    auto cnt = f.metadata().find("split.count");
    auto no = f.metadata().find("split.no");
    if (n > 1 || cnt != f.metadata().end()) {
      if (cnt == f.metadata().end() || !cnt->second.is_int() || no == f.metadata().end() || !no->second.is_int())
        return error(where + ": a shard of a split set needs integer 'split.count' and 'split.no'");
      if (cnt->second.i != int64_t(n))
        return error(where + ": 'split.count' is " + std::to_string(cnt->second.i) + ", but " + std::to_string(n) +
                     " shard(s) are named" + (n == 1 ? " (open the set by its -00001-of-0000N.gguf name)" : ""));
      if (no->second.i != int64_t(i))
        return error(where + ": 'split.no' is " + std::to_string(no->second.i) + ", expected " + std::to_string(i));
    }
    for (const GgufTensor& t : f.tensors())
      if (!m->tensors_.emplace(t.name, &t).second)
        return error(where + ": tensor '" + t.name + "' is also in another shard");
  }
  if (n > 1) {
    auto total = m->metadata().find("split.tensors.count");
    if (total != m->metadata().end() && total->second.is_int() && total->second.i != int64_t(m->tensors_.size()))
      return error("[gguf] '" + m->files_[0]->label() + "': 'split.tensors.count' is " + std::to_string(total->second.i) +
                   " but the shards hold " + std::to_string(m->tensors_.size()) + " tensors");
  }
  return m;
}

const GgufValue* GgufModel::find_value(const std::string& key) const {
  auto it = metadata().find(key);
  return it == metadata().end() ? nullptr : &it->second;
}

const GgufTensor* GgufModel::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

size_t GgufModel::total_bytes() const {
  size_t n = 0;
  for (const auto& [_, t] : tensors_) n += t->nbytes;
  return n;
}

void GgufModel::prefault(const std::function<void(size_t, size_t)>& progress) const {
  const size_t total = total_bytes();
  size_t done = 0;
  volatile uint8_t sink = 0;
  for (const auto& [_, t] : tensors_) {
    for (size_t off = 0; off < t->nbytes; off += 4096) sink = sink + t->data[off];
    done += t->nbytes;
    if (progress) progress(done, total);
  }
  (void)sink;
}

Result<int64_t> GgufModel::get_int(const std::string& key) const {
  const GgufValue* v = find_value(key);
  if (v == nullptr) return error("[gguf] missing metadata key '" + key + "'");
  if (!v->is_int())
    return error("[gguf] metadata key '" + key + "': expected an integer, found " +
                 std::string(gguf_value_type_name(v->type)));
  return v->i;
}

Result<int64_t> GgufModel::get_int_or(const std::string& key, int64_t fallback) const {
  if (find_value(key) == nullptr) return fallback;
  return get_int(key);
}

Result<double> GgufModel::get_float(const std::string& key) const {
  const GgufValue* v = find_value(key);
  if (v == nullptr) return error("[gguf] missing metadata key '" + key + "'");
  if (v->is_float()) return v->f;
  if (v->is_int()) return double(v->i);
  return error("[gguf] metadata key '" + key + "': expected a number, found " +
               std::string(gguf_value_type_name(v->type)));
}

Result<std::string> GgufModel::get_string(const std::string& key) const {
  const GgufValue* v = find_value(key);
  if (v == nullptr) return error("[gguf] missing metadata key '" + key + "'");
  if (v->type != GgufValueType::kString)
    return error("[gguf] metadata key '" + key + "': expected a string, found " +
                 std::string(gguf_value_type_name(v->type)));
  return v->s;
}

}  // namespace qwen35::formats
