// SHA-256 against the FIPS 180-4 examples (and NIST's million-'a' vector), fed whole and in
// uneven pieces so that the block buffering is exercised.
#include "core/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace qwen35::core {
namespace {

std::string hex(const std::array<uint8_t, 32>& d) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) s += digits[b >> 4], s += digits[b & 15];
  return s;
}

struct Vector {
  std::string message, digest;
};

std::vector<Vector> vectors() {
  return {
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
       "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
      {std::string(1000000, 'a'), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
  };
}

TEST(Sha256, FipsVectors) {
  for (const Vector& v : vectors()) EXPECT_EQ(hex(sha256(v.message)), v.digest) << v.message.size() << " bytes";
}

TEST(Sha256, PiecesGiveTheWholeDigest) {
  for (const Vector& v : vectors()) {
    for (size_t piece : {1, 3, 63, 64, 65, 1000}) {
      Sha256 s;
      for (size_t i = 0; i < v.message.size(); i += piece)
        s.update(std::string_view(v.message).substr(i, piece));
      EXPECT_EQ(hex(s.finish()), v.digest) << "pieces of " << piece;
    }
  }
}

// Lengths around the padding boundary.
TEST(Sha256, PaddingBoundaries) {
  // 55 bytes fit one block with the length, 56 need two (digests from coreutils sha256sum).
  EXPECT_EQ(hex(sha256(std::string(55, 'a'))), "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(hex(sha256(std::string(56, 'a'))), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(hex(sha256(std::string(64, 'a'))), "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

}  // namespace
}  // namespace qwen35::core
