// Highway compiles this file once per SIMD target (foreach_target) and dispatches at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// Once per target:
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul.h"
#include "kernels/matrix.h"

HWY_BEFORE_NAMESPACE();
namespace qwen35::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Up to 16 lanes (AVX-512). The activation permutation and the lane→group mapping depend on the
// lane count, which is fixed per target, so results are reproducible on a given machine.
using DF = hn::CappedTag<float, 16>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
constexpr int64_t kRowTile = 8;

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

// Codes per block for `bits`: N words x (32/bits) codes.
inline int64_t block_codes(int bits) { return int64_t(hn::Lanes(DF())) * (32 / bits); }

// xp[b*B + j*N + w] = x[b*B + w*per + j]: lane w of vector j meets code j of word w.
void PermuteRow(const float* x, int64_t cols, int bits, float* xp) {
  const int64_t N = int64_t(hn::Lanes(DF())), per = 32 / bits, B = N * per;
  for (int64_t b = 0; b < cols; b += B)
    for (int64_t j = 0; j < per; ++j)
      for (int64_t w = 0; w < N; ++w) xp[b + j * N + w] = x[b + w * per + j];
}

template <int kBits, int rt>
HWY_INLINE void AffineRows(const Matrix& m, const float* const* xp, const float* const* xsum,
                           int64_t o, float* const* y, const float* sf,
                           const float* bf, const float* /*unused*/) {
  const DF df;
  const DU du;
  const DI di;
  constexpr int kPer = 32 / kBits;
  const int64_t N = int64_t(hn::Lanes(df)), B = N * kPer, K = m.cols, groups = K / m.group;
  const uint32_t* row = static_cast<const uint32_t*>(m.data) + o * (K * kBits / 32);
  const auto mask = hn::Set(du, (1u << kBits) - 1u);
  hn::Vec<DF> acc[kRowTile];
  for (int r = 0; r < rt; ++r) acc[r] = hn::Zero(df);
  const bool bcast = B <= m.group;
  // When a block spans several groups, lane w (codes w*kPer..) takes the scale of group
  // (b + w*kPer) / group: a table lookup into the row's scales from the block's first group.
  HWY_ALIGN int32_t lane_group[16];
  for (int64_t w = 0; w < N; ++w) lane_group[w] = int32_t((w * kPer) / m.group);
  const auto idx = hn::SetTableIndices(df, lane_group);
  for (int64_t b = 0; b < K; b += B) {
    __builtin_prefetch(row + 16 * (K * kBits / 32) + b / kPer);  // 16 rows ahead (see AffineTile8)
    const auto words = hn::LoadU(du, row + b / kPer);
    const auto s = bcast ? hn::Set(df, sf[b / m.group]) : hn::TableLookupLanes(hn::LoadU(df, sf + b / m.group), idx);
    hn::Vec<DF> part[kRowTile];
    for (int r = 0; r < rt; ++r) part[r] = hn::Zero(df);
    for (int j = 0; j < kPer; ++j) {
      const auto q = hn::ConvertTo(df, hn::BitCast(di, hn::And(hn::ShiftRightSame(words, j * kBits), mask)));
      for (int r = 0; r < rt; ++r) part[r] = hn::MulAdd(q, hn::LoadU(df, xp[r] + b + j * N), part[r]);
    }
    for (int r = 0; r < rt; ++r) acc[r] = hn::MulAdd(s, part[r], acc[r]);
  }
  for (int r = 0; r < rt; ++r) {
    float bias = 0;
    for (int64_t g = 0; g < groups; ++g) bias += bf[g] * xsum[r][g];
    y[r][o] = hn::GetLane(hn::SumOfLanes(df, acc[r])) + bias;
  }
}

// Any affine width: each group decoded into a stack buffer, then a SIMD dot per row.
template <int rt>
HWY_INLINE void AffineGenericRows(const Matrix& m, const float* const* x, const float* const* xsum,
                                  int64_t o, float* const* y, const float* sf,
                                  const float* bf) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df)), K = m.cols, G = m.group;
  const uint32_t* row = static_cast<const uint32_t*>(m.data) + o * (K * m.bits / 32);
  HWY_ALIGN float q[128 + 16];
  hn::Vec<DF> acc[kRowTile];
  float tail[kRowTile] = {};
  for (int r = 0; r < rt; ++r) acc[r] = hn::Zero(df);
  for (int64_t g = 0; g < K / G; ++g) {
    for (int64_t j = 0; j < G; ++j) q[j] = float(affine_code(row, g * G + j, m.bits));
    const auto s = hn::Set(df, sf[g]);
    for (int r = 0; r < rt; ++r) {
      auto part = hn::Zero(df);
      int64_t j = 0;
      for (; j + N <= G; j += N) part = hn::MulAdd(hn::Load(df, q + j), hn::LoadU(df, x[r] + g * G + j), part);
      acc[r] = hn::MulAdd(s, part, acc[r]);
      for (; j < G; ++j) tail[r] += sf[g] * q[j] * x[r][g * G + j];
    }
  }
  for (int r = 0; r < rt; ++r) {
    float bias = 0;
    for (int64_t g = 0; g < K / G; ++g) bias += bf[g] * xsum[r][g];
    y[r][o] = hn::GetLane(hn::SumOfLanes(df, acc[r])) + tail[r] + bias;
  }
}

// Float weights (f32, f16, bf16) along k.
template <int rt>
HWY_INLINE void FloatRows(const Matrix& m, const float* const* x, int64_t o, float* const* y) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df)), K = m.cols;
  hn::Vec<DF> acc[kRowTile];
  for (int r = 0; r < rt; ++r) acc[r] = hn::Zero(df);
  int64_t k = 0;
  if (m.type == WeightType::kF32) {
    const float* wr = static_cast<const float*>(m.data) + o * K;
    for (; k + N <= K; k += N) {
      const auto w = hn::LoadU(df, wr + k);
      for (int r = 0; r < rt; ++r) acc[r] = hn::MulAdd(w, hn::LoadU(df, x[r] + k), acc[r]);
    }
  } else if (m.type == WeightType::kBF16) {
    const hn::Rebind<hwy::bfloat16_t, DF> dbf;
    const auto* wr = static_cast<const hwy::bfloat16_t*>(m.data) + o * K;
    for (; k + N <= K; k += N) {
      const auto w = hn::PromoteTo(df, hn::LoadU(dbf, wr + k));
      for (int r = 0; r < rt; ++r) acc[r] = hn::MulAdd(w, hn::LoadU(df, x[r] + k), acc[r]);
    }
  } else {
    const hn::Rebind<hwy::float16_t, DF> dh;
    const auto* wr = static_cast<const hwy::float16_t*>(m.data) + o * K;
    for (; k + N <= K; k += N) {
      const auto w = hn::PromoteTo(df, hn::LoadU(dh, wr + k));
      for (int r = 0; r < rt; ++r) acc[r] = hn::MulAdd(w, hn::LoadU(df, x[r] + k), acc[r]);
    }
  }
  for (int r = 0; r < rt; ++r) {
    float t = hn::GetLane(hn::SumOfLanes(df, acc[r]));
    for (int64_t kk = k; kk < K; ++kk) t += matrix_at(m, o, kk) * x[r][kk];
    y[r][o] = t;
  }
}

#if HWY_TARGET == HWY_SCALAR
// One lane per vector: no int8 dot products; fast mode falls back to the exact path.
constexpr bool kHasInt8 = false;
inline int64_t block_codes8(int) { return 1; }
void QuantizeRow8(const float*, int64_t, int, int64_t, int8_t*, float*, float*) {}
template <int rt>
HWY_INLINE void Range8(const Matrix&, const int8_t* const*, const float* const*, const float* const*,
                       int64_t, int64_t, float* const*, const float*, int64_t) {}
#else
constexpr bool kHasInt8 = true;
// ---- Fast mode: int8 activations, u8 x s8 integer dot products ----
// The weight codes are unsigned (0..2^bits-1) and the activations are quantized to int8 per weight
// group, which is exactly the operand shape of vpmaddubsw (SSSE3/AVX2/AVX-512BW) and vpdpbusd
// (AVX-512 VNNI). Integer sums are exact, so every target computes the same int32 per lane; only
// the float accumulation order differs between targets.
using D8 = hn::CappedTag<uint8_t, 64>;
using DI8 = hn::RebindToSigned<D8>;
using DU16 = hn::Repartition<uint16_t, D8>;
using D32 = hn::Repartition<int32_t, D8>;
using DF32 = hn::Rebind<float, D32>;
using V8 = hn::Vec<D8>;
using VI8 = hn::Vec<DI8>;
using V32 = hn::Vec<D32>;

#if HWY_TARGET == HWY_AVX3_DL
// vpdpbusd. Highway 1.0.3's AVX3_DL target string names "avxvnni" rather than "avx512vnni", so the
// intrinsic does not compile inside it; the instruction itself is safe (the target is only
// dispatched on CPUs with AVX-512 VNNI).
HWY_INLINE __m512i Dpbusd(__m512i acc, __m512i q, __m512i x) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(q), "v"(x));
  return acc;
}
#endif

// acc[l] += sum over the 4 bytes of lane l of q0*x0 + q1*x1. Requires q0, q1 <= 15 (the paired
// 16-bit partial sums stay below 2*2*15*127 = 7620, far from saturation).
HWY_INLINE V32 DotPair(V32 acc, V8 q0, VI8 x0, V8 q1, VI8 x1) {
#if HWY_TARGET == HWY_AVX3_DL
  return V32{Dpbusd(Dpbusd(acc.raw, q0.raw, x0.raw), q1.raw, x1.raw)};
#elif HWY_TARGET == HWY_AVX3
  const __m512i p = _mm512_add_epi16(_mm512_maddubs_epi16(q0.raw, x0.raw), _mm512_maddubs_epi16(q1.raw, x1.raw));
  return V32{_mm512_add_epi32(acc.raw, _mm512_madd_epi16(p, _mm512_set1_epi16(1)))};
#elif HWY_TARGET == HWY_AVX2
  const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(q0.raw, x0.raw), _mm256_maddubs_epi16(q1.raw, x1.raw));
  return V32{_mm256_add_epi32(acc.raw, _mm256_madd_epi16(p, _mm256_set1_epi16(1)))};
#elif HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3
  const __m128i p = _mm_add_epi16(_mm_maddubs_epi16(q0.raw, x0.raw), _mm_maddubs_epi16(q1.raw, x1.raw));
  return V32{_mm_add_epi32(acc.raw, _mm_madd_epi16(p, _mm_set1_epi16(1)))};
#else
  const D8 d8;
  const DI8 di8;
  const D32 d32;
  HWY_ALIGN uint8_t a0[64], a1[64];
  HWY_ALIGN int8_t b0[64], b1[64];
  HWY_ALIGN int32_t s[16];
  hn::Store(q0, d8, a0);
  hn::Store(q1, d8, a1);
  hn::Store(x0, di8, b0);
  hn::Store(x1, di8, b1);
  hn::Store(acc, d32, s);
  for (size_t l = 0; l < hn::Lanes(d32); ++l)
    for (size_t i = 4 * l; i < 4 * l + 4; ++i) s[l] += int32_t(a0[i]) * b0[i] + int32_t(a1[i]) * b1[i];
  return hn::Load(d32, s);
#endif
}

// acc[l] += sum over the 4 bytes of lane l of q*x for full 8-bit codes (q <= 255). Without VNNI
// the codes are split into nibbles so the 16-bit pair sums cannot saturate.
HWY_INLINE V32 DotWide(V32 acc, V8 q, VI8 x) {
#if HWY_TARGET == HWY_AVX3_DL
  return V32{Dpbusd(acc.raw, q.raw, x.raw)};
#else
  const D8 d8;
  const DU16 du16;
  const auto lo = hn::And(q, hn::Set(d8, 15));
  const auto hi = hn::And(hn::BitCast(d8, hn::ShiftRight<4>(hn::BitCast(du16, q))), hn::Set(d8, 15));
  const V32 z = hn::Zero(D32());
  return hn::Add(acc, hn::Add(DotPair(z, lo, x, hn::Zero(d8), hn::BitCast(DI8(), hn::Zero(d8))),
                              hn::ShiftLeft<4>(DotPair(z, hi, x, hn::Zero(d8), hn::BitCast(DI8(), hn::Zero(d8))))));
#endif
}

// Codes per block: one vector of weight bytes.
inline int64_t block_codes8(int bits) { return int64_t(hn::Lanes(D8())) * (8 / bits); }

// Quantizes one activation row per weight group (scale max|x|/127, round to nearest) and lays it
// out like the weight bytes: per block of V*per codes starting at c0, for j < per, V bytes
// x[c0 + per*i + j]. xdx[blk*N32 + l] = the scale of int32 lane l's group; xsum[g] = the group sum
// of the *quantized* activations (the bias term b*sum(x) must see the same activations as s*sum(q*x),
// or the large, opposite-signed terms stop cancelling).
void QuantizeRow8(const float* x, int64_t K, int bits, int64_t group, int8_t* xq, float* xdx, float* xsum) {
  const int64_t V = int64_t(hn::Lanes(D8())), per = 8 / bits, B = V * per, N32 = V / 4;
  thread_local std::vector<float> dx;
  thread_local std::vector<int8_t> q;
  dx.resize(size_t(K / group));
  q.resize(size_t(K));
  const DF df;
  const DI di;
  const hn::Rebind<int8_t, DI> d8;
  const int64_t NF = int64_t(hn::Lanes(df));
  for (int64_t g = 0; g < K / group; ++g) {
    const float* xg = x + g * group;
    int64_t k = 0;
    auto vmx = hn::Zero(df);
    for (; k + NF <= group; k += NF) vmx = hn::Max(vmx, hn::Abs(hn::LoadU(df, xg + k)));
    float mx = hn::GetLane(hn::MaxOfLanes(df, vmx));
    for (; k < group; ++k) mx = std::max(mx, std::fabs(xg[k]));
    const float inv = mx > 0 ? 127.0f / mx : 0.0f;
    dx[size_t(g)] = mx / 127.0f;
    int8_t* qg = q.data() + g * group;
    const auto vinv = hn::Set(df, inv);
    auto vsum = hn::Zero(di);
    for (k = 0; k + NF <= group; k += NF) {
      // |x·inv| <= 127 by construction, so the int32 -> int8 demotion never saturates.
      const auto qi = hn::NearestInt(hn::Mul(hn::LoadU(df, xg + k), vinv));
      vsum = hn::Add(vsum, qi);
      hn::StoreU(hn::DemoteTo(d8, qi), d8, qg + k);
    }
    int32_t sum = hn::GetLane(hn::SumOfLanes(di, vsum));
    for (; k < group; ++k) {
      const int8_t v = int8_t(std::lrintf(std::clamp(xg[k] * inv, -127.0f, 127.0f)));
      qg[k] = v;
      sum += v;
    }
    xsum[g] = float(sum) * dx[size_t(g)];
  }
  for (int64_t c0 = 0, blk = 0; c0 < K; c0 += B, ++blk) {
    for (int64_t j = 0; j < per; ++j)
      for (int64_t i = 0; i < V; ++i) xq[c0 + j * V + i] = q[size_t(c0 + per * i + j)];
    for (int64_t l = 0; l < N32; ++l) xdx[blk * N32 + l] = dx[size_t((c0 + 4 * per * l) / group)];
  }
}

// Σ a[i]·b[i] over n floats (the bias term of a row: Σ_g bias[g]·xsum[g]).
HWY_INLINE float DotF(const float* a, const float* b, int64_t n) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  auto acc = hn::Zero(df);
  int64_t i = 0;
  for (; i + N <= n; i += N) acc = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), acc);
  float t = hn::GetLane(hn::SumOfLanes(df, acc));
  for (; i < n; ++i) t += a[i] * b[i];
  return t;
}

using Idx32 = decltype(hn::SetTableIndices(DF32(), static_cast<const int32_t*>(nullptr)));

// ot output rows (o..o+ot-1) against rt activation rows. Every (output, activation) pair runs the
// same operation sequence whatever ot and rt are (blocks in order, one int32 sum per block, one
// float FMA per block, the bias folded in before the final lane sum), so tiling never changes bits.
// sf: the f32 scales of row o; row o+i's are at sf + i*sstride, its biases `stride` further on.
template <int kBits, int rt, int ot>
HWY_INLINE void AffineTile8(const Matrix& m, const int8_t* const* xq, const float* const* xdx,
                            const float* const* xsum, int64_t o, float* const* y, const float* sf,
                            int64_t sstride, int64_t stride, const Idx32& idx) {
  const D8 d8;
  const DI8 di8;
  const DU16 du16;
  const D32 d32;
  const DF32 df;
  constexpr int kPer = 8 / kBits;
  const int64_t V = int64_t(hn::Lanes(d8)), N32 = V / 4, B = V * kPer, K = m.cols, G = m.group;
  const int64_t row_bytes = K * kBits / 8;
  const uint8_t* row0 = static_cast<const uint8_t*>(m.data) + o * row_bytes;
  const auto mask = hn::Set(d8, uint8_t((1u << (kBits % 8)) - 1u));  // unused for 8-bit
  const bool bcast = B <= G;
  hn::Vec<DF32> acc[ot][rt];
  for (int i = 0; i < ot; ++i)
    for (int r = 0; r < rt; ++r) acc[i][r] = hn::Zero(df);
  for (int64_t b = 0, blk = 0; b < K; b += B, ++blk) {
    V32 isum[ot][rt];
    for (int i = 0; i < ot; ++i) {
      // The next tile's rows, one tile ahead (decode streams every weight once; the hardware
      // prefetcher alone leaves part of the bandwidth unused).
      __builtin_prefetch(row0 + (i + 4 * ot) * row_bytes + b / kPer);
      const auto w = hn::LoadU(d8, row0 + i * row_bytes + b / kPer);
      for (int r = 0; r < rt; ++r) isum[i][r] = hn::Zero(d32);
      if constexpr (kBits == 8) {
        for (int r = 0; r < rt; ++r) isum[i][r] = DotWide(isum[i][r], w, hn::LoadU(di8, xq[r] + b));
      } else if constexpr (kBits == 4) {
        const auto lo = hn::And(w, mask);
        const auto hi = hn::And(hn::BitCast(d8, hn::ShiftRight<4>(hn::BitCast(du16, w))), mask);
        for (int r = 0; r < rt; ++r)
          isum[i][r] = DotPair(isum[i][r], lo, hn::LoadU(di8, xq[r] + b), hi, hn::LoadU(di8, xq[r] + b + V));
      } else {
        const auto q0 = hn::And(w, mask);
        const auto q1 = hn::And(hn::BitCast(d8, hn::ShiftRight<2>(hn::BitCast(du16, w))), mask);
        const auto q2 = hn::And(hn::BitCast(d8, hn::ShiftRight<4>(hn::BitCast(du16, w))), mask);
        const auto q3 = hn::And(hn::BitCast(d8, hn::ShiftRight<6>(hn::BitCast(du16, w))), mask);
        for (int r = 0; r < rt; ++r) {
          isum[i][r] = DotPair(isum[i][r], q0, hn::LoadU(di8, xq[r] + b), q1, hn::LoadU(di8, xq[r] + b + V));
          isum[i][r] = DotPair(isum[i][r], q2, hn::LoadU(di8, xq[r] + b + 2 * V), q3, hn::LoadU(di8, xq[r] + b + 3 * V));
        }
      }
    }
    for (int r = 0; r < rt; ++r) {
      const auto dxv = hn::LoadU(df, xdx[r] + blk * N32);
      for (int i = 0; i < ot; ++i) {
        const float* si = sf + i * sstride;
        const auto s = bcast ? hn::Set(df, si[b / G]) : hn::TableLookupLanes(hn::LoadU(df, si + b / G), idx);
        acc[i][r] = hn::MulAdd(hn::ConvertTo(df, isum[i][r]), hn::Mul(s, dxv), acc[i][r]);
      }
    }
  }
  const int64_t groups = K / G, N = int64_t(hn::Lanes(df));
  for (int i = 0; i < ot; ++i) {
    const float* bi = sf + i * sstride + stride;
    for (int r = 0; r < rt; ++r) {
      auto a = acc[i][r];
      int64_t g = 0;
      for (; g + N <= groups; g += N) a = hn::MulAdd(hn::LoadU(df, bi + g), hn::LoadU(df, xsum[r] + g), a);
      float t = hn::GetLane(hn::SumOfLanes(df, a));
      for (; g < groups; ++g) t += bi[g] * xsum[r][g];
      y[r][o + i] = t;
    }
  }
}

// Output rows [ob, oe) against rt activation rows, in tiles of several output rows when few
// activation rows share the weights (decode), so fixed per-row costs are shared.
template <int kBits, int rt>
HWY_INLINE void AffineRange8(const Matrix& m, const int8_t* const* xq, const float* const* xdx,
                             const float* const* xsum, int64_t ob, int64_t oe, float* const* y,
                             const float* sb, int64_t stride) {
  constexpr int ot = rt == 1 ? 4 : rt <= 3 ? 2 : 1;
  const DF32 df;
  HWY_ALIGN int32_t lane_group[16] = {};
  for (int64_t l = 0; l < int64_t(hn::Lanes(df)); ++l) lane_group[l] = int32_t((4 * (8 / kBits) * l) / m.group);
  const auto idx = hn::SetTableIndices(df, lane_group);
  int64_t o = ob;
  for (; o + ot <= oe; o += ot)
    AffineTile8<kBits, rt, ot>(m, xq, xdx, xsum, o, y, sb + (o - ob) * 2 * stride, 2 * stride, stride, idx);
  for (; o < oe; ++o)
    AffineTile8<kBits, rt, 1>(m, xq, xdx, xsum, o, y, sb + (o - ob) * 2 * stride, 2 * stride, stride, idx);
}

template <int rt>
HWY_INLINE void Range8(const Matrix& m, const int8_t* const* xq, const float* const* xdx,
                       const float* const* xsum, int64_t ob, int64_t oe, float* const* y,
                       const float* sb, int64_t stride) {
  if (m.bits == 4) AffineRange8<4, rt>(m, xq, xdx, xsum, ob, oe, y, sb, stride);
  else if (m.bits == 8) AffineRange8<8, rt>(m, xq, xdx, xsum, ob, oe, y, sb, stride);
  else AffineRange8<2, rt>(m, xq, xdx, xsum, ob, oe, y, sb, stride);
}

#endif  // HWY_TARGET != HWY_SCALAR

// n scale/bias values starting at element i0 of a bf16/f16/f32 array, as f32.
HWY_INLINE void ConvertRow(const void* p, core::DType t, int64_t i0, int64_t n, float* out) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  int64_t g = 0;
  if (t == core::DType::kBF16) {
    const uint16_t* s = static_cast<const uint16_t*>(p) + i0;
    const hn::Rebind<uint16_t, DF> d16;
    for (; g + N <= n; g += N)
      hn::StoreU(hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(DU(), hn::LoadU(d16, s + g)))), df, out + g);
    for (; g < n; ++g) out[g] = core::bf16_to_f32(s[g]);
  } else if (t == core::DType::kF16) {
    const uint16_t* s = static_cast<const uint16_t*>(p) + i0;
    const hn::Rebind<hwy::float16_t, DF> dh;
    for (; g + N <= n; g += N)
      hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(s) + g)), df, out + g);
    for (; g < n; ++g) out[g] = core::f16_to_f32(s[g]);
  } else {
    std::memcpy(out, static_cast<const float*>(p) + i0, size_t(n) * 4);
  }
}

// rt rows of activations against output row o, with the row count fixed at compile time so the
// accumulators stay in registers.
template <int rt>
HWY_INLINE void Rows(const Matrix& m, bool affine, bool fast_bits, const float* const* x,
                     const float* const* xsum, int64_t o, float* const* y, const float* sf,
                     const float* bf, const float* lane_scales) {
  if (!affine) FloatRows<rt>(m, x, o, y);
  else if (!fast_bits) AffineGenericRows<rt>(m, x, xsum, o, y, sf, bf);
  else if (m.bits == 4) AffineRows<4, rt>(m, x, xsum, o, y, sf, bf, lane_scales);
  else if (m.bits == 8) AffineRows<8, rt>(m, x, xsum, o, y, sf, bf, lane_scales);
  else AffineRows<2, rt>(m, x, xsum, o, y, sf, bf, lane_scales);
}

void MatmulImpl(const Context& ctx, const float* x, int64_t n, const Matrix& m, float* y,
                MatmulScratch& sc) {
  const int64_t K = m.cols, M = m.rows;
  const bool affine = m.type == WeightType::kAffine;
  const bool fast_bits = affine && (m.bits == 2 || m.bits == 4 || m.bits == 8) && K % block_codes(m.bits) == 0;
  const bool int8 = kHasInt8 && ctx.int8_activations && affine && (m.bits == 2 || m.bits == 4 || m.bits == 8) &&
                    K % block_codes8(m.bits) == 0 && m.group % (4 * (8 / m.bits)) == 0 &&
                    K % m.group == 0;
  // Prepare activations once: permuted copies (exact affine path), quantized copies (fast mode)
  // and per-group sums, row by row (in parallel for prompts: this is serial work otherwise).
  if (affine) {
    const int64_t groups = K / m.group;
    const int64_t lanes = K / 4 / (8 / m.bits);
    sc.xsum.resize(size_t(n * groups));
    if (int8) {
      sc.xq.resize(size_t(n * K));
      sc.xdx.resize(size_t(n * lanes));
    } else if (fast_bits) {
      sc.xp.resize(size_t(n * K));
    }
    auto prep = [&](size_t t0, size_t t1, int) {
      for (int64_t t = int64_t(t0); t < int64_t(t1); ++t) {
        if (int8) {
          QuantizeRow8(x + t * K, K, m.bits, m.group, sc.xq.data() + t * K, sc.xdx.data() + t * lanes,
                       sc.xsum.data() + t * groups);
          continue;
        }
        for (int64_t g = 0; g < groups; ++g) {
          float s = 0;
          for (int64_t j = 0; j < m.group; ++j) s += x[t * K + g * m.group + j];
          sc.xsum[size_t(t * groups + g)] = s;
        }
        if (fast_bits) PermuteRow(x + t * K, K, m.bits, sc.xp.data() + t * K);
      }
    };
    if (ctx.pool != nullptr && n >= 4) ctx.pool->parallel_for(size_t(n), prep, 1);
    else prep(0, size_t(n), 0);
  }
  const float* xs = fast_bits ? sc.xp.data() : x;
  auto body = [&](size_t o0, size_t o1, int) {
    const int64_t groups = affine ? K / m.group : 0;
    // Output rows go in blocks of kOBlock, each block against all row tiles of the activations:
    // the block's weights stay in cache while a tile of activations is reused across the block.
    // Row scales/biases as f32, padded so a full-vector load from any group stays in bounds.
    constexpr int64_t kOBlock = 64;
    const int64_t stride = groups + 16;
    thread_local std::vector<float> sb_buf;
    if (sb_buf.size() < size_t(2 * kOBlock * stride)) sb_buf.assign(size_t(2 * kOBlock * stride), 0.0f);
    constexpr int64_t kTBlock = 64;  // activation rows per pass (their tiles stay in L2)
    for (int64_t tb = 0; tb < n; tb += kTBlock)
    for (int64_t ob = int64_t(o0); ob < int64_t(o1); ob += kOBlock) {
      const int64_t oe = std::min(int64_t(o1), ob + kOBlock);
      if (affine)
        for (int64_t o = ob; o < oe; ++o) {
          float* sf = sb_buf.data() + (o - ob) * 2 * stride;
          ConvertRow(m.scales, m.sb_type, o * groups, groups, sf);
          if (m.biases) ConvertRow(m.biases, m.sb_type, o * groups, groups, sf + stride);
          else std::fill_n(sf + stride, groups, 0.0f);
        }
      for (int64_t t0 = tb; t0 < std::min(n, tb + kTBlock); t0 += kRowTile) {
        const int64_t rt = std::min(kRowTile, std::min(n, tb + kTBlock) - t0);
        const float* xr[kRowTile];
        const float* xsr[kRowTile];
        float* yr[kRowTile];
        for (int r = 0; r < rt; ++r) {
          xr[r] = xs + (t0 + r) * K;
          xsr[r] = affine ? sc.xsum.data() + (t0 + r) * groups : nullptr;
          yr[r] = y + (t0 + r) * M;
        }
        if (int8) {
          const int8_t* xq[kRowTile];
          const float* xd[kRowTile];
          const int64_t lanes = K / 4 / (8 / m.bits);
          for (int r = 0; r < rt; ++r) {
            xq[r] = sc.xq.data() + (t0 + r) * K;
            xd[r] = sc.xdx.data() + (t0 + r) * lanes;
          }
          const float* sb = sb_buf.data();
          switch (rt) {
            case 1: Range8<1>(m, xq, xd, xsr, ob, oe, yr, sb, stride); break;
            case 2: Range8<2>(m, xq, xd, xsr, ob, oe, yr, sb, stride); break;
            case 3: Range8<3>(m, xq, xd, xsr, ob, oe, yr, sb, stride); break;
            case 4: Range8<4>(m, xq, xd, xsr, ob, oe, yr, sb, stride); break;
            case 5: Range8<5>(m, xq, xd, xsr, ob, oe, yr, sb, stride); break;
            case 6: Range8<6>(m, xq, xd, xsr, ob, oe, yr, sb, stride); break;
            case 7: Range8<7>(m, xq, xd, xsr, ob, oe, yr, sb, stride); break;
            default: Range8<8>(m, xq, xd, xsr, ob, oe, yr, sb, stride); break;
          }
          continue;
        }
        for (int64_t o = ob; o < oe; ++o) {
          const float* sf = sb_buf.data() + (o - ob) * 2 * stride;
          const float* bf = sf + stride;
          switch (rt) {
            case 1: Rows<1>(m, affine, fast_bits, xr, xsr, o, yr, sf, bf, nullptr); break;
            case 2: Rows<2>(m, affine, fast_bits, xr, xsr, o, yr, sf, bf, nullptr); break;
            case 3: Rows<3>(m, affine, fast_bits, xr, xsr, o, yr, sf, bf, nullptr); break;
            case 4: Rows<4>(m, affine, fast_bits, xr, xsr, o, yr, sf, bf, nullptr); break;
            case 5: Rows<5>(m, affine, fast_bits, xr, xsr, o, yr, sf, bf, nullptr); break;
            case 6: Rows<6>(m, affine, fast_bits, xr, xsr, o, yr, sf, bf, nullptr); break;
            case 7: Rows<7>(m, affine, fast_bits, xr, xsr, o, yr, sf, bf, nullptr); break;
            default: Rows<8>(m, affine, fast_bits, xr, xsr, o, yr, sf, bf, nullptr); break;
          }
        }
      }
    }
  };
  if (ctx.pool == nullptr) body(0, size_t(M), 0);
  else ctx.pool->parallel_for(size_t(M), body, 16);
}

}  // namespace qwen35::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qwen35::kernels::cpu {
HWY_EXPORT(MatmulImpl);
HWY_EXPORT(TargetName);

void matmul(const Context& ctx, const float* x, int64_t n, const Matrix& w, float* y,
            MatmulScratch& scratch) {
  if (n == 0 || w.rows == 0) return;
  HWY_DYNAMIC_DISPATCH(MatmulImpl)(ctx, x, n, w, y, scratch);
}

std::string simd_target() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

}  // namespace qwen35::kernels::cpu
#endif
