// Bidirectional attention of one image (the vision tower): for a block of query rows of one head,
// scores against each block of keys in register tiles (keys transposed, so no horizontal sums),
// an online softmax per row, and the values accumulated in register-held slabs. Memory beyond the
// prepared keys and values: one block of scores per query row of the work item.
//
// Highway compiles this file once per SIMD target (foreach_target) and dispatches at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/vision_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
// Once per target:
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/vision_attention.h"

HWY_BEFORE_NAMESPACE();
namespace qwen35::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 16>;
constexpr int64_t kKB = kVisionKeyBlock;
// Register tiles: kSQ queries × kSK vectors of keys for the scores, kPQ queries × up to kPV
// vectors of a value row for the weighted sum (accumulators + loads + a broadcast fit in the
// register file: 32 vectors with AVX-512, 16 below).
constexpr int kSQ = 6;
constexpr int kSK = HWY_MAX_BYTES >= 64 ? 4 : 2;
constexpr int kPQ = HWY_MAX_BYTES >= 64 ? 4 : 2;
constexpr int kPV = HWY_MAX_BYTES >= 64 ? 6 : 4;

int64_t ValueStrideImpl(int64_t head_dim) {
  const int64_t N = int64_t(hn::Lanes(DF()));
  return (head_dim + N - 1) / N * N;
}

// s[qq·kKB + j] = q_qq · k_j for kQ query rows (q: row stride hd) and the block's kKB keys (kt:
// [hd][kKB]). Each score is one FMA chain over c = 0..hd-1 from zero: the same bits in any tile.
template <int kQ>
HWY_INLINE void ScoreTile(const float* q, int64_t hd, const float* kt, float* s) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  for (int64_t j = 0; j < kKB; j += kSK * N) {
    hn::Vec<DF> acc[kQ][kSK];
    for (int a = 0; a < kQ; ++a)
      for (int k = 0; k < kSK; ++k) acc[a][k] = hn::Zero(df);
    for (int64_t c = 0; c < hd; ++c) {
      hn::Vec<DF> kv[kSK];
      for (int k = 0; k < kSK; ++k) kv[k] = hn::LoadU(df, kt + c * kKB + j + k * N);
      for (int a = 0; a < kQ; ++a) {
        const auto b = hn::Set(df, q[a * hd + c]);
        for (int k = 0; k < kSK; ++k) acc[a][k] = hn::MulAdd(b, kv[k], acc[a][k]);
      }
    }
    for (int a = 0; a < kQ; ++a)
      for (int k = 0; k < kSK; ++k) hn::StoreU(acc[a][k], df, s + a * kKB + j + k * N);
  }
}

void Scores(const float* q, int64_t nq, int64_t hd, const float* kt, float* s) {
  int64_t a = 0;
  for (; a + kSQ <= nq; a += kSQ) ScoreTile<kSQ>(q + a * hd, hd, kt, s + a * kKB);
  switch (nq - a) {
    case 0: break;
    case 1: ScoreTile<1>(q + a * hd, hd, kt, s + a * kKB); break;
    case 2: ScoreTile<2>(q + a * hd, hd, kt, s + a * kKB); break;
    case 3: ScoreTile<3>(q + a * hd, hd, kt, s + a * kKB); break;
    case 4: ScoreTile<4>(q + a * hd, hd, kt, s + a * kKB); break;
    default: ScoreTile<5>(q + a * hd, hd, kt, s + a * kKB); break;
  }
}

// o[qq][c0, c0 + kV·N) += Σ_j p[qq·kKB + j]·v[j·vs + ·] for j = 0..jn-1 in order, kQ rows at once
// (per element one FMA per key, in key order: the same bits in any tile).
template <int kQ, int kV>
HWY_INLINE void ValueTile(const float* p, int64_t jn, const float* v, int64_t vs, float* o, int64_t c0) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  hn::Vec<DF> acc[kQ][kV];
  for (int a = 0; a < kQ; ++a)
    for (int k = 0; k < kV; ++k) acc[a][k] = hn::LoadU(df, o + a * vs + c0 + k * N);
  for (int64_t j = 0; j < jn; ++j) {
    hn::Vec<DF> x[kV];
    for (int k = 0; k < kV; ++k) x[k] = hn::LoadU(df, v + j * vs + c0 + k * N);
    for (int a = 0; a < kQ; ++a) {
      const auto b = hn::Set(df, p[a * kKB + j]);
      for (int k = 0; k < kV; ++k) acc[a][k] = hn::MulAdd(b, x[k], acc[a][k]);
    }
  }
  for (int a = 0; a < kQ; ++a)
    for (int k = 0; k < kV; ++k) hn::StoreU(acc[a][k], df, o + a * vs + c0 + k * N);
}

// All vs/N vectors of kQ rows, in near-equal slabs of at most kPV vectors.
template <int kQ>
HWY_INLINE void ValueRows(const float* p, int64_t jn, const float* v, int64_t vs, float* o) {
  const int64_t N = int64_t(hn::Lanes(DF())), nv = vs / N;
  const int64_t slabs = (nv + kPV - 1) / kPV;
  for (int64_t sl = 0, c = 0; sl < slabs; ++sl) {
    const int64_t w = nv / slabs + (sl < nv % slabs ? 1 : 0);
    switch (w) {
      case 1: ValueTile<kQ, 1>(p, jn, v, vs, o, c * N); break;
      case 2: ValueTile<kQ, 2>(p, jn, v, vs, o, c * N); break;
      case 3: ValueTile<kQ, 3>(p, jn, v, vs, o, c * N); break;
      case 4: ValueTile<kQ, 4>(p, jn, v, vs, o, c * N); break;
      case 5: ValueTile<kQ, 5>(p, jn, v, vs, o, c * N); break;
      default: ValueTile<kQ, kPV>(p, jn, v, vs, o, c * N); break;
    }
    c += w;
  }
}

void Values(const float* p, int64_t nq, int64_t jn, const float* v, int64_t vs, float* o) {
  int64_t a = 0;
  for (; a + kPQ <= nq; a += kPQ) ValueRows<kPQ>(p + a * kKB, jn, v, vs, o + a * vs);
  for (; a < nq; ++a) ValueRows<1>(p + a * kKB, jn, v, vs, o + a * vs);
}

// The online-softmax step of one row for one block: s[kKB] scores (keys ≥ jn masked) become
// e^(s − m); the running maximum m, the lanes of the running sum l[N] and the output o[vs] are
// rescaled when the maximum grows (the sum's lanes are added once, at the end of the row).
HWY_INLINE void SoftmaxBlock(float* s, int64_t jn, float& m, float* l, float* o, int64_t vs) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  for (int64_t j = jn; j < kKB; ++j) s[j] = -INFINITY;
  auto vmax = hn::Set(df, -INFINITY);
  for (int64_t j = 0; j < kKB; j += N) vmax = hn::Max(vmax, hn::LoadU(df, s + j));
  const float bmx = hn::GetLane(hn::MaxOfLanes(df, vmax));
  auto vsum = hn::LoadU(df, l);
  if (bmx > m) {
    if (m > -INFINITY) {  // the first block has no sum or output to rescale
      const auto vf = hn::Set(df, std::exp(m - bmx));
      vsum = hn::Mul(vsum, vf);
      for (int64_t c = 0; c < vs; c += N) hn::StoreU(hn::Mul(vf, hn::LoadU(df, o + c)), df, o + c);
    }
    m = bmx;
  }
  const auto vm = hn::Set(df, m);
  for (int64_t j = 0; j < kKB; j += N) {
    const auto e = hn::Exp(df, hn::Sub(hn::LoadU(df, s + j), vm));
    hn::StoreU(e, df, s + j);
    vsum = hn::Add(vsum, e);
  }
  hn::StoreU(vsum, df, l);
}

// Query rows [q0, q1) of head h, rotated and scaled by 1/√hd, into q [nq, hd].
void RotateQueries(const VisionKv& kv, const float* qkv, const float* cos, const float* sin, int64_t h,
                   int64_t q0, int64_t q1, float* q) {
  const int64_t hd = kv.head_dim, half = hd / 2, row = 3 * kv.n_heads * hd;
  const float scale = 1.0f / std::sqrt(float(hd));
  for (int64_t t = q0; t < q1; ++t) {
    const float* x = qkv + t * row + h * hd;
    const float *c = cos + t * half, *s = sin + t * half;
    float* r = q + (t - q0) * hd;
    for (int64_t i = 0; i < half; ++i) {
      r[i] = (x[i] * c[i] - x[i + half] * s[i]) * scale;
      r[i + half] = (x[i + half] * c[i] + x[i] * s[i]) * scale;
    }
  }
}

void AttendRowsImpl(const VisionKv& kv, const float* qkv, const float* cos, const float* sin, int64_t h,
                    int64_t q0, int64_t q1, float* scratch, float* out, int64_t out_row0) {
  const int64_t hd = kv.head_dim, vs = kv.v_stride, nq = q1 - q0, blocks = kv.blocks();
  float* q = scratch;
  float* s = q + kVisionQueryBlock * hd;
  float* o = s + kVisionQueryBlock * kKB;
  float* m = o + kVisionQueryBlock * vs;
  float* l = m + kVisionQueryBlock;  // [nq][N]
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  RotateQueries(kv, qkv, cos, sin, h, q0, q1, q);
  std::fill_n(o, nq * vs, 0.0f);
  std::fill_n(m, nq, -INFINITY);
  std::fill_n(l, nq * N, 0.0f);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t jn = std::min(kKB, kv.n - b * kKB);
    Scores(q, nq, hd, kv.kt + (h * blocks + b) * hd * kKB, s);
    for (int64_t a = 0; a < nq; ++a) SoftmaxBlock(s + a * kKB, jn, m[a], l + a * N, o + a * vs, vs);
    Values(s, nq, jn, kv.v + (h * kv.n + b * kKB) * vs, vs, o);
  }
  for (int64_t a = 0; a < nq; ++a) {
    const float sum = hn::GetLane(hn::SumOfLanes(df, hn::LoadU(df, l + a * N)));
    float* r = out + (q0 + a - out_row0) * kv.n_heads * hd + h * hd;
    for (int64_t i = 0; i < hd; ++i) r[i] = o[a * vs + i] / sum;
  }
}

}  // namespace qwen35::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qwen35::kernels::cpu {
HWY_EXPORT(ValueStrideImpl);
HWY_EXPORT(AttendRowsImpl);

int64_t vision_value_stride(int64_t head_dim) { return HWY_DYNAMIC_DISPATCH(ValueStrideImpl)(head_dim); }

int64_t vision_scratch_floats(int64_t head_dim, int64_t v_stride) {
  return kVisionQueryBlock * (head_dim + kVisionKeyBlock + v_stride + 1 + 16);  // 16: the most lanes
}

void vision_prepare_rows(const float* qkv, const float* cos, const float* sin, const VisionKv& kv,
                         int64_t r0, int64_t r1) {
  const int64_t nh = kv.n_heads, hd = kv.head_dim, half = hd / 2, row = 3 * nh * hd, blocks = kv.blocks();
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t h = 0; h < nh; ++h) {
      float* kt = kv.kt + (h * blocks + r / kVisionKeyBlock) * hd * kVisionKeyBlock + r % kVisionKeyBlock;
      if (r >= kv.n) {
        for (int64_t c = 0; c < hd; ++c) kt[c * kVisionKeyBlock] = 0.0f;
        continue;
      }
      const float* k = qkv + r * row + (nh + h) * hd;
      const float *c = cos + r * half, *s = sin + r * half;
      for (int64_t i = 0; i < half; ++i) {
        kt[i * kVisionKeyBlock] = k[i] * c[i] - k[i + half] * s[i];
        kt[(i + half) * kVisionKeyBlock] = k[i + half] * c[i] + k[i] * s[i];
      }
      float* v = kv.v + (h * kv.n + r) * kv.v_stride;
      std::memcpy(v, qkv + r * row + (2 * nh + h) * hd, size_t(hd) * sizeof(float));
      std::fill(v + hd, v + kv.v_stride, 0.0f);
    }
}

void vision_attend_rows(const VisionKv& kv, const float* qkv, const float* cos, const float* sin,
                        int64_t h, int64_t q0, int64_t q1, float* scratch, float* out, int64_t out_row0) {
  HWY_DYNAMIC_DISPATCH(AttendRowsImpl)(kv, qkv, cos, sin, h, q0, q1, scratch, out, out_row0);
}
}  // namespace qwen35::kernels::cpu
#endif
