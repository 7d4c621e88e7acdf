#include "formats/safetensors.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace qwen35::formats {
namespace {

using qwen35::testing::RawTensor;
using qwen35::testing::safetensors_bytes;
using qwen35::testing::TempDir;
using qwen35::testing::write_file;

std::string f32_bytes(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  size_t i = 0;
  for (float f : v) std::memcpy(&s[4 * i++], &f, 4);
  return s;
}

core::Result<std::shared_ptr<SafetensorsFile>> parse(const std::string& b) {
  return SafetensorsFile::parse(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "t.safetensors");
}

// A header with one hand-written JSON body plus `data` bytes.
std::string with_header(const std::string& json, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out + json + data;
}

TEST(Safetensors, ParsesValidFileZeroCopy) {
  auto b = safetensors_bytes({{"a", "F32", {2}, f32_bytes({1, 2})}, {"b", "BF16", {1, 2}, std::string(4, '\x3f')},
                              {"c", "U8", {3}, "xyz"}});
  auto f = parse(b);
  ASSERT_TRUE(f.ok()) << f.message();
  const auto& t = (*f)->tensors();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t.at("a").dtype, core::DType::kF32);
  EXPECT_EQ(t.at("b").shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(t.at("c").nbytes, 3u);
  float x;
  std::memcpy(&x, t.at("a").data + 4, 4);
  EXPECT_EQ(x, 2.0f);
  EXPECT_GE(t.at("a").data, reinterpret_cast<const uint8_t*>(b.data()));  // points into the buffer
}

TEST(Safetensors, AllSupportedDtypes) {
  for (const char* d : {"F64", "F32", "F16", "BF16", "I32", "U32", "U8"}) {
    const size_t sz = core::dtype_size(core::dtype_from_name(d));
    auto f = parse(safetensors_bytes({{"x", d, {2}, std::string(2 * sz, '\0')}}));
    EXPECT_TRUE(f.ok()) << d << ": " << f.message();
  }
}

struct BadCase {
  const char* name;
  std::string bytes;
  const char* expect;  // substring of the message
};

TEST(Safetensors, RejectsMalformedFilesWithClearMessages) {
  const std::string ok_data = f32_bytes({1, 2});
  std::string absurd(8, '\0');
  absurd[5] = 1;  // 2^40
  std::vector<BadCase> cases = {
      {"empty", "", "too short"},
      {"short", std::string(5, '\0'), "too short"},
      {"absurd header length", absurd + "{}", "exceeds"},
      {"header past end", with_header("{}", "").substr(0, 8) + "{", "past the end"},
      {"invalid json", with_header("{\"a\": [", ""), "not valid JSON"},
      {"not an object", with_header("[1,2]", ""), "not a JSON object"},
      {"unsupported dtype", with_header(R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", std::string(8, 0)),
       "unsupported dtype 'I64'"},
      {"unknown dtype", with_header(R"({"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", "x"),
       "unsupported dtype 'Q4'"},
      {"missing dtype", with_header(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", ok_data), "dtype"},
      {"negative shape", with_header(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", ok_data),
       "non-negative"},
      {"offsets past end", with_header(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", ok_data),
       "past end of file"},
      {"begin after end", with_header(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", ok_data),
       "begin"},
      {"size mismatch", with_header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", ok_data),
       "needs 12 bytes"},
      {"overlap", with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                              ok_data), "overlaps"},
      {"gap", with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", ok_data), "gap"},
      {"trailing bytes", with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", ok_data),
       "trailing"},
      {"shape overflow", with_header(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", ok_data),
       "overflow"},
      {"bad offsets", with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", ok_data), "data_offsets"},
  };
  for (const auto& c : cases) {
    auto f = parse(c.bytes);
    ASSERT_FALSE(f.ok()) << c.name;
    EXPECT_NE(f.message().find(c.expect), std::string::npos) << c.name << ": " << f.message();
    EXPECT_NE(f.message().find("t.safetensors"), std::string::npos) << c.name;
    EXPECT_EQ(f.message().find('\n'), std::string::npos) << c.name;
  }
}

TEST(Safetensors, TruncatedFileOnDisk) {
  TempDir d;
  auto b = safetensors_bytes({{"a", "F32", {2}, f32_bytes({1, 2})}});
  write_file(d.file("model.safetensors"), b.substr(0, b.size() - 3));
  write_file(d.file("config.json"), "{}");
  auto s = TensorStore::open_dir(d.path());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("past end of file"), std::string::npos) << s.message();
}

TEST(TensorStore, ShardedIndex) {
  TempDir d;
  write_file(d.file("m-1.safetensors"), safetensors_bytes({{"a", "F32", {1}, f32_bytes({1})}}));
  write_file(d.file("m-2.safetensors"), safetensors_bytes({{"b", "F32", {1}, f32_bytes({2})}}));
  write_file(d.file("model.safetensors.index.json"),
             R"({"metadata":{},"weight_map":{"a":"m-1.safetensors","b":"m-2.safetensors"}})");
  auto s = TensorStore::open_dir(d.path());
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_NE(s->find("b"), nullptr);
  EXPECT_EQ(s->find("b")->file, "m-2.safetensors");
  EXPECT_EQ(s->total_bytes(), 8u);

  write_file(d.file("model.safetensors.index.json"), R"({"weight_map":{"a":"m-1.safetensors","b":"m-1.safetensors"}})");
  auto bad = TensorStore::open_dir(d.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("does not hold it"), std::string::npos) << bad.message();

  write_file(d.file("model.safetensors.index.json"), R"({"weight_map":{"a":"missing.safetensors"}})");
  bad = TensorStore::open_dir(d.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("missing.safetensors"), std::string::npos) << bad.message();

  write_file(d.file("model.safetensors.index.json"), R"({"weight_map":{"a":"../etc/passwd"}})");
  bad = TensorStore::open_dir(d.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("outside"), std::string::npos) << bad.message();

  write_file(d.file("model.safetensors.index.json"), "{not json");
  EXPECT_FALSE(TensorStore::open_dir(d.path()).ok());
}

TEST(TensorStore, DirectoryErrors) {
  TempDir d;
  auto s = TensorStore::open_dir(d.path());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no .safetensors"), std::string::npos);
  write_file(d.file("f"), "x");
  EXPECT_NE(TensorStore::open_dir(d.file("f")).message().find("not a directory"), std::string::npos);
  EXPECT_NE(TensorStore::open_dir(d.file("nope")).message().find("does not exist"), std::string::npos);
}

}  // namespace
}  // namespace qwen35::formats
