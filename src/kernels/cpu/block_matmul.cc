// Highway compiles this file once per SIMD target (foreach_target) and dispatches at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/block_matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// Once per target:
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/block_matmul.h"
#include "kernels/iq_grids.h"
#include "kernels/matrix.h"

HWY_BEFORE_NAMESPACE();
namespace qwen35::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 16>;
using DI = hn::RebindToSigned<DF>;
constexpr int kPartials = 64;  // partial sums per output (block_matmul.h)

#if HWY_TARGET != HWY_SCALAR
using D8 = hn::Full128<uint8_t>;

// An f16 value (the hardware conversion where the target has one).
HWY_MAYBE_UNUSED HWY_INLINE float HalfAt(const uint8_t* p) {
  const hn::CappedTag<float, 1> d1;
  return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(hn::Rebind<hwy::float16_t, decltype(d1)>(), reinterpret_cast<const hwy::float16_t*>(p))));
}

// out[i] = s·float(c[i]) − m for n (a multiple of the lane count) unsigned codes.
HWY_INLINE void ScaleU8(const uint8_t* c, int n, float s, float m, float* out) {
  const DF df;
  const hn::Rebind<uint8_t, DF> d8;
  const auto vs = hn::Set(df, s), vm = hn::Set(df, m);
  for (int i = 0; i < n; i += int(hn::Lanes(df))) {
    const auto q = hn::ConvertTo(df, hn::BitCast(DI(), hn::PromoteTo(hn::RebindToUnsigned<DF>(), hn::LoadU(d8, c + i))));
    hn::StoreU(hn::Sub(hn::Mul(vs, q), vm), df, out + i);
  }
}

// out[i] = s·float(c[i]) for n signed codes.
HWY_INLINE void ScaleI8(const int8_t* c, int n, float s, float* out) {
  const DF df;
  const hn::Rebind<int8_t, DF> d8;
  const auto vs = hn::Set(df, s);
  for (int i = 0; i < n; i += int(hn::Lanes(df)))
    hn::StoreU(hn::Mul(vs, hn::ConvertTo(df, hn::PromoteTo(DI(), hn::LoadU(d8, c + i)))), df, out + i);
}

// out[i] = s·float(c[i]) − m for n (a multiple of the lane count) signed codes.
HWY_INLINE void ScaleI8Min(const int8_t* c, int n, float s, float m, float* out) {
  const DF df;
  const hn::Rebind<int8_t, DF> d8;
  const auto vs = hn::Set(df, s), vm = hn::Set(df, m);
  for (int i = 0; i < n; i += int(hn::Lanes(df)))
    hn::StoreU(hn::Sub(hn::Mul(vs, hn::ConvertTo(df, hn::PromoteTo(DI(), hn::LoadU(d8, c + i)))), vm), df, out + i);
}

// The low and high nibbles of 16 bytes.
HWY_INLINE hn::Vec<D8> Low(hn::Vec<D8> b) { return hn::And(b, hn::Set(D8(), 0x0F)); }
HWY_INLINE hn::Vec<D8> High(hn::Vec<D8> b) {
  const hn::Full128<uint16_t> d16;
  return hn::And(hn::BitCast(D8(), hn::ShiftRight<4>(hn::BitCast(d16, b))), hn::Set(D8(), 0x0F));
}
HWY_INLINE hn::Vec<D8> Shr(hn::Vec<D8> b, int k) {
  const hn::Full128<uint16_t> d16;
  return hn::BitCast(D8(), hn::ShiftRightSame(hn::BitCast(d16, b), k));
}

// 0x10 in byte j where bit j of the 16 bits h is set.
HWY_INLINE hn::Vec<D8> FifthBits(uint32_t h) {
  const D8 d8;
  alignas(16) static constexpr uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  alignas(16) uint8_t bytes[16];
  const uint64_t lo = uint64_t(h & 0xFF) * 0x0101010101010101ull, hi = uint64_t(h >> 8) * 0x0101010101010101ull;
  std::memcpy(bytes, &lo, 8);
  std::memcpy(bytes + 8, &hi, 8);
  const auto set = hn::TestBit(hn::Load(d8, bytes), hn::Load(d8, kBit));
  return hn::IfThenElseZero(set, hn::Set(d8, 0x10));
}

// 16 grid magnitudes m (two runs of 8) as signed codes: byte j negated where bit j % 8 of s0
// (bytes 0..7) or s1 (bytes 8..15) is set.
HWY_INLINE void SignRuns(const uint8_t* m, uint32_t s0, uint32_t s1, int8_t* out) {
  const D8 d8;
  const hn::Full128<int8_t> di8;
  alignas(16) static constexpr uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  alignas(16) uint8_t bytes[16];
  const uint64_t lo = uint64_t(s0 & 0xFF) * 0x0101010101010101ull, hi = uint64_t(s1 & 0xFF) * 0x0101010101010101ull;
  std::memcpy(bytes, &lo, 8);
  std::memcpy(bytes + 8, &hi, 8);
  const auto neg = hn::RebindMask(di8, hn::TestBit(hn::Load(d8, bytes), hn::Load(d8, kBit)));
  const auto v = hn::BitCast(di8, hn::LoadU(d8, m));
  hn::StoreU(hn::IfThenElse(neg, hn::Neg(v), v), di8, out);
}

// The IQ2/IQ3 types: per group of 32, the grid points' magnitudes gathered, their signs applied
// in vectors, then s·c (kernels/matrix_lowbit.cc states the layouts).
template <WeightType t>
HWY_INLINE void DecodeIq(const uint8_t* b, float* out) {
  const float d = HalfAt(b);
  alignas(16) uint8_t mag[32];
  alignas(16) int8_t codes[32];
  uint32_t sg[4];
  for (int ib = 0; ib < 8; ++ib) {
    float s0 = 0, s1 = 0;
    if constexpr (t == WeightType::kIQ2_XXS) {
      uint32_t idx, hi;
      std::memcpy(&idx, b + 2 + 8 * ib, 4);
      std::memcpy(&hi, b + 6 + 8 * ib, 4);
      for (int l = 0; l < 4; ++l) {
        std::memcpy(mag + 8 * l, kIq2xxsGrid[(idx >> (8 * l)) & 255].data(), 8);
        sg[l] = iq_signs(hi >> (7 * l));
      }
      s0 = s1 = d * (0.5f + float(hi >> 28)) * 0.25f;
    } else if constexpr (t == WeightType::kIQ2_XS) {
      for (int l = 0; l < 4; ++l) {
        uint16_t v;
        std::memcpy(&v, b + 2 + 2 * (4 * ib + l), 2);
        std::memcpy(mag + 8 * l, kIq2xsGrid[v & 511].data(), 8);
        sg[l] = iq_signs(v >> 9);
      }
      s0 = d * (0.5f + float(b[66 + ib] & 0xF)) * 0.25f;
      s1 = d * (0.5f + float(b[66 + ib] >> 4)) * 0.25f;
    } else if constexpr (t == WeightType::kIQ3_XXS) {
      const uint8_t* q = b + 2 + 8 * ib;
      uint32_t aux;
      std::memcpy(&aux, b + 66 + 4 * ib, 4);
      for (int l = 0; l < 8; ++l) std::memcpy(mag + 4 * l, kIq3xxsGrid[q[l]].data(), 4);
      for (int l = 0; l < 4; ++l) sg[l] = iq_signs(aux >> (7 * l));
      s0 = s1 = d * (0.5f + float(aux >> 28)) * 0.5f;
    } else {
      const uint8_t* q = b + 2 + 8 * ib;
      const uint32_t qh = b[66 + ib];
      for (int l = 0; l < 8; ++l) std::memcpy(mag + 4 * l, kIq3sGrid[q[l] | ((qh >> l) & 1) << 8].data(), 4);
      for (int l = 0; l < 4; ++l) sg[l] = b[74 + 4 * ib + l];
      s0 = s1 = d * float(1 + 2 * ((b[106 + ib / 2] >> (4 * (ib % 2))) & 0xF));
    }
    SignRuns(mag, sg[0], sg[1], codes);
    SignRuns(mag + 16, sg[2], sg[3], codes + 16);
    ScaleI8(codes, 16, s0, out + 32 * ib);
    ScaleI8(codes + 16, 16, s1, out + 32 * ib + 16);
  }
}

// One block of type t into out[elements], with decode_block's float operations.
template <WeightType t>
HWY_INLINE void DecodeBlock(const uint8_t* b, float* out) {
  const D8 d8;
  alignas(64) uint8_t c[64];
  switch (t) {
    case WeightType::kQ8_0:
      ScaleI8(reinterpret_cast<const int8_t*>(b + 2), 32, HalfAt(b), out);
      return;
    case WeightType::kQ4_0:
    case WeightType::kIQ4_NL: {
      const auto q = hn::LoadU(d8, b + 2);
      auto lo = Low(q), hi = High(q);
      if (t == WeightType::kIQ4_NL) {
        const auto tbl = hn::LoadU(d8, reinterpret_cast<const uint8_t*>(kIq4Values));
        lo = hn::TableLookupBytes(tbl, lo);
        hi = hn::TableLookupBytes(tbl, hi);
      } else {
        lo = hn::Sub(lo, hn::Set(d8, 8));  // q − 8 as a signed byte
        hi = hn::Sub(hi, hn::Set(d8, 8));
      }
      hn::StoreU(lo, d8, c);
      hn::StoreU(hi, d8, c + 16);
      ScaleI8(reinterpret_cast<const int8_t*>(c), 32, HalfAt(b), out);
      return;
    }
    case WeightType::kQ4_1:
    case WeightType::kQ5_0:
    case WeightType::kQ5_1: {
      const bool mins = t != WeightType::kQ5_0, five = t != WeightType::kQ4_1;
      const uint8_t* p = b + (mins ? 4 : 2);
      const auto q = hn::LoadU(d8, five ? p + 4 : p);
      auto lo = Low(q), hi = High(q);
      if (five) {  // bit j of the u32 qh: the fifth bit of element j
        uint32_t qh;
        std::memcpy(&qh, p, 4);
        lo = hn::Or(lo, FifthBits(qh & 0xFFFF));
        hi = hn::Or(hi, FifthBits(qh >> 16));
      }
      if (t == WeightType::kQ5_0) {
        lo = hn::Sub(lo, hn::Set(d8, 16));  // q − 16 as a signed byte
        hi = hn::Sub(hi, hn::Set(d8, 16));
      }
      hn::StoreU(lo, d8, c);
      hn::StoreU(hi, d8, c + 16);
      if (mins) ScaleU8(c, 32, HalfAt(b), -HalfAt(b + 2), out);  // s·q − (−m), split_block's mn = −m
      else ScaleI8(reinterpret_cast<const int8_t*>(c), 32, HalfAt(b), out);
      return;
    }
    case WeightType::kQ4_K:
    case WeightType::kQ5_K: {
      const float d = HalfAt(b), dmin = HalfAt(b + 2);
      const uint8_t* scales = b + 4;
      const bool five = t == WeightType::kQ5_K;
      const uint8_t* qh = b + 16;
      const uint8_t* ql = five ? b + 48 : b + 16;
      for (int g = 0; g < 4; ++g) {
        int sc1, m1, sc2, m2;
        scale_min_k4(2 * g, scales, &sc1, &m1);
        scale_min_k4(2 * g + 1, scales, &sc2, &m2);
        for (int h = 0; h < 2; ++h) {
          const auto q = hn::LoadU(d8, ql + 32 * g + 16 * h);
          auto lo = Low(q), hi = High(q);
          if (five) {
            const auto hb = hn::LoadU(d8, qh + 16 * h);
            const auto one = hn::Set(d8, 1);
            lo = hn::Or(lo, hn::ShiftLeft<4>(hn::And(Shr(hb, 2 * g), one)));
            hi = hn::Or(hi, hn::ShiftLeft<4>(hn::And(Shr(hb, 2 * g + 1), one)));
          }
          hn::StoreU(lo, d8, c + 16 * h);
          hn::StoreU(hi, d8, c + 32 + 16 * h);
        }
        ScaleU8(c, 32, d * float(sc1), dmin * float(m1), out + 64 * g);
        ScaleU8(c + 32, 32, d * float(sc2), dmin * float(m2), out + 64 * g + 32);
      }
      return;
    }
    case WeightType::kQ6_K: {
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
      const float d = HalfAt(b + 208);
      const auto three = hn::Set(d8, 3), k32 = hn::Set(d8, 32);
      for (int n = 0; n < 2; ++n) {
        const uint8_t* l0 = b + 64 * n;
        const uint8_t* h0 = b + 128 + 32 * n;
        for (int h = 0; h < 2; ++h) {  // elements l = 16h..16h+15 of each quarter
          const auto a = hn::LoadU(d8, l0 + 16 * h), bb = hn::LoadU(d8, l0 + 32 + 16 * h);
          const auto hb = hn::LoadU(d8, h0 + 16 * h);
          const hn::Vec<D8> q[4] = {
              hn::Or(Low(a), hn::ShiftLeft<4>(hn::And(hb, three))),
              hn::Or(Low(bb), hn::ShiftLeft<4>(hn::And(Shr(hb, 2), three))),
              hn::Or(High(a), hn::ShiftLeft<4>(hn::And(Shr(hb, 4), three))),
              hn::Or(High(bb), hn::ShiftLeft<4>(hn::And(Shr(hb, 6), three)))};
          for (int j = 0; j < 4; ++j) {
            hn::StoreU(hn::Sub(q[j], k32), d8, c);
            ScaleI8(reinterpret_cast<const int8_t*>(c), 16, d * float(sc[8 * n + h + 2 * j]),
                    out + 128 * n + 32 * j + 16 * h);
          }
        }
      }
      return;
    }
    case WeightType::kIQ4_XS: {
      const float d = HalfAt(b);
      uint16_t sh;
      std::memcpy(&sh, b + 2, 2);
      const uint8_t* sl = b + 4;
      const auto tbl = hn::LoadU(d8, reinterpret_cast<const uint8_t*>(kIq4Values));
      for (int ib = 0; ib < 8; ++ib) {
        const int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
        const auto q = hn::LoadU(d8, b + 8 + 16 * ib);
        hn::StoreU(hn::TableLookupBytes(tbl, Low(q)), d8, c);
        hn::StoreU(hn::TableLookupBytes(tbl, High(q)), d8, c + 16);
        ScaleI8(reinterpret_cast<const int8_t*>(c), 32, d * float(ls - 32), out + 32 * ib);
      }
      return;
    }
    case WeightType::kQ2_K:
    case WeightType::kQ3_K: {
      // Element 128n + 32j + 16h + l: bits 2j..2j+1 of qs[32n + 16h + l], group 8n + 2j + h;
      // Q3_K's high-mask bit of it is bit 4n + j of hmask[16h + l].
      const bool three = t == WeightType::kQ3_K;
      const uint8_t* qs = b + (three ? 32 : 16);
      float s[16], mn[16] = {};
      if (three) {
        const float d = HalfAt(b + 108);
        const uint8_t* sc = b + 96;
        for (int g = 0; g < 16; ++g) {
          const int lo = g < 8 ? sc[g] & 0xF : sc[g - 8] >> 4, hi = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
          s[g] = d * float((lo | hi << 4) - 32);
        }
      } else {
        const float d = HalfAt(b + 80), dmin = HalfAt(b + 82);
        for (int g = 0; g < 16; ++g) {
          s[g] = d * float(b[g] & 0xF);
          mn[g] = dmin * float(b[g] >> 4);
        }
      }
      const auto three_mask = hn::Set(d8, 3), one = hn::Set(d8, 1);
      for (int n = 0; n < 2; ++n)
        for (int h = 0; h < 2; ++h) {
          const auto q = hn::LoadU(d8, qs + 32 * n + 16 * h);
          const auto hm = hn::LoadU(d8, b + 16 * h);
          for (int j = 0; j < 4; ++j) {
            const int g = 8 * n + 2 * j + h;
            auto u = hn::And(Shr(q, 2 * j), three_mask);
            if (three) {  // q − 4·(1 − h): (q | h << 2) − 4 as a signed byte
              u = hn::Sub(hn::Or(u, hn::ShiftLeft<2>(hn::And(Shr(hm, 4 * n + j), one))), hn::Set(d8, 4));
              hn::StoreU(u, d8, c);
              ScaleI8(reinterpret_cast<const int8_t*>(c), 16, s[g], out + 16 * g);
            } else {
              hn::StoreU(u, d8, c);
              ScaleU8(c, 16, s[g], mn[g], out + 16 * g);
            }
          }
        }
      return;
    }
    case WeightType::kIQ2_XXS:
    case WeightType::kIQ2_XS:
    case WeightType::kIQ3_XXS:
    case WeightType::kIQ3_S: return DecodeIq<t>(b, out);
    default: {
      // The other types: split_block's codes and scales (scalar), then decode_block's s·c − mn in
      // vectors, group by group.
      alignas(64) int8_t codes[256];
      float s[16], mn[16];
      split_block(t, b, codes, s, mn);
      const int G = block_group(t), n = int(block_format(t).elements);
      for (int g = 0; g * G < n; ++g) ScaleI8Min(codes + g * G, G, s[g], mn[g], out + g * G);
    }
  }
}
#else
// No 16-byte vectors on this target: the scalar decoding (the same operations).
template <WeightType t>
HWY_INLINE void DecodeBlock(const uint8_t* b, float* out) { decode_block(t, b, out); }
#endif

template <WeightType t>
void DecodeRowT(const Matrix& m, int64_t r, float* out) {
  const BlockFormat f = block_format(t);
  const uint8_t* p = static_cast<const uint8_t*>(m.data) + r * block_row_bytes(m);
  for (int64_t k = 0; k < m.cols; k += f.elements, p += f.bytes) {
    // The rows of a matrix lie back to back: fetching ahead keeps the stream from memory going
    // while the decoded rows are multiplied.
    __builtin_prefetch(p + 1024);
    __builtin_prefetch(p + 1024 + 64);
    DecodeBlock<t>(p, out + k);
  }
}

void DecodeRow(const Matrix& m, int64_t r, float* out) {
  switch (m.type) {
    case WeightType::kQ8_0: return DecodeRowT<WeightType::kQ8_0>(m, r, out);
    case WeightType::kQ4_0: return DecodeRowT<WeightType::kQ4_0>(m, r, out);
    case WeightType::kIQ4_NL: return DecodeRowT<WeightType::kIQ4_NL>(m, r, out);
    case WeightType::kQ4_K: return DecodeRowT<WeightType::kQ4_K>(m, r, out);
    case WeightType::kQ5_K: return DecodeRowT<WeightType::kQ5_K>(m, r, out);
    case WeightType::kQ6_K: return DecodeRowT<WeightType::kQ6_K>(m, r, out);
    case WeightType::kIQ4_XS: return DecodeRowT<WeightType::kIQ4_XS>(m, r, out);
    case WeightType::kQ4_1: return DecodeRowT<WeightType::kQ4_1>(m, r, out);
    case WeightType::kQ5_0: return DecodeRowT<WeightType::kQ5_0>(m, r, out);
    case WeightType::kQ5_1: return DecodeRowT<WeightType::kQ5_1>(m, r, out);
    case WeightType::kQ2_K: return DecodeRowT<WeightType::kQ2_K>(m, r, out);
    case WeightType::kQ3_K: return DecodeRowT<WeightType::kQ3_K>(m, r, out);
    case WeightType::kIQ2_XXS: return DecodeRowT<WeightType::kIQ2_XXS>(m, r, out);
    case WeightType::kIQ2_XS: return DecodeRowT<WeightType::kIQ2_XS>(m, r, out);
    case WeightType::kIQ3_XXS: return DecodeRowT<WeightType::kIQ3_XXS>(m, r, out);
    case WeightType::kIQ3_S: return DecodeRowT<WeightType::kIQ3_S>(m, r, out);
    default: decode_row(m, r, out);
  }
}

#if HWY_TARGET != HWY_SCALAR
// The halving tree of block_matmul.h inside one vector: lanes [0, n/2) += lanes [n/2, n) until
// two are left, then lane 0 + lane 1.
template <class D>
HWY_INLINE float ReduceTree(D d, hn::Vec<D> v) {
  if constexpr (hn::MaxLanes(D()) <= 2) {
    (void)d;
    return hn::GetLane(v) + hn::ExtractLane(v, 1);
  } else {
    const hn::Half<D> dh;
    return ReduceTree(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  }
}

// rt activation rows against one decoded weight row w[K]: the partials as kPartials / lanes
// vectors per row (K a multiple of 32; a last half chunk feeds partials 0..31).
template <int rt>
HWY_INLINE void Dot(const float* w, const float* const* x, int64_t K, float* const* y, int64_t o) {
  const DF df;
  constexpr int kL = int(hn::MaxLanes(DF()));
  constexpr int P = kPartials / kL;  // vectors per row
  hn::Vec<DF> acc[rt][P];
  for (int r = 0; r < rt; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = hn::Zero(df);
  int64_t k = 0;
  for (; k + kPartials <= K; k += kPartials)
    for (int p = 0; p < P; ++p) {
      const auto wv = hn::LoadU(df, w + k + p * kL);
      for (int r = 0; r < rt; ++r) acc[r][p] = hn::MulAdd(wv, hn::LoadU(df, x[r] + k + p * kL), acc[r][p]);
    }
  for (int p = 0; k + p * kL < K; ++p) {
    const auto wv = hn::LoadU(df, w + k + p * kL);
    for (int r = 0; r < rt; ++r) acc[r][p] = hn::MulAdd(wv, hn::LoadU(df, x[r] + k + p * kL), acc[r][p]);
  }
  // The tree: partial vectors pairwise (p[i] += p[i + w] for w down to the lane count), then
  // inside the last one.
  for (int r = 0; r < rt; ++r) {
    for (int w = P / 2; w >= 1; w /= 2)
      for (int p = 0; p < w; ++p) acc[r][p] = hn::Add(acc[r][p], acc[r][p + w]);
    y[r][o] = ReduceTree(df, acc[r][0]);
  }
}

#endif  // HWY_TARGET != HWY_SCALAR

constexpr int64_t kRowBlock = 16;  // output rows decoded at a time
constexpr int64_t kActBlock = 64;  // activation rows that stay in cache across them
// Activation rows per pass over a decoded row: their accumulators fill about half the registers.
constexpr int kActRows = hn::MaxLanes(DF()) >= 16 ? 4 : 1;

void BlockRowsImpl(const Matrix& m, const float* x, int64_t n, int64_t o0, int64_t o1, float* y,
                   std::vector<float>& wbuf) {
  const int64_t K = m.cols, M = m.rows;
  wbuf.resize(size_t(kRowBlock * K));
  // The partials need whole vectors and fused multiply-adds (std::fma in the twin); other targets
  // run the twin.
  constexpr bool kSimd = HWY_TARGET != HWY_SCALAR && HWY_NATIVE_FMA && 32 % hn::MaxLanes(DF()) == 0;
  // Few activation rows (decoding): one decoded row at a time, which stays in L1 for its dot
  // products; more: 16, each reused by up to 64 activation rows.
  const int64_t row_block = n <= kActRows ? 1 : kRowBlock;
  for (int64_t ob = o0; ob < o1; ob += row_block) {
    const int64_t oe = std::min(o1, ob + row_block);
    for (int64_t o = ob; o < oe; ++o) DecodeRow(m, o, wbuf.data() + (o - ob) * K);
    for (int64_t tb = 0; tb < n; tb += kActBlock) {
      const int64_t te = std::min(n, tb + kActBlock);
      for (int64_t o = ob; o < oe; ++o) {
        const float* w = wbuf.data() + (o - ob) * K;
        if constexpr (!kSimd) {
          for (int64_t t = tb; t < te; ++t) y[t * M + o] = block_row_dot_scalar(w, x + t * K, K);
        } else {
#if HWY_TARGET != HWY_SCALAR
        for (int64_t t = tb; t < te; t += kActRows) {
          const int rt = int(std::min<int64_t>(kActRows, te - t));
          const float* xr[kActRows];
          float* yr[kActRows];
          for (int r = 0; r < rt; ++r) {
            xr[r] = x + (t + r) * K;
            yr[r] = y + (t + r) * M;
          }
          if constexpr (kActRows == 1) {
            Dot<1>(w, xr, K, yr, o);
          } else {
            switch (rt) {
              case 1: Dot<1>(w, xr, K, yr, o); break;
              case 2: Dot<2>(w, xr, K, yr, o); break;
              case 3: Dot<3>(w, xr, K, yr, o); break;
              default: Dot<kActRows>(w, xr, K, yr, o); break;
            }
          }
        }
#endif
        }
      }
    }
  }
}

}  // namespace qwen35::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qwen35::kernels::cpu {
HWY_EXPORT(BlockRowsImpl);

void block_matmul_rows(const Matrix& m, const float* x, int64_t n, int64_t o0, int64_t o1, float* y,
                       std::vector<float>& decoded) {
  if (n == 0 || o1 <= o0) return;
  HWY_DYNAMIC_DISPATCH(BlockRowsImpl)(m, x, n, o0, o1, y, decoded);
}

float block_row_dot_scalar(const float* w, const float* x, int64_t K) {
  float p[64] = {};
  for (int64_t k = 0; k < K; ++k) p[k % 64] = std::fma(w[k], x[k], p[k % 64]);
  for (int w2 = 32; w2 >= 2; w2 /= 2)
    for (int i = 0; i < w2; ++i) p[i] += p[i + w2];
  return p[0] + p[1];
}

}  // namespace qwen35::kernels::cpu
#endif
