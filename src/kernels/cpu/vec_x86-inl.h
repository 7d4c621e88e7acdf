// The x86 vector layer of the matmul tile kernels: lane types, loads, integer and float
// arithmetic, the u8 x s8 dot products and the in-register transpose of a tile of weight words, on
// AVX-512 (16 lanes) and AVX2 (8 lanes). Other targets have no tile kernels (kTileRows = 0) and
// run the scalar loops, which perform the same float operations.
//
// Part of the matmul kernels: included once per SIMD target by matmul.cc (Highway foreach_target),
// after the files it builds on (see the include order there).
#if defined(QWEN35_KERNELS_CPU_VEC_X86_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QWEN35_KERNELS_CPU_VEC_X86_INL_H_
#undef QWEN35_KERNELS_CPU_VEC_X86_INL_H_
#else
#define QWEN35_KERNELS_CPU_VEC_X86_INL_H_
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/matrix.h"
#include "kernels/ops.h"

HWY_BEFORE_NAMESPACE();
namespace qwen35::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Up to 16 lanes (AVX-512). The float kernels' lane order depends on the lane count, which is fixed
// per target, so results are reproducible on a given machine.
using DF = hn::CappedTag<float, 16>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
constexpr int64_t kRowKernelActRows = 8;  // activation rows per call of the per-row kernels

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr int kTileRows = 16;  // output rows per tile: one per int32 lane
constexpr int kInt8ActRowsPerPass = 8;      // activation rows per pass (fast mode)
constexpr int kExactActRowsPerPass = 8;     // activation rows per pass (exact mode)
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
constexpr int kInt8ActRowsPerPass = 4;
constexpr int kExactActRowsPerPass = 4;
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
constexpr int kInt8ActRowsPerPass = 1;
constexpr int kExactActRowsPerPass = 1;
#endif

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
// kTileRows rows of kTileRows words (row l at p + l·stride) transposed: out[j] holds word j of
// every row.
HWY_INLINE void TransposeTile(const uint8_t* p, int64_t stride, VI* out) {
  VI r[kTileRows];
  for (int l = 0; l < kTileRows; ++l) r[l] = LoadI(p + l * stride);
  TransposeRegs(r, out);
}
#endif

}  // namespace qwen35::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // QWEN35_KERNELS_CPU_VEC_X86_INL_H_
