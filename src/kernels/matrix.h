// Row decoding of stored weight matrices, shared by the reference and the CPU kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/ops.h"

namespace qwen35::kernels {

// Scale/bias element i of an affine matrix's `scales`/`biases` array.
inline float sb_at(const void* p, core::DType t, int64_t i) {
  switch (t) {
    case core::DType::kBF16: return core::bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case core::DType::kF16: return core::f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

// Code j of an MLX packed row (little-endian bit stream).
// `stride`: words from one word of the row to the next (16 in tile-major codes, affine_row_at).
inline uint32_t affine_code(const uint32_t* row, int64_t j, int bits, int64_t stride = 1) {
  const uint64_t off = uint64_t(j) * uint64_t(bits);
  const int64_t word = int64_t(off >> 5);
  const unsigned sh = unsigned(off & 31);
  uint64_t v = row[word * stride] >> sh;
  if (sh + unsigned(bits) > 32) v |= uint64_t(row[(word + 1) * stride]) << (32 - sh);
  return uint32_t(v) & ((1u << bits) - 1u);
}

// The IQ4_NL / IQ4_XS code book.
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

// The bias of an affine group without stored biases: −zero·scale (exactly 0 when zero is 0).
inline float implicit_bias(const Matrix& m, float scale) { return m.zero != 0 ? -float(m.zero) * scale : 0.0f; }

// Index of group g of row r in an affine matrix's scales and biases (Matrix::sb_tiled or row-major).
inline int64_t sb_index(const Matrix& m, int64_t r, int64_t g) {
  const int64_t groups = m.cols / m.group;
  return m.sb_tiled ? ((r >> 4) * groups + g) * 16 + (r & 15) : r * groups + g;
}

// The unsigned code an affine matrix's stored code q stands for (a code-book form's entry).
inline uint32_t affine_value(const Matrix& m, uint32_t q) { return m.book ? uint32_t(m.book[q]) : q; }

// Words per packed row of an affine matrix.
inline int64_t affine_row_words(const Matrix& m) { return m.cols * m.bits / 32; }

// Row r of an affine matrix as its row-major words: in place, or gathered into buf (which then
// holds affine_row_words(m) words) when the codes are tile-major (Matrix::codes_tiled).
inline const uint32_t* affine_row(const Matrix& m, int64_t r, std::vector<uint32_t>& buf) {
  const int64_t W = affine_row_words(m);
  const uint32_t* d = static_cast<const uint32_t*>(m.data);
  if (!m.codes_tiled) return d + r * W;
  buf.resize(size_t(W) + 1);  // one spare word: odd widths read a word past their last code
  buf[size_t(W)] = 0;
  const uint32_t* t = d + (r >> 4) * 16 * W + (r & 15);
  for (int64_t j = 0; j < W; ++j) buf[size_t(j)] = t[j * 16];
  return buf.data();
}

// Row r of an affine matrix in place: its first word, and the stride from one of its words to the
// next (1 row-major, 16 in tile-major codes).
struct AffineRowAt {
  const uint32_t* words;
  int64_t stride;
};
inline AffineRowAt affine_row_at(const Matrix& m, int64_t r) {
  const uint32_t* d = static_cast<const uint32_t*>(m.data);
  if (!m.codes_tiled) return {d + r * affine_row_words(m), 1};
  return {d + (r >> 4) * 16 * affine_row_words(m) + (r & 15), 16};
}

// A ggml block type's elements and bytes per block ({0, 0} for the other types). Its blocks lie
// along a row: a row of `cols` elements is cols / elements blocks.
struct BlockFormat {
  int64_t elements = 0;
  int64_t bytes = 0;
};
BlockFormat block_format(WeightType t);
inline bool is_block_type(WeightType t) { return block_format(t).elements != 0; }
inline int64_t block_row_bytes(const Matrix& m) {
  const BlockFormat f = block_format(m.type);
  return m.cols / f.elements * f.bytes;
}


// The 6-bit scale and min of group j (0..7) of a Q4_K / Q5_K block's 12 packed bytes.
inline void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Elements per scale group of a ggml block type: 16 for Q6_K, Q2_K, Q3_K and IQ2_XS, 32 for the
// others (0: not a block type).
int block_group(WeightType t);

// One block of a ggml block type as integer codes and group scales: element i is
// s[g]·c[i] − mn[g] with g = i / block_group(t). c[block elements] are signed:
//   Q8_0: c = q, s = d;  Q4_0: c = q−8, s = d;  IQ4_NL: c = v[q], s = d;
//   Q4_1, Q5_1: c = q, s = d, mn = −m (so s·c − mn is d·q + m exactly);  Q5_0: c = q−16, s = d;
//   Q4_K, Q5_K: c = q, s = d·sc, mn = dmin·m, sc and m the 6-bit scale and min of each group;
//   Q2_K: c = q, s = d·sc, mn = dmin·m, sc and m the 4-bit scale and min of each group;
//   Q3_K: c = q−4·(1−h) (q 2 bits, h the high-mask bit), s = d·(sc−32), sc 6 bits;
//   Q6_K: c = q−32, s = d·sc, sc the int8 scale of each group;
//   IQ4_XS: c = v[q], s = d·(ls−32), ls the 6-bit scale of each group;
//   IQ2_XXS, IQ2_XS: c = ±grid magnitude (kernels/iq_grids.h), s = d·(0.5+ls)·0.25, ls 4 bits;
//   IQ3_XXS: c = ±grid magnitude, s = d·(0.5+ls)·0.5;  IQ3_S: c = ±grid magnitude, s = d·(1+2·ls);
// d and dmin the block's f16 values, v the code book above; mn = 0 where the type has no mins.
// s and mn hold up to 16 groups.
void split_block(WeightType t, const uint8_t* block, int8_t* c, float* s, float* mn);
// split_block of Q4_1, Q5_0, Q5_1, Q2_K, Q3_K and the IQ2/IQ3 types (kernels/matrix_lowbit.cc).
void split_block_lowbit(WeightType t, const uint8_t* block, int8_t* c, float* s, float* mn);

// Decodes one block into out[block elements] by split_block's rule, s·c − mn per element (no
// fused multiply-add inside a weight; x − 0 is x, so the types without mins are s·c). The SIMD
// kernels perform the same float operations.
void decode_block(WeightType t, const uint8_t* block, float* out);


}  // namespace qwen35::kernels
