// Highway compiles this file once per SIMD target (foreach_target) and dispatches at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/block_matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// Once per target:
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/block_matmul.h"
#include "kernels/matrix.h"

HWY_BEFORE_NAMESPACE();
namespace qwen35::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int64_t kTile = 16;  // output rows per tile, on every target

// The scalar twin: one output row against one activation row.
float RowScalar(const Matrix& m, const float* x, int64_t o, float* wrow) {
  decode_row(m, o, wrow);
  float acc = 0.0f;
  for (int64_t k = 0; k < m.cols; ++k) acc = std::fma(wrow[k], x[k], acc);
  return acc;
}

void BlockRowsImpl(const Matrix& m, const float* x, int64_t n, int64_t o0, int64_t o1, float* y) {
  const hn::CappedTag<float, kTile> df;
  const int64_t L = int64_t(hn::Lanes(df));  // lanes per vector; kTile / L vectors per tile
  const int64_t K = m.cols, M = m.rows;
  const BlockFormat f = block_format(m.type);
  const int64_t E = f.elements, row_bytes = block_row_bytes(m);
  thread_local std::vector<float> buf;
  // [kTile][E] decoded, [E][kTile] transposed, [n][kTile] accumulators, [K] scalar-twin row.
  buf.resize(size_t(2 * kTile * E + n * kTile + K));
  float* dec = buf.data();
  float* wt = dec + kTile * E;
  float* acc = wt + kTile * E;
  float* wrow = acc + n * kTile;
  int64_t o = o0;
  // The tiles' MulAdd must be fused, as std::fma in the scalar twin is (targets without FMA run the
  // twin alone).
  if (HWY_NATIVE_FMA && o % kTile == 0 && kTile % L == 0) {
    for (; o + kTile <= o1; o += kTile) {
      std::fill_n(acc, n * kTile, 0.0f);
      const uint8_t* base = static_cast<const uint8_t*>(m.data) + o * row_bytes;
      for (int64_t b = 0; b < K / E; ++b) {
        for (int64_t r = 0; r < kTile; ++r) decode_block(m.type, base + r * row_bytes + b * f.bytes, dec + r * E);
        for (int64_t r = 0; r < kTile; ++r)
          for (int64_t k = 0; k < E; ++k) wt[k * kTile + r] = dec[r * E + k];
        for (int64_t t = 0; t < n; ++t) {
          const float* xk = x + t * K + b * E;
          float* a = acc + t * kTile;
          for (int64_t v = 0; v < kTile; v += L) {
            auto s = hn::LoadU(df, a + v);
            for (int64_t k = 0; k < E; ++k) s = hn::MulAdd(hn::LoadU(df, wt + k * kTile + v), hn::Set(df, xk[k]), s);
            hn::StoreU(s, df, a + v);
          }
        }
      }
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < kTile; ++r) y[t * M + o + r] = acc[t * kTile + r];
    }
  }
  for (; o < o1; ++o)
    for (int64_t t = 0; t < n; ++t) y[t * M + o] = RowScalar(m, x + t * K, o, wrow);
}

}  // namespace qwen35::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qwen35::kernels::cpu {
HWY_EXPORT(BlockRowsImpl);

void block_matmul_rows(const Matrix& m, const float* x, int64_t n, int64_t o0, int64_t o1, float* y) {
  if (n == 0 || o1 <= o0) return;
  HWY_DYNAMIC_DISPATCH(BlockRowsImpl)(m, x, n, o0, o1, y);
}

}  // namespace qwen35::kernels::cpu
#endif
