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
    default:
      decode_block(t, b, out);
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
