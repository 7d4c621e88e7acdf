#include "formats/npy.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace qwen35::formats {
namespace {

TEST(Npy, RoundTrip) {
  qwen35::testing::TempDir d;
  std::vector<float> v = {1.5f, -2, 3, 4, 5, 6};
  ASSERT_TRUE(write_npy_f32(d.file("a.npy"), v.data(), {2, 3}).ok());
  auto a = read_npy(d.file("a.npy"));
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->data, v);
  const std::string raw = qwen35::testing::read_file(d.file("a.npy"));
  EXPECT_EQ((raw.find('\n') + 1) % 64, 0u);  // header padded to 64 bytes
  EXPECT_NE(raw.find("'shape': (2, 3)"), std::string::npos);
  ASSERT_TRUE(write_npy_f32(d.file("b.npy"), v.data(), {6}).ok());
  EXPECT_NE(qwen35::testing::read_file(d.file("b.npy")).find("'shape': (6,)"), std::string::npos);
  EXPECT_FALSE(write_npy_f32("/nonexistent/dir/x.npy", v.data(), {6}).ok());
  EXPECT_FALSE(read_npy(d.file("missing.npy")).ok());
}

// Integer arrays: a grid file numpy wrote (the vision fixtures' [n_images, 3] int64 grids), and
// an int32 file assembled by hand.
TEST(Npy, ReadsIntegerArrays) {
  auto g = read_npy(qwen35::testing::source_dir() + "/tests/fixtures/vision/tiny_grids/grid.npy");
  ASSERT_TRUE(g.ok()) << g.message();
  EXPECT_EQ(g->shape, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(g->ints, (std::vector<int64_t>{1, 2, 2, 1, 4, 6, 1, 6, 10, 1, 14, 8}));
  EXPECT_TRUE(g->data.empty());
  std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');  // 10 + header + '\n' = 64·k
  header += '\n';
  std::string raw = std::string("\x93NUMPY\x01\x00", 8) + char(header.size()) + char(0) + header;
  for (int32_t v : {7, -2, 1 << 30}) raw.append(reinterpret_cast<const char*>(&v), 4);
  qwen35::testing::TempDir d;
  qwen35::testing::write_file(d.file("i.npy"), raw);
  auto a = read_npy(d.file("i.npy"));
  ASSERT_TRUE(a.ok()) << a.message();
  EXPECT_EQ(a->ints, (std::vector<int64_t>{7, -2, 1 << 30}));
  qwen35::testing::write_file(d.file("t.npy"), raw.substr(0, raw.size() - 2));
  EXPECT_FALSE(read_npy(d.file("t.npy")).ok());  // truncated data
}

}  // namespace
}  // namespace qwen35::formats
