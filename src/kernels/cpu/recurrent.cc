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

// Σ a[i]·b[i] (vector partial sums, then lanes, then the scalar tail).
HWY_INLINE float Dot(const float* a, const float* b, int64_t n) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  auto acc0 = hn::Zero(df), acc1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    acc0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), acc0);
    acc1 = hn::MulAdd(hn::LoadU(df, a + i + N), hn::LoadU(df, b + i + N), acc1);
  }
  for (; i + N <= n; i += N) acc0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), acc0);
  float t = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1)));
  for (; i < n; ++i) t += a[i] * b[i];
  return t;
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

// y += s·x
HWY_INLINE void Axpy(float* y, const float* x, float s, int64_t n) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  const auto vs = hn::Set(df, s);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::MulAdd(vs, hn::LoadU(df, x + i), hn::LoadU(df, y + i)), df, y + i);
  for (; i < n; ++i) y[i] += s * x[i];
}

// y *= s
HWY_INLINE void Scale(float* y, float s, int64_t n) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::Set(df, s), hn::LoadU(df, y + i)), df, y + i);
  for (; i < n; ++i) y[i] *= s;
}

void DeltaChunkImpl(const DeltaChunk& c) {
  const int64_t n = c.n, dk = c.dk, dv = c.dv;
  auto K = [&](int64_t t) { return c.k + t * c.qk_stride; };
  auto Q = [&](int64_t t) { return c.q + t * c.qk_stride; };
  auto G = [&](int64_t t) { return c.g[t * c.gb_stride]; };
  auto Bt = [&](int64_t t) { return c.beta[t * c.gb_stride]; };
  float* cum = c.scratch;
  float* A = cum + n;        // [n, n] strictly lower: β_i k_i·k_j e^{cum_i - cum_j}
  float* W = A + n * n;      // [n, dv]
  float* U = W + n * dv;     // [n, dk]
  float* vnew = U + n * dk;  // [n, dv]
  float acc = 0;
  for (int64_t t = 0; t < n; ++t) cum[t] = (acc += G(t));
  for (int64_t i = 0; i < n; ++i) {
    const float bi = Bt(i);
    for (int64_t j = 0; j < i; ++j) A[i * n + j] = bi * DotD(K(i), K(j), dk) * std::exp(cum[i] - cum[j]);
    const float* vi = c.v + i * c.v_stride;
    const float ei = std::exp(cum[i]);
    for (int64_t e = 0; e < dv; ++e) W[i * dv + e] = bi * vi[e];
    for (int64_t e = 0; e < dk; ++e) U[i * dk + e] = bi * K(i)[e] * ei;
    for (int64_t j = 0; j < i; ++j) {
      Axpy(W + i * dv, W + j * dv, -A[i * n + j], dv);
      Axpy(U + i * dk, U + j * dk, -A[i * n + j], dk);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    float* vn = vnew + i * dv;
    std::copy_n(W + i * dv, dv, vn);
    for (int64_t d = 0; d < dk; ++d) Axpy(vn, c.S + d * dv, -U[i * dk + d], dv);
  }
  for (int64_t i = 0; i < n; ++i) {
    float* o = c.out + i * c.out_stride;
    std::fill_n(o, dv, 0.0f);
    for (int64_t d = 0; d < dk; ++d) Axpy(o, c.S + d * dv, Q(i)[d], dv);
    Scale(o, std::exp(cum[i]), dv);
    for (int64_t j = 0; j <= i; ++j) Axpy(o, vnew + j * dv, DotD(Q(i), K(j), dk) * std::exp(cum[i] - cum[j]), dv);
  }
  const float last = n > 0 ? cum[n - 1] : 0.0f;
  const float el = std::exp(last);
  for (int64_t d = 0; d < dk; ++d) {
    float* Sd = c.S + d * dv;
    Scale(Sd, el, dv);
    for (int64_t j = 0; j < n; ++j) Axpy(Sd, vnew + j * dv, std::exp(last - cum[j]) * K(j)[d], dv);
  }
}

void AttendImpl(const float* q, const float* k, const float* v, int64_t stride, int64_t n_pos, int64_t hd,
                float scale, float* s, float* o) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < n_pos; ++j) {
    s[j] = Dot(q, k + j * stride, hd) * scale;
    mx = std::max(mx, s[j]);
  }
  float sum = 0;
  for (int64_t j = 0; j < n_pos; ++j) sum += (s[j] = std::exp(s[j] - mx));
  std::fill_n(o, hd, 0.0f);
  for (int64_t j = 0; j < n_pos; ++j) Axpy(o, v + j * stride, s[j], hd);
  Scale(o, 1.0f / sum, hd);
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
    for (int64_t j = 0; j < kernel; ++j)  // tap j of channels c..c+N-1: stride `kernel` in w
      wj[j] = hn::GatherIndex(df, w + c * kernel + j, hn::Mul(hn::Iota(di, 0), hn::Set(di, int32_t(kernel))));
    for (int64_t t = 0; t < n; ++t) {
      auto acc = hn::Zero(df);
      for (int64_t j = 0; j < kernel; ++j) acc = hn::MulAdd(wj[j], hn::LoadU(df, src(t + j, c)), acc);
      // silu(a) = a / (1 + e^-a)
      const auto e = hn::Exp(df, hn::Neg(acc));
      hn::StoreU(hn::Div(acc, hn::Add(hn::Set(df, 1.0f), e)), df, out + t * ch + c);
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
HWY_EXPORT(AttendImpl);

void delta_chunk(const DeltaChunk& c) { HWY_DYNAMIC_DISPATCH(DeltaChunkImpl)(c); }

void attend(const float* q, const float* k, const float* v, int64_t stride, int64_t n_pos, int64_t hd,
            float scale, float* s, float* o) {
  HWY_DYNAMIC_DISPATCH(AttendImpl)(q, k, v, stride, n_pos, hd, scale, s, o);
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
