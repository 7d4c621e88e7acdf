// Highway compiles this file once per SIMD target (foreach_target) and dispatches at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/recurrent.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
// Once per target:
#include <algorithm>
#include <cmath>

#include "kernels/cpu/recurrent.h"

HWY_BEFORE_NAMESPACE();
namespace qwen35::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 16>;
constexpr int kVecs = 4;  // vectors per column block of the state

void DeltaStepImpl(float* S, const float* k, const float* q, const float* v, float decay, float beta,
                   int64_t dk, int64_t dv, float* o) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  const auto vdecay = hn::Set(df, decay), vbeta = hn::Set(df, beta);
  int64_t c0 = 0;
  // Full blocks of kVecs vectors, then single vectors, then a scalar tail.
  auto block = [&](auto nv_tag) {
    constexpr int nv = decltype(nv_tag)::value;
    hn::Vec<DF> acc[nv], u[nv], out[nv];
    for (int j = 0; j < nv; ++j) acc[j] = out[j] = hn::Zero(df);
    for (int64_t i = 0; i < dk; ++i) {
      const auto ki = hn::Set(df, k[i]);
      const float* Si = S + i * dv + c0;
      for (int j = 0; j < nv; ++j) acc[j] = hn::MulAdd(ki, hn::LoadU(df, Si + j * N), acc[j]);
    }
    for (int j = 0; j < nv; ++j)
      u[j] = hn::Mul(vbeta, hn::NegMulAdd(vdecay, acc[j], hn::LoadU(df, v + c0 + j * N)));
    for (int64_t i = 0; i < dk; ++i) {
      const auto ki = hn::Set(df, k[i]), qi = hn::Set(df, q[i]);
      float* Si = S + i * dv + c0;
      for (int j = 0; j < nv; ++j) {
        const auto s = hn::MulAdd(vdecay, hn::LoadU(df, Si + j * N), hn::Mul(ki, u[j]));
        hn::StoreU(s, df, Si + j * N);
        out[j] = hn::MulAdd(qi, s, out[j]);
      }
    }
    for (int j = 0; j < nv; ++j) hn::StoreU(out[j], df, o + c0 + j * N);
    c0 += nv * N;
  };
  while (c0 + kVecs * N <= dv) block(std::integral_constant<int, kVecs>());
  while (c0 + N <= dv) block(std::integral_constant<int, 1>());
  for (; c0 < dv; ++c0) {  // scalar tail columns
    float acc = 0;
    for (int64_t i = 0; i < dk; ++i) acc += k[i] * S[i * dv + c0];
    const float u = beta * (v[c0] - decay * acc);
    float out = 0;
    for (int64_t i = 0; i < dk; ++i) {
      float& s = S[i * dv + c0];
      s = decay * s + k[i] * u;
      out += q[i] * s;
    }
    o[c0] = out;
  }
}

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

// Σ a[i]·b[i] accumulated in double. The chunked delta rule's key/query dot products feed
// exponentially weighted sums whose rounding some positions amplify a thousandfold (a fixture with
// near-tied routing shows it); double accumulation there keeps the chunked path as close to the
// float64 reference as the scalar reference backend is.
HWY_INLINE float DotD(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  double t = 0;
#if HWY_HAVE_FLOAT64
  const hn::CappedTag<double, 8> dd;
  const hn::Rebind<float, decltype(dd)> dh;
  const int64_t N = int64_t(hn::Lanes(dd));
  auto acc = hn::Zero(dd);
  for (; i + N <= n; i += N) acc = hn::MulAdd(hn::PromoteTo(dd, hn::LoadU(dh, a + i)), hn::PromoteTo(dd, hn::LoadU(dh, b + i)), acc);
  t = hn::GetLane(hn::SumOfLanes(dd, acc));
#endif
  for (; i < n; ++i) t += double(a[i]) * double(b[i]);
  return float(t);
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

// y[e] = init_scale·init[e] + Σ_m coef[m]·rows[m·stride + e] for e < len (init may be null, or
// y itself). Blocks of kVecs vectors stay in registers across all m, so y is stored once.
HWY_INLINE void CombineRows(float* y, const float* init, float init_scale, const float* rows, int64_t stride,
                            const float* coef, int64_t count, int64_t len) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  int64_t e = 0;
  auto block = [&](auto nv_tag) {
    constexpr int nv = decltype(nv_tag)::value;
    hn::Vec<DF> acc[nv];
    for (int j = 0; j < nv; ++j)
      acc[j] = init ? hn::Mul(hn::Set(df, init_scale), hn::LoadU(df, init + e + j * N)) : hn::Zero(df);
    for (int64_t m = 0; m < count; ++m) {
      const auto cm = hn::Set(df, coef[m]);
      const float* r = rows + m * stride + e;
      for (int j = 0; j < nv; ++j) acc[j] = hn::MulAdd(cm, hn::LoadU(df, r + j * N), acc[j]);
    }
    for (int j = 0; j < nv; ++j) hn::StoreU(acc[j], df, y + e + j * N);
    e += nv * N;
  };
  while (e + kVecs * N <= len) block(std::integral_constant<int, kVecs>());
  while (e + N <= len) block(std::integral_constant<int, 1>());
  for (; e < len; ++e) {
    float t = init ? init_scale * init[e] : 0.0f;
    for (int64_t m = 0; m < count; ++m) t += coef[m] * rows[m * stride + e];
    y[e] = t;
  }
}

// CombineRows for R outputs over the same rows: y_r[e] = init_scale[r]·init[r][e] +
// Σ_m coef[r][m]·rows[m·stride + e]. Each loaded row serves all R outputs (a register tile of R
// rows by kNV vectors); every element gets CombineRows' operations in its order, so the same bits.
template <int R>
HWY_INLINE void CombineRowsR(float* const* y, const float* const* init, const float* init_scale, const float* rows,
                             int64_t stride, const float* const* coef, int64_t count, int64_t len) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  constexpr int kNV = HWY_MAX_BYTES >= 64 ? 4 : 2;
  int64_t e = 0;
  auto block = [&](auto nv_tag) {
    constexpr int nv = decltype(nv_tag)::value;
    hn::Vec<DF> acc[R][nv];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < nv; ++j)
        acc[r][j] = init[r] ? hn::Mul(hn::Set(df, init_scale[r]), hn::LoadU(df, init[r] + e + j * N)) : hn::Zero(df);
    for (int64_t m = 0; m < count; ++m) {
      const float* rm = rows + m * stride + e;
      hn::Vec<DF> x[nv];
      for (int j = 0; j < nv; ++j) x[j] = hn::LoadU(df, rm + j * N);
      for (int r = 0; r < R; ++r) {
        const auto cm = hn::Set(df, coef[r][m]);
        for (int j = 0; j < nv; ++j) acc[r][j] = hn::MulAdd(cm, x[j], acc[r][j]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < nv; ++j) hn::StoreU(acc[r][j], df, y[r] + e + j * N);
    e += nv * N;
  };
  while (e + kNV * N <= len) block(std::integral_constant<int, kNV>());
  while (e + N <= len) block(std::integral_constant<int, 1>());
  if (e < len)  // the scalar tail, as CombineRows computes it
    for (int r = 0; r < R; ++r)
      CombineRows(y[r] + e, init[r] ? init[r] + e : nullptr, init_scale[r], rows + e, stride, coef[r], count, len - e);
}

// Rows i of y = init_scale·init_i + coef_i · rows (coef_i = coef + i·coef_stride, init likewise),
// four at a time. Null init: zero.
HWY_INLINE void CombineRowsMany(int64_t n, float* y, int64_t y_stride, const float* init, int64_t init_stride,
                                float init_scale, const float* rows, int64_t stride, const float* coef,
                                int64_t coef_stride, int64_t count, int64_t len) {
  const float sc[4] = {init_scale, init_scale, init_scale, init_scale};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    float* yr[4];
    const float* ir[4];
    const float* cr[4];
    for (int r = 0; r < 4; ++r) {
      yr[r] = y + (i + r) * y_stride;
      ir[r] = init ? init + (i + r) * init_stride : nullptr;
      cr[r] = coef + (i + r) * coef_stride;
    }
    CombineRowsR<4>(yr, ir, sc, rows, stride, cr, count, len);
  }
  for (; i < n; ++i)
    CombineRows(y + i * y_stride, init ? init + i * init_stride : nullptr, init_scale, rows, stride,
                coef + i * coef_stride, count, len);
}

// out[j] = e^(a - b[j]) for j < n, in SIMD (Highway's Exp, a few ulp).
HWY_INLINE void ExpDiff(float a, const float* b, int64_t n, float* out) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  const auto va = hn::Set(df, a);
  int64_t j = 0;
  for (; j + N <= n; j += N) hn::StoreU(hn::Exp(df, hn::Sub(va, hn::LoadU(df, b + j))), df, out + j);
  for (; j < n; ++j) out[j] = std::exp(a - b[j]);
}

void DeltaChunkImpl(const DeltaChunk& c) {
  const int64_t n = c.n, dk = c.dk, dv = c.dv;
  auto K = [&](int64_t t) { return c.k + t * c.qk_stride; };
  auto Q = [&](int64_t t) { return c.q + t * c.qk_stride; };
  auto G = [&](int64_t t) { return c.g[t * c.gb_stride]; };
  auto Bt = [&](int64_t t) { return c.beta[t * c.gb_stride]; };
  float* cum = c.scratch;
  float* A = cum + n;        // [n, n] strictly lower: -β_i k_i·k_j e^{cum_i - cum_j}
  float* W = A + n * n;      // [n, dv]
  float* U = W + n * dv;     // [n, dk]
  float* vnew = U + n * dk;  // [n, dv]
  float* coef = vnew + n * dv;                // max(n, dk)
  float* ex = coef + std::max(n, dk);         // [n]: e^(cum_i - cum_j) for one row i
  float acc = 0;
  for (int64_t t = 0; t < n; ++t) cum[t] = (acc += G(t));
  // Forward substitution: W_i = β_i v_i − Σ_{j<i} A_ij W_j, U_i = β_i e^{cum_i} k_i − Σ_{j<i} A_ij U_j.
  for (int64_t i = 0; i < n; ++i) {
    const float bi = Bt(i);
    float* Ai = A + i * n;
    ExpDiff(cum[i], cum, i, ex);
    for (int64_t j = 0; j < i; ++j) Ai[j] = -(bi * DotD(K(i), K(j), dk) * ex[j]);
    CombineRows(W + i * dv, c.v + i * c.v_stride, bi, W, dv, Ai, i, dv);
    CombineRows(U + i * dk, K(i), bi * std::exp(cum[i]), U, dk, Ai, i, dk);
  }
  // vnew_i = W_i − Σ_d U_id S_d (U negated in place: it is not needed any more)
  for (int64_t e = 0; e < n * dk; ++e) U[e] = -U[e];
  CombineRowsMany(n, vnew, dv, W, dv, 1.0f, c.S, dv, U, dk, dk, dv);
  // o_i = e^{cum_i} Σ_d q_id S_d + Σ_{j<=i} (q_i·k_j) e^{cum_i − cum_j} vnew_j
  CombineRowsMany(n, c.out, c.out_stride, nullptr, 0, 0.0f, c.S, dv, c.q, c.qk_stride, dk, dv);
  for (int64_t i = 0; i < n; ++i) {
    float* o = c.out + i * c.out_stride;
    ExpDiff(cum[i], cum, i + 1, ex);
    for (int64_t j = 0; j <= i; ++j) coef[j] = DotD(Q(i), K(j), dk) * ex[j];
    CombineRows(o, o, std::exp(cum[i]), vnew, dv, coef, i + 1, dv);
  }
  // S_d = e^{cum_last} S_d + Σ_j e^{cum_last − cum_j} k_jd vnew_j
  const float last = n > 0 ? cum[n - 1] : 0.0f;
  const float el = std::exp(last);
  ExpDiff(last, cum, n, cum);  // in place: each element read before it is written
  // Row d's coefficients cum_j·k_jd, [dk][n], go where W and U were (n·(dv + dk) floats, free now).
  for (int64_t d = 0; d < dk; ++d)
    for (int64_t j = 0; j < n; ++j) W[d * n + j] = cum[j] * K(j)[d];
  CombineRowsMany(dk, c.S, dv, c.S, dv, el, vnew, dv, W, n, n, dv);
}

// Online softmax over blocks of 64 keys (a block's scores, then the running maximum, sum and
// output rescaled only when the maximum grows), for nq queries that share the keys/values: the
// outer loop walks the blocks, so each block is read from memory once and reused from cache by
// every query that reaches it. Query i's operations, and their order, are those of a lone query.
void AttendManyImpl(const float* const* q, const int64_t* n_pos, int nq, const float* k, const float* v,
                    int64_t stride, int64_t hd, float scale, float* s_all, float* m_all, float* const* o) {
  constexpr int64_t kBlock = 64;
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
  for (int64_t j0 = 0; j0 < most; j0 += kBlock) {
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
      const float* kb = k + j0 * stride;
      switch (g) {
        case 1: Scores<1>(qg, kb, stride, hd, scale, jn, sg); break;
        case 2: Scores<2>(qg, kb, stride, hd, scale, jn, sg); break;
        case 3: Scores<3>(qg, kb, stride, hd, scale, jn, sg); break;
        default: Scores<4>(qg, kb, stride, hd, scale, jn, sg); break;
      }
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
      const float* vb = v + j0 * stride;
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

// silu(a) = a / (1 + e^-a), in SIMD (Highway's Exp, a few ulp); std::exp for the tail.
template <typename V>
HWY_INLINE V SiluV(V a) {
  const DF df;
  return hn::Div(a, hn::Add(hn::Set(df, 1.0f), hn::Exp(df, hn::Neg(a))));
}
HWY_INLINE float SiluS(float a) { return a / (1.0f + std::exp(-a)); }

void SiluMulImpl(const float* g, const float* u, int64_t n, float* out) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(SiluV(hn::LoadU(df, g + i)), hn::LoadU(df, u + i)), df, out + i);
  for (; i < n; ++i) out[i] = SiluS(g[i]) * u[i];
}

void MulSiluImpl(float* x, const float* z, int64_t n) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(df, x + i), SiluV(hn::LoadU(df, z + i))), df, x + i);
  for (; i < n; ++i) x[i] *= SiluS(z[i]);
}

constexpr int64_t kMaxKernel = 8;

bool Conv1dSiluImpl(const float* x, int64_t n, int64_t ch, const float* w, int64_t kernel, float* state,
                    float* out, int64_t c0, int64_t c1) {
  if (kernel < 1 || kernel > kMaxKernel) return false;
  const DF df;
  const hn::RebindToSigned<DF> di;
  const int64_t N = int64_t(hn::Lanes(df)), km1 = kernel - 1;
  // Input p of the window: p < km1 is the state, then the rows of x.
  auto src = [&](int64_t p, int64_t c) { return p < km1 ? state + p * ch + c : x + (p - km1) * ch + c; };
  int64_t c = c0;
  for (; c + N <= c1; c += N) {
    hn::Vec<DF> wj[kMaxKernel];
#if HWY_TARGET != HWY_SCALAR
    if (kernel == 4) {  // Qwen3.5's width: deinterleave the 4N contiguous weights (no gathers)
      const float* wc = w + c * 4;
      const auto a0 = hn::LoadU(df, wc), a1 = hn::LoadU(df, wc + N), a2 = hn::LoadU(df, wc + 2 * N),
                 a3 = hn::LoadU(df, wc + 3 * N);
      const auto e01 = hn::ConcatEven(df, a1, a0), o01 = hn::ConcatOdd(df, a1, a0);
      const auto e23 = hn::ConcatEven(df, a3, a2), o23 = hn::ConcatOdd(df, a3, a2);
      wj[0] = hn::ConcatEven(df, e23, e01);
      wj[2] = hn::ConcatOdd(df, e23, e01);
      wj[1] = hn::ConcatEven(df, o23, o01);
      wj[3] = hn::ConcatOdd(df, o23, o01);
    } else
#endif
    for (int64_t j = 0; j < kernel; ++j)  // tap j of channels c..c+N-1: stride `kernel` in w
      wj[j] = hn::GatherIndex(df, w + c * kernel + j, hn::Mul(hn::Iota(di, 0), hn::Set(di, int32_t(kernel))));
    for (int64_t t = 0; t < n; ++t) {
      auto acc = hn::Zero(df);
      for (int64_t j = 0; j < kernel; ++j) acc = hn::MulAdd(wj[j], hn::LoadU(df, src(t + j, c)), acc);
      hn::StoreU(SiluV(acc), df, out + t * ch + c);
    }
    // New state: the last km1 inputs (ascending rows read only rows not yet overwritten).
    for (int64_t r = 0; r < km1; ++r) hn::StoreU(hn::LoadU(df, src(n + r, c)), df, state + r * ch + c);
  }
  for (; c < c1; ++c) {  // scalar tail channels
    for (int64_t t = 0; t < n; ++t) {
      float acc = 0;
      for (int64_t j = 0; j < kernel; ++j) acc += w[c * kernel + j] * *src(t + j, c);
      out[t * ch + c] = acc / (1.0f + std::exp(-acc));
    }
    for (int64_t r = 0; r < km1; ++r) state[r * ch + c] = *src(n + r, c);
  }
  return true;
}

}  // namespace qwen35::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qwen35::kernels::cpu {
HWY_EXPORT(DeltaStepImpl);
HWY_EXPORT(Conv1dSiluImpl);
HWY_EXPORT(DeltaChunkImpl);
HWY_EXPORT(AttendManyImpl);
HWY_EXPORT(SiluMulImpl);
HWY_EXPORT(MulSiluImpl);

void silu_mul(const float* g, const float* u, int64_t n, float* out) { HWY_DYNAMIC_DISPATCH(SiluMulImpl)(g, u, n, out); }
void mul_silu(float* x, const float* z, int64_t n) { HWY_DYNAMIC_DISPATCH(MulSiluImpl)(x, z, n); }

void delta_chunk(const DeltaChunk& c) { HWY_DYNAMIC_DISPATCH(DeltaChunkImpl)(c); }

void attend(const float* q, const float* k, const float* v, int64_t stride, int64_t n_pos, int64_t hd,
            float scale, float* s, float* o) {
  float m[2];
  HWY_DYNAMIC_DISPATCH(AttendManyImpl)(&q, &n_pos, 1, k, v, stride, hd, scale, s, m, &o);
}

void attend_many(const float* const* q, const int64_t* n_pos, int nq, const float* k, const float* v,
                 int64_t stride, int64_t hd, float scale, float* s, float* m, float* const* o) {
  HWY_DYNAMIC_DISPATCH(AttendManyImpl)(q, n_pos, nq, k, v, stride, hd, scale, s, m, o);
}

void delta_step(float* S, const float* k, const float* q, const float* v, float decay, float beta,
                int64_t dk, int64_t dv, float* o) {
  HWY_DYNAMIC_DISPATCH(DeltaStepImpl)(S, k, q, v, decay, beta, dk, dv, o);
}

bool conv1d_silu_channels(const float* x, int64_t n, int64_t ch, const float* w, int64_t kernel,
                          float* state, float* out, int64_t c0, int64_t c1) {
  return HWY_DYNAMIC_DISPATCH(Conv1dSiluImpl)(x, n, ch, w, kernel, state, out, c0, c1);
}

}  // namespace qwen35::kernels::cpu
#endif
