#include "kernels/matrix.h"

#include <cstring>

#include "core/check.h"

namespace qwen35::kernels {

namespace {
float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return core::f16_to_f32(h);
}
}  // namespace

BlockFormat block_format(WeightType t) {
  switch (t) {
    case WeightType::kQ8_0: return {32, 34};
    case WeightType::kQ4_0: return {32, 18};
    case WeightType::kIQ4_NL: return {32, 18};
    case WeightType::kQ4_K: return {256, 144};
    case WeightType::kQ5_K: return {256, 176};
    case WeightType::kQ6_K: return {256, 210};
    case WeightType::kIQ4_XS: return {256, 136};
    case WeightType::kQ4_1: return {32, 20};
    case WeightType::kQ5_0: return {32, 22};
    case WeightType::kQ5_1: return {32, 24};
    case WeightType::kQ2_K: return {256, 84};
    case WeightType::kQ3_K: return {256, 110};
    case WeightType::kIQ2_XXS: return {256, 66};
    case WeightType::kIQ2_XS: return {256, 74};
    case WeightType::kIQ3_XXS: return {256, 98};
    case WeightType::kIQ3_S: return {256, 110};
    default: return {};
  }
}

int block_group(WeightType t) {
  switch (t) {
    case WeightType::kQ6_K:
    case WeightType::kQ2_K:
    case WeightType::kQ3_K:
    case WeightType::kIQ2_XS: return 16;
    default: return is_block_type(t) ? 32 : 0;
  }
}

void split_block(WeightType t, const uint8_t* b, int8_t* c, float* s, float* mn) {
  switch (t) {
    case WeightType::kQ8_0:
      s[0] = half_at(b);
      mn[0] = 0.0f;
      std::memcpy(c, b + 2, 32);
      return;
    case WeightType::kQ4_0:
    case WeightType::kIQ4_NL: {
      s[0] = half_at(b);
      mn[0] = 0.0f;
      const uint8_t* qs = b + 2;
      const bool nl = t == WeightType::kIQ4_NL;
      for (int j = 0; j < 16; ++j) {
        const int lo = qs[j] & 0xF, hi = qs[j] >> 4;
        c[j] = int8_t(nl ? kIq4Values[lo] : lo - 8);
        c[j + 16] = int8_t(nl ? kIq4Values[hi] : hi - 8);
      }
      return;
    }
    case WeightType::kQ4_K:
    case WeightType::kQ5_K: {
      const float d = half_at(b), dmin = half_at(b + 2);
      const uint8_t* scales = b + 4;
      const bool five = t == WeightType::kQ5_K;
      const uint8_t* qh = b + 16;
      const uint8_t* ql = five ? b + 48 : b + 16;
      for (int j = 0; j < 8; ++j) {
        int sc, m;
        scale_min_k4(j, scales, &sc, &m);
        s[j] = d * float(sc);
        mn[j] = dmin * float(m);
      }
      for (int p = 0; p < 4; ++p)  // groups 2p and 2p+1: the low, then the high nibbles of 32 bytes
        for (int l = 0; l < 32; ++l) {
          const int h1 = five ? ((qh[l] >> (2 * p)) & 1) << 4 : 0;
          const int h2 = five ? ((qh[l] >> (2 * p + 1)) & 1) << 4 : 0;
          c[64 * p + l] = int8_t((ql[32 * p + l] & 0xF) | h1);
          c[64 * p + 32 + l] = int8_t((ql[32 * p + l] >> 4) | h2);
        }
      return;
    }
    case WeightType::kQ6_K: {
      const uint8_t* ql = b;
      const uint8_t* qh = b + 128;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
      const float d = half_at(b + 208);
      for (int g = 0; g < 16; ++g) {
        s[g] = d * float(sc[g]);
        mn[g] = 0.0f;
      }
      for (int n = 0; n < 2; ++n) {  // 128 elements each
        const uint8_t* l0 = ql + 64 * n;
        const uint8_t* h0 = qh + 32 * n;
        int8_t* o = c + 128 * n;
        for (int l = 0; l < 32; ++l) {
          o[l] = int8_t(((l0[l] & 0xF) | (((h0[l] >> 0) & 3) << 4)) - 32);
          o[l + 32] = int8_t(((l0[l + 32] & 0xF) | (((h0[l] >> 2) & 3) << 4)) - 32);
          o[l + 64] = int8_t(((l0[l] >> 4) | (((h0[l] >> 4) & 3) << 4)) - 32);
          o[l + 96] = int8_t(((l0[l + 32] >> 4) | (((h0[l] >> 6) & 3) << 4)) - 32);
        }
      }
      return;
    }
    case WeightType::kIQ4_XS: {
      const float d = half_at(b);
      uint16_t sh;
      std::memcpy(&sh, b + 2, 2);
      const uint8_t* sl = b + 4;
      const uint8_t* qs = b + 8;
      for (int ib = 0; ib < 8; ++ib) {
        const int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
        s[ib] = d * float(ls - 32);
        mn[ib] = 0.0f;
        for (int j = 0; j < 16; ++j) {
          c[32 * ib + j] = kIq4Values[qs[16 * ib + j] & 0xF];
          c[32 * ib + j + 16] = kIq4Values[qs[16 * ib + j] >> 4];
        }
      }
      return;
    }
    default:
      QWEN35_CHECK(is_block_type(t) && "split_block: not a block type");
      split_block_lowbit(t, b, c, s, mn);
  }
}

void decode_block(WeightType t, const uint8_t* b, float* y) {
  int8_t c[256];
  float s[16], mn[16];
  split_block(t, b, c, s, mn);
  const int64_t n = block_format(t).elements, G = block_group(t);
  for (int64_t g = 0; g * G < n; ++g)
    for (int64_t i = g * G; i < (g + 1) * G; ++i) y[i] = s[g] * float(c[i]) - mn[g];
}

Matrix Matrix::row_slice(int64_t r0, int64_t n) const {
  QWEN35_CHECK(r0 >= 0 && n >= 0 && r0 + n <= rows);
  Matrix m = *this;
  m.rows = n;
  switch (type) {
    case WeightType::kF32: m.data = static_cast<const float*>(data) + r0 * cols; break;
    case WeightType::kF16:
    case WeightType::kBF16: m.data = static_cast<const uint16_t*>(data) + r0 * cols; break;
    case WeightType::kAffine: {
      // Tile-major scales and codes: tile r0/16 starts at r0·groups and r0·words.
      QWEN35_CHECK(!(sb_tiled || codes_tiled) || r0 % 16 == 0);
      m.data = static_cast<const uint32_t*>(data) + r0 * affine_row_words(*this);
      const int64_t groups = cols / group;
      const size_t esz = core::dtype_size(sb_type);
      m.scales = static_cast<const uint8_t*>(scales) + size_t(r0 * groups) * esz;
      if (biases) m.biases = static_cast<const uint8_t*>(biases) + size_t(r0 * groups) * esz;
      break;
    }
    default: m.data = static_cast<const uint8_t*>(data) + r0 * block_row_bytes(*this); break;
  }
  return m;
}

size_t Matrix::bytes() const {
  switch (type) {
    case WeightType::kF32: return size_t(rows * cols) * 4;
    case WeightType::kF16:
    case WeightType::kBF16: return size_t(rows * cols) * 2;
    case WeightType::kAffine: {
      const size_t sb = size_t(rows * (cols / group)) * core::dtype_size(sb_type);
      return size_t(rows * affine_row_words(*this)) * 4 + sb * (biases ? 2 : 1);
    }
    default: return size_t(rows * block_row_bytes(*this));
  }
}

float matrix_at(const Matrix& m, int64_t r, int64_t c) {
  switch (m.type) {
    case WeightType::kF32: return static_cast<const float*>(m.data)[r * m.cols + c];
    case WeightType::kF16: return core::f16_to_f32(static_cast<const uint16_t*>(m.data)[r * m.cols + c]);
    case WeightType::kBF16: return core::bf16_to_f32(static_cast<const uint16_t*>(m.data)[r * m.cols + c]);
    case WeightType::kAffine: {
      const AffineRowAt row = affine_row_at(m, r);
      const int64_t gi = sb_index(m, r, c / m.group);
      const float s = sb_at(m.scales, m.sb_type, gi);
      const float b = m.biases ? sb_at(m.biases, m.sb_type, gi) : implicit_bias(m, s);
      return s * float(affine_value(m, affine_code(row.words, c, m.bits, row.stride))) + b;
    }
    default: {
      const BlockFormat f = block_format(m.type);
      float block[256];
      decode_block(m.type, static_cast<const uint8_t*>(m.data) + r * block_row_bytes(m) + c / f.elements * f.bytes, block);
      return block[c % f.elements];
    }
  }
}

void decode_row(const Matrix& m, int64_t r, float* out) {
  const int64_t n = m.cols;
  switch (m.type) {
    case WeightType::kF32:
      std::memcpy(out, static_cast<const float*>(m.data) + r * n, size_t(n) * 4);
      return;
    case WeightType::kF16: {
      const uint16_t* p = static_cast<const uint16_t*>(m.data) + r * n;
      for (int64_t i = 0; i < n; ++i) out[i] = core::f16_to_f32(p[i]);
      return;
    }
    case WeightType::kBF16: {
      const uint16_t* p = static_cast<const uint16_t*>(m.data) + r * n;
      for (int64_t i = 0; i < n; ++i) out[i] = core::bf16_to_f32(p[i]);
      return;
    }
    case WeightType::kAffine: {
      // Read in place (no buffer: callers decode rows from several threads at once).
      const AffineRowAt row = affine_row_at(m, r);
      const int64_t groups = n / m.group;
      for (int64_t g = 0; g < groups; ++g) {
        const float s = sb_at(m.scales, m.sb_type, sb_index(m, r, g));
        const float b = m.biases ? sb_at(m.biases, m.sb_type, sb_index(m, r, g)) : implicit_bias(m, s);
        float* o = out + g * m.group;
        const int64_t j0 = g * m.group;
        if (m.bits == 4 || m.bits == 8 || m.bits == 2) {
          // Codes never straddle words: decode word by word.
          const int per = 32 / m.bits;
          const uint32_t mask = (1u << m.bits) - 1u;
          for (int64_t j = 0; j < m.group; j += per) {
            uint32_t w = row.words[(j0 + j) / per * row.stride];
            for (int k = 0; k < per; ++k, w >>= m.bits) o[j + k] = s * float(affine_value(m, w & mask)) + b;
          }
        } else {
          for (int64_t j = 0; j < m.group; ++j)
            o[j] = s * float(affine_value(m, affine_code(row.words, j0 + j, m.bits, row.stride))) + b;
        }
      }
      return;
    }
    default: {
      const BlockFormat f = block_format(m.type);
      const uint8_t* p = static_cast<const uint8_t*>(m.data) + r * block_row_bytes(m);
      for (int64_t k = 0; k < n; k += f.elements, p += f.bytes) decode_block(m.type, p, out + k);
      return;
    }
  }
}

}  // namespace qwen35::kernels
