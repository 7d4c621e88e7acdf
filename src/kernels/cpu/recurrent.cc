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
