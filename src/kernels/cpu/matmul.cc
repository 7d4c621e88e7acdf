// Highway compiles this file once per SIMD target (foreach_target) and dispatches at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// Once per target:
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/cpu/matmul.h"
#include "kernels/matrix.h"

HWY_BEFORE_NAMESPACE();
namespace qwen35::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Up to 16 lanes (AVX-512). The float kernels' lane order depends on the lane count, which is fixed
// per target, so results are reproducible on a given machine.
using DF = hn::CappedTag<float, 16>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
constexpr int64_t kRowTile = 8;

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

// MLX widths whose codes run across 32-bit words; the fast mode reads them in blocks of
// lcm(16, bits) words (a whole number of 16-word tiles and of 32-code runs).
constexpr bool OddWidth(int bits) { return bits == 3 || bits == 5 || bits == 6; }

// kBytes little-endian bytes at p as an integer, in power-of-two loads combined in registers (a
// memcpy of 3, 5 or 6 bytes into a uint64_t goes through the stack and stalls the next load).
template <int kBytes>
HWY_INLINE uint64_t LoadLE(const uint8_t* p) {
  if constexpr (kBytes >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  } else if constexpr (kBytes >= 4) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v | (LoadLE<kBytes - 4>(p + 4) << 32);
  } else if constexpr (kBytes >= 2) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v | (LoadLE<kBytes - 2>(p + 2) << 16);
  } else if constexpr (kBytes == 1) {
    return p[0];
  } else {
    return 0;
  }
}

#if HWY_TARGET == HWY_AVX3_DL
// 64 codes of kBits < 8 from the 8·kBits bytes at p, as bytes: vpermb hands each 64-bit lane the
// kBits bytes of its eight codes, vpmultishiftqb pulls the eight bitfields out of the lane, the
// mask keeps kBits of each. A masked load: nothing past the 8·kBits bytes is read.
template <int kBits>
HWY_INLINE __m512i Codes64(const uint8_t* p) {
  static constexpr auto kIdx = [] {
    std::array<uint8_t, 64> a{};
    for (int i = 0; i < 8; ++i)
      for (int k = 0; k < 8; ++k) a[size_t(8 * i + k)] = uint8_t(std::min(i * kBits + k, 63));
    return a;
  }();
  static constexpr auto kShift = [] {
    std::array<uint8_t, 64> a{};
    for (int i = 0; i < 8; ++i)
      for (int k = 0; k < 8; ++k) a[size_t(8 * i + k)] = uint8_t(k * kBits);
    return a;
  }();
  const __mmask64 bytes = (uint64_t(1) << (8 * kBits)) - 1;
  const __m512i lanes = _mm512_permutexvar_epi8(_mm512_loadu_si512(kIdx.data()), _mm512_maskz_loadu_epi8(bytes, p));
  return _mm512_and_si512(_mm512_multishift_epi64_epi8(_mm512_loadu_si512(kShift.data()), lanes),
                          _mm512_set1_epi8(char((1 << kBits) - 1)));
}
// Byte lanes 16k..16k+15 of codes as floats.
template <int k>
HWY_INLINE __m512 CodesF(__m512i codes) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(codes, k)));
}
#endif

// Codes [c0, c0 + n) of an affine row as floats, for c0 and n multiples of 8: eight codes fill
// kBits bytes of MLX's little-endian bit stream, so each run of eight starts on a byte boundary.
template <int kBits>
HWY_INLINE void UnpackCodes(const uint32_t* row, int64_t c0, int64_t n, float* q) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(row) + c0 / 8 * kBits;
  int64_t j = 0;
#if HWY_TARGET == HWY_AVX3_DL
  if constexpr (kBits < 8)
    for (; j + 64 <= n; j += 64, p += 8 * kBits) {
      const __m512i codes = Codes64<kBits>(p);
      _mm512_storeu_ps(q + j, CodesF<0>(codes));
      _mm512_storeu_ps(q + j + 16, CodesF<1>(codes));
      _mm512_storeu_ps(q + j + 32, CodesF<2>(codes));
      _mm512_storeu_ps(q + j + 48, CodesF<3>(codes));
    }
#endif
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
  // Eight codes per step: their kBits bytes shifted by each code's offset in 64-bit lanes, the
  // low 32 bits of the eight lanes gathered in order, masked and converted.
  const __m256i sh_lo = _mm256_setr_epi64x(0, kBits, 2 * kBits, 3 * kBits);
  const __m256i sh_hi = _mm256_setr_epi64x(4 * kBits, 5 * kBits, 6 * kBits, 7 * kBits);
  const __m256i order = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  const __m256i cmask = _mm256_set1_epi32((1 << kBits) - 1);
  for (; j < n; j += 8, p += kBits) {
    const __m256i w = _mm256_set1_epi64x(int64_t(LoadLE<kBits>(p)));
    const __m256i lo = _mm256_srlv_epi64(w, sh_lo), hi = _mm256_slli_epi64(_mm256_srlv_epi64(w, sh_hi), 32);
    const __m256i codes = _mm256_permutevar8x32_epi32(_mm256_blend_epi32(lo, hi, 0xAA), order);
    _mm256_storeu_ps(q + j, _mm256_cvtepi32_ps(_mm256_and_si256(codes, cmask)));
  }
#endif
  for (; j < n; j += 8, p += kBits) {
    const uint64_t v = LoadLE<kBits>(p);
    for (int k = 0; k < 8; ++k) q[j + k] = float((v >> (k * kBits)) & ((1u << kBits) - 1u));
  }
}

#if HWY_TARGET == HWY_AVX3_DL
// Groups [g, g + 4) of one row (G a multiple of 64) against one activation row, codes kept in
// registers: each group's partial sum is one FMA chain over its 16-float chunks in order, and acc
// takes the groups in order, exactly as AffineGenericRows does (the same bits, ~2x faster).
template <int kBits>
HWY_INLINE __m512 Groups4(const uint8_t* row, const float* x, int64_t g, int64_t G, const float* sf,
                          __m512 acc) {
  __m512 part[4];
  for (int i = 0; i < 4; ++i) {
    part[i] = _mm512_setzero_ps();
    __builtin_prefetch(row + (g + i) * G * kBits / 8 + (16 << 10));
  }
  for (int64_t c = 0; c < G; c += 64)
    for (int i = 0; i < 4; ++i) {
      const int64_t k0 = (g + i) * G + c;
      const __m512i codes = Codes64<kBits>(row + k0 / 8 * kBits);
      part[i] = _mm512_fmadd_ps(CodesF<0>(codes), _mm512_loadu_ps(x + k0), part[i]);
      part[i] = _mm512_fmadd_ps(CodesF<1>(codes), _mm512_loadu_ps(x + k0 + 16), part[i]);
      part[i] = _mm512_fmadd_ps(CodesF<2>(codes), _mm512_loadu_ps(x + k0 + 32), part[i]);
      part[i] = _mm512_fmadd_ps(CodesF<3>(codes), _mm512_loadu_ps(x + k0 + 48), part[i]);
    }
  for (int i = 0; i < 4; ++i) acc = _mm512_fmadd_ps(_mm512_set1_ps(sf[g + i]), part[i], acc);
  return acc;
}
#endif

HWY_INLINE void UnpackGroup(const Matrix& m, const uint32_t* row, int64_t c0, float* q) {
  const int64_t G = m.group;
  if (G % 8 == 0 && c0 % 8 == 0) {
    switch (m.bits) {
      case 2: return UnpackCodes<2>(row, c0, G, q);
      case 3: return UnpackCodes<3>(row, c0, G, q);
      case 4: return UnpackCodes<4>(row, c0, G, q);
      case 5: return UnpackCodes<5>(row, c0, G, q);
      case 6: return UnpackCodes<6>(row, c0, G, q);
      case 7: return UnpackCodes<7>(row, c0, G, q);
      case 8: return UnpackCodes<8>(row, c0, G, q);
      default: break;
    }
  }
  for (int64_t j = 0; j < G; ++j) q[j] = float(affine_code(row, c0 + j, m.bits));
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
  // Rows go one after another through memory: the stream is kept 16 KiB ahead (without it this
  // loop waited on DRAM for half its time).
  const uint8_t* ahead = reinterpret_cast<const uint8_t*>(row) + (16 << 10);
  int64_t g = 0;
  if constexpr (rt == 1) {
    // One activation row (decode): four groups at once, so their partial sums are four
    // independent FMA chains. Each chain runs in the order of a group alone and acc takes them in
    // group order: the same bits as the loop below.
#if HWY_TARGET == HWY_AVX3_DL
    if (G % 64 == 0 && (m.bits == 3 || m.bits == 5 || m.bits == 6 || m.bits == 7)) {
      const auto* rb = reinterpret_cast<const uint8_t*>(row);
      __m512 a = acc[0].raw;
      for (; g + 4 <= K / G; g += 4) {
        switch (m.bits) {
          case 3: a = Groups4<3>(rb, x[0], g, G, sf, a); break;
          case 5: a = Groups4<5>(rb, x[0], g, G, sf, a); break;
          case 6: a = Groups4<6>(rb, x[0], g, G, sf, a); break;
          default: a = Groups4<7>(rb, x[0], g, G, sf, a); break;
        }
      }
      acc[0] = hn::Vec<DF>{a};
    }
#endif
    HWY_ALIGN float q4[4 * 128 + 16];
    if (G % N == 0 && G <= 128)
      for (; g + 4 <= K / G; g += 4) {
        for (int i = 0; i < 4; ++i) {
          __builtin_prefetch(ahead + ((g + i) * G * m.bits) / 8);
          UnpackGroup(m, row, (g + i) * G, q4 + i * G);
        }
        hn::Vec<DF> part[4] = {hn::Zero(df), hn::Zero(df), hn::Zero(df), hn::Zero(df)};
        for (int64_t j = 0; j < G; j += N)
          for (int i = 0; i < 4; ++i)
            part[i] = hn::MulAdd(hn::Load(df, q4 + i * G + j), hn::LoadU(df, x[0] + (g + i) * G + j), part[i]);
        for (int i = 0; i < 4; ++i) acc[0] = hn::MulAdd(hn::Set(df, sf[g + i]), part[i], acc[0]);
      }
  }
  for (; g < K / G; ++g) {
    __builtin_prefetch(ahead + (g * G * m.bits) / 8);
    UnpackGroup(m, row, g * G, q);
    const auto s = hn::Set(df, sf[g]);
    // Each chunk of codes is loaded once for all rt rows; each row's partial sum is still one FMA
    // chain over the chunks in order.
    hn::Vec<DF> part[kRowTile];
    for (int r = 0; r < rt; ++r) part[r] = hn::Zero(df);
    int64_t j = 0;
    for (; j + N <= G; j += N) {
      const auto qv = hn::Load(df, q + j);
      for (int r = 0; r < rt; ++r) part[r] = hn::MulAdd(qv, hn::LoadU(df, x[r] + g * G + j), part[r]);
    }
    for (int r = 0; r < rt; ++r) {
      acc[r] = hn::MulAdd(s, part[r], acc[r]);
      for (int64_t jt = j; jt < G; ++jt) tail[r] += sf[g] * q[jt] * x[r][g * G + jt];
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

// ---- Fast mode: int8 activations, u8 x s8 integer dot products ----
// The weight codes are unsigned (0..2^bits-1) and the activations are quantized to int8 per weight
// group, the operand shape of vpmaddubsw (AVX2/AVX-512BW) and vpdpbusd (AVX-512 VNNI). For output
// row o and activation row t, over the groups g in order:
//   isum = Σ_{k∈g} q[o,k]·xq[t,k]                       (exact int32)
//   acc  = fma(float(isum), s[o,g]·dx[t,g], acc);  acc = fma(b[o,g], xsum[t,g], acc)
// The SIMD kernels put one output row per lane (a tile of N rows, its 32-bit words transposed in
// registers) and perform exactly these float operations, as does the scalar loop for tail rows and
// other targets: results are identical whatever the target, thread count or batch.
//
// Activation layout: weight word jj (C = 32/bits codes) meets 4·per bytes of xq (per = 8/bits):
// for m < per, the 4 bytes x[C·jj + b·per + m], b < 4 (the codes bits [m·bits, (m+1)·bits) of the
// word's 4 bytes). Odd widths (3, 5, 6), whose codes run across words, keep the natural order.
void QuantizeRow8(const float* x, int64_t K, int bits, int64_t group, int8_t* xq, float* dx, float* xsum) {
  const int64_t per = OddWidth(bits) ? 1 : 8 / bits, C = 4 * per;
  thread_local std::vector<int8_t> q;
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
    dx[g] = mx / 127.0f;
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
    xsum[g] = float(sum) * dx[g];
  }
  if (per == 1) {
    std::memcpy(xq, q.data(), size_t(K));
    return;
  }
  int64_t k0 = 0;
#if HWY_TARGET != HWY_SCALAR
  // The reorder moves bytes within runs of C (8 or 16) bytes: sixteen at a time, one byte shuffle.
  const hn::Full128<uint8_t> d16;
  HWY_ALIGN uint8_t idx[16];
  for (int64_t i = 0; i < 16; ++i) {
    const int64_t r = i % C;
    idx[i] = uint8_t(i / C * C + (r % 4) * per + r / 4);
  }
  const auto vidx = hn::Load(d16, idx);
  const auto* qb = reinterpret_cast<const uint8_t*>(q.data());
  auto* xb = reinterpret_cast<uint8_t*>(xq);
  for (; k0 + 16 <= K; k0 += 16) hn::StoreU(hn::TableLookupBytes(hn::LoadU(d16, qb + k0), vidx), d16, xb + k0);
#endif
  for (int64_t jj = k0 / C; jj < K / C; ++jj)
    for (int64_t m = 0; m < per; ++m)
      for (int64_t b = 0; b < 4; ++b) xq[jj * C + m * 4 + b] = q[size_t(C * jj + b * per + m)];
}

// One output row, scalar (tail rows, and targets without a tile kernel).
template <int kBits>
void RowScalar8(const Matrix& m, const int8_t* xq, const float* dx, const float* xsum, int64_t o,
                const float* s_row, const float* b_row, float* y) {
  constexpr uint32_t mask = kBits == 8 ? 0xFFu : (1u << kBits) - 1u;
  if constexpr (OddWidth(kBits)) {
    // Odd widths: runs of eight codes fill kBits bytes; activations in natural order.
    const int64_t K = m.cols, G = m.group;
    const uint8_t* row = static_cast<const uint8_t*>(m.data) + o * (K * kBits / 8);
    float acc = 0;
    for (int64_t g = 0; g < K / G; ++g) {
      int32_t isum = 0;
      for (int64_t c = g * G; c < (g + 1) * G; c += 8) {
        const uint64_t v = LoadLE<kBits>(row + c / 8 * kBits);
        for (int k = 0; k < 8; ++k) isum += int32_t((v >> (k * kBits)) & mask) * xq[c + k];
      }
      acc = std::fma(float(isum), s_row[g] * dx[g], acc);
      acc = std::fma(b_row[g], xsum[g], acc);
    }
    *y = acc;
    return;
  }
  constexpr int per = 8 / kBits, C = 32 / kBits;
  const int64_t K = m.cols, DG = m.group / C, words = K / C;
  const uint8_t* row = static_cast<const uint8_t*>(m.data) + o * (K * kBits / 8);
  float acc = 0;
  int32_t isum = 0;
  int64_t left = DG, g_next = 0;
  for (int64_t jj = 0; jj < words; ++jj) {
    const uint8_t* w = row + jj * 4;
    const int8_t* xw = xq + jj * C;
    for (int mm = 0; mm < per; ++mm)
      for (int b = 0; b < 4; ++b) isum += int32_t((uint32_t(w[b]) >> (kBits * mm)) & mask) * xw[mm * 4 + b];
    if (--left == 0) {
      const int64_t g = g_next++;
      left = DG;
      acc = std::fma(float(isum), s_row[g] * dx[g], acc);
      acc = std::fma(b_row[g], xsum[g], acc);
      isum = 0;
    }
  }
  *y = acc;
}

// Exact mode, one output row, scalar: per group, two partial sums of fma(q, x) in code order (even
// and odd words), then acc = fma(p0 + p1, s, acc), acc = fma(b, xsum, acc). The float tile kernel
// performs the same operations.
template <int kBits>
void RowScalarF(const Matrix& m, const float* x, const float* xsum, int64_t o, const float* s_row,
                const float* b_row, float* y) {
  constexpr int C = 32 / kBits;
  constexpr uint32_t mask = kBits == 8 ? 0xFFu : (1u << kBits) - 1u;
  const int64_t K = m.cols, DG = m.group / C, words = K / C;
  const uint8_t* row = static_cast<const uint8_t*>(m.data) + o * (K * kBits / 8);
  float acc = 0, part[2] = {0, 0};  // even and odd words, as in TileF
  int64_t left = DG, g_next = 0;
  for (int64_t jj = 0; jj < words; ++jj) {
    uint32_t w;
    std::memcpy(&w, row + jj * 4, 4);
    float& p = part[jj & 1];
    for (int i = 0; i < C; ++i) p = std::fma(float((w >> (kBits * i)) & mask), x[jj * C + i], p);
    if (--left == 0) {
      const int64_t g = g_next++;
      left = DG;
      acc = std::fma(part[0] + part[1], s_row[g], acc);
      acc = std::fma(b_row[g], xsum[g], acc);
      part[0] = part[1] = 0;
    }
  }
  *y = acc;
}

// bf16 weights, one output row, scalar: two partial sums (even and odd 32-bit words, i.e. element
// pairs), each fma(w, x) in element order, added at the end. TileBF performs the same operations.
void RowScalarBF(const Matrix& m, const float* x, int64_t o, float* y) {
  const int64_t K = m.cols;
  const uint16_t* row = static_cast<const uint16_t*>(m.data) + o * K;
  float part[2] = {0, 0};
  for (int64_t jj = 0; jj < K / 2; ++jj) {
    float& p = part[jj & 1];
    p = std::fma(core::bf16_to_f32(row[2 * jj]), x[2 * jj], p);
    p = std::fma(core::bf16_to_f32(row[2 * jj + 1]), x[2 * jj + 1], p);
  }
  *y = part[0] + part[1];
}

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr int kTileRows = 16;  // output rows per tile: one per int32 lane
constexpr int kTileT = 8;      // activation rows per pass (fast mode)
constexpr int kTileTF = 8;     // activation rows per pass (exact mode)
using VI = __m512i;
using VFl = __m512;
HWY_INLINE VI LoadI(const void* p) { return _mm512_loadu_si512(p); }
HWY_INLINE VI Bcast(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
HWY_INLINE VI AndI(VI a, uint8_t mask) { return _mm512_and_si512(a, _mm512_set1_epi8(char(mask))); }
template <int k>
HWY_INLINE VI Srl(VI a) { return _mm512_srli_epi32(a, k); }
HWY_INLINE VI SrlVar(VI a, int k) { return _mm512_srl_epi32(a, _mm_cvtsi32_si128(k)); }
HWY_INLINE VI And32(VI a, uint32_t mask) { return _mm512_and_si512(a, _mm512_set1_epi32(int32_t(mask))); }
HWY_INLINE VI ZeroI() { return _mm512_setzero_si512(); }
HWY_INLINE VFl ZeroF() { return _mm512_setzero_ps(); }
HWY_INLINE VFl LoadF(const float* p) { return _mm512_loadu_ps(p); }
HWY_INLINE void StoreF(float* p, VFl v) { _mm512_storeu_ps(p, v); }
HWY_INLINE VFl CvtF(VI v) { return _mm512_cvtepi32_ps(v); }
HWY_INLINE VFl MulF(VFl a, VFl b) { return _mm512_mul_ps(a, b); }
HWY_INLINE VFl FmaF(VFl a, VFl b, VFl c) { return _mm512_fmadd_ps(a, b, c); }
HWY_INLINE VFl SetF(float v) { return _mm512_set1_ps(v); }
HWY_INLINE VI AddI(VI a, VI b) { return _mm512_add_epi32(a, b); }
template <int k>
HWY_INLINE VI ShlI(VI a) { return _mm512_slli_epi32(a, k); }
HWY_INLINE VFl AsF(VI a) { return _mm512_castsi512_ps(a); }
HWY_INLINE VFl AddF(VFl a, VFl b) { return _mm512_add_ps(a, b); }
HWY_INLINE VI OrI(VI a, VI b) { return _mm512_or_si512(a, b); }
#if HWY_TARGET == HWY_AVX3_DL
// The 32 bits at bit s of each lane's pair (hi:lo), 0 <= s < 32 (vpshrdvd).
HWY_INLINE VI Funnel(VI lo, VI hi, int s) { return _mm512_shrdv_epi32(lo, hi, _mm512_set1_epi32(s)); }
// The four kBits-bit fields at the bottom of each lane as its four bytes (vpmultishiftqb).
template <int kBits>
HWY_INLINE VI Spread(VI v) {
  constexpr uint64_t kCtl = [] {
    uint64_t c = 0;
    for (int j = 0; j < 8; ++j) c |= uint64_t(32 * (j / 4) + kBits * (j % 4)) << (8 * j);
    return c;
  }();
  return _mm512_and_si512(_mm512_multishift_epi64_epi8(_mm512_set1_epi64(int64_t(kCtl)), v),
                          _mm512_set1_epi8(char((1 << kBits) - 1)));
}
#else
HWY_INLINE VI Funnel(VI lo, VI hi, int s) {
  return _mm512_or_si512(_mm512_srl_epi32(lo, _mm_cvtsi32_si128(s)), _mm512_sll_epi32(hi, _mm_cvtsi32_si128(32 - s)));
}
#endif
#if HWY_TARGET == HWY_AVX3_DL
// vpdpbusd. Highway 1.0.3's AVX3_DL target string names "avxvnni" rather than "avx512vnni", so the
// intrinsic does not compile inside it; the instruction itself is safe (the target is only
// dispatched on CPUs with AVX-512 VNNI).
HWY_INLINE VI Dpbusd(VI acc, VI q, VI x) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(q), "v"(x));
  return acc;
}
// The same with the 4 activation bytes at x broadcast from memory ({1to16}: no separate broadcast).
HWY_INLINE VI DpbusdB(VI acc, VI q, const int8_t* x) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(q), "m"(*reinterpret_cast<const int32_t*>(x)));
  return acc;
}
// acc += Σ over each lane's 4 bytes of q0·x0 + q1·x1 (q unsigned; x: 4 signed bytes, broadcast).
HWY_INLINE VI DotPair(VI acc, VI q0, const int8_t* x0, VI q1, const int8_t* x1) {
  return DpbusdB(DpbusdB(acc, q0, x0), q1, x1);
}
// The same for full 8-bit codes.
HWY_INLINE VI DotWide(VI acc, VI q, const int8_t* x) { return DpbusdB(acc, q, x); }
#else
// vpmaddubsw pairs saturate at 16 bits: with q <= 63 (6-bit codes) two pairs sum to at most
// 2·2·63·127 = 32004 < 32767.
HWY_INLINE VI DotPair(VI acc, VI q0, const int8_t* x0p, VI q1, const int8_t* x1p) {
  const VI x0 = Bcast(x0p), x1 = Bcast(x1p);
  const VI p = _mm512_add_epi16(_mm512_maddubs_epi16(q0, x0), _mm512_maddubs_epi16(q1, x1));
  return _mm512_add_epi32(acc, _mm512_madd_epi16(p, _mm512_set1_epi16(1)));
}
// 8-bit codes go in nibbles so the 16-bit pairs cannot saturate: q = 16·hi + lo.
HWY_INLINE VI DotWide(VI acc, VI q, const int8_t* xp) {
  const VI x = Bcast(xp);
  const VI lo = AndI(q, 15), hi = AndI(Srl<4>(q), 15);
  acc = _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(lo, x), _mm512_set1_epi16(1)));
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(hi, x), _mm512_set1_epi16(16)));
}
#endif
// 16 rows of 16 words (row l at p + l·stride) transposed: out[j] holds word j of every row.
HWY_INLINE void TransposeRegs(const VI* r, VI* out) {
  VI a[16], b[16];
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    b[4 * i + 0] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
  }
  // b[4i+m], 128-bit block k: word 4k+m of rows 4i..4i+3.
  for (int mm = 0; mm < 4; ++mm) {
    const VI d0 = _mm512_shuffle_i32x4(b[mm], b[4 + mm], 0x44), d1 = _mm512_shuffle_i32x4(b[mm], b[4 + mm], 0xEE);
    const VI e0 = _mm512_shuffle_i32x4(b[8 + mm], b[12 + mm], 0x44), e1 = _mm512_shuffle_i32x4(b[8 + mm], b[12 + mm], 0xEE);
    out[0 + mm] = _mm512_shuffle_i32x4(d0, e0, 0x88);
    out[4 + mm] = _mm512_shuffle_i32x4(d0, e0, 0xDD);
    out[8 + mm] = _mm512_shuffle_i32x4(d1, e1, 0x88);
    out[12 + mm] = _mm512_shuffle_i32x4(d1, e1, 0xDD);
  }
}
// 16 bf16 values as the bits of 16 floats.
HWY_INLINE VI LoadBf16(const uint16_t* p) {
  return _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16);
}
#elif HWY_TARGET == HWY_AVX2
constexpr int kTileRows = 8;
constexpr int kTileT = 4;
constexpr int kTileTF = 4;
using VI = __m256i;
using VFl = __m256;
HWY_INLINE VI LoadI(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
HWY_INLINE VI Bcast(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
HWY_INLINE VI AndI(VI a, uint8_t mask) { return _mm256_and_si256(a, _mm256_set1_epi8(char(mask))); }
template <int k>
HWY_INLINE VI Srl(VI a) { return _mm256_srli_epi32(a, k); }
HWY_INLINE VI SrlVar(VI a, int k) { return _mm256_srl_epi32(a, _mm_cvtsi32_si128(k)); }
HWY_INLINE VI And32(VI a, uint32_t mask) { return _mm256_and_si256(a, _mm256_set1_epi32(int32_t(mask))); }
HWY_INLINE VI ZeroI() { return _mm256_setzero_si256(); }
HWY_INLINE VFl ZeroF() { return _mm256_setzero_ps(); }
HWY_INLINE VFl LoadF(const float* p) { return _mm256_loadu_ps(p); }
HWY_INLINE void StoreF(float* p, VFl v) { _mm256_storeu_ps(p, v); }
HWY_INLINE VFl CvtF(VI v) { return _mm256_cvtepi32_ps(v); }
HWY_INLINE VFl MulF(VFl a, VFl b) { return _mm256_mul_ps(a, b); }
HWY_INLINE VFl FmaF(VFl a, VFl b, VFl c) { return _mm256_fmadd_ps(a, b, c); }
HWY_INLINE VFl SetF(float v) { return _mm256_set1_ps(v); }
HWY_INLINE VI AddI(VI a, VI b) { return _mm256_add_epi32(a, b); }
template <int k>
HWY_INLINE VI ShlI(VI a) { return _mm256_slli_epi32(a, k); }
HWY_INLINE VFl AsF(VI a) { return _mm256_castsi256_ps(a); }
HWY_INLINE VFl AddF(VFl a, VFl b) { return _mm256_add_ps(a, b); }
HWY_INLINE VI OrI(VI a, VI b) { return _mm256_or_si256(a, b); }
HWY_INLINE VI Funnel(VI lo, VI hi, int s) {
  return _mm256_or_si256(_mm256_srl_epi32(lo, _mm_cvtsi32_si128(s)), _mm256_sll_epi32(hi, _mm_cvtsi32_si128(32 - s)));
}
HWY_INLINE VI DotPair(VI acc, VI q0, const int8_t* x0p, VI q1, const int8_t* x1p) {
  const VI x0 = Bcast(x0p), x1 = Bcast(x1p);
  const VI p = _mm256_add_epi16(_mm256_maddubs_epi16(q0, x0), _mm256_maddubs_epi16(q1, x1));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}
HWY_INLINE VI DotWide(VI acc, VI q, const int8_t* xp) {
  const VI x = Bcast(xp);
  const VI lo = AndI(q, 15), hi = AndI(Srl<4>(q), 15);
  acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x), _mm256_set1_epi16(1)));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x), _mm256_set1_epi16(16)));
}
HWY_INLINE void TransposeRegs(const VI* r, VI* out) {
  VI a[8], b[8];
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    b[4 * i + 0] = _mm256_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm256_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm256_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm256_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
  }
  for (int mm = 0; mm < 4; ++mm) {
    out[mm] = _mm256_permute2x128_si256(b[mm], b[4 + mm], 0x20);
    out[4 + mm] = _mm256_permute2x128_si256(b[mm], b[4 + mm], 0x31);
  }
}
// 8 bf16 values as the bits of 8 floats.
HWY_INLINE VI LoadBf16(const uint16_t* p) {
  return _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16);
}
#else
constexpr int kTileRows = 0;  // no tile kernel: every row takes the scalar loop
constexpr int kTileT = 1;
constexpr int kTileTF = 1;
#endif

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
// kTileRows rows of kTileRows words (row l at p + l·stride) transposed: out[j] holds word j of
// every row.
HWY_INLINE void TransposeTile(const uint8_t* p, int64_t stride, VI* out) {
  VI r[kTileRows];
  for (int l = 0; l < kTileRows; ++l) r[l] = LoadI(p + l * stride);
  TransposeRegs(r, out);
}

// The end of group g in the fast tile kernels, per activation row: acc += float(isum)·(s·dx), then
// acc += b·xsum (RowScalar8's operations, one output row per lane); the integer sums restart.
template <int rt, int kChains>
HWY_INLINE void CloseGroup8(VI (&isum)[2][rt], VFl (&acc)[rt], const float* sT, const float* bT,
                            const float* const* dx, const float* const* xsum, int64_t g) {
  constexpr int N = kTileRows;
  const VFl s = LoadF(sT + g * N), b = LoadF(bT + g * N);
  for (int r = 0; r < rt; ++r) {
    const VI total = kChains == 2 ? AddI(isum[0][r], isum[1][r]) : isum[0][r];
    acc[r] = FmaF(CvtF(total), MulF(s, SetF(dx[r][g])), acc[r]);
    acc[r] = FmaF(b, SetF(xsum[r][g]), acc[r]);
    isum[0][r] = isum[1][r] = ZeroI();
  }
}

// Output rows o..o+kTileRows-1 against rt activation rows. sT/bT: scales/biases as [group][row].
template <int kBits, int rt>
HWY_INLINE void Tile8(const Matrix& m, const int8_t* const* xq, const float* const* dx, const float* const* xsum,
                      int64_t o, const float* sT, const float* bT, float* const* y) {
  constexpr int N = kTileRows, C = 32 / kBits;
  const int64_t K = m.cols, DG = m.group / C, words = K / C, row_bytes = K * kBits / 8;
  const uint8_t* base = static_cast<const uint8_t*>(m.data) + o * row_bytes;
  // With few activation rows, words alternate between two integer accumulators (even, odd word) so
  // consecutive dot products do not wait on each other; integer sums are exact, so this changes no
  // bits. With more rows the rows' chains are independent already and registers are scarce.
  constexpr int kChains = rt <= 2 ? 2 : 1;
  VI isum[2][rt];
  VFl acc[rt];
  for (int r = 0; r < rt; ++r) {
    isum[0][r] = isum[1][r] = ZeroI();
    acc[r] = ZeroF();
  }
  int64_t left = DG, g_next = 0;
  VI tw[N];
  for (int64_t j0 = 0; j0 < words; j0 += N) {
    TransposeTile(base + j0 * 4, row_bytes, tw);
    // The same words of the next tile's rows: one tile ahead, decode reaches ~90% of the bandwidth.
    for (int l = 0; l < N; ++l) __builtin_prefetch(base + (N + l) * row_bytes + j0 * 4);
    for (int j = 0; j < N; j += 2)
      for (int cc = 0; cc < 2; ++cc) {
        const int c = cc % kChains;
        const int64_t jj = j0 + j + cc;
        const VI w = tw[j + cc];
        if constexpr (kBits == 8) {
          for (int r = 0; r < rt; ++r) isum[c][r] = DotWide(isum[c][r], w, xq[r] + jj * C);
        } else if constexpr (kBits == 4) {
          const VI lo = AndI(w, 0x0F), hi = AndI(Srl<4>(w), 0x0F);
          for (int r = 0; r < rt; ++r)
            isum[c][r] = DotPair(isum[c][r], lo, xq[r] + jj * C, hi, xq[r] + jj * C + 4);
        } else {
          const VI q0 = AndI(w, 3), q1 = AndI(Srl<2>(w), 3), q2 = AndI(Srl<4>(w), 3), q3 = AndI(Srl<6>(w), 3);
          for (int r = 0; r < rt; ++r) {
            const int8_t* xw = xq[r] + jj * C;
            isum[c][r] = DotPair(isum[c][r], q0, xw, q1, xw + 4);
            isum[c][r] = DotPair(isum[c][r], q2, xw + 8, q3, xw + 12);
          }
        }
        if (--left == 0) {  // the word closes group g (a countdown: no division per word)
          left = DG;
          CloseGroup8<rt, kChains>(isum, acc, sT, bT, dx, xsum, g_next++);
        }
      }
  }
  for (int r = 0; r < rt; ++r) StoreF(y[r] + o, acc[r]);
}

// Odd widths (3, 5, 6): MLX packs a row's codes as one little-endian bit stream, so a 32-bit word
// holds a fraction of a code run. Each lane (output row) takes four codes at a time: the 32 bits
// from bit 4·kBits·q of the stream (a funnel shift of two neighbouring transposed words), their
// four fields spread into four bytes. Words go in blocks of lcm(16, kBits) (a whole number of
// 16-word tiles and of 32-code runs); activations are quantized in natural order.
template <int kBits>
HWY_INLINE VI SpreadCodes(VI v) {
#if HWY_TARGET == HWY_AVX3_DL
  return Spread<kBits>(v);
#else
  constexpr uint32_t mask = (1u << kBits) - 1u;
  VI r = And32(v, mask);
  r = OrI(r, And32(ShlI<8 - kBits>(v), mask << 8));
  r = OrI(r, And32(ShlI<16 - 2 * kBits>(v), mask << 16));
  return OrI(r, And32(ShlI<24 - 3 * kBits>(v), mask << 24));
#endif
}

template <int kBits, int rt>
HWY_INLINE void Tile8Odd(const Matrix& m, const int8_t* const* xq, const float* const* dx, const float* const* xsum,
                         int64_t o, const float* sT, const float* bT, float* const* y) {
  constexpr int N = kTileRows, BW = std::lcm(16, kBits), BP = BW * 32 / kBits / 8;  // words, 8-code pairs
  const int64_t K = m.cols, row_bytes = K * kBits / 8, words = row_bytes / 4, GP = m.group / 8;
  const uint8_t* base = static_cast<const uint8_t*>(m.data) + o * row_bytes;
  constexpr int kChains = rt <= 2 ? 2 : 1;  // as in Tile8
  VI isum[2][rt];
  VFl acc[rt];
  for (int r = 0; r < rt; ++r) {
    isum[0][r] = isum[1][r] = ZeroI();
    acc[r] = ZeroF();
  }
  int64_t left = GP, g_next = 0;
  VI tw[BW + 1];
  tw[BW] = ZeroI();  // read (and shifted out) by the block's last funnel
  for (int64_t w0 = 0; w0 < words; w0 += BW) {
    for (int t = 0; t < BW; t += N) {
      TransposeTile(base + (w0 + t) * 4, row_bytes, tw + t);
      for (int l = 0; l < N; ++l) __builtin_prefetch(base + (N + l) * row_bytes + (w0 + t) * 4);
    }
    const int64_t c0 = w0 * 32 / kBits;
    for (int p = 0; p < BP; ++p) {
      VI q[2];
      for (int h = 0; h < 2; ++h) {
        const int bit = (2 * p + h) * 4 * kBits;
        q[h] = SpreadCodes<kBits>(Funnel(tw[bit / 32], tw[bit / 32 + 1], bit % 32));
      }
      const int c = p % kChains;
      for (int r = 0; r < rt; ++r) {
        const int8_t* xc = xq[r] + c0 + 8 * p;
        isum[c][r] = DotPair(isum[c][r], q[0], xc, q[1], xc + 4);
      }
      if (--left == 0) {
        left = GP;
        CloseGroup8<rt, kChains>(isum, acc, sT, bT, dx, xsum, g_next++);
      }
    }
  }
  for (int r = 0; r < rt; ++r) StoreF(y[r] + o, acc[r]);
}

template <int kBits, int rt>
HWY_INLINE void Tile8Sel(const Matrix& m, const int8_t* const* xq, const float* const* dx, const float* const* xsum,
                         int64_t o, const float* sT, const float* bT, float* const* y) {
  if constexpr (OddWidth(kBits)) Tile8Odd<kBits, rt>(m, xq, dx, xsum, o, sT, bT, y);
  else Tile8<kBits, rt>(m, xq, dx, xsum, o, sT, bT, y);
}

template <int kBits>
HWY_INLINE void TileRows8(const Matrix& m, const int8_t* const* xq, const float* const* dx,
                          const float* const* xsum, int64_t rt, int64_t o, const float* sT, const float* bT,
                          float* const* y) {
  switch (rt) {
    case 1: Tile8Sel<kBits, 1>(m, xq, dx, xsum, o, sT, bT, y); break;
    case 2: Tile8Sel<kBits, 2>(m, xq, dx, xsum, o, sT, bT, y); break;
    case 3: Tile8Sel<kBits, 3>(m, xq, dx, xsum, o, sT, bT, y); break;
    case 4: Tile8Sel<kBits, 4>(m, xq, dx, xsum, o, sT, bT, y); break;
#if HWY_TARGET != HWY_AVX2
    case 5: Tile8Sel<kBits, 5>(m, xq, dx, xsum, o, sT, bT, y); break;
    case 6: Tile8Sel<kBits, 6>(m, xq, dx, xsum, o, sT, bT, y); break;
    case 7: Tile8Sel<kBits, 7>(m, xq, dx, xsum, o, sT, bT, y); break;
    default: Tile8Sel<kBits, 8>(m, xq, dx, xsum, o, sT, bT, y); break;
#else
    default: Tile8Sel<kBits, 4>(m, xq, dx, xsum, o, sT, bT, y); break;
#endif
  }
}
#endif

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
// Exact mode: output rows o..o+kTileRows-1 (one per lane) against rt activation rows.
template <int kBits, int rt>
HWY_INLINE void TileF(const Matrix& m, const float* const* x, const float* const* xsum, int64_t o,
                      const float* sT, const float* bT, float* const* y) {
  constexpr int N = kTileRows, C = 32 / kBits;
  constexpr uint32_t mask = kBits == 8 ? 0xFFu : (1u << kBits) - 1u;
  const int64_t K = m.cols, DG = m.group / C, words = K / C, row_bytes = K * kBits / 8;
  const uint8_t* base = static_cast<const uint8_t*>(m.data) + o * row_bytes;
  // Even and odd words accumulate into separate partial sums (two independent FMA chains), added at
  // the end of each group; RowScalarF does the same.
  VFl part[2][rt], acc[rt];
  for (int r = 0; r < rt; ++r) part[0][r] = part[1][r] = acc[r] = ZeroF();
  int64_t left = DG, g_next = 0;
  VI tw[N];
  for (int64_t j0 = 0; j0 < words; j0 += N) {
    TransposeTile(base + j0 * 4, row_bytes, tw);
    for (int l = 0; l < N; ++l) __builtin_prefetch(base + (N + l) * row_bytes + j0 * 4);
    for (int j = 0; j < N; j += 2)
      for (int c = 0; c < 2; ++c) {
        const int64_t jj = j0 + j + c;
        // Code i < C-1 stays in place (q·2^(bits·i), exact in fp32 and below 2^31) and meets the
        // activation pre-scaled by 2^-(bits·i) (ScaleForTiles): the products, and so the FMAs, equal
        // q·x exactly, one shift fewer per code. The top code is shifted down.
        for (int i = 0; i < C - 1; ++i) {
          const VFl q = CvtF(And32(tw[j + c], mask << (kBits * i)));
          for (int r = 0; r < rt; ++r) part[c][r] = FmaF(q, SetF(x[r][jj * C + i]), part[c][r]);
        }
        {
          const VFl q = CvtF(Srl<32 - kBits>(tw[j + c]));
          for (int r = 0; r < rt; ++r) part[c][r] = FmaF(q, SetF(x[r][jj * C + C - 1]), part[c][r]);
        }
        if (--left == 0) {  // the word closes group g (a countdown: no division per word)
          const int64_t g = g_next++;
          left = DG;
          const VFl sv = LoadF(sT + g * N), bv = LoadF(bT + g * N);
          for (int r = 0; r < rt; ++r) {
            acc[r] = FmaF(AddF(part[0][r], part[1][r]), sv, acc[r]);
            acc[r] = FmaF(bv, SetF(xsum[r][g]), acc[r]);
            part[0][r] = part[1][r] = ZeroF();
          }
        }
      }
  }
  for (int r = 0; r < rt; ++r) StoreF(y[r] + o, acc[r]);
}

template <int kBits>
HWY_INLINE void TileRowsF(const Matrix& m, const float* const* x, const float* const* xsum, int64_t rt,
                          int64_t o, const float* sT, const float* bT, float* const* y) {
  switch (rt) {
    case 1: TileF<kBits, 1>(m, x, xsum, o, sT, bT, y); break;
    case 2: TileF<kBits, 2>(m, x, xsum, o, sT, bT, y); break;
    case 3: TileF<kBits, 3>(m, x, xsum, o, sT, bT, y); break;
    case 4: TileF<kBits, 4>(m, x, xsum, o, sT, bT, y); break;
#if HWY_TARGET != HWY_AVX2
    case 5: TileF<kBits, 5>(m, x, xsum, o, sT, bT, y); break;
    case 6: TileF<kBits, 6>(m, x, xsum, o, sT, bT, y); break;
    case 7: TileF<kBits, 7>(m, x, xsum, o, sT, bT, y); break;
    default: TileF<kBits, 8>(m, x, xsum, o, sT, bT, y); break;
#else
    default: TileF<kBits, 4>(m, x, xsum, o, sT, bT, y); break;
#endif
  }
}
#endif

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
// bf16 weights: output rows o..o+kTileRows-1 (one per lane) against rt activation rows.
template <int rt>
HWY_INLINE void TileBF(const Matrix& m, const float* const* x, int64_t o, float* const* y) {
  constexpr int N = kTileRows;
  const int64_t K = m.cols, words = K / 2, row_bytes = K * 2;
  const uint8_t* base = static_cast<const uint8_t*>(m.data) + o * row_bytes;
  VFl part[2][rt];
  for (int r = 0; r < rt; ++r) part[0][r] = part[1][r] = ZeroF();
  VI tw[N];
  for (int64_t j0 = 0; j0 < words; j0 += N) {
    TransposeTile(base + j0 * 4, row_bytes, tw);
    for (int l = 0; l < N; ++l) __builtin_prefetch(base + (N + l) * row_bytes + j0 * 4);
    for (int j = 0; j < N; j += 2)
      for (int c = 0; c < 2; ++c) {
        const int64_t jj = j0 + j + c;
        const VFl lo = AsF(ShlI<16>(tw[j + c])), hi = AsF(And32(tw[j + c], 0xFFFF0000u));
        for (int r = 0; r < rt; ++r) {
          part[c][r] = FmaF(lo, SetF(x[r][2 * jj]), part[c][r]);
          part[c][r] = FmaF(hi, SetF(x[r][2 * jj + 1]), part[c][r]);
        }
      }
  }
  for (int r = 0; r < rt; ++r) StoreF(y[r] + o, AddF(part[0][r], part[1][r]));
}

HWY_INLINE void TileRowsBF(const Matrix& m, const float* const* x, int64_t rt, int64_t o, float* const* y) {
  switch (rt) {
    case 1: TileBF<1>(m, x, o, y); break;
    case 2: TileBF<2>(m, x, o, y); break;
    case 3: TileBF<3>(m, x, o, y); break;
    case 4: TileBF<4>(m, x, o, y); break;
#if HWY_TARGET != HWY_AVX2
    case 5: TileBF<5>(m, x, o, y); break;
    case 6: TileBF<6>(m, x, o, y); break;
    case 7: TileBF<7>(m, x, o, y); break;
    default: TileBF<8>(m, x, o, y); break;
#else
    default: TileBF<4>(m, x, o, y); break;
#endif
  }
}
#endif

// Output rows [o0, o1) of a bf16 matrix against activation rows [t0, t1): whole tiles (starting
// at multiples of kTileRows) in the tile kernel, the rest in the scalar loop, the same bits.
void RangeBF16(const Matrix& m, const float* x, int64_t t0, int64_t t1, int64_t o0, int64_t o1, float* y) {
  const int64_t K = m.cols, M = m.rows;
  int64_t o = o0;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
  constexpr int N = kTileRows;
  if ((K / 2) % N == 0) {
    for (; o + N <= o1 && o + N <= M; o += N)
      for (int64_t t = t0; t < t1; t += kTileTF) {
        const int64_t rt = std::min<int64_t>(kTileTF, t1 - t);
        const float* xr[kTileTF];
        float* yr[kTileTF];
        for (int r = 0; r < rt; ++r) {
          xr[r] = x + (t + r) * K;
          yr[r] = y + (t + r) * M;
        }
        TileRowsBF(m, xr, rt, o, yr);
      }
  }
#endif
  for (; o < o1; ++o)
    for (int64_t t = t0; t < t1; ++t) RowScalarBF(m, x + t * K, o, y + t * M + o);
}

// x[k]·2^-(bits·(k mod C)) for the exact tile kernels (powers of two: exact for any activation
// above 1e-29).
void ScaleForTiles(const float* x, int64_t K, int bits, float* out) {
  const int C = 32 / bits;  // 4, 8 or 16: divides 16, so the factors repeat every 16 floats
  HWY_ALIGN float f[16];
  for (int i = 0; i < 16; ++i) f[i] = i % C == C - 1 ? 1.0f : std::ldexp(1.0f, -bits * (i % C));
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  int64_t k = 0;
  if (16 % N == 0)
    for (; k + N <= K; k += N) hn::StoreU(hn::Mul(hn::LoadU(df, x + k), hn::Load(df, f + k % 16)), df, out + k);
  for (; k < K; ++k) out[k] = x[k] * f[k % 16];
}

// Per-group sums of one activation row (exact mode's bias term).
void GroupSums(const float* x, int64_t K, int64_t group, float* out) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  for (int64_t g = 0; g < K / group; ++g) {
    const float* xg = x + g * group;
    auto acc = hn::Zero(df);
    int64_t j = 0;
    for (; j + N <= group; j += N) acc = hn::Add(acc, hn::LoadU(df, xg + j));
    float t = hn::GetLane(hn::SumOfLanes(df, acc));
    for (; j < group; ++j) t += xg[j];
    out[g] = t;
  }
}

// The activations of one affine matmul call: exact mode reads x and the per-group sums; fast mode
// the int8 rows, their per-group scales and the sums of the quantized values.
struct AffineActs {
  const float* x;
  const float* xs;  // x scaled for the exact tile kernels (ScaleForTiles)
  const int8_t* xq;
  const float* dx;
  const float* xsum;
};

// Output rows [o0, o1) against activation rows [t0, t1) of a 2/4/8-bit affine matrix. Rows in whole
// tiles of kTileRows (tiles start at multiples of kTileRows: the thread split is in multiples of
// 16) take the tile kernel, the others the scalar loop; both compute the same bits.
template <int kBits, bool kInt8>
void RangeAffine(const Matrix& m, const AffineActs& a, int64_t t0, int64_t t1, int64_t o0, int64_t o1, float* y) {
  const int64_t K = m.cols, M = m.rows, groups = K / m.group;
  thread_local std::vector<float> sbuf;
  const int64_t NT = kTileRows > 0 ? kTileRows : 1;
  sbuf.resize(size_t(4 * NT * (groups + 16)));
  float* srow = sbuf.data();  // [NT][groups] row-major
  float* brow = srow + NT * (groups + 16);
  auto convert = [&](int64_t o, float* s, float* b) {
    ConvertRow(m.scales, m.sb_type, o * groups, groups, s);
    if (m.biases) ConvertRow(m.biases, m.sb_type, o * groups, groups, b);
    else std::fill_n(b, groups, 0.0f);
  };
  int64_t o = o0;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
  constexpr int N = kTileRows;
  constexpr int64_t kT = kInt8 ? kTileT : kTileTF;  // activation rows per kernel call
  float* sT = brow + NT * (groups + 16);  // [groups][N]
  float* bT = sT + NT * (groups + 16);
  constexpr bool kOdd = OddWidth(kBits);
  if (kOdd ? (K * kBits / 32) % std::lcm(16, kBits) == 0 : (K / (32 / kBits)) % N == 0) {
    // The tile's scales and biases as [group][row] f32. bf16 (the MLX default) is widened straight
    // into the registers of the transpose; other types go through a row-major buffer.
    const bool bf16_direct = m.sb_type == core::DType::kBF16 && m.biases != nullptr && groups % N == 0;
    const int64_t sb_bytes = int64_t(core::dtype_size(m.sb_type)), tile_sb = N * groups * sb_bytes;
    for (; o + N <= o1 && o + N <= M; o += N) {
      // The next tile's scales and biases (they stream beside the codes, which the tile kernel
      // prefetches): decode +4-5% in a token-interleaved A/B, in both bandwidth states.
      if (o + 2 * N <= M) {
        const uint8_t* ns = static_cast<const uint8_t*>(m.scales) + (o + N) * groups * sb_bytes;
        const uint8_t* nb = m.biases ? static_cast<const uint8_t*>(m.biases) + (o + N) * groups * sb_bytes : nullptr;
        for (int64_t b = 0; b < tile_sb; b += 64) {
          __builtin_prefetch(ns + b);
          if (nb) __builtin_prefetch(nb + b);
        }
      }
      int64_t g = 0;
      if (bf16_direct) {
        const uint16_t* sp = static_cast<const uint16_t*>(m.scales) + o * groups;
        const uint16_t* bp = static_cast<const uint16_t*>(m.biases) + o * groups;
        for (; g < groups; g += N) {
          VI r[N], t[N];
          for (int l = 0; l < N; ++l) r[l] = LoadBf16(sp + l * groups + g);
          TransposeRegs(r, t);
          for (int j = 0; j < N; ++j) std::memcpy(sT + (g + j) * N, &t[j], N * 4);
          for (int l = 0; l < N; ++l) r[l] = LoadBf16(bp + l * groups + g);
          TransposeRegs(r, t);
          for (int j = 0; j < N; ++j) std::memcpy(bT + (g + j) * N, &t[j], N * 4);
        }
      } else {
        for (int l = 0; l < N; ++l) convert(o + l, srow + l * groups, brow + l * groups);
        for (; g + N <= groups; g += N) {  // N groups of N rows at a time, transposed in registers
          VI t[N];
          TransposeTile(reinterpret_cast<const uint8_t*>(srow + g), groups * 4, t);
          for (int j = 0; j < N; ++j) std::memcpy(sT + (g + j) * N, &t[j], N * 4);
          TransposeTile(reinterpret_cast<const uint8_t*>(brow + g), groups * 4, t);
          for (int j = 0; j < N; ++j) std::memcpy(bT + (g + j) * N, &t[j], N * 4);
        }
        for (; g < groups; ++g)
          for (int l = 0; l < N; ++l) {
            sT[g * N + l] = srow[l * groups + g];
            bT[g * N + l] = brow[l * groups + g];
          }
      }
      for (int64_t t = t0; t < t1; t += kT) {
        const int64_t rt = std::min<int64_t>(kT, t1 - t);
        const int8_t* xr[kT];
        const float* xf[kT];
        const float* dr[kT];
        const float* sr[kT];
        float* yr[kT];
        for (int r = 0; r < rt; ++r) {
          xr[r] = kInt8 ? a.xq + (t + r) * K : nullptr;
          xf[r] = kInt8 ? nullptr : a.xs + (t + r) * K;
          dr[r] = kInt8 ? a.dx + (t + r) * groups : nullptr;
          sr[r] = a.xsum + (t + r) * groups;
          yr[r] = y + (t + r) * M;
        }
        if constexpr (kInt8) TileRows8<kBits>(m, xr, dr, sr, rt, o, sT, bT, yr);
        else if constexpr (!kOdd) TileRowsF<kBits>(m, xf, sr, rt, o, sT, bT, yr);
      }
    }
  }
#endif
  for (; o < o1; ++o) {
    convert(o, srow, brow);
    for (int64_t t = t0; t < t1; ++t) {
      if constexpr (kInt8)
        RowScalar8<kBits>(m, a.xq + t * K, a.dx + t * groups, a.xsum + t * groups, o, srow, brow, y + t * M + o);
      else if constexpr (!OddWidth(kBits))
        RowScalarF<kBits>(m, a.x + t * K, a.xsum + t * groups, o, srow, brow, y + t * M + o);
    }
  }
}



// rt rows of activations against output row o, with the row count fixed at compile time so the
// accumulators stay in registers.
template <int rt>
HWY_INLINE void Rows(const Matrix& m, bool affine, const float* const* x, const float* const* xsum, int64_t o,
                     float* const* y, const float* sf, const float* bf) {
  if (!affine) FloatRows<rt>(m, x, o, y);
  else AffineGenericRows<rt>(m, x, xsum, o, y, sf, bf);
}

// Whether a matrix takes the affine tile kernels.
bool Tiled(const Matrix& m) {
  return m.type == WeightType::kAffine && (m.bits == 2 || m.bits == 4 || m.bits == 8) &&
         m.group % (32 / m.bits) == 0 && m.cols % m.group == 0;
}

// Whether a 3/5/6-bit matrix takes the int8 kernels in fast mode (otherwise it runs exact in both
// modes): groups of whole 8-code runs, rows of whole blocks of the odd-width tile. Decided from
// the shape alone, so every target makes the same choice and fast mode keeps its bits.
bool FastOdd(const Matrix& m) {
  return m.type == WeightType::kAffine && OddWidth(m.bits) && m.group % 8 == 0 &&
         m.cols % m.group == 0 && (m.cols * m.bits) % 32 == 0 && (m.cols * m.bits / 32) % std::lcm(16, m.bits) == 0;
}

// Prepares the activations of an affine matmul once: quantized copies (fast mode) or pre-scaled
// ones (exact tiles), and per-group sums, row by row (in parallel for prompts: this is serial work
// otherwise).
void PrepAffine(const Context& ctx, const float* x, int64_t n, const Matrix& m, bool tiled, bool int8,
                MatmulScratch& sc) {
  const int64_t K = m.cols, groups = K / m.group;
  sc.xsum.resize(size_t(n * groups));
  if (int8) {
    sc.xq.resize(size_t(n * K));
    sc.xdx.resize(size_t(n * groups));
  } else if (tiled) {
    sc.xs.resize(size_t(n * K));
  }
  auto prep = [&](size_t t0, size_t t1, int) {
    for (int64_t t = int64_t(t0); t < int64_t(t1); ++t) {
      if (int8) {
        QuantizeRow8(x + t * K, K, m.bits, m.group, sc.xq.data() + t * K, sc.xdx.data() + t * groups,
                     sc.xsum.data() + t * groups);
        continue;
      }
      GroupSums(x + t * K, K, m.group, sc.xsum.data() + t * groups);
      if (tiled) ScaleForTiles(x + t * K, K, m.bits, sc.xs.data() + t * K);
    }
  };
  if (ctx.pool != nullptr && n >= 4) ctx.pool->parallel_for(size_t(n), prep, 1);
  else prep(0, size_t(n), 0);
}

// Output rows [o0, o1) of a tiled affine matrix (prepared by PrepAffine) against all n rows.
void TiledRows(const Matrix& m, const float* x, int64_t n, bool int8, const MatmulScratch& sc, int64_t o0,
               int64_t o1, float* y) {
  const AffineActs acts{x, sc.xs.data(), sc.xq.data(), sc.xdx.data(), sc.xsum.data()};
  constexpr int64_t kTBlockA = 64;  // activation rows per pass over a tile (their rows stay in L1/L2)
  for (int64_t tb = 0; tb < n; tb += kTBlockA) {
    const int64_t te = std::min(n, tb + kTBlockA);
    if (int8) {
      switch (m.bits) {
        case 4: RangeAffine<4, true>(m, acts, tb, te, o0, o1, y); break;
        case 8: RangeAffine<8, true>(m, acts, tb, te, o0, o1, y); break;
        case 2: RangeAffine<2, true>(m, acts, tb, te, o0, o1, y); break;
        case 3: RangeAffine<3, true>(m, acts, tb, te, o0, o1, y); break;
        case 5: RangeAffine<5, true>(m, acts, tb, te, o0, o1, y); break;
        default: RangeAffine<6, true>(m, acts, tb, te, o0, o1, y); break;
      }
    } else {
      if (m.bits == 4) RangeAffine<4, false>(m, acts, tb, te, o0, o1, y);
      else if (m.bits == 8) RangeAffine<8, false>(m, acts, tb, te, o0, o1, y);
      else RangeAffine<2, false>(m, acts, tb, te, o0, o1, y);
    }
  }
}

void MatmulImpl(const Context& ctx, const float* x, int64_t n, const Matrix& m, float* y,
                MatmulScratch& sc) {
  const int64_t K = m.cols, M = m.rows;
  const bool affine = m.type == WeightType::kAffine;
  // 2/4/8-bit affine matrices take the tile kernels (exact, or fast with int8 activations), and so
  // do 3/5/6-bit ones in the fast mode (FastOdd); other widths, the exact mode of 3/5/6/7-bit and
  // float weights the per-row kernels below.
  const bool tiled = Tiled(m);
  const bool int8 = ctx.int8_activations && (tiled || FastOdd(m));
  if (affine) PrepAffine(ctx, x, n, m, tiled, int8, sc);
  const bool bf16_tiled = m.type == WeightType::kBF16 && K % 2 == 0;
  const size_t n_threads = ctx.pool ? size_t(ctx.pool->size()) : 1;
  if (sc.row_scales.size() < n_threads) sc.row_scales.resize(n_threads);
  auto body = [&](size_t o0, size_t o1, int tid) {
    if (bf16_tiled) {
      constexpr int64_t kTBlockB = 64;
      for (int64_t tb = 0; tb < n; tb += kTBlockB)
        RangeBF16(m, x, tb, std::min(n, tb + kTBlockB), int64_t(o0), int64_t(o1), y);
      return;
    }
    if (tiled || int8) {
      TiledRows(m, x, n, int8, sc, int64_t(o0), int64_t(o1), y);
      return;
    }
    const int64_t groups = affine ? K / m.group : 0;
    // Output rows go in blocks of kOBlock, each block against all row tiles of the activations:
    // the block's weights stay in cache while a tile of activations is reused across the block.
    // Row scales/biases as f32, padded so a full-vector load from any group stays in bounds.
    constexpr int64_t kOBlock = 64;
    const int64_t stride = groups + 16;
    std::vector<float>& sb_buf = sc.row_scales[size_t(tid)];
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
          xr[r] = x + (t0 + r) * K;
          xsr[r] = affine ? sc.xsum.data() + (t0 + r) * groups : nullptr;
          yr[r] = y + (t0 + r) * M;
        }
        for (int64_t o = ob; o < oe; ++o) {
          const float* sf = sb_buf.data() + (o - ob) * 2 * stride;
          const float* bf = sf + stride;
          switch (rt) {
            case 1: Rows<1>(m, affine, xr, xsr, o, yr, sf, bf); break;
            case 2: Rows<2>(m, affine, xr, xsr, o, yr, sf, bf); break;
            case 3: Rows<3>(m, affine, xr, xsr, o, yr, sf, bf); break;
            case 4: Rows<4>(m, affine, xr, xsr, o, yr, sf, bf); break;
            case 5: Rows<5>(m, affine, xr, xsr, o, yr, sf, bf); break;
            case 6: Rows<6>(m, affine, xr, xsr, o, yr, sf, bf); break;
            case 7: Rows<7>(m, affine, xr, xsr, o, yr, sf, bf); break;
            default: Rows<8>(m, affine, xr, xsr, o, yr, sf, bf); break;
          }
        }
      }
    }
  };
  if (ctx.pool == nullptr) body(0, size_t(M), 0);
  else ctx.pool->parallel_for(size_t(M), body, 16);
}

void MatmulManyImpl(const Context& ctx, const float* x, int64_t n, const Matrix* const* ws, float* const* ys,
                    int count, MatmulScratch& sc) {
  const Matrix& m0 = *ws[0];
  const bool int8 = ctx.int8_activations;
  auto fits = [&](const Matrix& m) { return Tiled(m) || (int8 && FastOdd(m)); };
  bool shared = count > 1 && fits(m0);
  for (int i = 0; i < count && shared; ++i) {
    const Matrix& m = *ws[i];
    shared = fits(m) && m.bits == m0.bits && m.group == m0.group && m.cols == m0.cols &&
             m.sb_type == m0.sb_type && m.rows % 16 == 0;
  }
  if (!shared) {
    for (int i = 0; i < count; ++i) MatmulImpl(ctx, x, n, *ws[i], ys[i], sc);
    return;
  }
  PrepAffine(ctx, x, n, m0, true, int8, sc);
  // One pass over the concatenated rows; every matrix starts at a multiple of 16, so its tiles and
  // the thread split fall where they would in a call of its own.
  int64_t total = 0;
  for (int i = 0; i < count; ++i) total += ws[i]->rows;
  auto body = [&](size_t g0, size_t g1, int) {
    int64_t off = 0;
    for (int i = 0; i < count; ++i) {
      const int64_t M = ws[i]->rows, a = std::max(int64_t(g0), off), b = std::min(int64_t(g1), off + M);
      if (a < b) TiledRows(*ws[i], x, n, int8, sc, a - off, b - off, ys[i]);
      off += M;
    }
  };
  if (ctx.pool == nullptr) body(0, size_t(total), 0);
  else ctx.pool->parallel_for(size_t(total), body, 16);
}

}  // namespace qwen35::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qwen35::kernels::cpu {
HWY_EXPORT(MatmulImpl);
HWY_EXPORT(MatmulManyImpl);
HWY_EXPORT(TargetName);

void matmul(const Context& ctx, const float* x, int64_t n, const Matrix& w, float* y,
            MatmulScratch& scratch) {
  if (n == 0 || w.rows == 0) return;
  HWY_DYNAMIC_DISPATCH(MatmulImpl)(ctx, x, n, w, y, scratch);
}

void matmul_many(const Context& ctx, const float* x, int64_t n, const Matrix* const* ws, float* const* ys,
                 int count, MatmulScratch& scratch) {
  if (n == 0 || count <= 0) return;
  HWY_DYNAMIC_DISPATCH(MatmulManyImpl)(ctx, x, n, ws, ys, count, scratch);
}

std::string simd_target() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

bool limit_simd(const std::string& name) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    std::string t = hwy::TargetName(target);
    std::string want = name;
    for (auto& c : t) c = char(std::tolower(static_cast<unsigned char>(c)));
    for (auto& c : want) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (t != want) continue;
    // This target and every lower one (higher bits are better targets in Highway's encoding).
    int64_t mask = 0;
    for (int64_t other : hwy::SupportedAndGeneratedTargets())
      if (other >= target) mask |= other;
    hwy::SetSupportedTargetsForTest(mask);
    return true;
  }
  return false;
}

}  // namespace qwen35::kernels::cpu
#endif
