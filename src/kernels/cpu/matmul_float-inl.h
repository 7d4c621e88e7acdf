// Float weights (f32, f16, bf16): the per-row kernel along k, and bf16 tiles of kTileRows output
// rows (one per lane) whose scalar twin performs the same operations.
//
// A part of matmul.cc: included there, once per SIMD target, inside its per-target namespace and
// after the parts it builds on. It has no includes or guards of its own.

// Float weights (f32, f16, bf16) along k.
template <int rt>
HWY_INLINE void FloatRows(const Matrix& m, const float* const* x, int64_t o, float* const* y) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df)), K = m.cols;
  hn::Vec<DF> acc[kRowKernelActRows];
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
  const int64_t full = words / N * N;
  for (int64_t j0 = 0; j0 < full; j0 += N) {
    TransposeTileAndPrefetchNext(base + j0 * 4, row_bytes, tw);
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
  // The words past the last whole tile (a width that is not a multiple of 2·N: the large
  // towers' 4304), one word of every lane's row at a time: the same operations, in the same
  // order, as the tile loop and RowScalarBF.
  for (int64_t jj = full; jj < words; ++jj) {
    alignas(64) uint32_t w[N];
    for (int l = 0; l < N; ++l) std::memcpy(&w[l], base + l * row_bytes + jj * 4, 4);
    const VI tv = LoadI(w);
    const int c = int(jj & 1);
    const VFl lo = AsF(ShlI<16>(tv)), hi = AsF(And32(tv, 0xFFFF0000u));
    for (int r = 0; r < rt; ++r) {
      part[c][r] = FmaF(lo, SetF(x[r][2 * jj]), part[c][r]);
      part[c][r] = FmaF(hi, SetF(x[r][2 * jj + 1]), part[c][r]);
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

// Output rows [o0, o1) of a bf16 matrix against activation rows [t0, t1): whole tiles of output
// rows (starting at multiples of kTileRows) in the tile kernel, the rest in the scalar loop, the
// same bits, at any (even) width.
void RangeBF16(const Matrix& m, const float* x, int64_t t0, int64_t t1, int64_t o0, int64_t o1, float* y) {
  const int64_t K = m.cols, M = m.rows;
  int64_t o = o0;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
  constexpr int N = kTileRows;
  {
    for (; o + N <= o1 && o + N <= M; o += N)
      for (int64_t t = t0; t < t1; t += kExactActRowsPerPass) {
        const int64_t rt = std::min<int64_t>(kExactActRowsPerPass, t1 - t);
        const float* xr[kExactActRowsPerPass];
        float* yr[kExactActRowsPerPass];
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
