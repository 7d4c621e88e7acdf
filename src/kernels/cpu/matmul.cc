// Highway compiles this file once per SIMD target (foreach_target) and dispatches at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// Once per target:
#include <algorithm>
#include <cstring>

#include "kernels/cpu/matmul.h"
#include "kernels/matrix.h"

HWY_BEFORE_NAMESPACE();
namespace qwen35::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most 8 lanes: the activation permutation and the lane→group mapping depend on the lane
// count, and 8 keeps one 4-bit group of 64 per vector load on AVX2 and AVX-512 alike.
using DF = hn::CappedTag<float, 8>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
constexpr int64_t kRowTile = 4;

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
                           const float* bf, const float* lane_scales) {
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
  for (int64_t b = 0; b < K; b += B) {
    const auto words = hn::LoadU(du, row + b / kPer);
    const auto s = bcast ? hn::Set(df, sf[b / m.group]) : hn::LoadU(df, lane_scales + b / kPer);
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
  HWY_ALIGN float q[128 + 8];
  hn::Vec<DF> acc[kRowTile];
  float tail[kRowTile] = {0, 0, 0, 0};
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

// n scale/bias values starting at element i0 of a bf16/f16/f32 array, as f32.
HWY_INLINE void ConvertRow(const void* p, core::DType t, int64_t i0, int64_t n, float* out) {
  if (t == core::DType::kBF16) {
    const uint16_t* s = static_cast<const uint16_t*>(p) + i0;
    for (int64_t g = 0; g < n; ++g) out[g] = core::bf16_to_f32(s[g]);
  } else if (t == core::DType::kF16) {
    const uint16_t* s = static_cast<const uint16_t*>(p) + i0;
    for (int64_t g = 0; g < n; ++g) out[g] = core::f16_to_f32(s[g]);
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
  // Prepare activations once: permuted copies (fast affine path) and per-group sums (affine).
  if (affine) {
    const int64_t groups = K / m.group;
    sc.xsum.resize(size_t(n * groups));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t g = 0; g < groups; ++g) {
        float s = 0;
        for (int64_t j = 0; j < m.group; ++j) s += x[t * K + g * m.group + j];
        sc.xsum[size_t(t * groups + g)] = s;
      }
    if (fast_bits) {
      sc.xp.resize(size_t(n * K));
      for (int64_t t = 0; t < n; ++t) PermuteRow(x + t * K, K, m.bits, sc.xp.data() + t * K);
    }
  }
  const float* xs = fast_bits ? sc.xp.data() : x;
  auto body = [&](size_t o0, size_t o1, int) {
    const int64_t groups = affine ? K / m.group : 0;
    HWY_ALIGN float sf[4096], bf[4096];
    const int64_t lanes_needed = fast_bits ? K * m.bits / 32 : 0;
    thread_local std::vector<float> lane_scales;
    if (lane_scales.size() < size_t(lanes_needed)) lane_scales.resize(size_t(lanes_needed));
    for (int64_t o = int64_t(o0); o < int64_t(o1); ++o) {
      if (affine) {
        ConvertRow(m.scales, m.sb_type, o * groups, groups, sf);
        if (m.biases) ConvertRow(m.biases, m.sb_type, o * groups, groups, bf);
        else std::fill_n(bf, groups, 0.0f);
        if (fast_bits && block_codes(m.bits) > m.group) {
          const int64_t per = 32 / m.bits;
          for (int64_t w = 0; w < lanes_needed; ++w) lane_scales[size_t(w)] = sf[(w * per) / m.group];
        }
      }
      for (int64_t t0 = 0; t0 < n; t0 += kRowTile) {
        const int64_t rt = std::min(kRowTile, n - t0);
        const float* xr[kRowTile];
        const float* xsr[kRowTile];
        float* yr[kRowTile];
        for (int r = 0; r < rt; ++r) {
          xr[r] = xs + (t0 + r) * K;
          xsr[r] = affine ? sc.xsum.data() + (t0 + r) * groups : nullptr;
          yr[r] = y + (t0 + r) * M;
        }
        switch (rt) {
          case 1: Rows<1>(m, affine, fast_bits, xr, xsr, o, yr, sf, bf, lane_scales.data()); break;
          case 2: Rows<2>(m, affine, fast_bits, xr, xsr, o, yr, sf, bf, lane_scales.data()); break;
          case 3: Rows<3>(m, affine, fast_bits, xr, xsr, o, yr, sf, bf, lane_scales.data()); break;
          default: Rows<4>(m, affine, fast_bits, xr, xsr, o, yr, sf, bf, lane_scales.data()); break;
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
