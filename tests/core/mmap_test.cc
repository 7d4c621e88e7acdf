#include "core/mmap.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace qwen35::core {
namespace {

class MmapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/qwen35_mmap_XXXXXX";
    int fd = mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    close(fd);
    path_ = tmpl;
    // 3 MiB + 17 bytes: spans a huge page boundary and ends off any page boundary.
    bytes_.resize((size_t(3) << 20) + 17);
    uint32_t s = 12345;
    for (auto& b : bytes_) b = uint8_t((s = s * 1664525u + 1013904223u) >> 24);
    std::ofstream(path_, std::ios::binary).write(reinterpret_cast<const char*>(bytes_.data()),
                                                 std::streamsize(bytes_.size()));
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_;
  std::vector<uint8_t> bytes_;
};

TEST_F(MmapTest, EveryModeReadsTheFileExactly) {
  for (LoadMode mode : {LoadMode::kMmap, LoadMode::kMmapPopulate, LoadMode::kAnonymous}) {
    auto f = MappedFile::open(path_, mode);
    ASSERT_TRUE(f.ok()) << f.status().message();
    ASSERT_EQ((*f)->size(), bytes_.size());
    EXPECT_EQ(0, std::memcmp((*f)->data(), bytes_.data(), bytes_.size())) << int(mode);
  }
}

TEST_F(MmapTest, AnonymousCopyStartsOnAHugePageBoundary) {
  // The copy is placed so transparent huge pages can back it from its first byte.
  auto f = MappedFile::open(path_, LoadMode::kAnonymous);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*f)->data()) % (uintptr_t(2) << 20), 0u);
}

TEST_F(MmapTest, MissingFileAndDirectoryFailClearly) {
  auto missing = MappedFile::open(path_ + ".none", LoadMode::kAnonymous);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot open"), std::string::npos);
  auto dir = MappedFile::open("/tmp", LoadMode::kAnonymous);
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("not a regular file"), std::string::npos);
}

}  // namespace
}  // namespace qwen35::core
