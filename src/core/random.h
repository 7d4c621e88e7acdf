// Small, fast, reproducible random numbers: splitmix64 (seeding) and xoshiro256** (streams).
// Same seed, same sequence on every machine.
#pragma once

#include <cstdint>

namespace qwen35::core {

inline uint64_t splitmix64(uint64_t* x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// splitmix64's output for state x (a well-mixed key of x).
inline uint64_t splitmix64_of(uint64_t x) { return splitmix64(&x); }

class Xoshiro256 {
 public:
  // The four state words are successive splitmix64 outputs from `seed`.
  explicit Xoshiro256(uint64_t seed) {
    for (uint64_t& v : s_) v = splitmix64(&seed);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace qwen35::core
