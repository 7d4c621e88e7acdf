// The x86 vector layer of the matmul tile kernels: lane types, loads, integer and float
// arithmetic, the u8 x s8 dot products and the in-register transpose of a tile of weight words, on
// AVX-512 (16 lanes) and AVX2 (8 lanes). Other targets have no tile kernels (kTileRows = 0) and
// run the scalar loops, which perform the same float operations.
//
// A part of matmul.cc and of the tile units (affine_tiles_*.cc): included there, once per SIMD
// target, inside its per-target namespace and after the parts it builds on. It has no includes or
// guards of its own.

// Up to 16 lanes (AVX-512). The float kernels' lane order depends on the lane count, which is fixed
// per target, so results are reproducible on a given machine.
using DF = hn::CappedTag<float, 16>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
constexpr int64_t kRowKernelActRows = 8;  // activation rows per call of the per-row kernels

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
// One output row per int32 lane: 16 on AVX-512, 8 on AVX2. Written once with Highway ops; only the
// byte dot products and the transpose below name the instructions of each ISA.
using DTileI = hn::ScalableTag<int32_t>;
using DTileU = hn::RebindToUnsigned<DTileI>;
using DTileF = hn::RebindToFloat<DTileI>;
using VI = hn::Vec<DTileI>;
using VFl = hn::Vec<DTileF>;
constexpr int kTileRows = HWY_TARGET == HWY_AVX2 ? 8 : 16;  // output rows per tile
constexpr int kInt8ActRowsPerPass = kTileRows / 2;          // activation rows per pass (fast mode)
constexpr int kExactActRowsPerPass = kTileRows / 2;         // activation rows per pass (exact mode)
static_assert(HWY_LANES(int32_t) == kTileRows);

HWY_INLINE VI LoadI(const void* p) { return hn::LoadU(DTileI(), static_cast<const int32_t*>(p)); }
// The 4 bytes at p in every lane.
HWY_INLINE VI Bcast(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return hn::Set(DTileI(), v);
}
HWY_INLINE VI AndI(VI a, uint8_t mask) { return hn::And(a, hn::Set(DTileI(), int32_t(0x01010101u * mask))); }
template <int k>
HWY_INLINE VI Srl(VI a) { return hn::BitCast(DTileI(), hn::ShiftRight<k>(hn::BitCast(DTileU(), a))); }
HWY_INLINE VI SrlVar(VI a, int k) { return hn::BitCast(DTileI(), hn::ShiftRightSame(hn::BitCast(DTileU(), a), k)); }
HWY_INLINE VI And32(VI a, uint32_t mask) { return hn::And(a, hn::Set(DTileI(), int32_t(mask))); }
HWY_INLINE VI ZeroI() { return hn::Zero(DTileI()); }
HWY_INLINE VFl ZeroF() { return hn::Zero(DTileF()); }
HWY_INLINE VFl LoadF(const float* p) { return hn::LoadU(DTileF(), p); }
HWY_INLINE void StoreF(float* p, VFl v) { hn::StoreU(v, DTileF(), p); }
HWY_INLINE VFl CvtF(VI v) { return hn::ConvertTo(DTileF(), v); }
HWY_INLINE VFl MulF(VFl a, VFl b) { return hn::Mul(a, b); }
HWY_INLINE VFl FmaF(VFl a, VFl b, VFl c) { return hn::MulAdd(a, b, c); }
HWY_INLINE VFl SetF(float v) { return hn::Set(DTileF(), v); }
HWY_INLINE VI AddI(VI a, VI b) { return hn::Add(a, b); }
template <int k>
HWY_INLINE VI ShlI(VI a) { return hn::ShiftLeft<k>(a); }
HWY_INLINE VFl AsF(VI a) { return hn::BitCast(DTileF(), a); }
HWY_INLINE VFl AddF(VFl a, VFl b) { return hn::Add(a, b); }
HWY_INLINE VI OrI(VI a, VI b) { return hn::Or(a, b); }
// kTileRows bf16 values as the bits of kTileRows floats.
HWY_INLINE VI LoadBf16(const uint16_t* p) {
  return hn::ShiftLeft<16>(hn::PromoteTo(DTileI(), hn::LoadU(hn::Rebind<uint16_t, DTileI>(), p)));
}
// A lane's worth of f16 values at p widened to f32 (exactly), as the bits of an integer vector.
HWY_INLINE VI LoadF16(const uint16_t* p) {
  const hn::Rebind<hwy::float16_t, DTileF> dh;
  return hn::BitCast(DTileI(), hn::PromoteTo(DTileF(), hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p))));
}

#if HWY_TARGET == HWY_AVX3_DL
// The 32 bits at bit s of each lane's pair (hi:lo), 0 <= s < 32 (vpshrdvd).
HWY_INLINE VI Funnel(VI lo, VI hi, int s) { return VI{_mm512_shrdv_epi32(lo.raw, hi.raw, _mm512_set1_epi32(s))}; }
// The four kBits-bit fields from bit s of each lane (s + 4·kBits <= 32) as its four bytes
// (vpmultishiftqb).
template <int kBits, int s = 0>
HWY_INLINE VI Spread(VI v) {
  static_assert(s + 4 * kBits <= 32);
  constexpr uint64_t kCtl = [] {
    uint64_t c = 0;
    for (int j = 0; j < 8; ++j) c |= uint64_t(32 * (j / 4) + s + kBits * (j % 4)) << (8 * j);
    return c;
  }();
  return AndI(VI{_mm512_multishift_epi64_epi8(_mm512_set1_epi64(int64_t(kCtl)), v.raw)}, uint8_t((1 << kBits) - 1));
}
// Funnel with the shift fixed at compile time (vpshrdd).
template <int s>
HWY_INLINE VI FunnelImm(VI lo, VI hi) { return VI{_mm512_shrdi_epi32(lo.raw, hi.raw, s)}; }
// vpdpbusd. Highway 1.0.3's AVX3_DL target string names "avxvnni" rather than "avx512vnni", so the
// intrinsic does not compile inside it; the instruction itself is safe (the target is only
// dispatched on CPUs with AVX-512 VNNI).
HWY_INLINE VI DpbusdB(VI acc, VI q, const int8_t* x) {
  // The 4 activation bytes at x broadcast from memory ({1to16}: no separate broadcast).
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc.raw) : "v"(q.raw), "m"(*reinterpret_cast<const int32_t*>(x)));
  return acc;
}
// acc += Σ over each lane's 4 bytes of q0·x0 + q1·x1 (q unsigned; x: 4 signed bytes, broadcast).
HWY_INLINE VI DotPair(VI acc, VI q0, const int8_t* x0, VI q1, const int8_t* x1) {
  return DpbusdB(DpbusdB(acc, q0, x0), q1, x1);
}
// The same for full 8-bit codes.
HWY_INLINE VI DotWide(VI acc, VI q, const int8_t* x) { return DpbusdB(acc, q, x); }
#else
// The 32 bits at bit s of each lane's pair (hi:lo), 0 < s < 32.
HWY_INLINE VI Funnel(VI lo, VI hi, int s) {
  return OrI(SrlVar(lo, s), hn::ShiftLeftSame(hi, 32 - s));
}
// u8 x s8 pairs summed to 16 bits (vpmaddubsw), then pairs of those to 32 bits (vpmaddwd by w).
#if HWY_TARGET == HWY_AVX2
HWY_INLINE VI MaddUbs(VI q, VI x) { return VI{_mm256_maddubs_epi16(q.raw, x.raw)}; }
HWY_INLINE VI Add16(VI a, VI b) { return VI{_mm256_add_epi16(a.raw, b.raw)}; }
HWY_INLINE VI Madd16(VI a, int16_t w) { return VI{_mm256_madd_epi16(a.raw, _mm256_set1_epi16(w))}; }
#else
HWY_INLINE VI MaddUbs(VI q, VI x) { return VI{_mm512_maddubs_epi16(q.raw, x.raw)}; }
HWY_INLINE VI Add16(VI a, VI b) { return VI{_mm512_add_epi16(a.raw, b.raw)}; }
HWY_INLINE VI Madd16(VI a, int16_t w) { return VI{_mm512_madd_epi16(a.raw, _mm512_set1_epi16(w))}; }
#endif
// vpmaddubsw pairs saturate at 16 bits: with q <= 63 (6-bit codes) two pairs sum to at most
// 2·2·63·127 = 32004 < 32767.
HWY_INLINE VI DotPair(VI acc, VI q0, const int8_t* x0p, VI q1, const int8_t* x1p) {
  const VI p = Add16(MaddUbs(q0, Bcast(x0p)), MaddUbs(q1, Bcast(x1p)));
  return AddI(acc, Madd16(p, 1));
}
// 8-bit codes go in nibbles so the 16-bit pairs cannot saturate: q = 16·hi + lo.
HWY_INLINE VI DotWide(VI acc, VI q, const int8_t* xp) {
  const VI x = Bcast(xp);
  const VI lo = AndI(q, 15), hi = AndI(Srl<4>(q), 15);
  acc = AddI(acc, Madd16(MaddUbs(lo, x), 1));
  return AddI(acc, Madd16(MaddUbs(hi, x), 16));
}
#endif

// kTileRows rows of kTileRows words transposed in registers: out[j] holds word j of every row.
#if HWY_TARGET == HWY_AVX2
HWY_INLINE void TransposeRegs(const VI* r, VI* out) {
  __m256i a[8], b[8];
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = _mm256_unpacklo_epi32(r[2 * i].raw, r[2 * i + 1].raw);
    a[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i].raw, r[2 * i + 1].raw);
  }
  for (int i = 0; i < 2; ++i) {
    b[4 * i + 0] = _mm256_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm256_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm256_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm256_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
  }
  for (int mm = 0; mm < 4; ++mm) {
    out[mm] = VI{_mm256_permute2x128_si256(b[mm], b[4 + mm], 0x20)};
    out[4 + mm] = VI{_mm256_permute2x128_si256(b[mm], b[4 + mm], 0x31)};
  }
}
#else
HWY_INLINE void TransposeRegs(const VI* r, VI* out) {
  __m512i a[16], b[16];
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_epi32(r[2 * i].raw, r[2 * i + 1].raw);
    a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i].raw, r[2 * i + 1].raw);
  }
  for (int i = 0; i < 4; ++i) {
    b[4 * i + 0] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
  }
  // b[4i+m], 128-bit block k: word 4k+m of rows 4i..4i+3.
  for (int mm = 0; mm < 4; ++mm) {
    const __m512i d0 = _mm512_shuffle_i32x4(b[mm], b[4 + mm], 0x44), d1 = _mm512_shuffle_i32x4(b[mm], b[4 + mm], 0xEE);
    const __m512i e0 = _mm512_shuffle_i32x4(b[8 + mm], b[12 + mm], 0x44),
                  e1 = _mm512_shuffle_i32x4(b[8 + mm], b[12 + mm], 0xEE);
    out[0 + mm] = VI{_mm512_shuffle_i32x4(d0, e0, 0x88)};
    out[4 + mm] = VI{_mm512_shuffle_i32x4(d0, e0, 0xDD)};
    out[8 + mm] = VI{_mm512_shuffle_i32x4(d1, e1, 0x88)};
    out[12 + mm] = VI{_mm512_shuffle_i32x4(d1, e1, 0xDD)};
  }
}
#endif
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
// The same, and a prefetch of the same words of the next tile's rows into L2 (the tile kernels walk
// a tile of rows word block by word block; decode is bound by this stream, and L1 is left to the
// words in use).
HWY_INLINE void TransposeTileAndPrefetchNext(const uint8_t* p, int64_t stride, VI* out) {
  TransposeTile(p, stride, out);
  for (int l = 0; l < kTileRows; ++l) __builtin_prefetch(p + (kTileRows + l) * stride, 0, 2);
}
#endif
