// split_block for the ggml block types of the low-RAM GGUF files (kernels/matrix.h states each
// type's codes and scales): Q4_1, Q5_0, Q5_1 (the 32-element fallbacks for rows that are not a
// multiple of 256), Q2_K, Q3_K, and the code-book types IQ2_XXS, IQ2_XS, IQ3_XXS and IQ3_S.
//
// Every scale is one float product of the block's f16 values and small integers, in the order the
// format defines it (d·(0.5+ls)·0.25 is (d·(0.5+ls))·0.25): exact in f32 for all of them (at most
// 11 + 6 significant bits), so s·c is the format's value rounded once.
#include <cstring>

#include "core/check.h"
#include "kernels/iq_grids.h"
#include "kernels/matrix.h"

namespace qwen35::kernels {

namespace {

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return core::f16_to_f32(h);
}

uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Q4_1 / Q5_0 / Q5_1: d, [m], [32 high bits], 16 bytes of nibbles (element j low, j+16 high).
void split_legacy(WeightType t, const uint8_t* b, int8_t* c, float* s, float* mn) {
  const bool mins = t != WeightType::kQ5_0, five = t != WeightType::kQ4_1;
  s[0] = half_at(b);
  mn[0] = mins ? -half_at(b + 2) : 0.0f;
  const uint8_t* p = b + (mins ? 4 : 2);
  const uint32_t qh = five ? u32_at(p) : 0;
  const uint8_t* qs = five ? p + 4 : p;
  const int off = t == WeightType::kQ5_0 ? 16 : 0;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0xF) | int((qh >> j) & 1) << 4;
    const int hi = (qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
    c[j] = int8_t(lo - off);
    c[j + 16] = int8_t(hi - off);
  }
}

// Q2_K: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin. Q3_K: hmask[32], qs[64],
// scales[12] (sixteen 6-bit scales), d. Both: element 128n + 32j + 16h + l (n < 2, j < 4, h < 2,
// l < 16) is bits 2j..2j+1 of qs[32n + 16h + l], in group 8n + 2j + h; Q3_K's high-mask bit of it
// is bit 4n + j of hmask[16h + l].
void split_k_low(WeightType t, const uint8_t* b, int8_t* c, float* s, float* mn) {
  const bool three = t == WeightType::kQ3_K;
  const uint8_t* qs = b + (three ? 32 : 16);
  if (three) {
    const float d = half_at(b + 108);
    const uint8_t* sc = b + 96;
    for (int g = 0; g < 16; ++g) {
      const int lo = g < 8 ? sc[g] & 0xF : sc[g - 8] >> 4;
      const int hi = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
      s[g] = d * float((lo | hi << 4) - 32);
      mn[g] = 0.0f;
    }
  } else {
    const float d = half_at(b + 80), dmin = half_at(b + 82);
    for (int g = 0; g < 16; ++g) {
      s[g] = d * float(b[g] & 0xF);
      mn[g] = dmin * float(b[g] >> 4);
    }
  }
  for (int n = 0; n < 2; ++n)
    for (int j = 0; j < 4; ++j)
      for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 16; ++l) {
          const int i = 16 * h + l;
          int q = (qs[32 * n + i] >> (2 * j)) & 3;
          if (three && !((b[i] >> (4 * n + j)) & 1)) q -= 4;
          c[128 * n + 32 * j + 16 * h + l] = int8_t(q);
        }
}

// N signed magnitudes: c[j] = ±m[j], negative where bit j of `signs` is set (branch-free:
// (m ^ −1) + 1 is −m).
template <int N>
void signed_run(const uint8_t* m, uint32_t signs, int8_t* c) {
  for (int j = 0; j < N; ++j) {
    const int neg = -int((signs >> j) & 1);
    c[j] = int8_t((int(m[j]) ^ neg) - neg);
  }
}

// IQ2_XXS: d, then per group of 32 two u32: four 8-bit grid indices, then four 7-bit sign fields
// and the 4-bit scale in the top bits. IQ2_XS: d, 32 u16 (9-bit grid index, 7-bit signs), then
// 8 bytes of two 4-bit scales (groups of 16).
void split_iq2(WeightType t, const uint8_t* b, int8_t* c, float* s, float* mn) {
  const float d = half_at(b);
  for (int g = 0; g < 16; ++g) mn[g] = 0.0f;
  for (int ib = 0; ib < 8; ++ib) {
    if (t == WeightType::kIQ2_XXS) {
      const uint32_t idx = u32_at(b + 2 + 8 * ib), hi = u32_at(b + 6 + 8 * ib);
      s[ib] = d * (0.5f + float(hi >> 28)) * 0.25f;
      for (int l = 0; l < 4; ++l)
        signed_run<8>(kIq2xxsGrid[(idx >> (8 * l)) & 255].data(), iq_signs(hi >> (7 * l)),
                      c + 32 * ib + 8 * l);
    } else {
      const uint8_t sc = b[66 + ib];
      s[2 * ib] = d * (0.5f + float(sc & 0xF)) * 0.25f;
      s[2 * ib + 1] = d * (0.5f + float(sc >> 4)) * 0.25f;
      for (int l = 0; l < 4; ++l) {
        uint16_t v;
        std::memcpy(&v, b + 2 + 2 * (4 * ib + l), 2);
        signed_run<8>(kIq2xsGrid[v & 511].data(), iq_signs(v >> 9), c + 32 * ib + 8 * l);
      }
    }
  }
}

// IQ3_XXS: d, qs[64] (8-bit grid indices of runs of 4), then per group of 32 a u32 of four 7-bit
// sign fields and the 4-bit scale on top. IQ3_S: d, qs[64] (low 8 bits of 9-bit grid indices),
// qh[8] (their high bits, one byte per group), signs[32] (8 full sign bits per run of 8),
// scales[4] (two 4-bit scales each).
void split_iq3(WeightType t, const uint8_t* b, int8_t* c, float* s, float* mn) {
  const float d = half_at(b);
  const uint8_t* qs = b + 2;
  for (int ib = 0; ib < 8; ++ib) {
    mn[ib] = 0.0f;
    const uint8_t* q = qs + 8 * ib;
    int8_t* o = c + 32 * ib;
    if (t == WeightType::kIQ3_XXS) {
      const uint32_t aux = u32_at(b + 66 + 4 * ib);
      s[ib] = d * (0.5f + float(aux >> 28)) * 0.5f;
      for (int l = 0; l < 4; ++l) {
        const uint32_t signs = iq_signs(aux >> (7 * l));
        signed_run<4>(kIq3xxsGrid[q[2 * l]].data(), signs, o + 8 * l);
        signed_run<4>(kIq3xxsGrid[q[2 * l + 1]].data(), signs >> 4, o + 8 * l + 4);
      }
    } else {
      const uint32_t qh = b[66 + ib];
      const uint8_t* signs = b + 74 + 4 * ib;
      s[ib] = d * float(1 + 2 * ((b[106 + ib / 2] >> (4 * (ib % 2))) & 0xF));
      for (int l = 0; l < 4; ++l) {
        const uint32_t i1 = q[2 * l] | ((qh >> (2 * l)) & 1) << 8,
                       i2 = q[2 * l + 1] | ((qh >> (2 * l + 1)) & 1) << 8;
        signed_run<4>(kIq3sGrid[i1].data(), signs[l], o + 8 * l);
        signed_run<4>(kIq3sGrid[i2].data(), uint32_t(signs[l]) >> 4, o + 8 * l + 4);
      }
    }
  }
}

}  // namespace

void split_block_lowbit(WeightType t, const uint8_t* b, int8_t* c, float* s, float* mn) {
  switch (t) {
    case WeightType::kQ4_1:
    case WeightType::kQ5_0:
    case WeightType::kQ5_1:
      return split_legacy(t, b, c, s, mn);
    case WeightType::kQ2_K:
    case WeightType::kQ3_K:
      return split_k_low(t, b, c, s, mn);
    case WeightType::kIQ2_XXS:
    case WeightType::kIQ2_XS:
      return split_iq2(t, b, c, s, mn);
    case WeightType::kIQ3_XXS:
    case WeightType::kIQ3_S:
      return split_iq3(t, b, c, s, mn);
    default:
      QWEN35_CHECK(false && "split_block_lowbit: not a low-bit block type");
  }
}

}  // namespace qwen35::kernels
