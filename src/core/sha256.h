// SHA-256 (FIPS 180-4). The content hash of client images: the prefix cache shares state between
// clients by it, so it must resist collisions made on purpose (a checksum would not).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace qwen35::core {

class Sha256 {
 public:
  Sha256();
  void update(std::string_view bytes);
  std::array<uint8_t, 32> finish();  // once; the object is spent after it

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  uint64_t length_ = 0;  // bytes so far
  size_t used_ = 0;      // bytes in buf_
};

std::array<uint8_t, 32> sha256(std::string_view bytes);

}  // namespace qwen35::core
