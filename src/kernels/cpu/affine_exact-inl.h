// MLX affine weights in the exact mode: decoded codes times fp32 activations. 2/4/8-bit matrices
// take tiles of kTileRows output rows, their 32-bit words transposed in registers, with activations
// pre-scaled by powers of two (ScaleForTiles) so each code is read in place from its word; any
// width takes the per-row kernel. Biases enter through per-group activation sums:
// Σ x(s·q + b) = s·Σ x q + b·Σ x.
//
// A part of matmul.cc and of the tile units (affine_tiles_*.cc): included there, once per SIMD
// target, inside its per-target namespace and after the parts it builds on. It has no includes or
// guards of its own.

#if HWY_TARGET == HWY_AVX3_DL
// Groups [g, g + 4) of one row (G a multiple of 64) against one activation row, codes kept in
// registers: each group's partial sum is one FMA chain over its 16-float chunks in order, and acc
// takes the groups in order, exactly as AffineGenericRows does (the same bits).
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

// Any affine width: each group decoded into a stack buffer, then a SIMD dot per row.
template <int rt>
HWY_INLINE void AffineGenericRows(const Matrix& m, const float* const* x, const float* const* xsum,
                                  int64_t o, float* const* y, const float* sf,
                                  const float* bf) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df)), K = m.cols, G = m.group;
  const uint32_t* row = static_cast<const uint32_t*>(m.data) + o * (K * m.bits / 32);
  HWY_ALIGN float q[128 + 16];
  hn::Vec<DF> acc[kRowKernelActRows];
  float tail[kRowKernelActRows] = {};
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
    hn::Vec<DF> part[kRowKernelActRows];
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
    TransposeTileAndPrefetchNext(base + j0 * 4, row_bytes, tw);
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

// x[k]·2^-(bits·(k mod C)) for the exact tile kernels (powers of two: exact for any activation
// above 1e-29). Inline, as GroupSums below: the tile units include this part too; matmul.cc alone
// calls them.
inline void ScaleForTiles(const float* x, int64_t K, int bits, float* out) {
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
inline void GroupSums(const float* x, int64_t K, int64_t group, float* out) {
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
