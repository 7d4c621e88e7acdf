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

}  // namespace
}  // namespace qwen35::formats
