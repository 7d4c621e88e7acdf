#include "kernels/int8_form.h"

#include <array>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/iq_grids.h"
#include "kernels/matrix.h"

namespace qwen35::kernels {

namespace {
using Book = std::array<uint8_t, 64>;

// Matrix::book of the code-book forms: split_block's signed codes as v + 128, four times over.
constexpr Book iq4_book() {
  Book b{};
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(kIq4Values[i % 16] + 128);
  return b;
}
// The IQ2/IQ3 codes: ± the grid's levels (−l[L−1] .. −l[0], l[0] .. l[L−1]); unused entries 0.
template <size_t L>
constexpr Book signed_levels_book(const uint8_t (&levels)[L]) {
  Book b{};
  for (size_t r = 0; r < 4; ++r)
    for (size_t i = 0; i < 16; ++i)
      b[16 * r + i] = i < L ? uint8_t(128 - levels[L - 1 - i]) : i < 2 * L ? uint8_t(128 + levels[i - L]) : 128;
  return b;
}
alignas(64) constexpr Book kIq4Book = iq4_book();
alignas(64) constexpr Book kIq2Book = signed_levels_book(kIq2Levels);
alignas(64) constexpr Book kIq3xxsBook = signed_levels_book(kIq3xxsLevels);
alignas(64) constexpr Book kIq3sBook = signed_levels_book(kIq3sLevels);
}  // namespace

Matrix int8_form_shape(const Matrix& b) {
  Matrix m;
  m.type = WeightType::kAffine;
  m.rows = b.rows;
  m.cols = b.cols;
  m.group = block_group(b.type);
  switch (b.type) {
    case WeightType::kQ8_0: m.bits = 8, m.zero = 128; break;
    case WeightType::kQ4_0: m.bits = 4, m.zero = 8; break;
    case WeightType::kQ6_K: m.bits = 6, m.zero = 32; break;
    case WeightType::kQ4_K: m.bits = 4; break;
    case WeightType::kQ5_K: m.bits = 5; break;
    case WeightType::kQ4_1: m.bits = 4; break;
    case WeightType::kQ5_0: m.bits = 5, m.zero = 16; break;
    case WeightType::kQ5_1: m.bits = 5; break;
    case WeightType::kQ2_K: m.bits = 2; break;
    case WeightType::kQ3_K: m.bits = 3, m.zero = 4; break;
    case WeightType::kIQ2_XXS:
    case WeightType::kIQ2_XS: m.bits = 4, m.zero = 128, m.book = kIq2Book.data(); break;
    case WeightType::kIQ3_XXS: m.bits = 4, m.zero = 128, m.book = kIq3xxsBook.data(); break;
    case WeightType::kIQ3_S: m.bits = 4, m.zero = 128, m.book = kIq3sBook.data(); break;
    case WeightType::kIQ4_NL:
    case WeightType::kIQ4_XS: m.bits = 4, m.zero = 128, m.book = kIq4Book.data(); break;
    default: m.bits = 0; break;
  }
  return m;
}

namespace {
// Whether v fits f16: rounded to it, v moves by a relative 2^-11 at most, or (subnormal) by 2^-25.
bool fits_f16(float v) { return std::fabs(v) <= 65504.0f; }
}  // namespace

std::unique_ptr<Int8Form> make_int8_form(const Matrix& b, core::ThreadPool* pool) {
  auto f = std::make_unique<Int8Form>();
  Matrix& m = f->m;
  m = int8_form_shape(b);
  QWEN35_CHECK(m.bits != 0);
  const BlockFormat bf = block_format(b.type);
  const int64_t R = b.rows, K = b.cols, G = m.group, groups = K / G, words = K * m.bits / 32;
  const bool mins = m.zero == 0;
  f->codes.assign(size_t(R * words), 0u);
  std::vector<float> s(size_t(R * groups)), bias(mins ? size_t(R * groups) : 0);
  const int64_t bytes_per_row = K / bf.elements * bf.bytes, gpb = bf.elements / G;
  // Code-book forms store each code's index in the book (the kernels map it back).
  uint8_t book_index[256] = {};
  if (m.book != nullptr)
    for (uint8_t q = 16; q-- > 0;) book_index[uint8_t(m.book[q] - 128)] = q;
  auto rows = [&](size_t r0, size_t r1, int) {
    int8_t c[256];
    float sc[16], mn[16];
    for (int64_t r = int64_t(r0); r < int64_t(r1); ++r) {
      const uint8_t* row = static_cast<const uint8_t*>(b.data) + r * bytes_per_row;
      uint32_t* out = f->codes.data() + r * words;
      for (int64_t k0 = 0; k0 < K; k0 += bf.elements) {
        split_block(b.type, row + k0 / bf.elements * bf.bytes, c, sc, mn);
        for (int64_t g = 0; g < gpb; ++g) {
          const int64_t gi = r * groups + k0 / G + g;
          s[size_t(gi)] = sc[g];
          if (mins) bias[size_t(gi)] = -mn[g];
        }
        for (int64_t i = 0; i < bf.elements; ++i) {
          // An unsigned code of m.bits bits into the row's bit stream (5- and 6-bit codes may
          // cross a word).
          const uint64_t u = m.book ? book_index[uint8_t(c[i])] : uint64_t(int(c[i]) + m.zero);
          const uint64_t bit = uint64_t(k0 + i) * uint64_t(m.bits);
          out[bit / 32] |= uint32_t(u << (bit % 32));
          if (bit % 32 + uint64_t(m.bits) > 32) out[bit / 32 + 1] |= uint32_t(u >> (32 - bit % 32));
        }
      }
    }
  };
  if (pool != nullptr) pool->parallel_for(size_t(R), rows, 16);
  else rows(0, size_t(R), 0);

  if (R % 16 == 0) {  // tile-major codes (Matrix::codes_tiled)
    std::vector<uint32_t> t(f->codes.size());
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = 0; j < words; ++j)
        t[size_t(((r >> 4) * words + j) * 16 + (r & 15))] = f->codes[size_t(r * words + j)];
    f->codes.swap(t);
    m.codes_tiled = true;
  }
  bool half = true;
  for (float v : s) half = half && fits_f16(v);
  for (float v : bias) half = half && fits_f16(v);
  m.sb_type = half ? core::DType::kF16 : core::DType::kF32;
  // f16 values of whole tiles of 16 rows go tile-major: a tile of the int8 kernels then reads its
  // scales in place instead of transposing them (decode reads each once).
  m.sb_tiled = half && R % 16 == 0;
  auto store = [&](const std::vector<float>& v, std::vector<uint8_t>& out) {
    out.resize(v.size() * (half ? 2 : 4));
    for (size_t r = 0; r < size_t(R); ++r)
      for (size_t g = 0; g < size_t(groups); ++g) {
        const size_t i = size_t(sb_index(m, int64_t(r), int64_t(g)));
        const float x = v[r * size_t(groups) + g];
        if (half) {
          const uint16_t h = core::f32_to_f16(x);
          std::memcpy(out.data() + 2 * i, &h, 2);
        } else {
          std::memcpy(out.data() + 4 * i, &x, 4);
        }
      }
  };
  store(s, f->scales);
  if (mins) store(bias, f->biases);
  m.data = f->codes.data();
  m.scales = f->scales.data();
  m.biases = mins ? f->biases.data() : nullptr;
  return f;
}

}  // namespace qwen35::kernels
