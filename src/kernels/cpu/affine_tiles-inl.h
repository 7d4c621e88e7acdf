// The tile loop of MLX affine matmuls, both modes: a range of output rows against a block of
// activation rows, whole tiles through the tile kernels, the rest through the scalar loop.
//
// A part of matmul.cc, affine_tiles_exact.cc and affine_tiles_int8.cc: included in each, once per
// SIMD target, inside its per-target namespace and after the parts it builds on (it has no includes
// or guards of its own). matmul.cc calls TiledRangeExact and TiledRangeInt8, which the two units
// define for the same targets: the template's instantiations, most of the matmul's compile time,
// are built in two units beside the dispatch instead of in it.

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
template <int kBits, bool kInt8, bool kIq4 = false>
void RangeAffine(const Matrix& m, const AffineActs& a, int64_t t0, int64_t t1, int64_t o0, int64_t o1, float* y,
                 MatmulScratch::Share& share) {
  const int64_t K = m.cols, M = m.rows, groups = K / m.group;
  std::vector<float>& sbuf = share.tile_scales;
  const int64_t NT = kTileRows > 0 ? kTileRows : 1;
  sbuf.resize(size_t(4 * NT * (groups + 16)));
  float* srow = sbuf.data();  // [NT][groups] row-major
  float* brow = srow + NT * (groups + 16);
  auto convert = [&](int64_t o, float* s, float* b) { ConvertScales(m, o, groups, s, b); };
  int64_t o = o0;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
  constexpr int N = kTileRows;
  constexpr int64_t kT = kInt8 ? kInt8ActRowsPerPass : kExactActRowsPerPass;  // activation rows per kernel call
  float* sT = brow + NT * (groups + 16);  // [groups][N]
  float* bT = sT + NT * (groups + 16);
  constexpr bool kOdd = OddWidth(kBits);
  if (kOdd ? (K * kBits / 32) % std::lcm(16, kBits) == 0 : (K / (32 / kBits)) % N == 0) {
    // The tile's scales and biases as [group][row] f32. bf16 (the MLX default) and f16 (the int8
    // forms of GGUF blocks) are widened straight into the registers of the transpose, and implicit
    // biases (−zero·scale) made there; other types go through a row-major buffer.
    const bool half_direct =
        (m.sb_type == core::DType::kBF16 || m.sb_type == core::DType::kF16) && groups % N == 0;
    const int64_t sb_bytes = int64_t(core::dtype_size(m.sb_type)), tile_sb = N * groups * sb_bytes;
    // Tile-major f16 scales and biases (the int8 forms, which only the fast kernels take): read in
    // place by the kernels (GroupScales), [group][row] already. Other tile-major types have no
    // kernel.
    const bool in_place = kInt8 && m.sb_tiled && m.sb_type == core::DType::kF16;
    QWEN35_CHECK(!m.sb_tiled || in_place);
    for (; o + N <= o1 && o + N <= M; o += N) {
      // The next tile's scales and biases: they stream beside the codes, which the tile kernel
      // prefetches itself.
      if (o + 2 * N <= M) {
        const uint8_t* ns = static_cast<const uint8_t*>(m.scales) + (o + N) * groups * sb_bytes;
        const uint8_t* nb = m.biases ? static_cast<const uint8_t*>(m.biases) + (o + N) * groups * sb_bytes : nullptr;
        for (int64_t b = 0; b < tile_sb; b += 64) {
          __builtin_prefetch(ns + b);
          if (nb) __builtin_prefetch(nb + b);
        }
      }
      int64_t g = 0;
      if (in_place) {
        // The kernels read the tile's scales where they lie.
      } else if (half_direct) {
        const bool f16 = m.sb_type == core::DType::kF16;
        const uint16_t* sp = static_cast<const uint16_t*>(m.scales) + o * groups;
        const uint16_t* bp = m.biases ? static_cast<const uint16_t*>(m.biases) + o * groups : nullptr;
        const VFl neg_zero = SetF(-float(m.zero));
        for (; g < groups; g += N) {
          VI r[N], t[N];
          for (int l = 0; l < N; ++l) r[l] = f16 ? LoadF16(sp + l * groups + g) : LoadBf16(sp + l * groups + g);
          TransposeRegs(r, t);
          for (int j = 0; j < N; ++j) std::memcpy(sT + (g + j) * N, &t[j], N * 4);
          if (bp != nullptr) {
            for (int l = 0; l < N; ++l) r[l] = f16 ? LoadF16(bp + l * groups + g) : LoadBf16(bp + l * groups + g);
            TransposeRegs(r, t);
            for (int j = 0; j < N; ++j) std::memcpy(bT + (g + j) * N, &t[j], N * 4);
          } else {
            // implicit_bias: −zero·scale, or exactly 0 when zero is 0.
            for (int j = 0; j < N; ++j)
              StoreF(bT + (g + j) * N, m.zero != 0 ? MulF(LoadF(sT + (g + j) * N), neg_zero) : ZeroF());
          }
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
        if constexpr (kInt8) TileRows8<kBits, kIq4>(m, xr, dr, sr, rt, o, in_place ? nullptr : sT, bT, yr);
        else if constexpr (!kOdd) TileRowsF<kBits>(m, xf, sr, rt, o, sT, bT, yr);
      }
    }
  }
#endif
  for (; o < o1; ++o) {
    convert(o, srow, brow);
    for (int64_t t = t0; t < t1; ++t) {
      if constexpr (kInt8)
        RowScalar8<kBits>(m, a.xq + t * K, a.dx + t * groups, a.xsum + t * groups, o, srow, brow, y + t * M + o,
                           share.row_words);
      else if constexpr (!OddWidth(kBits))
        RowScalarF<kBits>(m, a.x + t * K, a.xsum + t * groups, o, srow, brow, y + t * M + o);
    }
  }
}

// Output rows [o0, o1) against activation rows [t0, t1) of a tiled affine matrix (tiled_affine),
// exact mode; affine_tiles_exact.cc.
void TiledRangeExact(const Matrix& m, const AffineActs& a, int64_t t0, int64_t t1, int64_t o0, int64_t o1,
                     float* y, MatmulScratch::Share& share);
// The same in fast mode (int8 activations), for tiled_affine and fast_odd_affine matrices;
// affine_tiles_int8.cc.
void TiledRangeInt8(const Matrix& m, const AffineActs& a, int64_t t0, int64_t t1, int64_t o0, int64_t o1,
                    float* y, MatmulScratch::Share& share);
