// The GGUF reader: metadata of every type, tensor views and alignment, split sets, and a corpus
// of broken files, each a clean one-line error (and every truncation of a valid file too).
#include <gtest/gtest.h>

#include <limits>

#include "formats/gguf.h"
#include "gguf_builder.h"
#include "test_util.h"

namespace qwen35::formats {
namespace {

using testing::GgufBuilder;
using VT = GgufValueType;

std::string gguf_f32_bytes(std::initializer_list<float> v) {
  std::string b;
  for (float x : v) b += GgufBuilder::le(x);
  return b;
}

// A small valid file: scalars of several types, arrays, an F32 [3, 2] and a Q8_0 [32, 2] tensor.
GgufBuilder valid() {
  GgufBuilder b;
  b.str("general.architecture", "qwen35");
  b.u32("qwen35.block_count", 24);
  b.f32("qwen35.rope.freq_base", 1e7f);
  b.boolean("tokenizer.ggml.add_bos_token", false);
  b.scalar("some.i8", VT::kI8, int8_t(-5));
  b.scalar("some.u64", VT::kU64, uint64_t(1) << 40);
  b.scalar("some.f64", VT::kF64, 0.25);
  b.strings("tokenizer.ggml.tokens", {"a", "b", "ab"});
  b.ints("qwen35.rope.dimension_sections", {11, 11, 10, 0});
  b.tensor({"t.f32", {3, 2}, 0, gguf_f32_bytes({1, 2, 3, 4, 5, 6})});
  b.tensor({"t.q8", {32, 2}, 8, std::string(68, '\x01')});
  return b;
}

core::Result<std::shared_ptr<GgufFile>> parse_gguf(const std::string& bytes) {
  return GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "test.gguf");
}

TEST(Gguf, ParsesMetadataAndTensors) {
  const std::string bytes = valid().build();
  auto f = parse_gguf(bytes);
  ASSERT_TRUE(f.ok()) << f.message();
  const auto& kv = (*f)->metadata();
  EXPECT_EQ(kv.at("general.architecture").s, "qwen35");
  EXPECT_EQ(kv.at("qwen35.block_count").i, 24);
  EXPECT_FLOAT_EQ(float(kv.at("qwen35.rope.freq_base").f), 1e7f);
  EXPECT_EQ(kv.at("some.i8").i, -5);
  EXPECT_EQ(kv.at("some.u64").i, int64_t(1) << 40);
  EXPECT_EQ(kv.at("some.f64").f, 0.25);
  EXPECT_EQ(kv.at("tokenizer.ggml.tokens").strings, (std::vector<std::string>{"a", "b", "ab"}));
  EXPECT_EQ(kv.at("qwen35.rope.dimension_sections").ints, (std::vector<int64_t>{11, 11, 10, 0}));
  ASSERT_EQ((*f)->tensors().size(), 2u);
  const GgufTensor& t = (*f)->tensors()[0];
  EXPECT_EQ(t.name, "t.f32");
  EXPECT_EQ(t.ne, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(t.nbytes, 24u);
  EXPECT_EQ((t.data - reinterpret_cast<const uint8_t*>(bytes.data())) % 32, 0);
  float x;
  std::memcpy(&x, t.data + 20, 4);
  EXPECT_EQ(x, 6.0f);
  EXPECT_EQ((*f)->tensors()[1].type, GgmlType::kQ8_0);
  EXPECT_EQ((*f)->tensors()[1].nbytes, 68u);
}

TEST(Gguf, HonoursTheAlignmentKey) {
  GgufBuilder b = valid();
  b.u32("general.alignment", 256);
  const std::string bytes = b.build(256);
  auto f = parse_gguf(bytes);
  ASSERT_TRUE(f.ok()) << f.message();
  for (const auto& t : (*f)->tensors()) EXPECT_EQ((t.data - reinterpret_cast<const uint8_t*>(bytes.data())) % 256, 0);
}

TEST(Gguf, EveryTruncationIsACleanError) {
  const std::string bytes = valid().build();
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto f = parse_gguf(bytes.substr(0, n));
    EXPECT_FALSE(f.ok()) << "a prefix of " << n << " bytes parsed";
    if (!f.ok()) {
      EXPECT_EQ(f.message().find('\n'), std::string::npos);
    }
  }
}

void expect_error(const GgufBuilder& b, const std::string& what, uint64_t alignment = 32) {
  auto f = parse_gguf(b.build(alignment));
  ASSERT_FALSE(f.ok()) << "expected an error containing '" << what << "'";
  EXPECT_NE(f.message().find(what), std::string::npos) << f.message();
  EXPECT_NE(f.message().find("test.gguf"), std::string::npos) << f.message();
}

TEST(Gguf, BrokenFiles) {
  {
    std::string bytes = valid().build();
    bytes[0] = 'X';
    auto f = parse_gguf(bytes);
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.message().find("bad magic"), std::string::npos);
  }
  {
    auto f = parse_gguf(valid().build(32, 4));
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.message().find("version 4"), std::string::npos);
  }
  {  // counts the file cannot hold
    std::string bytes = valid().build();
    const uint64_t huge = uint64_t(1) << 60;
    std::string h = GgufBuilder::le(huge);
    std::string k = bytes;
    k.replace(16, 8, h);  // key/value count
    auto f = parse_gguf(k);
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.message().find("cannot fit"), std::string::npos) << f.message();
    std::string t = bytes;
    t.replace(8, 8, h);  // tensor count
    f = parse_gguf(t);
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.message().find("cannot fit"), std::string::npos) << f.message();
  }
  GgufBuilder b;
  b = valid();
  b.raw_kv("x.str", uint32_t(VT::kString), GgufBuilder::le(uint64_t(1) << 50) + "abc");
  expect_error(b, "runs past the end");
  b = valid();
  b.raw_kv("x.arr", uint32_t(VT::kArray), GgufBuilder::le(uint32_t(VT::kU32)) + GgufBuilder::le(uint64_t(1) << 58));
  expect_error(b, "cannot fit in the rest of the file");
  b = valid();
  b.raw_kv("x.arr", uint32_t(VT::kArray), GgufBuilder::le(uint32_t(VT::kString)) + GgufBuilder::le(uint64_t(1) << 58));
  expect_error(b, "cannot fit in the rest of the file");
  b = valid();
  b.raw_kv("x.nested", uint32_t(VT::kArray), GgufBuilder::le(uint32_t(VT::kArray)) + GgufBuilder::le(uint64_t(1)));
  expect_error(b, "arrays of arrays");
  b = valid();
  b.raw_kv("x.type", 13, "");
  expect_error(b, "unknown value type 13");
  b = valid();
  b.raw_kv("x.bool", uint32_t(VT::kBool), std::string(1, '\x02'));
  expect_error(b, "bool value 2");
  b = valid();
  b.raw_kv("x.u64", uint32_t(VT::kU64), GgufBuilder::le(std::numeric_limits<uint64_t>::max()));
  expect_error(b, "out of range");
  b = valid();
  b.u32("general.alignment", 48);
  expect_error(b, "power of two");
  b = valid();
  b.raw_kv("", uint32_t(VT::kU8), std::string(1, '\0'));
  expect_error(b, "is empty");
  {  // the same key twice
    // Two copies of the pair "a" = 1, no tensors.
    const std::string pair = GgufBuilder::gstr("a") + GgufBuilder::le(uint32_t(VT::kU32)) + GgufBuilder::le(uint32_t(1));
    std::string twice = std::string("GGUF") + GgufBuilder::le(uint32_t(3)) + GgufBuilder::le(uint64_t(0)) + GgufBuilder::le(uint64_t(2)) + pair + pair;
    auto f = parse_gguf(twice);
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.message().find("'a' appears twice"), std::string::npos) << f.message();
  }
  b = valid();
  b.find_tensor("t.f32")->ne = {};
  expect_error(b, "0 dimensions");
  b = valid();
  b.find_tensor("t.f32")->ne = {1, 1, 1, 1, 1};
  expect_error(b, "5 dimensions");
  b = valid();
  b.find_tensor("t.f32")->ne = {3, 0};
  expect_error(b, "out of range");
  b = valid();
  b.find_tensor("t.f32")->ne = {uint64_t(1) << 40, uint64_t(1) << 40};
  expect_error(b, "out of range");
  b = valid();
  b.find_tensor("t.f32")->type = 77;
  expect_error(b, "unknown ggml type 77");
  b = valid();
  b.find_tensor("t.q8")->ne = {33, 2};
  expect_error(b, "not whole blocks");
  b = valid();
  b.find_tensor("t.q8")->offset = 40;
  expect_error(b, "not a multiple of the alignment");
  b = valid();
  b.find_tensor("t.q8")->offset = 1 << 20;
  b.find_tensor("t.q8")->data.clear();
  expect_error(b, "runs past the end of the file");
  b = valid();
  b.tensor({"t.f32", {3, 2}, 0, gguf_f32_bytes({1, 2, 3, 4, 5, 6})});
  expect_error(b, "tensor 't.f32' appears twice");
}

TEST(Gguf, TypedAccessNamesTheKey) {
  testing::TempDir tmp;
  testing::write_file(tmp.file("m.gguf"), valid().build());
  auto m = GgufModel::open(tmp.file("m.gguf"));
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(*(*m)->get_int("qwen35.block_count"), 24);
  EXPECT_EQ(*(*m)->get_float("qwen35.block_count"), 24.0);
  EXPECT_EQ(*(*m)->get_string("general.architecture"), "qwen35");
  EXPECT_EQ(*(*m)->get_int_or("qwen35.absent", 7), 7);
  auto bad = (*m)->get_int("general.architecture");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("'general.architecture': expected an integer, found string"), std::string::npos);
  auto missing = (*m)->get_string("qwen35.absent");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("missing metadata key 'qwen35.absent'"), std::string::npos);
  ASSERT_NE((*m)->find("t.q8"), nullptr);
  EXPECT_EQ((*m)->find("t.none"), nullptr);
  EXPECT_EQ((*m)->total_bytes(), 24u + 68u);
}

// Shard i of n: the split keys, and tensor "s<i>".
std::string shard(int i, int n, int64_t count_key = -1) {
  GgufBuilder b;
  if (i == 0) b.str("general.architecture", "qwen35");
  b.scalar("split.no", VT::kU16, uint16_t(i));
  b.scalar("split.count", VT::kU16, uint16_t(count_key >= 0 ? count_key : n));
  if (i == 0) b.i32("split.tensors.count", n);
  b.tensor({std::string("s").append(std::to_string(i)), {2}, 0, gguf_f32_bytes({float(i), float(i)})});
  return b.build();
}

TEST(Gguf, SplitSets) {
  testing::TempDir tmp;
  for (int i = 0; i < 3; ++i) testing::write_file(tmp.file("m-0000" + std::to_string(i + 1) + "-of-00003.gguf"), shard(i, 3));
  for (const char* name : {"m-00001-of-00003.gguf", "m-00002-of-00003.gguf"}) {  // any shard opens the set
    auto m = GgufModel::open(tmp.file(name));
    ASSERT_TRUE(m.ok()) << m.message();
    EXPECT_EQ((*m)->files().size(), 3u);
    EXPECT_EQ(*(*m)->get_string("general.architecture"), "qwen35");
    for (const char* t : {"s0", "s1", "s2"}) EXPECT_NE((*m)->find(t), nullptr) << t;
  }
  EXPECT_EQ(gguf_file_set(tmp.file("m-00002-of-00003.gguf")),
            (std::vector<std::string>{tmp.file("m-00001-of-00003.gguf"), tmp.file("m-00002-of-00003.gguf"),
                                      tmp.file("m-00003-of-00003.gguf")}));
  EXPECT_EQ(gguf_file_set("/x/model.gguf"), (std::vector<std::string>{"/x/model.gguf"}));
  EXPECT_EQ(gguf_file_set("/x/m-00004-of-00003.gguf"), (std::vector<std::string>{"/x/m-00004-of-00003.gguf"}));
  // A missing shard names its file.
  testing::TempDir two;
  testing::write_file(two.file("m-00001-of-00002.gguf"), shard(0, 2));
  auto m = GgufModel::open(two.file("m-00001-of-00002.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("m-00002-of-00002.gguf"), std::string::npos) << m.message();
  // A shard that disagrees about the count, and a tensor in two shards.
  testing::write_file(two.file("m-00002-of-00002.gguf"), shard(1, 2, 3));
  m = GgufModel::open(two.file("m-00001-of-00002.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("'split.count' is 3"), std::string::npos) << m.message();
  testing::write_file(two.file("m-00002-of-00002.gguf"), shard(0, 2));
  m = GgufModel::open(two.file("m-00001-of-00002.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("'split.no' is 0, expected 1"), std::string::npos) << m.message();
  // One shard opened under a plain name is refused, with the way out.
  testing::write_file(two.file("renamed.gguf"), shard(0, 2));
  m = GgufModel::open(two.file("renamed.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("-00001-of-0000N.gguf"), std::string::npos) << m.message();
}

TEST(Gguf, BlockSizesOfTheTypes) {
  EXPECT_EQ(ggml_block(GgmlType::kQ4_K).elements, 256);
  EXPECT_EQ(ggml_block(GgmlType::kQ4_K).bytes, 144);
  EXPECT_EQ(ggml_block(GgmlType::kQ5_K).bytes, 176);
  EXPECT_EQ(ggml_block(GgmlType::kQ6_K).bytes, 210);
  EXPECT_EQ(ggml_block(GgmlType::kIQ4_XS).bytes, 136);
  EXPECT_EQ(ggml_block(GgmlType::kIQ4_NL).bytes, 18);
  EXPECT_EQ(ggml_block(GgmlType::kQ8_0).bytes, 34);
  EXPECT_EQ(ggml_block(GgmlType(99)).elements, 0);
  EXPECT_EQ(ggml_type_name(GgmlType::kQ2_K), "Q2_K");
  EXPECT_EQ(ggml_type_name(GgmlType(99)), "type 99");
}

}  // namespace
}  // namespace qwen35::formats
