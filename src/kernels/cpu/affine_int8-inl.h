// MLX affine weights in the fast mode: activations quantized to int8 per weight group and
// multiplied with the unsigned codes in integers.
//
// A part of matmul.cc and of the tile units (affine_tiles_*.cc): included there, once per SIMD
// target, inside its per-target namespace and after the parts it builds on. It has no includes or
// guards of its own.

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
// q: scratch for the row in natural order (the caller share's buffer). Inline: the tile units
// include this part too; matmul.cc alone calls it.
inline void QuantizeRow8(const float* x, int64_t K, int bits, int64_t group, int8_t* xq, float* dx, float* xsum,
                  std::vector<int8_t>& q) {
  const int64_t per = OddWidth(bits) ? 1 : 8 / bits, C = 4 * per;
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

// One output row, scalar (tail rows, and targets without a tile kernel). buf: where a row of
// tile-major codes is gathered (the caller share's buffer).
template <int kBits>
void RowScalar8(const Matrix& m, const int8_t* xq, const float* dx, const float* xsum, int64_t o,
                const float* s_row, const float* b_row, float* y, std::vector<uint32_t>& buf) {
  constexpr uint32_t mask = kBits == 8 ? 0xFFu : (1u << kBits) - 1u;
  if constexpr (OddWidth(kBits)) {
    // Odd widths: runs of eight codes fill kBits bytes; activations in natural order.
    const int64_t K = m.cols, G = m.group;
    const uint8_t* row = reinterpret_cast<const uint8_t*>(affine_row(m, o, buf));
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
  const uint8_t* row = reinterpret_cast<const uint8_t*>(affine_row(m, o, buf));
  float acc = 0;
  int32_t isum = 0;
  int64_t left = DG, g_next = 0;
  const uint8_t* book = kBits == 4 ? m.book : nullptr;
  for (int64_t jj = 0; jj < words; ++jj) {
    const uint8_t* w = row + jj * 4;
    const int8_t* xw = xq + jj * C;
    for (int mm = 0; mm < per; ++mm)
      for (int b = 0; b < 4; ++b) {
        const uint32_t q = (uint32_t(w[b]) >> (kBits * mm)) & mask;
        isum += int32_t(book ? uint32_t(book[q]) : q) * xw[mm * 4 + b];
      }
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

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
// Where the fast tile kernels read a group's scales and biases, one per row (lane): f32 as
// [group][row] (sT, bT, prepared per tile by RangeAffine), or, where sT is null, the tile-major
// f16 values of an int8 form in place (Matrix::sb_tiled), widened in registers and the implicit
// bias −zero·scale made there: the same values, without the round trip through memory.
struct GroupScales {
  const float* sT;
  const float* bT;
  const uint16_t* sp = nullptr;
  const uint16_t* bp = nullptr;
  float neg_zero = 0;
};
HWY_INLINE GroupScales TileGroupScales(const Matrix& m, int64_t o, const float* sT, const float* bT) {
  GroupScales gs{sT, bT};
  if (sT == nullptr) {
    const int64_t at = (o >> 4) * 16 * (m.cols / m.group) + (o & 15);
    gs.sp = static_cast<const uint16_t*>(m.scales) + at;
    gs.bp = m.biases != nullptr ? static_cast<const uint16_t*>(m.biases) + at : nullptr;
    gs.neg_zero = -float(m.zero);
  }
  return gs;
}

// The accumulators of a fast tile kernel: per activation row, kChains integer sums (exact, so how
// the dot products are spread over them changes no bits) and the float sum of the closed groups.
// step() follows each unit of `per_group` (words or code pairs) that make a group; the last one
// closes group g: acc += float(isum)·(s·dx), then acc += b·xsum (RowScalar8's operations, one
// output row per lane), and the integer sums restart.
template <int rt, int kChains>
struct TileAcc8 {
  VI isum[kChains][rt];
  VFl acc[rt];
  GroupScales gs;
  int64_t per_group, left, g = 0;

  HWY_INLINE TileAcc8(const GroupScales& scales, int64_t units) : gs(scales), per_group(units), left(units) {
    for (int r = 0; r < rt; ++r) {
      for (int c = 0; c < kChains; ++c) isum[c][r] = ZeroI();
      acc[r] = ZeroF();
    }
  }
  HWY_INLINE void step(const float* const* dx, const float* const* xsum) {
    if (--left != 0) return;  // a countdown: no division per unit
    left = per_group;
    constexpr int N = kTileRows;
    VFl s, b;
    if (gs.sT != nullptr) {
      s = LoadF(gs.sT + g * N);
      b = LoadF(gs.bT + g * N);
    } else {
      s = AsF(LoadF16(gs.sp + g * 16));
      b = gs.bp != nullptr ? AsF(LoadF16(gs.bp + g * 16)) : gs.neg_zero != 0 ? MulF(s, SetF(gs.neg_zero)) : ZeroF();
    }
    for (int r = 0; r < rt; ++r) {
      VI total = isum[0][r];
      for (int c = 1; c < kChains; ++c) total = AddI(total, isum[c][r]);
      acc[r] = FmaF(CvtF(total), MulF(s, SetF(dx[r][g])), acc[r]);
      acc[r] = FmaF(b, SetF(xsum[r][g]), acc[r]);
      for (int c = 0; c < kChains; ++c) isum[c][r] = ZeroI();
    }
    ++g;
  }
  HWY_INLINE void store(float* const* y, int64_t o) const {
    for (int r = 0; r < rt; ++r) StoreF(y[r] + o, acc[r]);
  }
};

// How far ahead of its reads a tile kernel prefetches tile-major codes, and into L2 only
// (prefetcht1). The hardware prefetchers do not run far enough ahead of a stream consumed in
// bursts of whole tiles, nor across 4 KiB pages, and without this the kernel's arithmetic and the
// memory stream do not overlap; L1 is left to the words in use.
constexpr int64_t kCodePrefetchBytes = 8192;
HWY_INLINE void PrefetchCodes(const uint8_t* p) { __builtin_prefetch(p + kCodePrefetchBytes, 0, 2); }

// Words j0..j0+kTileRows-1 of the tile's rows o.., one vector a word (lane = row): transposed from
// row-major codes (and the next tile's prefetched), or loaded in place from tile-major ones
// (Matrix::codes_tiled: one sequential stream).
HWY_INLINE void TileWords(const Matrix& m, const uint8_t* base, int64_t o, int64_t row_bytes, int64_t j0, VI* tw) {
  if (m.codes_tiled) {
    const uint8_t* t = static_cast<const uint8_t*>(m.data) + (o >> 4) * 16 * row_bytes + (o & 15) * 4;
    for (int j = 0; j < kTileRows; ++j) PrefetchCodes(t + (j0 + j) * 64);
    for (int j = 0; j < kTileRows; ++j) tw[j] = LoadI(t + (j0 + j) * 64);
    return;
  }
  TransposeTileAndPrefetchNext(base + j0 * 4, row_bytes, tw);
}

// Output rows o..o+kTileRows-1 against rt activation rows. sT/bT: scales/biases as [group][row].
// kIq4 (4-bit only): the codes are code-book indices, mapped through Matrix::book by a byte
// shuffle (vpshufb) per 128-bit block.
template <int kBits, int rt, bool kIq4 = false>
HWY_INLINE void Tile8(const Matrix& m, const int8_t* const* xq, const float* const* dx, const float* const* xsum,
                      int64_t o, const float* sT, const float* bT, float* const* y) {
  constexpr int N = kTileRows, C = 32 / kBits;
  const int64_t K = m.cols, DG = m.group / C, words = K / C, row_bytes = K * kBits / 8;
  const uint8_t* base = static_cast<const uint8_t*>(m.data) + o * row_bytes;
  // With few activation rows, words alternate between two integer accumulators (even, odd word) so
  // consecutive dot products do not wait on each other; integer sums are exact, so this changes no
  // bits. With more rows the rows' chains are independent already and registers are scarce. One
  // row of 4-bit codes on VNNI (decode) also splits each word's low and high nibbles (four chains).
  constexpr bool kSplit = HWY_TARGET == HWY_AVX3_DL && kBits == 4 && rt == 1;
  constexpr int kChains = kSplit ? 4 : rt <= 2 ? 2 : 1;
  TileAcc8<rt, kChains> a(TileGroupScales(m, o, sT, bT), DG);
  // Word jj (one vector: lane = row) into chain c, and the group it closes.
  auto word = [&]<int c>(const VI w, int64_t jj) {
    if constexpr (kBits == 8) {
      for (int r = 0; r < rt; ++r) a.isum[c][r] = DotWide(a.isum[c][r], w, xq[r] + jj * C);
    } else if constexpr (kBits == 4) {
      VI lo = AndI(w, 0x0F), hi = AndI(Srl<4>(w), 0x0F);
      if constexpr (kIq4) {
        const VI book = LoadI(m.book);
        lo = hn::TableLookupBytes(book, lo);
        hi = hn::TableLookupBytes(book, hi);
      }
      if constexpr (kSplit) {
        a.isum[c][0] = DotWide(a.isum[c][0], lo, xq[0] + jj * C);
        a.isum[c + 2][0] = DotWide(a.isum[c + 2][0], hi, xq[0] + jj * C + 4);
      } else if constexpr (kIq4) {
        // Full-byte codes: DotWide, whose 16-bit pairs cannot saturate (vpmaddubsw).
        for (int r = 0; r < rt; ++r)
          a.isum[c][r] = DotWide(DotWide(a.isum[c][r], lo, xq[r] + jj * C), hi, xq[r] + jj * C + 4);
      } else {
        for (int r = 0; r < rt; ++r)
          a.isum[c][r] = DotPair(a.isum[c][r], lo, xq[r] + jj * C, hi, xq[r] + jj * C + 4);
      }
    } else {
      const VI q0 = AndI(w, 3), q1 = AndI(Srl<2>(w), 3), q2 = AndI(Srl<4>(w), 3), q3 = AndI(Srl<6>(w), 3);
      for (int r = 0; r < rt; ++r) {
        const int8_t* xw = xq[r] + jj * C;
        a.isum[c][r] = DotPair(a.isum[c][r], q0, xw, q1, xw + 4);
        a.isum[c][r] = DotPair(a.isum[c][r], q2, xw + 8, q3, xw + 12);
      }
    }
    a.step(dx, xsum);
  };
  constexpr int c1 = kChains >= 2 ? 1 : 0;  // even and odd words
  if (m.codes_tiled) {  // in place, straight from the stream
    const uint8_t* t = static_cast<const uint8_t*>(m.data) + (o >> 4) * 16 * row_bytes + (o & 15) * 4;
    for (int64_t jj = 0; jj < words; jj += 2) {
      PrefetchCodes(t + jj * 64);
      PrefetchCodes(t + jj * 64 + 64);
      word.template operator()<0>(LoadI(t + jj * 64), jj);
      word.template operator()<c1>(LoadI(t + jj * 64 + 64), jj + 1);
    }
  } else {
    VI tw[N];
    for (int64_t j0 = 0; j0 < words; j0 += N) {
      TileWords(m, base, o, row_bytes, j0, tw);
      for (int j = 0; j < N; j += 2) {
        word.template operator()<0>(tw[j], j0 + j);
        word.template operator()<c1>(tw[j + 1], j0 + j + 1);
      }
    }
  }
  a.store(y, o);
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
  TileAcc8<rt, kChains> a(TileGroupScales(m, o, sT, bT), GP);
  VI tw[BW + 1];
  tw[BW] = ZeroI();  // read (and shifted out) by the block's last funnel
  for (int64_t w0 = 0; w0 < words; w0 += BW) {
    for (int t = 0; t < BW; t += N) {
      TileWords(m, base, o, row_bytes, w0 + t, tw + t);
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
        a.isum[c][r] = DotPair(a.isum[c][r], q[0], xc, q[1], xc + 4);
      }
      a.step(dx, xsum);
    }
  }
  a.store(y, o);
}

#if HWY_TARGET == HWY_AVX3_DL
// Odd widths in tile-major codes (the int8 forms of Q5_K and Q6_K blocks): 32 codes of every lane
// are kBits consecutive words of the stream, loaded in place. Each quad of codes is spread from
// its word, or from a funnel of two where it straddles them, at offsets fixed at compile time.
// The same integer sums as Tile8Odd, in the same groups.
template <int kBits, int q>
HWY_INLINE VI OddQuad(const VI* v) {
  constexpr int bit = 4 * kBits * q, i = bit / 32, sh = bit % 32;
  if constexpr (sh + 4 * kBits <= 32) return Spread<kBits, sh>(v[i]);
  else return Spread<kBits>(FunnelImm<sh>(v[i], v[i + 1]));
}

template <int kBits, int rt>
HWY_INLINE void Tile8OddTiled(const Matrix& m, const int8_t* const* xq, const float* const* dx,
                              const float* const* xsum, int64_t o, const float* sT, const float* bT, float* const* y) {
  const int64_t K = m.cols, row_bytes = K * kBits / 8, GP = m.group / 8;
  const uint8_t* t = static_cast<const uint8_t*>(m.data) + (o >> 4) * 16 * row_bytes;
  constexpr int kChains = rt <= 2 ? 2 : 1;  // as in Tile8
  TileAcc8<rt, kChains> a(TileGroupScales(m, o, sT, bT), GP);
  for (int64_t c0 = 0; c0 < K; c0 += 32) {
    const uint8_t* w = t + c0 / 32 * kBits * 64;
    VI v[kBits];
    for (int i = 0; i < kBits; ++i) {
      PrefetchCodes(w + i * 64);
      v[i] = LoadI(w + i * 64);
    }
    auto pair = [&]<int p>() {
      const VI q0 = OddQuad<kBits, 2 * p>(v), q1 = OddQuad<kBits, 2 * p + 1>(v);
      constexpr int c = p % kChains;
      for (int r = 0; r < rt; ++r)
        a.isum[c][r] = DotPair(a.isum[c][r], q0, xq[r] + c0 + 8 * p, q1, xq[r] + c0 + 8 * p + 4);
      a.step(dx, xsum);
    };
    pair.template operator()<0>();
    pair.template operator()<1>();
    pair.template operator()<2>();
    pair.template operator()<3>();
  }
  a.store(y, o);
}
#endif

template <int kBits, int rt, bool kIq4>
HWY_INLINE void Tile8Sel(const Matrix& m, const int8_t* const* xq, const float* const* dx, const float* const* xsum,
                         int64_t o, const float* sT, const float* bT, float* const* y) {
  if constexpr (OddWidth(kBits)) {
#if HWY_TARGET == HWY_AVX3_DL
    if (m.codes_tiled) return Tile8OddTiled<kBits, rt>(m, xq, dx, xsum, o, sT, bT, y);
#endif
    Tile8Odd<kBits, rt>(m, xq, dx, xsum, o, sT, bT, y);
  } else Tile8<kBits, rt, kIq4>(m, xq, dx, xsum, o, sT, bT, y);
}

template <int kBits, bool kIq4 = false>
HWY_INLINE void TileRows8(const Matrix& m, const int8_t* const* xq, const float* const* dx,
                          const float* const* xsum, int64_t rt, int64_t o, const float* sT, const float* bT,
                          float* const* y) {
  switch (rt) {
    case 1: Tile8Sel<kBits, 1, kIq4>(m, xq, dx, xsum, o, sT, bT, y); break;
    case 2: Tile8Sel<kBits, 2, kIq4>(m, xq, dx, xsum, o, sT, bT, y); break;
    case 3: Tile8Sel<kBits, 3, kIq4>(m, xq, dx, xsum, o, sT, bT, y); break;
    case 4: Tile8Sel<kBits, 4, kIq4>(m, xq, dx, xsum, o, sT, bT, y); break;
#if HWY_TARGET != HWY_AVX2
    case 5: Tile8Sel<kBits, 5, kIq4>(m, xq, dx, xsum, o, sT, bT, y); break;
    case 6: Tile8Sel<kBits, 6, kIq4>(m, xq, dx, xsum, o, sT, bT, y); break;
    case 7: Tile8Sel<kBits, 7, kIq4>(m, xq, dx, xsum, o, sT, bT, y); break;
    default: Tile8Sel<kBits, 8, kIq4>(m, xq, dx, xsum, o, sT, bT, y); break;
#else
    default: Tile8Sel<kBits, 4, kIq4>(m, xq, dx, xsum, o, sT, bT, y); break;
#endif
  }
}
#endif
