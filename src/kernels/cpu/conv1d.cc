// The depthwise causal conv1d + SiLU of the Gated DeltaNet layer, over a range of channels.
//
// Highway compiles this file once per SIMD target (foreach_target) and dispatches at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/conv1d.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/math-inl.h"
#include "kernels/math.h"
// Once per target:
#include <algorithm>
#include <cmath>

#include "kernels/cpu/conv1d.h"

HWY_BEFORE_NAMESPACE();
namespace qwen35::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 16>;

constexpr int64_t kMaxKernel = 8;

void Conv1dSiluImpl(const float* x, int64_t n, int64_t ch, const float* w, int64_t kernel, float* state,
                    float* out, int64_t c0, int64_t c1) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const int64_t N = int64_t(hn::Lanes(df)), km1 = kernel - 1;
  // Input p of the window: p < km1 is the state, then the rows of x.
  auto src = [&](int64_t p, int64_t c) { return p < km1 ? state + p * ch + c : x + (p - km1) * ch + c; };
  int64_t c = c0;
  // Kernels wider than kMaxKernel take the scalar loop for every channel.
  for (; kernel <= kMaxKernel && c + N <= c1; c += N) {
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
      hn::StoreU(SiluV(df, acc), df, out + t * ch + c);
    }
    // New state: the last km1 inputs (ascending rows read only rows not yet overwritten).
    for (int64_t r = 0; r < km1; ++r) hn::StoreU(hn::LoadU(df, src(n + r, c)), df, state + r * ch + c);
  }
  for (; c < c1; ++c) {  // tail channels: the same operations, one lane
    for (int64_t t = 0; t < n; ++t) {
      float acc = 0;
      for (int64_t j = 0; j < kernel; ++j) acc += w[c * kernel + j] * *src(t + j, c);
      out[t * ch + c] = silu(acc);
    }
    for (int64_t r = 0; r < km1; ++r) state[r * ch + c] = *src(n + r, c);
  }
}

}  // namespace qwen35::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qwen35::kernels::cpu {
HWY_EXPORT(Conv1dSiluImpl);

void conv1d_silu_channels(const float* x, int64_t n, int64_t ch, const float* w, int64_t kernel,
                          float* state, float* out, int64_t c0, int64_t c1) {
  HWY_DYNAMIC_DISPATCH(Conv1dSiluImpl)(x, n, ch, w, kernel, state, out, c0, c1);
}
}  // namespace qwen35::kernels::cpu
#endif
