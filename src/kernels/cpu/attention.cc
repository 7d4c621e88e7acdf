// Causal attention of query rows over a key/value cache: scores in register tiles, an online
// softmax over blocks of 64 keys, values accumulated in register-held slabs.
//
// Highway compiles this file once per SIMD target (foreach_target) and dispatches at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
// Once per target:
#include <algorithm>
#include <cmath>

#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/ops.h"

HWY_BEFORE_NAMESPACE();
namespace qwen35::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 16>;

// Attention scores of up to kQ queries against keys [0, jn) of a block (key j at k + j·stride):
// s[i][j] = (q_i·k_j)·scale. Every (query, key) sum is the same sequence whatever the blocking:
// one vector accumulator over the head's chunks in order, its lanes summed (SumOfLanes), then the
// scalar tail. A register tile of the queries by kK keys loads each key chunk once for all of
// them (the 64-key block, 64 KiB at head_dim 256, does not fit in L1).
template <int kQ>
HWY_INLINE void Scores(const float* const* q, const float* k, int64_t stride, int64_t hd, float scale, int64_t jn,
                       float* const* s) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df)), hv = hd / N * N;
  constexpr int kK = kQ == 1 ? 8 : HWY_MAX_BYTES >= 64 ? 4 : 2;  // enough independent chains
  auto finish = [&](const hn::Vec<DF>& acc, int i, int64_t j) {
    float t = hn::GetLane(hn::SumOfLanes(df, acc));
    const float* kj = k + j * stride;
    for (int64_t c = hv; c < hd; ++c) t += q[i][c] * kj[c];
    s[i][j] = t * scale;
  };
  int64_t j = 0;
  for (; j + kK <= jn; j += kK) {
    hn::Vec<DF> acc[kQ][kK];
    for (int i = 0; i < kQ; ++i)
      for (int kk = 0; kk < kK; ++kk) acc[i][kk] = hn::Zero(df);
    for (int64_t c = 0; c < hv; c += N) {
      hn::Vec<DF> kv[kK];
      for (int kk = 0; kk < kK; ++kk) kv[kk] = hn::LoadU(df, k + (j + kk) * stride + c);
      for (int i = 0; i < kQ; ++i) {
        const auto qv = hn::LoadU(df, q[i] + c);
        for (int kk = 0; kk < kK; ++kk) acc[i][kk] = hn::MulAdd(qv, kv[kk], acc[i][kk]);
      }
    }
    for (int i = 0; i < kQ; ++i)
      for (int kk = 0; kk < kK; ++kk) finish(acc[i][kk], i, j + kk);
  }
  for (; j < jn; ++j) {
    hn::Vec<DF> acc[kQ];
    for (int i = 0; i < kQ; ++i) acc[i] = hn::Zero(df);
    for (int64_t c = 0; c < hv; c += N) {
      const auto kv = hn::LoadU(df, k + j * stride + c);
      for (int i = 0; i < kQ; ++i) acc[i] = hn::MulAdd(hn::LoadU(df, q[i] + c), kv, acc[i]);
    }
    for (int i = 0; i < kQ; ++i) finish(acc[i], i, j);
  }
}

// y[0, kV·N) += s[j]·x[j·stride + ·] for j = 0..m-1 in turn, the kV vectors of y held in
// registers while the rows stream past (per element: one FMA per row, in row order).
template <int kV>
HWY_INLINE void SlabAxpy(float* y, const float* x, int64_t stride, const float* s, int64_t m) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  hn::Vec<DF> acc[kV];
  for (int c = 0; c < kV; ++c) acc[c] = hn::LoadU(df, y + c * N);
  for (int64_t j = 0; j < m; ++j) {
    const auto vs = hn::Set(df, s[j]);
    const float* xj = x + j * stride;
    for (int c = 0; c < kV; ++c) acc[c] = hn::MulAdd(vs, hn::LoadU(df, xj + c * N), acc[c]);
  }
  for (int c = 0; c < kV; ++c) hn::StoreU(acc[c], df, y + c * N);
}

// y[0, n) += s[j]·x[j·stride + ·] for j = 0..m-1 in turn, in slabs of y that fit in registers.
HWY_INLINE void AxpyRows(float* y, const float* x, int64_t stride, const float* s, int64_t m, int64_t n) {
  const int64_t N = int64_t(hn::Lanes(DF()));
  int64_t i = 0;
  for (; i + 16 * N <= n; i += 16 * N) SlabAxpy<16>(y + i, x + i, stride, s, m);
  for (; i + 4 * N <= n; i += 4 * N) SlabAxpy<4>(y + i, x + i, stride, s, m);
  for (; i + N <= n; i += N) SlabAxpy<1>(y + i, x + i, stride, s, m);
  for (; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) y[i] += s[j] * x[j * stride + i];
}

// For kQ outputs at once: y_i[0, n) += s_i[j]·x[j·stride + ·] for j = 0..m-1 in turn, slabs of
// four vectors per output in registers, so each loaded row serves all kQ outputs. Per element
// the operations of AxpyRows (one FMA per row, in row order): the same bits.
template <int kQ>
HWY_INLINE void AxpyRowsQ(float* const* y, const float* x, int64_t stride, const float* const* s, int64_t m, int64_t n) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  constexpr int kV = HWY_MAX_BYTES >= 64 ? 4 : 2;
  int64_t i = 0;
  for (; i + kV * N <= n; i += kV * N) {
    hn::Vec<DF> acc[kQ][kV];
    for (int qq = 0; qq < kQ; ++qq)
      for (int c = 0; c < kV; ++c) acc[qq][c] = hn::LoadU(df, y[qq] + i + c * N);
    for (int64_t j = 0; j < m; ++j) {
      hn::Vec<DF> xv[kV];
      for (int c = 0; c < kV; ++c) xv[c] = hn::LoadU(df, x + j * stride + i + c * N);
      for (int qq = 0; qq < kQ; ++qq) {
        const auto vs = hn::Set(df, s[qq][j]);
        for (int c = 0; c < kV; ++c) acc[qq][c] = hn::MulAdd(vs, xv[c], acc[qq][c]);
      }
    }
    for (int qq = 0; qq < kQ; ++qq)
      for (int c = 0; c < kV; ++c) hn::StoreU(acc[qq][c], df, y[qq] + i + c * N);
  }
  if (i < n)
    for (int qq = 0; qq < kQ; ++qq) AxpyRows(y[qq] + i, x + i, stride, s[qq], m, n - i);
}

// y *= s
HWY_INLINE void Scale(float* y, float s, int64_t n) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::Set(df, s), hn::LoadU(df, y + i)), df, y + i);
  for (; i < n; ++i) y[i] *= s;
}

// Online softmax over blocks of 64 keys (a block's scores, then the running maximum, sum and
// output rescaled only when the maximum grows), for nq queries that share the keys/values: the
// outer loop walks the blocks, so each block is read from memory once and reused from cache by
// every query that reaches it. Query i's operations, and their order, are those of a lone query.
void AttendManyImpl(const float* const* q, const int64_t* n_pos, int nq, const KvHead& kv, int64_t hd,
                    float scale, float* s_all, float* m_all, float* const* o) {
  constexpr int64_t kBlock = kKvBlock;  // the softmax's key blocks are the cache's blocks
  const int64_t stride = kv.stride;
  float* mx = m_all;
  float* sum = m_all + nq;
  int64_t most = 0;
  for (int i = 0; i < nq; ++i) {
    mx[i] = -INFINITY;
    sum[i] = 0;
    std::fill_n(o[i], hd, 0.0f);
    most = std::max(most, n_pos[i]);
  }
  // Each block: the scores of every query that reaches it (four queries at a time), each query's
  // online-softmax update, then the values for four queries at a time over the keys they all
  // see, and each query's remaining keys alone (per element still one FMA per key, in order).
  for (int64_t j0 = kv.first / kBlock * kBlock; j0 < most; j0 += kBlock) {
    auto jn_of = [&](int i) { return std::min(kBlock, n_pos[i] - j0); };
    // fn(act, g) for the queries that reach this block, in groups of up to four.
    auto groups = [&](auto fn) {
      int act[4], g = 0;
      for (int i = 0; i < nq; ++i) {
        if (j0 >= n_pos[i]) continue;
        act[g++] = i;
        if (g == 4) {
          fn(act, g);
          g = 0;
        }
      }
      if (g > 0) fn(act, g);
    };
    groups([&](const int* act, int g) {
      const float* qg[4];
      float* sg[4];
      int64_t jn = 0;
      for (int a = 0; a < g; ++a) {
        qg[a] = q[act[a]];
        sg[a] = s_all + act[a] * kBlock;
        jn = std::max(jn, jn_of(act[a]));
      }
      const float* kb = reinterpret_cast<const float*>(kv.k_blocks[j0 / kBlock]) + kv.offset;
      switch (g) {
        case 1: Scores<1>(qg, kb, stride, hd, scale, jn, sg); break;
        case 2: Scores<2>(qg, kb, stride, hd, scale, jn, sg); break;
        case 3: Scores<3>(qg, kb, stride, hd, scale, jn, sg); break;
        default: Scores<4>(qg, kb, stride, hd, scale, jn, sg); break;
      }
      // Keys before kv.first: -inf scores, so e^(s - max) is 0 and they add nothing (every
      // query sees a key at or past kv.first in this block, so its maximum is finite).
      for (int a = 0; a < g; ++a)
        for (int64_t j = j0; j < kv.first; ++j) sg[a][j - j0] = -INFINITY;
    });
    for (int i = 0; i < nq; ++i) {
      if (j0 >= n_pos[i]) continue;
      const int64_t jn = jn_of(i);
      float* s = s_all + i * kBlock;
      const DF df;
      const int64_t N = int64_t(hn::Lanes(df)), jv = jn / N * N;
      // The block's maximum and, after the rescale, e^(s - max) and its sum, in SIMD (lanes
      // summed once per block; the tail after them).
      auto vmax = hn::Set(df, -INFINITY);
      for (int64_t j = 0; j < jv; j += N) vmax = hn::Max(vmax, hn::LoadU(df, s + j));
      float bmx = hn::GetLane(hn::MaxOfLanes(df, vmax));
      for (int64_t j = jv; j < jn; ++j) bmx = std::max(bmx, s[j]);
      if (bmx > mx[i]) {
        if (sum[i] > 0) {
          const float f = std::exp(mx[i] - bmx);
          sum[i] *= f;
          Scale(o[i], f, hd);
        }
        mx[i] = bmx;
      }
      const auto vmx = hn::Set(df, mx[i]);
      auto vsum = hn::Zero(df);
      for (int64_t j = 0; j < jv; j += N) {
        const auto e = hn::Exp(df, hn::Sub(hn::LoadU(df, s + j), vmx));
        hn::StoreU(e, df, s + j);
        vsum = hn::Add(vsum, e);
      }
      float bsum = hn::GetLane(hn::SumOfLanes(df, vsum));
      for (int64_t j = jv; j < jn; ++j) bsum += (s[j] = std::exp(s[j] - mx[i]));
      sum[i] += bsum;
    }
    groups([&](const int* act, int g) {
      float* og[4];
      const float* sg[4];
      int64_t jmin = kBlock;
      for (int a = 0; a < g; ++a) {
        og[a] = o[act[a]];
        sg[a] = s_all + act[a] * kBlock;
        jmin = std::min(jmin, jn_of(act[a]));
      }
      const float* vb = reinterpret_cast<const float*>(kv.v_blocks[j0 / kBlock]) + kv.offset;
      switch (g) {
        case 1: AxpyRows(og[0], vb, stride, sg[0], jmin, hd); break;
        case 2: AxpyRowsQ<2>(og, vb, stride, sg, jmin, hd); break;
        case 3: AxpyRowsQ<3>(og, vb, stride, sg, jmin, hd); break;
        default: AxpyRowsQ<4>(og, vb, stride, sg, jmin, hd); break;
      }
      for (int a = 0; a < g; ++a) {
        const int64_t jn = jn_of(act[a]);
        if (jn > jmin) AxpyRows(og[a], vb + jmin * stride, stride, sg[a] + jmin, jn - jmin, hd);
      }
    });
  }
  for (int i = 0; i < nq; ++i) Scale(o[i], 1.0f / sum[i], hd);
}

}  // namespace qwen35::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qwen35::kernels::cpu {
HWY_EXPORT(AttendManyImpl);

std::vector<const uint8_t*> contiguous_blocks(const float* base, int64_t n_pos, int64_t stride) {
  std::vector<const uint8_t*> blocks;
  for (int64_t j0 = 0; j0 < n_pos; j0 += kKvBlock)
    blocks.push_back(reinterpret_cast<const uint8_t*>(base + j0 * stride));
  return blocks;
}

void attend(const float* q, const float* k, const float* v, int64_t stride, int64_t n_pos, int64_t hd,
            float scale, float* s, float* o) {
  const std::vector<const uint8_t*> kb = contiguous_blocks(k, n_pos, stride), vb = contiguous_blocks(v, n_pos, stride);
  float m[2];
  HWY_DYNAMIC_DISPATCH(AttendManyImpl)(&q, &n_pos, 1, KvHead{kb.data(), vb.data(), 0, stride}, hd, scale, s, m, &o);
}

void attend_many(const float* const* q, const int64_t* n_pos, int nq, const KvHead& kv, int64_t hd,
                 float scale, float* s, float* m, float* const* o) {
  HWY_DYNAMIC_DISPATCH(AttendManyImpl)(q, n_pos, nq, kv, hd, scale, s, m, o);
}
}  // namespace qwen35::kernels::cpu
#endif
