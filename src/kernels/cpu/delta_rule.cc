// The gated delta rule of one value head: the recurrent step (decode) and the chunked UT form
// (prefill), both on an fp32 state [d_k, d_v].
//
// Highway compiles this file once per SIMD target (foreach_target) and dispatches at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/delta_rule.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
// Once per target:
#include <algorithm>
#include <cmath>

#include "kernels/cpu/delta_rule.h"

HWY_BEFORE_NAMESPACE();
namespace qwen35::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 16>;

constexpr int kStateBlockVecs = 4;  // vectors per column block of the state

void DeltaStepImpl(float* S, const float* k, const float* q, const float* v, float decay, float beta,
                   int64_t dk, int64_t dv, float* o) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  const auto vdecay = hn::Set(df, decay), vbeta = hn::Set(df, beta);
  int64_t c0 = 0;
  // Full blocks of kStateBlockVecs vectors, then single vectors, then a scalar tail.
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
  while (c0 + kStateBlockVecs * N <= dv) block(std::integral_constant<int, kStateBlockVecs>());
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

// y[e] = init_scale·init[e] + Σ_m coef[m]·rows[m·stride + e] for e < len (init may be null, or
// y itself). Blocks of kStateBlockVecs vectors stay in registers across all m, so y is stored once.
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
  while (e + kStateBlockVecs * N <= len) block(std::integral_constant<int, kStateBlockVecs>());
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

}  // namespace qwen35::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qwen35::kernels::cpu {
HWY_EXPORT(DeltaStepImpl);
HWY_EXPORT(DeltaChunkImpl);

void delta_step(float* S, const float* k, const float* q, const float* v, float decay, float beta,
                int64_t dk, int64_t dv, float* o) {
  HWY_DYNAMIC_DISPATCH(DeltaStepImpl)(S, k, q, v, decay, beta, dk, dv, o);
}

void delta_chunk(const DeltaChunk& c) { HWY_DYNAMIC_DISPATCH(DeltaChunkImpl)(c); }
}  // namespace qwen35::kernels::cpu
#endif
