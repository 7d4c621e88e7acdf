// Highway compiles this file once per SIMD target (foreach_target) and dispatches at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// Once per target:
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul.h"
#include "kernels/matrix.h"

HWY_BEFORE_NAMESPACE();
namespace qwen35::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Up to 16 lanes (AVX-512). The activation permutation and the lane→group mapping depend on the
// lane count, which is fixed per target, so results are reproducible on a given machine.
using DF = hn::CappedTag<float, 16>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
constexpr int64_t kRowTile = 8;

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
                           const float* bf, const float* /*unused*/) {
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
  // When a block spans several groups, lane w (codes w*kPer..) takes the scale of group
  // (b + w*kPer) / group: a table lookup into the row's scales from the block's first group.
  HWY_ALIGN int32_t lane_group[16];
  for (int64_t w = 0; w < N; ++w) lane_group[w] = int32_t((w * kPer) / m.group);
  const auto idx = hn::SetTableIndices(df, lane_group);
  for (int64_t b = 0; b < K; b += B) {
    const auto words = hn::LoadU(du, row + b / kPer);
    const auto s = bcast ? hn::Set(df, sf[b / m.group]) : hn::TableLookupLanes(hn::LoadU(df, sf + b / m.group), idx);
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
  HWY_ALIGN float q[128 + 16];
  hn::Vec<DF> acc[kRowTile];
  float tail[kRowTile] = {};
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

// ---- Fast mode: int16 activations, integer products (vpmaddwd), one conversion per block ----
using D16 = hn::CappedTag<int16_t, 32>;
using DU16 = hn::RebindToUnsigned<D16>;
using D32 = hn::Repartition<int32_t, D16>;
using DF32 = hn::Rebind<float, D32>;

// Codes per block: N16 u16 lanes x (16/bits) codes. int32 lane i of a block covers codes
// [2*per*i, 2*per*i + 2*per) where per = 16/bits.
inline int64_t block_codes16(int bits) { return int64_t(hn::Lanes(D16())) * (16 / bits); }

// Quantizes one activation row per weight group and permutes it to the u16 code layout:
// xq[b + j*N16 + l] = q(x[b + per*l + j]); xdx[blk*N32 + i] = scale of the group of lane i.
// `xsum` gets the per-group sums of the *quantized* activations: the bias term b·Σx must see the
// same activations as s·Σxq, or the large, opposite-signed terms stop cancelling.
void QuantizeRow16(const float* x, int64_t K, int bits, int64_t group, int16_t* xq, float* xdx,
                   float* xsum) {
  const int64_t N16 = int64_t(hn::Lanes(D16())), per = 16 / bits, B = N16 * per, N32 = N16 / 2;
  thread_local std::vector<float> dx;
  dx.resize(size_t(K / group));
  thread_local std::vector<int16_t> q;
  q.resize(size_t(K));
  for (int64_t g = 0; g < K / group; ++g) {
    float mx = 0;
    for (int64_t k = 0; k < group; ++k) mx = std::max(mx, std::fabs(x[g * group + k]));
    const float scale = mx / 32767.0f, inv = mx > 0 ? 32767.0f / mx : 0.0f;
    dx[size_t(g)] = scale;
    int64_t sum = 0;
    for (int64_t k = 0; k < group; ++k) {
      const int16_t v = int16_t(std::lrintf(std::clamp(x[g * group + k] * inv, -32767.0f, 32767.0f)));
      q[size_t(g * group + k)] = v;
      sum += v;
    }
    xsum[g] = float(sum) * scale;
  }
  for (int64_t b = 0, blk = 0; b < K; b += B, ++blk) {
    for (int64_t j = 0; j < per; ++j)
      for (int64_t l = 0; l < N16; ++l) xq[b + j * N16 + l] = q[size_t(b + per * l + j)];
    for (int64_t i = 0; i < N32; ++i) xdx[blk * N32 + i] = dx[size_t((b + 2 * per * i) / group)];
  }
}

template <int kBits, int rt>
HWY_INLINE void AffineRows16(const Matrix& m, const int16_t* const* xq, const float* const* xdx,
                             const float* const* xsum, int64_t o, float* const* y, const float* sf,
                             const float* bf) {
  const D16 d16;
  const DU16 du16;
  const D32 d32;
  const DF32 df;
  constexpr int kPer = 16 / kBits;
  const int64_t N16 = int64_t(hn::Lanes(d16)), N32 = N16 / 2, B = N16 * kPer, K = m.cols;
  const int64_t groups = K / m.group;
  const uint16_t* row = reinterpret_cast<const uint16_t*>(static_cast<const uint32_t*>(m.data) + o * (K * kBits / 32));
  const auto mask = hn::Set(du16, uint16_t((1u << kBits) - 1u));
  HWY_ALIGN int32_t lane_group[16];
  for (int64_t i = 0; i < N32; ++i) lane_group[i] = int32_t((2 * kPer * i) / m.group);
  const auto idx = hn::SetTableIndices(df, lane_group);
  hn::Vec<DF32> acc[kRowTile];
  for (int r = 0; r < rt; ++r) acc[r] = hn::Zero(df);
  for (int64_t b = 0, blk = 0; b < K; b += B, ++blk) {
    const auto words = hn::LoadU(du16, row + b / kPer);
    const auto s = hn::TableLookupLanes(hn::LoadU(df, sf + b / m.group), idx);
    hn::Vec<D32> isum[kRowTile], isum1[kRowTile];
    for (int r = 0; r < rt; ++r) isum[r] = isum1[r] = hn::Zero(d32);
    for (int j = 0; j < kPer; ++j) {
      const auto q = hn::BitCast(d16, hn::And(hn::ShiftRightSame(words, j * kBits), mask));
      for (int r = 0; r < rt; ++r)
        isum[r] = hn::ReorderWidenMulAccumulate(d32, q, hn::LoadU(d16, xq[r] + b + j * N16), isum[r], isum1[r]);
    }
    for (int r = 0; r < rt; ++r) {
      const auto f = hn::ConvertTo(df, hn::RearrangeToOddPlusEven(isum[r], isum1[r]));
      acc[r] = hn::MulAdd(hn::Mul(f, s), hn::LoadU(df, xdx[r] + blk * N32), acc[r]);
    }
  }
  for (int r = 0; r < rt; ++r) {
    float bias = 0;
    for (int64_t g = 0; g < groups; ++g) bias += bf[g] * xsum[r][g];
    y[r][o] = hn::GetLane(hn::SumOfLanes(df, acc[r])) + bias;
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

template <int rt>
HWY_INLINE void Rows16(const Matrix& m, const int16_t* const* xq, const float* const* xdx,
                       const float* const* xsum, int64_t o, float* const* y, const float* sf,
                       const float* bf) {
  if (m.bits == 4) AffineRows16<4, rt>(m, xq, xdx, xsum, o, y, sf, bf);
  else if (m.bits == 8) AffineRows16<8, rt>(m, xq, xdx, xsum, o, y, sf, bf);
  else AffineRows16<2, rt>(m, xq, xdx, xsum, o, y, sf, bf);
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
  const bool int16 = ctx.int16_activations && affine && (m.bits == 2 || m.bits == 4 || m.bits == 8) &&
                     K % block_codes16(m.bits) == 0 && m.group % (32 / m.bits) == 0 &&
                     hn::Lanes(D16()) >= 2;  // int16 pairs need two lanes (not HWY_SCALAR)
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
    if (int16) {
      const int64_t lanes = K / (2 * (16 / m.bits));
      sc.xq.resize(size_t(n * K));
      sc.xdx.resize(size_t(n * lanes));
      for (int64_t t = 0; t < n; ++t)
        QuantizeRow16(x + t * K, K, m.bits, m.group, sc.xq.data() + t * K, sc.xdx.data() + t * lanes,
                      sc.xsum.data() + t * groups);
    } else if (fast_bits) {
      sc.xp.resize(size_t(n * K));
      for (int64_t t = 0; t < n; ++t) PermuteRow(x + t * K, K, m.bits, sc.xp.data() + t * K);
    }
  }
  const float* xs = fast_bits ? sc.xp.data() : x;
  auto body = [&](size_t o0, size_t o1, int) {
    const int64_t groups = affine ? K / m.group : 0;
    // Output rows go in blocks of kOBlock, each block against all row tiles of the activations:
    // the block's weights stay in cache while a tile of activations is reused across the block.
    // Row scales/biases as f32, padded so a full-vector load from any group stays in bounds.
    constexpr int64_t kOBlock = 64;
    const int64_t stride = groups + 16;
    thread_local std::vector<float> sb_buf;
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
          xr[r] = xs + (t0 + r) * K;
          xsr[r] = affine ? sc.xsum.data() + (t0 + r) * groups : nullptr;
          yr[r] = y + (t0 + r) * M;
        }
        if (int16) {
          const int16_t* xq[kRowTile];
          const float* xd[kRowTile];
          const int64_t lanes = K / (2 * (16 / m.bits));
          for (int r = 0; r < rt; ++r) {
            xq[r] = sc.xq.data() + (t0 + r) * K;
            xd[r] = sc.xdx.data() + (t0 + r) * lanes;
          }
          for (int64_t o = ob; o < oe; ++o) {
            const float* sf = sb_buf.data() + (o - ob) * 2 * stride;
            const float* bf = sf + stride;
            switch (rt) {
              case 1: Rows16<1>(m, xq, xd, xsr, o, yr, sf, bf); break;
              case 2: Rows16<2>(m, xq, xd, xsr, o, yr, sf, bf); break;
              case 3: Rows16<3>(m, xq, xd, xsr, o, yr, sf, bf); break;
              case 4: Rows16<4>(m, xq, xd, xsr, o, yr, sf, bf); break;
              case 5: Rows16<5>(m, xq, xd, xsr, o, yr, sf, bf); break;
              case 6: Rows16<6>(m, xq, xd, xsr, o, yr, sf, bf); break;
              case 7: Rows16<7>(m, xq, xd, xsr, o, yr, sf, bf); break;
              default: Rows16<8>(m, xq, xd, xsr, o, yr, sf, bf); break;
            }
          }
          continue;
        }
        for (int64_t o = ob; o < oe; ++o) {
          const float* sf = sb_buf.data() + (o - ob) * 2 * stride;
          const float* bf = sf + stride;
          switch (rt) {
            case 1: Rows<1>(m, affine, fast_bits, xr, xsr, o, yr, sf, bf, nullptr); break;
            case 2: Rows<2>(m, affine, fast_bits, xr, xsr, o, yr, sf, bf, nullptr); break;
            case 3: Rows<3>(m, affine, fast_bits, xr, xsr, o, yr, sf, bf, nullptr); break;
            case 4: Rows<4>(m, affine, fast_bits, xr, xsr, o, yr, sf, bf, nullptr); break;
            case 5: Rows<5>(m, affine, fast_bits, xr, xsr, o, yr, sf, bf, nullptr); break;
            case 6: Rows<6>(m, affine, fast_bits, xr, xsr, o, yr, sf, bf, nullptr); break;
            case 7: Rows<7>(m, affine, fast_bits, xr, xsr, o, yr, sf, bf, nullptr); break;
            default: Rows<8>(m, affine, fast_bits, xr, xsr, o, yr, sf, bf, nullptr); break;
          }
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
