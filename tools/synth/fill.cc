// Value generation: xoshiro256** seeded per (seed, tensor stream, block of 2^16 elements).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/random.h"
#include "tools/synth/tensor_plan.h"

namespace qwen35::tools {

namespace {

constexpr uint64_t kBlockElems = uint64_t(1) << 16;

// One generator per (seed, tensor stream, block): values do not depend on write order.
core::Xoshiro256 block_rng(uint64_t seed, uint64_t stream, uint64_t block) {
  uint64_t x = seed * 0xd1342543de82ef95ull ^ stream;
  return core::Xoshiro256(core::splitmix64(&x) ^ (block * 0x9e3779b97f4a7c15ull));
}

// Sum of four 16-bit uniforms, standardized: mean 0, variance 1 (to 1e-9).
inline float normal_from(uint64_t x) {
  const int64_t s = int64_t(x & 0xffff) + int64_t((x >> 16) & 0xffff) +
                    int64_t((x >> 32) & 0xffff) + int64_t(x >> 48);
  constexpr double kMean = 4 * 32767.5;
  const double kInvStd = 1.0 / std::sqrt(4.0 * (65536.0 * 65536.0 - 1.0) / 12.0);
  return float((double(s) - kMean) * kInvStd);
}

inline float uniform01(uint64_t x) { return float(x >> 40) * (1.0f / 16777216.0f); }

inline float quant_scale(const TensorSpec& t, uint64_t x) {
  const float mag = t.a * (0.75f + 0.5f * uniform01(x));
  return (x & 1) ? -mag : mag;
}

inline void store(core::DType dt, float v, uint8_t* out, uint64_t i) {
  if (dt == core::DType::kBF16) {
    const uint16_t h = core::f32_to_bf16(v);
    std::memcpy(out + 2 * i, &h, 2);
  } else {
    std::memcpy(out + 4 * i, &v, 4);
  }
}

}  // namespace

uint64_t name_hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

void fill_tensor(const TensorSpec& t, uint64_t seed, uint64_t begin, uint64_t count, uint8_t* out) {
  const uint64_t end = begin + count;
  const float levels = float((1u << t.bits) - 1);
  uint64_t i = begin;
  while (i < end) {
    const uint64_t block = i / kBlockElems;
    const uint64_t block_end = std::min(end, (block + 1) * kBlockElems);
    core::Xoshiro256 rng = block_rng(seed, t.stream, block);
    for (uint64_t k = block * kBlockElems; k < i; ++k) rng.next();  // unaligned start
    uint64_t o = i - begin;
    switch (t.init) {
      case Init::kNormal:
        for (; i < block_end; ++i, ++o) store(t.dtype, t.a + t.b * normal_from(rng.next()), out, o);
        break;
      case Init::kUniform:
        for (; i < block_end; ++i, ++o)
          store(t.dtype, t.a + (t.b - t.a) * uniform01(rng.next()), out, o);
        break;
      case Init::kQuantWords:
        for (; i < block_end; ++i, ++o) {
          const uint32_t w = uint32_t(rng.next() >> 32);
          std::memcpy(out + 4 * o, &w, 4);
        }
        break;
      case Init::kQuantScales:
        for (; i < block_end; ++i, ++o) store(t.dtype, quant_scale(t, rng.next()), out, o);
        break;
      case Init::kQuantBiases:
        for (; i < block_end; ++i, ++o) {
          const float s = core::bf16_to_f32(core::f32_to_bf16(quant_scale(t, rng.next())));
          store(t.dtype, -s * levels * 0.5f, out, o);
        }
        break;
    }
  }
}

}  // namespace qwen35::tools
