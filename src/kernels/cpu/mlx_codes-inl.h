// MLX affine codes: a row of a `bits`-bit matrix is one little-endian bit stream of codes
// (3/5/6/7-bit codes cross 32-bit word boundaries). Unpacking to floats, and the per-row scales and
// biases converted to f32.
//
// A part of matmul.cc and of the tile units (affine_tiles_*.cc): included there, once per SIMD
// target, inside its per-target namespace and after the parts it builds on. It has no includes or
// guards of its own.

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

// Row o's scales and biases as f32 (biases −zero·scale when the matrix stores none), from
// row-major or tile-major (Matrix::sb_tiled) storage.
HWY_INLINE void ConvertScales(const Matrix& m, int64_t o, int64_t groups, float* s, float* b) {
  if (m.sb_tiled) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t i = sb_index(m, o, g);
      s[g] = sb_at(m.scales, m.sb_type, i);
      b[g] = m.biases ? sb_at(m.biases, m.sb_type, i) : implicit_bias(m, s[g]);
    }
    return;
  }
  ConvertRow(m.scales, m.sb_type, o * groups, groups, s);
  if (m.biases) ConvertRow(m.biases, m.sb_type, o * groups, groups, b);
  else for (int64_t g = 0; g < groups; ++g) b[g] = implicit_bias(m, s[g]);
}
